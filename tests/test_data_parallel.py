"""Specifications for ``workbench.learners.DataParallelLearner`` (DDP learners, gloo on CPU).

1. The key one (Stooke & Abbeel 2018, Sec. 3.2): two gloo learners, each on half of the batch,
   produce the same update as one learner on the joined batch: the same parameters (atol 1e-5)
   and the same metrics (rel 1e-4), two updates in a row (so the optimizer states, PPO's minibatch
   generator and DQN's target copies stay in step too). For A2C (advantages normalised over the
   rollout) and PPO (2 epochs x 2 minibatches, advantages normalised per minibatch), each learner
   holds half of the environments; for DQN and C51 (uniform batches and prioritized ones with
   importance weights; the target network copied every update) half of the transitions, and the
   joined priorities are the single learner's; for IMPALA (V-trace, with a termination and a
   truncation in each half) half of the unrolls.
2. Arguments: B not divisible by the number of learners, 'cuda' without a GPU, a single device,
   mixed cpu and cuda, a factory that cannot be pickled: each a ValueError or TypeError naming
   the fix, raised before any process starts (or, for B, without disturbing the learners).
3. Processes: close() and garbage collection leave no learner process; a killed learner makes the
   next update raise RuntimeError at once (and stops the other); learners die with their parent
   (SIGKILL of the process that holds them, as when a kernel is killed).

Starting two learner processes costs a few seconds (each imports torch), so the learners are
module-scoped fixtures shared by the tests that only read them.
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
from typing import Any

import pytest
import torch
from processes import running, wait_gone

from workbench import system
from workbench.learners import (
    A2C,
    DQN,
    IMPALA,
    PPO,
    A2CConfig,
    DataParallelLearner,
    DQNConfig,
    IMPALAConfig,
    PPOConfig,
)
from workbench.models import ActorCritic, QNetwork
from workbench.rollout import Rollout
from workbench.sampling import SerialSampler

OBS_SHAPE = (4,)
NUM_ACTIONS = 2
T, B = 16, 8
DEVICES = ("cpu:0", "cpu:1")


@pytest.fixture(autouse=True, scope="module")
def two_torch_threads():
    """The single learner's reductions, and so its last bits, follow this process's torch threads,
    which earlier tests may have changed (an in-process ``ApexActor`` sets one): the comparisons
    run at two threads whatever ran before (at one thread an IMPALA weight differed by 1.9e-5)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


TIMEOUT = 60.0  # seconds per learner answer: generous for 2 busy cores, still never a hang
A2C_CONFIG = A2CConfig(normalize_advantages=True)
PPO_CONFIG = PPOConfig(num_epochs=2, num_minibatches=2, normalize_advantages=True)
N = 32  # transitions per DQN batch: 16 per learner
# The target network is copied at every update, so the second update's targets come from it.
DQN_CONFIG = DQNConfig(learning_rate=1e-3, n_step=3, double=True, target_update_interval=1)
# Annealed over 4 updates, so the two updates below run at two different rates on every replica.
IMPALA_CONFIG = IMPALAConfig(learning_rate=1e-3, unroll_length=T, batch_size=B, anneal_updates=4)


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


def transitions(seed: int, n: int = N, *, weighted: bool = False) -> dict[str, torch.Tensor]:
    """A batch of ``n`` 3-step CartPole-shaped transitions: random observations, actions and
    returns, discounts ``0.99^3`` or 0 (a window that ended in a terminal state); ``weighted``:
    importance weights in (0, 1], the largest 1, as a prioritized replay gives them."""
    g = torch.Generator().manual_seed(seed)
    terminal = torch.rand(n, generator=g) < 0.2
    terminal[0] = terminal[-1] = True  # in both halves
    batch = {
        "obs": torch.randn(n, *OBS_SHAPE, generator=g),
        "actions": torch.randint(NUM_ACTIONS, (n,), generator=g),
        "returns": 1.0 + torch.rand(n, generator=g) * 2,
        "discounts": torch.where(terminal, 0.0, 0.99**3),
        "next_obs": torch.randn(n, *OBS_SHAPE, generator=g),
    }
    if weighted:
        weights = 0.1 + torch.rand(n, generator=g)
        batch["weights"] = weights / weights.max()
    return batch


def unrolls(model: ActorCritic, seed: int, T: int = T, B: int = B) -> dict[str, torch.Tensor]:
    """A ``[T + 1, B]`` batch of IMPALA unrolls (``learners.impala.UNROLL_KEYS``): random
    observations and actions, behaviour log-probabilities from perturbed logits of ``model`` (so
    that pi / mu varies around 1 and some rhos are clipped), random rewards, some terminations and
    some truncations (with a final observation), at least one of each in each half of B."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T + 1, B, *OBS_SHAPE, generator=g)
    actions = torch.randint(NUM_ACTIONS, (T + 1, B), generator=g)
    with torch.no_grad():
        logits, _ = model(obs)
    behaviour = torch.log_softmax(logits + 0.5 * torch.randn(logits.shape, generator=g), -1)
    terminated = torch.rand(T + 1, B, generator=g) < 0.1
    truncated = (torch.rand(T + 1, B, generator=g) < 0.05) & ~terminated
    terminated[2, 0] = terminated[5, B - 1] = True
    truncated[4, 1] = truncated[3, B - 2] = True
    terminated[4, 1] = terminated[3, B - 2] = False
    return {
        "obs": obs,
        "actions": actions,
        "logp": behaviour.gather(-1, actions[..., None]).squeeze(-1),
        "rewards": torch.randn(T + 1, B, generator=g),
        "terminated": terminated,
        "truncated": truncated,
        "final_obs": torch.randn(T + 1, B, *OBS_SHAPE, generator=g),
    }


def assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module, atol: float = 1e-5) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.allclose(p, q, atol=atol, rtol=0), (name, (p - q).abs().max().item())


def assert_same_metrics(single: dict[str, float], parallel: dict[str, float]) -> None:
    assert list(parallel) == list(single)
    for key, value in single.items():
        assert parallel[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def pair(algo_cls, config, model: torch.nn.Module) -> tuple[Any, DataParallelLearner]:
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


@pytest.fixture(scope="module")
def dqn_pair():
    torch.manual_seed(2)
    single, parallel = pair(DQN, DQN_CONFIG, QNetwork(OBS_SHAPE, NUM_ACTIONS, dueling=True))
    yield single, parallel
    parallel.close()


@pytest.fixture(scope="module")
def c51_pair():
    torch.manual_seed(3)
    q = QNetwork(OBS_SHAPE, NUM_ACTIONS, num_atoms=51, v_min=0.0, v_max=10.0)
    single, parallel = pair(DQN, DQN_CONFIG, q)
    yield single, parallel
    parallel.close()


@pytest.fixture(scope="module")
def impala_pair():
    single, parallel = pair(IMPALA, IMPALA_CONFIG, make_model(4))
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


@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "prioritized"])
@pytest.mark.parametrize("name", ["dqn_pair", "c51_pair"])
def test_two_gloo_dqn_learners_make_the_single_learner_update(name, weighted, request):
    """Each learner on half of the transitions (and of the importance weights); the target network
    is copied after every update (``target_update_interval=1``), so the second update bootstraps
    from the copy of the first update's parameters."""
    single, parallel = request.getfixturevalue(name)
    assert_same_parameters(single.model, parallel.model)  # the same start (or the same past)
    for update in range(2):
        batch = transitions(seed=70 + 2 * weighted + update, weighted=weighted)
        expected = single.update(batch)
        got = parallel.update(batch)
        assert_same_parameters(single.model, parallel.model)
        assert_same_metrics(expected, got)
        # The new priorities (|TD error|, or C51's cross-entropy), joined in batch order.
        assert parallel.priorities.shape == single.priorities.shape == (N,)
        torch.testing.assert_close(parallel.priorities, single.priorities, rtol=1e-4, atol=1e-6)
    assert parallel.num_updates == single.num_updates
    state = parallel.state_dict()  # rank 0's: its target network is the single learner's
    assert state["num_updates"] == single.num_updates
    for key, value in single.target.state_dict().items():
        assert torch.allclose(state["target"][key], value, atol=1e-5, rtol=0), key
        assert torch.equal(state["target"][key], state["model"][f"q_network.{key}"]), key


def test_two_gloo_impala_learners_make_the_single_learner_update(impala_pair):
    single, parallel = impala_pair
    assert_same_parameters(single.model, parallel.model, atol=0)  # the same start
    for update in range(2):
        batch = unrolls(single.model, seed=50 + update)
        expected = single.update(batch)
        got = parallel.update(batch)
        # Adam divides each gradient by its own scale, so where a gradient is near zero a float32
        # rounding of the all-reduce's sum turns into a step-sized difference: on a Xeon with
        # AVX-512 kernels 2.3e-5 of a 1e-3 step. A twentieth of the step still fails any update
        # that is not the single learner's (a wrong shard or reduction moves whole steps).
        assert_same_parameters(single.model, parallel.model, atol=5e-5)
        assert_same_metrics(expected, got)
    assert expected["charts/clipped_rho_fraction"] > 0  # the clipping was exercised
    assert parallel.num_updates == single.num_updates == 2
    assert parallel.learning_rate == single.learning_rate == 1e-3 * (1 - 2 / 4)
    state = parallel.state_dict()
    assert state["num_updates"] == single.num_updates
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


def test_transitions_not_divisible_by_learners_name_the_fix(dqn_pair):
    single, parallel = dqn_pair
    with pytest.raises(ValueError, match=r"N = 31.*multiple of 2"):
        parallel.update(transitions(seed=60, n=31))
    # Nothing reached the learners: they go on.
    batch = transitions(seed=61)
    assert_same_metrics(single.update(batch), parallel.update(batch))
    assert_same_parameters(single.model, parallel.model)


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
    monkeypatch.setattr(system, "resolve_device", lambda name: torch.device(name))
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
from workbench.learners import A2C, A2CConfig, DataParallelLearner
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
