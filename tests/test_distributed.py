"""Specifications for ``workbench.distributed.DataParallelLearner`` (DDP learners, gloo on CPU).

1. The key one (Stooke & Abbeel 2018, Sec. 3.2): two gloo learners, each on half of the
   environments, produce the same update as one learner on the joined batch: the same parameters
   (atol 1e-5) and the same metrics, for A2C (advantages normalised over the rollout) and for PPO
   (2 epochs x 2 minibatches, advantages normalised per minibatch), two updates in a row (so the
   optimizer states and PPO's minibatch generator stay in step too).
2. Arguments: B not divisible by the number of learners, 'cuda' without a GPU, a single device,
   mixed cpu and cuda, a factory that cannot be pickled: each a ValueError or TypeError naming
   the fix, raised before any process starts (or, for B, without disturbing the learners).
3. Processes: close() and garbage collection leave no learner process; a killed learner makes the
   next update raise RuntimeError at once (and stops the other); learners die with their parent
   (SIGKILL of the process that holds them, as when a kernel is killed).

Starting two learner processes costs a few seconds (each imports torch), so the A2C and PPO
learners are module-scoped fixtures shared by the tests that only read them.
"""

from __future__ import annotations

import copy
import functools
import gc
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch

from workbench import distributed
from workbench.algos import A2C, PPO, A2CConfig, PPOConfig
from workbench.distributed import DataParallelLearner
from workbench.models import ActorCritic
from workbench.rollout import Rollout
from workbench.samplers import SerialSampler
from processes import running, wait_gone

OBS_SHAPE = (4,)
NUM_ACTIONS = 2
T, B = 16, 8
DEVICES = ("cpu:0", "cpu:1")
TIMEOUT = 60.0  # seconds per learner answer: generous for 2 busy cores, still never a hang
A2C_CONFIG = A2CConfig(normalize_advantages=True)
PPO_CONFIG = PPOConfig(num_epochs=2, num_minibatches=2, normalize_advantages=True)


def make_model(seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    return ActorCritic(OBS_SHAPE, NUM_ACTIONS)


def cartpole_like_rollout(model: ActorCritic, seed: int, T: int = T, B: int = B) -> Rollout:
    """A ``[T, B]`` CartPole-shaped rollout: random observations, the model's own actions, logp and
    values, reward 1 per step, some terminations and some truncations (bootstrapped from the value
    of a final observation), in every shard."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, B, *OBS_SHAPE, generator=g)
    torch.manual_seed(seed)
    out = model.act(obs)
    terminated = torch.rand(T, B, generator=g) < 0.1
    truncated = (torch.rand(T, B, generator=g) < 0.05) & ~terminated
    terminated[3, 0] = terminated[9, B - 1] = True
    truncated[5, 1] = truncated[11, B - 2] = True
    final_values = model.act(torch.randn(T, B, *OBS_SHAPE, generator=g))["value"]
    return Rollout(
        obs=obs,
        actions=out["action"],
        rewards=torch.ones(T, B) + 0.1 * torch.randn(T, B, generator=g),
        terminated=terminated,
        truncated=truncated,
        truncation_values=torch.where(truncated, final_values, torch.zeros(T, B)),
        policy_outputs={"logp": out["logp"], "value": out["value"]},
        next_obs=torch.randn(B, *OBS_SHAPE, generator=g),
    )


def assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module, atol: float = 1e-5) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=atol, rtol=0), (name, (p - q).abs().max().item())


def assert_same_metrics(single: dict[str, float], parallel: dict[str, float]) -> None:
    assert list(parallel) == list(single)
    for key, value in single.items():
        assert parallel[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key






def pair(algo_cls, config, model: ActorCritic) -> tuple[A2C | PPO, DataParallelLearner]:
    """The single learner and two gloo learners, both from copies of ``model``."""
    single = algo_cls(copy.deepcopy(model), config)
    parallel = DataParallelLearner(
        functools.partial(algo_cls, copy.deepcopy(model), config), DEVICES, timeout=TIMEOUT
    )
    return single, parallel


@pytest.fixture(scope="module")
def a2c_pair():
    single, parallel = pair(A2C, A2C_CONFIG, make_model(0))
    yield single, parallel
    parallel.close()


@pytest.fixture(scope="module")
def ppo_pair():
    single, parallel = pair(PPO, PPO_CONFIG, make_model(1))
    yield single, parallel
    parallel.close()


# --------------------------------------------------------------------------------------------------
# 1. Two learners = one learner on the joined batch


@pytest.mark.parametrize("name", ["a2c_pair", "ppo_pair"])
def test_two_gloo_learners_make_the_single_learner_update(name, request):
    single, parallel = request.getfixturevalue(name)
    assert_same_parameters(single.model, parallel.model, atol=0)  # the same start
    for update in range(2):
        rollout = cartpole_like_rollout(single.model, seed=10 + update)
        expected = single.update(rollout)
        got = parallel.update(rollout)
        assert_same_parameters(single.model, parallel.model)
        assert_same_metrics(expected, got)
    assert parallel.num_updates == single.num_updates
    # learner.model is rank 0's replica, which state_dict() reads from the learner process.
    state = parallel.state_dict()
    assert state["num_updates"] == single.num_updates
    assert state["num_gradient_steps"] == single.num_gradient_steps
    for key, value in state["model"].items():
        assert torch.equal(value, parallel.model.state_dict()[key]), key


def test_same_update_on_a_cartpole_rollout(ppo_pair):
    """The same with a rollout that SerialSampler collected on CartPole-v1 (B=8, T=16)."""
    single, parallel = ppo_pair
    sampler = SerialSampler("CartPole-v1", num_envs=B, horizon=T, seed=3)
    try:
        rollout = sampler.collect(single.model)
    finally:
        sampler.close()
    assert_same_metrics(single.update(rollout), parallel.update(rollout))
    assert_same_parameters(single.model, parallel.model)


def test_load_state_dict_restores_identical_updates(ppo_pair):
    """A single learner's checkpoint loaded into the learners: the next updates agree again."""
    single, parallel = ppo_pair
    parallel.load_state_dict(single.state_dict())
    rollout = cartpole_like_rollout(single.model, seed=20)
    assert_same_metrics(single.update(rollout), parallel.update(rollout))
    assert_same_parameters(single.model, parallel.model)


def test_learning_rate_rule_uses_the_joined_batch(a2c_pair):
    """set_progress / set_learning_rate reach the learners; the rate is the single learner's."""
    single, parallel = a2c_pair
    for algo in (single, parallel):
        algo.set_learning_rate(3e-4)
    rollout = cartpole_like_rollout(single.model, seed=30)
    expected, got = single.update(rollout), parallel.update(rollout)
    assert got["charts/learning_rate"] == expected["charts/learning_rate"] == 3e-4
    assert_same_parameters(single.model, parallel.model)


# --------------------------------------------------------------------------------------------------
# 2. Arguments


def test_batch_not_divisible_by_learners_names_the_fix(a2c_pair):
    single, parallel = a2c_pair
    rollout = cartpole_like_rollout(single.model, seed=40, B=7)
    with pytest.raises(ValueError, match=r"B = 7.*multiple of 2"):
        parallel.update(rollout)
    # Nothing reached the learners: they go on.
    rollout = cartpole_like_rollout(single.model, seed=41)
    assert_same_metrics(single.update(rollout), parallel.update(rollout))


@pytest.mark.usefixtures("no_gpu")
def test_cuda_without_gpu_names_cpu():
    factory = functools.partial(A2C, make_model(), A2CConfig())
    with pytest.raises(ValueError, match="cpu"):
        DataParallelLearner(factory, ("cuda:0", "cuda:1"))
    with pytest.raises(ValueError, match="cpu"):
        DataParallelLearner(factory, ("cuda", "cuda"))


def test_single_device_says_use_the_algorithm():
    factory = functools.partial(A2C, make_model(), A2CConfig())
    for devices in (("cpu:0",), "cpu"):
        with pytest.raises(ValueError, match="use the algorithm directly"):
            DataParallelLearner(factory, devices)


def test_mixed_cpu_and_cuda_is_refused(monkeypatch):
    # Pretend the GPU exists, to reach the check after resolve_device.
    monkeypatch.setattr(distributed, "resolve_device", lambda name: torch.device(name))
    factory = functools.partial(A2C, make_model(), A2CConfig())
    with pytest.raises(ValueError, match="mix cpu and cuda"):
        DataParallelLearner(factory, ("cpu:0", "cuda:0"))
    with pytest.raises(ValueError, match="twice"):
        DataParallelLearner(factory, ("cuda:0", "cuda:0"))
    with pytest.raises(ValueError, match="gloo"):
        DataParallelLearner(factory, DEVICES, backend="nccl")


def test_unpicklable_factory_names_the_fix():
    model = make_model()
    with pytest.raises(TypeError, match="functools.partial"):
        DataParallelLearner(lambda device: A2C(model, device=device), DEVICES)


# --------------------------------------------------------------------------------------------------
# 3. Processes


def test_close_leaves_no_process(a2c_pair):
    """Runs after the other users of ``a2c_pair`` (file order); its teardown's close is a no-op."""
    _, learner = a2c_pair
    pids = learner.pids
    assert len(running(pids)) == 2
    learner.close()
    assert wait_gone(pids) == []
    learner.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        learner.update(cartpole_like_rollout(learner.model, seed=0))


def test_garbage_collection_leaves_no_process():
    factory = functools.partial(A2C, make_model(), A2CConfig())
    learner = DataParallelLearner(factory, DEVICES, timeout=TIMEOUT)
    pids = learner.pids
    assert len(running(pids)) == 2
    del learner
    gc.collect()
    assert wait_gone(pids) == []


def test_killed_learner_raises_promptly_and_stops_the_other():
    model = make_model()
    factory = functools.partial(A2C, model, A2CConfig())
    learner = DataParallelLearner(factory, DEVICES, timeout=TIMEOUT)
    rollout = cartpole_like_rollout(model, seed=0)
    learner.update(rollout)
    pids = learner.pids
    os.kill(pids[1], signal.SIGKILL)
    assert wait_gone([pids[1]]) == []
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=rf"learner 1 on cpu:1 \(pid {pids[1]}\) died"):
        learner.update(rollout)
    assert time.monotonic() - start < 10.0
    assert wait_gone(pids) == []
    with pytest.raises(RuntimeError, match="make a new one"):
        learner.update(rollout)


HOLDER = """
import functools, json, sys, time
from workbench.algos import A2C, A2CConfig
from workbench.distributed import DataParallelLearner
from workbench.models import ActorCritic
learner = DataParallelLearner(
    functools.partial(A2C, ActorCritic((4,), 2), A2CConfig()), ("cpu:0", "cpu:1"), timeout=60
)
print(json.dumps(learner.pids), flush=True)
time.sleep(600)
"""


def test_learners_die_with_their_parent():
    """A kernel killed with SIGKILL (no finalizer runs) leaves no learner behind."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = holder.stdout.readline()
        assert line, holder.stderr.read()
        pids = json.loads(line)
        assert len(running(pids)) == 2
        holder.kill()
        holder.wait(timeout=5)
        assert wait_gone(pids) == []
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=5)
