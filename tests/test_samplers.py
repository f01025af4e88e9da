"""Specifications for workbench.sampling: the four ways to collect a time-major [T, B] rollout.

Workers start with the 'spawn' method (~1-2 s per sampler on the 2-core CI machine), so samplers
that tests only read from are made once per module (``cartpole_runs``, ``pong_runs``,
``interrupted_runs``), and every policy a worker must unpickle is defined here, at module level.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest
import torch
from processes import wait_gone
from torch import nn

from workbench.models import ActorCritic
from workbench.sampling import make_sampler

CARTPOLE = "CartPole-v1"
PONG = "ALE/Pong-v5"
MOUNTAIN_CAR = "MountainCar-v0"  # time limit 200 steps; a constant action never reaches the goal
MOUNTAIN_CAR_LIMIT = 200

KINDS = ["serial", "parallel", "batched", "alternating"]
WORKER_KINDS = ["parallel", "batched", "alternating"]
ROLLOUT_FIELDS = ["obs", "actions", "rewards", "terminated", "truncated", "next_obs"]

#: Seconds a test that might hang (a dead worker, an interrupt) may take before it counts as hung.
HANG_LIMIT = 30.0


# --- policies (module level: spawned workers unpickle them by name) ----------------------------


class DeterministicActorCritic(ActorCritic):
    """ActorCritic that always takes its most probable action, so rollouts are reproducible."""

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> dict[str, torch.Tensor]:
        return super().act(obs, deterministic=True)


class InterruptingPolicy(DeterministicActorCritic):
    """Raises KeyboardInterrupt (a Ctrl-C in the sampler's process) on the ``countdown``-th act."""

    countdown = -1

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> dict[str, torch.Tensor]:
        self.countdown -= 1
        if self.countdown == 0:
            raise KeyboardInterrupt
        return super().act(obs)


class SlowPolicy(DeterministicActorCritic):
    """Sleeps ``delay`` seconds per act. ``delay`` is a buffer, so samplers sync it to workers."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register_buffer("delay", torch.zeros(()))

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> dict[str, torch.Tensor]:
        time.sleep(float(self.delay))
        return super().act(obs)


class ConstantPolicy(nn.Module):
    """Always ``action``; with ``with_value``, a value ``10 * sum(obs) + 1`` that tests
    recompute."""

    def __init__(self, action: int = 1, with_value: bool = True) -> None:
        super().__init__()
        self.action = action
        self.with_value = with_value

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        out = {"action": torch.full(obs.shape[:1], self.action, dtype=torch.int64)}
        if self.with_value:
            out["value"] = constant_policy_value(obs)
        return out


def constant_policy_value(obs: torch.Tensor) -> torch.Tensor:
    return obs.to(torch.float32).sum(-1) * 10.0 + 1.0


class NoActionPolicy(nn.Module):
    """A policy that forgot the 'action' entry."""

    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"value": torch.zeros(obs.shape[0])}


# --- helpers ------------------------------------------------------------------------------------


def make(kind: str, env_id: str = CARTPOLE, **kwargs):
    """A sampler on the CPU with 2 workers, or 1 for ParallelSampler (whose workers import torch,
    ~2 s each on the CI machine) where the test is not about how envs are split among workers."""
    kwargs.setdefault("device", "cpu")
    kwargs.setdefault("num_workers", 1 if kind == "parallel" else 2)
    return make_sampler(kind, env_id, **kwargs)


def cartpole_policy() -> DeterministicActorCritic:
    torch.manual_seed(0)
    return DeterministicActorCritic((4,), 2)


def run_bounded(fn, timeout: float = HANG_LIMIT):
    """``fn()`` in a thread: (its result or None, its exception or None); fails the test on a
    hang."""
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as error:  # noqa: BLE001 (the test inspects it)
            box["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"hung: still running after {timeout:.0f} s")
    return box.get("result"), box.get("error")


_cartpole_model: list = []  # made on first use: spawned workers import this module too


def cartpole_model():
    if not _cartpole_model:
        env = gym.make(CARTPOLE).unwrapped
        env.reset(seed=0)
        _cartpole_model.append(env)
    return _cartpole_model[0]


def fake_transitions(rollout) -> list[tuple[int, int]]:
    """(t, b) of the steps that CartPole's dynamics do not explain: obs[t], actions[t] -> obs[t+1].

    CartPole is deterministic given its state (= the observation), so every stored step that did
    not end an episode can be replayed from its observation (a sampler never invents a step).
    """
    following = torch.cat([rollout.obs[1:], rollout.next_obs[None]])
    done = rollout.terminated | rollout.truncated
    model, bad = cartpole_model(), []
    for t in range(rollout.horizon):
        for b in range(rollout.num_envs):
            if done[t, b]:
                continue
            model.state = rollout.obs[t, b].double().numpy()
            model.steps_beyond_terminated = None  # a fresh step, not one past an episode's end
            predicted, *_ = model.step(int(rollout.actions[t, b]))
            if not np.allclose(predicted, following[t, b].numpy(), atol=1e-5):
                bad.append((t, b))
    return bad


def assert_same_rollout(a, b, label: str) -> None:
    for name in ROLLOUT_FIELDS:
        assert torch.equal(getattr(a, name), getattr(b, name)), f"{label}: {name} differ"
    assert torch.allclose(a.policy_outputs["value"], b.policy_outputs["value"], atol=1e-5), label
    assert torch.allclose(a.policy_outputs["logp"], b.policy_outputs["logp"], atol=1e-5), label


# --- shared runs (read-only) --------------------------------------------------------------------

CARTPOLE_B, CARTPOLE_T, CARTPOLE_COLLECTS = 4, 16, 3


@pytest.fixture(scope="module")
def cartpole_runs(closed_samplers) -> dict[str, list]:
    """Each sampler, CartPole, B=4, T=16, seed 0, 3 collects with one deterministic policy.

    The samplers are then closed; ``closed_samplers`` records their workers for the close test.
    """
    runs = {}
    for kind in KINDS:
        policy = cartpole_policy()
        sampler = make(kind, num_envs=CARTPOLE_B, horizon=CARTPOLE_T, seed=0, num_workers=2)
        try:
            runs[kind] = [sampler.collect(policy) for _ in range(CARTPOLE_COLLECTS)]
        finally:
            pids = getattr(sampler, "worker_pids", [])
            alive_before = wait_gone(pids, 0.0) == pids
            _, error = run_bounded(sampler.close)
            closed_samplers[kind] = dict(
                sampler=sampler, pids=pids, alive_before=alive_before, error=error
            )
    return runs


@pytest.fixture(scope="module")
def closed_samplers() -> dict[str, dict]:
    return {}


@pytest.fixture(scope="module")
def pong_runs() -> dict[str, list]:
    """Each sampler, Pong, B=2, T=6, seed 3, 2 collects with one deterministic policy (1 or 2
    workers)."""
    runs = {}
    for kind in KINDS:
        with make(kind, PONG, num_envs=2, horizon=6, seed=3) as sampler:
            torch.manual_seed(0)
            policy = DeterministicActorCritic(
                sampler.observation_space.shape, int(sampler.action_space.n)
            )
            runs[kind] = [sampler.collect(policy) for _ in range(2)]
    return runs


# --- shapes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_rollout_is_time_major(cartpole_runs, kind: str) -> None:
    T, B = CARTPOLE_T, CARTPOLE_B
    r = cartpole_runs[kind][0]
    assert r.obs.shape == (T, B, 4)
    assert r.next_obs.shape == (B, 4)
    for name in ("actions", "rewards", "terminated", "truncated", "truncation_values"):
        assert getattr(r, name).shape == (T, B), name
    assert set(r.policy_outputs) == {"logp", "value"}
    assert r.policy_outputs["logp"].shape == (T, B)
    assert r.policy_outputs["value"].shape == (T, B)
    assert r.terminated.dtype == torch.bool and r.truncated.dtype == torch.bool
    assert (r.horizon, r.num_envs, r.num_steps) == (T, B, T * B)
    assert not torch.isnan(r.rewards).any(), "every step must be written (no NaN sentinel left)"


# --- reproducibility ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["parallel", "batched", "alternating"])
def test_same_seed_same_rollout_as_serial_on_cartpole(cartpole_runs, kind: str) -> None:
    for k, (expected, got) in enumerate(zip(cartpole_runs["serial"], cartpole_runs[kind])):
        assert_same_rollout(expected, got, f"{kind} collect {k}")


@pytest.mark.parametrize("kind", ["parallel", "batched", "alternating"])
def test_same_seed_same_rollout_as_serial_on_pong(pong_runs, kind: str) -> None:
    for k, (expected, got) in enumerate(zip(pong_runs["serial"], pong_runs[kind])):
        assert expected.obs.shape == (6, 2, 4, 84, 84) and expected.obs.dtype == torch.uint8
        assert_same_rollout(expected, got, f"{kind} collect {k}")


@pytest.mark.parametrize("kind", KINDS)
def test_consecutive_collects_are_continuous(cartpole_runs, kind: str) -> None:
    runs = cartpole_runs[kind]
    for before, after in zip(runs, runs[1:]):
        assert torch.equal(before.next_obs, after.obs[0])


@pytest.mark.parametrize("kind", KINDS)
def test_every_stored_step_is_a_real_transition(cartpole_runs, kind: str) -> None:
    for k, rollout in enumerate(cartpole_runs[kind]):
        assert fake_transitions(rollout) == [], f"collect {k}"


def test_different_seeds_give_different_rollouts() -> None:
    policy = cartpole_policy()
    with (
        make("serial", num_envs=2, horizon=8, seed=0) as a,
        make("serial", num_envs=2, horizon=8, seed=1) as b,
    ):
        ra, rb = a.collect(policy), b.collect(policy)
    assert not torch.equal(ra.obs, rb.obs)


def test_env_i_is_seeded_seed_plus_i() -> None:
    policy, seed = cartpole_policy(), 11
    with (
        make("serial", num_envs=4, horizon=12, seed=seed) as four,
        make("serial", num_envs=1, horizon=12, seed=seed + 2) as one,
    ):
        for _ in range(2):
            r4, r1 = four.collect(policy), one.collect(policy)
            for name in ROLLOUT_FIELDS:
                a, b = getattr(r4, name), getattr(r1, name)
                env2 = a[2] if name == "next_obs" else a[:, 2]
                only = b[0] if name == "next_obs" else b[:, 0]
                assert torch.equal(env2, only), name


# --- episodes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_episode_stats_match_the_dones(cartpole_runs, kind: str) -> None:
    """CartPole pays 1 per step: each return is its length, the steps since that env's last done."""
    steps = np.zeros(CARTPOLE_B, dtype=np.int64)
    expected, reported_returns, reported_lengths = [], [], []
    for rollout in cartpole_runs[kind]:
        done = (rollout.terminated | rollout.truncated).numpy()
        for t in range(rollout.horizon):  # the order of EpisodeStats: t, then b
            steps += 1
            for b in np.flatnonzero(done[t]):
                expected.append(int(steps[b]))
                steps[b] = 0
        reported_returns += rollout.episodes.returns
        reported_lengths += rollout.episodes.lengths
    assert len(expected) >= CARTPOLE_B, "the test needs several episodes to end"
    assert reported_lengths == expected
    assert reported_returns == [float(n) for n in expected]


# --- truncation ---------------------------------------------------------------------------------


def mountain_car_final_obs(seed: int, steps: int, action: int = 1) -> np.ndarray:
    env = gym.make(MOUNTAIN_CAR)
    env.reset(seed=seed)
    for _ in range(steps):
        obs, _, terminated, truncated, _ = env.step(action)
        assert not terminated
    assert truncated, "MountainCar's time limit should end the episode here"
    env.close()
    return obs


@pytest.mark.parametrize("kind", KINDS)
def test_truncation_bootstraps_from_the_value_of_the_final_obs(kind: str) -> None:
    seed, B = 5, 2
    with make(kind, MOUNTAIN_CAR, num_envs=B, horizon=MOUNTAIN_CAR_LIMIT, seed=seed) as sampler:
        r = sampler.collect(ConstantPolicy(with_value=True))
    last = MOUNTAIN_CAR_LIMIT - 1
    assert not r.terminated.any()
    assert r.truncated[last].all() and r.truncated.sum() == B
    expected = torch.stack(
        [
            constant_policy_value(
                torch.as_tensor(mountain_car_final_obs(seed + i, MOUNTAIN_CAR_LIMIT))[None]
            )[0]
            for i in range(B)
        ]
    )
    torch.testing.assert_close(r.truncation_values[last], expected)
    assert (r.truncation_values[:last] == 0).all()
    # The stored value of the last step is that of obs[last], not of the final observation.
    assert not torch.allclose(r.policy_outputs["value"][last], expected)


@pytest.mark.parametrize("kind", KINDS)
def test_truncation_values_are_nan_when_the_policy_gives_no_value(kind: str) -> None:
    with make(kind, MOUNTAIN_CAR, num_envs=2, horizon=MOUNTAIN_CAR_LIMIT, seed=0) as sampler:
        r = sampler.collect(ConstantPolicy(with_value=False))
    assert r.truncated[-1].all()
    assert torch.isnan(r.truncation_values[-1]).all(), r.truncation_values[-1]
    assert (r.truncation_values[:-1] == 0).all()


# --- resize -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, start, new",
    [
        ("parallel", dict(num_workers=2, num_envs=2), dict(num_workers=1, num_envs=3)),
        ("batched", dict(num_workers=2, num_envs=2), dict(num_workers=1, num_envs=3)),
        ("alternating", dict(num_workers=4, num_envs=4), dict(num_workers=2, num_envs=6)),
    ],
)
def test_resize_changes_workers_envs_and_horizon(kind: str, start: dict, new: dict) -> None:
    policy = cartpole_policy()
    with make(kind, horizon=5, seed=0, **start) as sampler:
        r = sampler.collect(policy)
        assert r.num_envs == start["num_envs"] and len(sampler.worker_pids) == start["num_workers"]
        old_pids = sampler.worker_pids
        sampler.resize(**new)
        r = sampler.collect(policy)
        assert r.obs.shape == (5, new["num_envs"], 4) and r.actions.shape == (5, new["num_envs"])
        assert r.policy_outputs["value"].shape == (5, new["num_envs"])
        assert len(sampler.worker_pids) == new["num_workers"]
        assert wait_gone(old_pids, 5.0) == [], "resize must stop the old workers"
        sampler.resize(horizon=9)
        r = sampler.collect(policy)
        assert r.obs.shape == (9, new["num_envs"], 4) and r.rewards.shape == (9, new["num_envs"])
        assert not torch.isnan(r.rewards).any()
        assert fake_transitions(r) == []


def test_serial_resize_changes_envs_and_horizon() -> None:
    policy = cartpole_policy()
    with make("serial", num_envs=2, horizon=5) as sampler:
        sampler.collect(policy)
        sampler.resize(num_envs=3, horizon=7)
        r = sampler.collect(policy)
    assert r.obs.shape == (7, 3, 4) and r.policy_outputs["logp"].shape == (7, 3)


def test_rejected_resize_leaves_the_sampler_as_it_was() -> None:
    policy = cartpole_policy()
    with make("batched", num_envs=2, horizon=5) as sampler:
        sampler.collect(policy)
        with pytest.raises(ValueError, match="num_workers"):
            sampler.resize(num_workers=3, horizon=9)  # 3 workers > 2 envs
        assert sampler.horizon == 5
        r = sampler.collect(policy)
    assert r.obs.shape == (5, 2, 4)


def test_resize_to_zero_workers_raises() -> None:
    sampler = make("parallel", num_envs=2, horizon=5)  # workers start at the first collect
    try:
        with pytest.raises(ValueError, match="positive"):
            sampler.resize(num_workers=0)
    finally:
        sampler.close()


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, kwargs, fix",
    [
        ("parallel", dict(num_envs=2, num_workers=3), "num_workers <= 2"),
        ("batched", dict(num_envs=2, num_workers=3), "num_workers <= 2"),
        ("alternating", dict(num_envs=2, num_workers=4), "num_workers <= 2"),
        ("parallel", dict(num_envs=2, num_workers=0), "positive integer"),
        ("batched", dict(num_envs=2, num_workers=0), "positive integer"),
        ("alternating", dict(num_envs=4, num_workers=0), "positive integer"),
        ("alternating", dict(num_envs=6, num_workers=3), "num_workers=4"),
        ("alternating", dict(num_envs=5, num_workers=2), "num_envs=6"),
        ("serial", dict(num_envs=0), "positive integer"),
        ("batched", dict(num_envs=2, horizon=0), "positive integer"),
    ],
)
def test_bad_sizes_raise_value_error_naming_the_fix(kind: str, kwargs: dict, fix: str) -> None:
    kwargs.setdefault("horizon", 4)
    with pytest.raises(ValueError, match=fix):
        make(kind, **kwargs)


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_env_id_raises_value_error_naming_the_fix(kind: str) -> None:
    with pytest.raises(ValueError, match="Did you mean 'CartPole-v1'"):
        make(kind, "CartPol-v1", num_envs=2, horizon=4)


@pytest.mark.usefixtures("no_gpu")
@pytest.mark.parametrize("kind", ["serial", "batched", "alternating"])
def test_cuda_without_a_gpu_raises_value_error_naming_the_fix(kind: str) -> None:
    with pytest.raises(ValueError, match="device='cpu'"):
        make(kind, num_envs=2, horizon=4, device="cuda")


def test_unknown_sampler_kind_raises_value_error() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        make_sampler("threaded", CARTPOLE, num_envs=2, horizon=4)


@pytest.mark.parametrize("kind", KINDS)
def test_policy_without_action_raises_type_error(kind: str) -> None:
    with make(kind, num_envs=2, horizon=4) as sampler:
        with pytest.raises(TypeError, match="'action'"):
            sampler.collect(NoActionPolicy())


# --- workers that die, collects that are interrupted, close -------------------------------------


def kill_worker(sampler, index: int) -> int:
    """SIGKILL worker ``index`` of ``sampler`` and wait until it is gone; returns its pid."""
    pid = sampler.worker_pids[index]
    os.kill(pid, signal.SIGKILL)
    assert wait_gone([pid], 5.0) == []
    return pid


def assert_full_rollout(r, horizon: int, num_envs: int) -> None:
    assert r.obs.shape == (horizon, num_envs, 4) and r.actions.shape == (horizon, num_envs)
    assert r.rewards.shape == (horizon, num_envs) and r.next_obs.shape == (num_envs, 4)
    assert r.policy_outputs["value"].shape == (horizon, num_envs)
    assert not torch.isnan(r.rewards).any(), "every step must be written (no NaN sentinel left)"
    assert fake_transitions(r) == []


@pytest.mark.parametrize("kind", WORKER_KINDS)
def test_a_killed_worker_is_restarted_and_the_next_collect_is_full(kind: str) -> None:
    """A worker killed between collects is restarted, as an Ape-X or SEED actor is: the next
    collect is whole, one ``worker_restart`` event names the worker and its old pid, and the other
    worker is untouched."""
    policy = cartpole_policy()
    sampler = make(kind, num_envs=4, horizon=CARTPOLE_T, num_workers=2)
    try:
        sampler.collect(policy)
        assert sampler.take_events() == []
        survivor = sampler.worker_pids[0]
        old_pid = kill_worker(sampler, 1)
        rollout, error = run_bounded(lambda: sampler.collect(policy))
        assert error is None, repr(error)
        assert_full_rollout(rollout, CARTPOLE_T, 4)
        (event,) = sampler.take_events()
        new_pid = sampler.worker_pids[1]
        assert event["event"] == "worker_restart" and event["worker"] == 1
        assert event["old_pid"] == old_pid and event["pid"] == new_pid != old_pid
        assert event["exit_code"] == -signal.SIGKILL
        assert sampler.worker_pids == [survivor, new_pid]
        assert wait_gone([new_pid], 0.0) == [new_pid], "the restarted worker runs"
        assert wait_gone([old_pid], 0.0) == [], "the old worker is gone"
        assert sampler.take_events() == [], "events are handed over once"
        rollout, error = run_bounded(lambda: sampler.collect(policy))
        assert error is None, repr(error)
        assert_full_rollout(rollout, CARTPOLE_T, 4)
    finally:
        pids = sampler.worker_pids
        run_bounded(sampler.close)
    assert wait_gone(pids, 5.0) == []


@pytest.mark.parametrize("kind", WORKER_KINDS)
def test_a_worker_that_keeps_dying_makes_collect_raise(kind: str) -> None:
    """Killed 4 times within a minute: the first 3 deaths are restarts, each after a wait that
    doubles (0.5, 1, 2 s: ``restarts.RestartBudget``, as Ape-X's and SEED's actors), the 4th fails
    the collect with a RuntimeError that names the worker and says it is not restarted again."""
    policy = cartpole_policy()
    sampler = make(kind, num_envs=4, horizon=4)
    pids, waits = [], []
    try:
        sampler.collect(policy)
        pids += sampler.worker_pids
        for restart in range(3):
            pids.append(kill_worker(sampler, -1))
            _, error = run_bounded(lambda: sampler.collect(policy))
            assert error is None, f"restart {restart + 1}: {error!r}"
            (event,) = sampler.take_events()
            assert event["event"] == "worker_restart"
            waits.append(event["after_seconds"])
            pids += sampler.worker_pids
        assert waits == [0.5, 1.0, 2.0]
        pids.append(kill_worker(sampler, -1))
        _, error = run_bounded(lambda: sampler.collect(policy))
        assert isinstance(error, RuntimeError), repr(error)
        worker = len(sampler.worker_pids) - 1
        assert f"worker {worker} died 4 times within 60 s" in str(error), str(error)
        assert "not restarted again" in str(error)
    finally:
        pids += sampler.worker_pids
        _, error = run_bounded(sampler.close)
    assert error is None
    assert wait_gone(pids, 5.0) == []


def test_worker_killed_during_a_collect_is_restarted_promptly() -> None:
    """A worker killed mid-collect is noticed at once (its restart starts then, not when the
    collect would have ended), and the collect is taken again, whole."""
    torch.manual_seed(0)
    policy = SlowPolicy((4,), 2)
    sampler = make("parallel", num_envs=2, horizon=60)
    try:
        sampler.collect(policy)  # starts the workers
        policy.delay.fill_(0.05)  # from now on a collect takes 60 * 0.05 = 3 s
        pids = sampler.worker_pids
        threading.Timer(0.3, os.kill, (pids[0], signal.SIGKILL)).start()
        start = time.time()
        rollout, error = run_bounded(lambda: sampler.collect(policy))
        assert error is None, repr(error)
        assert_full_rollout(rollout, 60, 2)
        (event,) = sampler.take_events()
        assert event["event"] == "worker_restart" and event["old_pid"] == pids[0]
        restarted_after = psutil.Process(event["pid"]).create_time() - start
        assert restarted_after < 2.0, "the death should be noticed at once, not at the end"
        pids += sampler.worker_pids
    finally:
        run_bounded(sampler.close)
    assert wait_gone(pids, 5.0) == []


@pytest.mark.parametrize("kind", WORKER_KINDS)
def test_close_terminates_every_worker(cartpole_runs, closed_samplers, kind: str) -> None:
    closed = closed_samplers[kind]
    assert len(closed["pids"]) == 2 and closed["alive_before"], "the workers ran until close"
    assert closed["error"] is None, repr(closed["error"])
    assert wait_gone(closed["pids"], 5.0) == []
    with pytest.raises(RuntimeError, match="closed"):
        closed["sampler"].collect(cartpole_policy())


@pytest.mark.parametrize("kind", ["batched", "alternating"])
def test_env_only_workers_never_load_torch(kind: str) -> None:
    """Env-only workers stay small and start fast (a restart waits for one): no torch library is
    mapped into them, though they import ``workbench.sampling.workers`` through its package."""
    with make(kind, num_envs=2, horizon=4) as sampler:
        for pid in sampler.worker_pids:
            libraries = {m.path for m in psutil.Process(pid).memory_maps()}
            assert not [path for path in libraries if "libtorch" in path], pid


def test_sampler_made_in_a_thread_keeps_its_workers_after_the_thread_ends() -> None:
    """A notebook run makes its sampler in a background thread; the sampler outlives that thread."""
    box = []
    thread = threading.Thread(target=lambda: box.append(make("batched", num_envs=2, horizon=4)))
    thread.start()
    thread.join(60)
    sampler = box[0]
    try:
        time.sleep(0.5)
        assert wait_gone(sampler.worker_pids, 0.0) == sampler.worker_pids, (
            "workers died with the thread"
        )
        _, error = run_bounded(lambda: sampler.collect(cartpole_policy()))
        assert error is None, repr(error)
    finally:
        run_bounded(sampler.close)


def _interrupt_main_thread_during(collect, after: float):
    """Run ``collect()`` and deliver SIGINT to this (main) thread ``after`` seconds in: a Ctrl-C."""
    armed = threading.Event()
    armed.set()

    def handler(signum, frame):
        # Only inside the sampler's code: a signal that came late must not abort the session.
        inside = False
        while frame is not None and not inside:
            inside = os.path.join("workbench", "sampling", "") in frame.f_code.co_filename
            frame = frame.f_back
        if armed.is_set() and inside:
            armed.clear()
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    timer = threading.Timer(
        after, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)
    )
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            collect()
    finally:
        timer.cancel()
        armed.clear()
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="module")
def interrupted_runs() -> dict[str, list]:
    """Per worker sampler: one collect, one interrupted collect, then two collects after it.

    Batched and Alternating are interrupted inside policy.act (the 5th call: Alternating then has
    a group of workers in flight); Parallel, whose policy runs in the workers, by a SIGINT to the
    main thread while it waits for them.
    """
    assert threading.current_thread() is threading.main_thread()
    runs = {}
    for kind in WORKER_KINDS:
        torch.manual_seed(0)
        if kind == "parallel":
            policy = SlowPolicy((4,), 2)
        else:
            policy = InterruptingPolicy((4,), 2)
        with make(kind, num_envs=4, horizon=CARTPOLE_T, seed=0) as sampler:
            first = sampler.collect(policy)
            if kind == "parallel":
                policy.delay.fill_(0.05)  # synced to the workers: this collect takes ~0.8 s
                _interrupt_main_thread_during(
                    lambda sampler=sampler, policy=policy: sampler.collect(policy), after=0.2
                )
                policy.delay.fill_(0.0)
            else:
                policy.countdown = 5
                with pytest.raises(KeyboardInterrupt):
                    sampler.collect(policy)
            after = run_bounded(
                lambda sampler=sampler, policy=policy: [sampler.collect(policy) for _ in range(2)]
            )
            runs[kind] = [first, *after[0]] if after[1] is None else after[1]
    return runs


@pytest.mark.parametrize("kind", WORKER_KINDS)
def test_interrupted_collect_leaves_a_usable_sampler(interrupted_runs, kind: str) -> None:
    runs = interrupted_runs[kind]
    assert not isinstance(runs, BaseException), f"collect after the interrupt failed: {runs!r}"
    for r in runs:
        assert r.obs.shape == (CARTPOLE_T, 4, 4) and r.actions.shape == (CARTPOLE_T, 4)
        assert r.policy_outputs["value"].shape == (CARTPOLE_T, 4)
        assert not torch.isnan(r.rewards).any()
    assert torch.equal(runs[1].next_obs, runs[2].obs[0])


@pytest.mark.parametrize("kind", WORKER_KINDS)
def test_collect_after_an_interrupt_stores_only_real_transitions(
    interrupted_runs, kind: str
) -> None:
    """The first observation after an interrupt is where the envs really are, not a stale one."""
    runs = interrupted_runs[kind]
    assert not isinstance(runs, BaseException), f"collect after the interrupt failed: {runs!r}"
    assert fake_transitions(runs[1]) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_different_policy_is_used_from_the_next_collect(kind: str) -> None:
    with make(kind, num_envs=2, horizon=4) as sampler:
        first = sampler.collect(ConstantPolicy(1, with_value=True))
        second = sampler.collect(ConstantPolicy(0, with_value=False))
    assert first.actions.unique().tolist() == [1] and "value" in first.policy_outputs
    assert second.actions.unique().tolist() == [0] and "value" not in second.policy_outputs


@pytest.mark.parametrize("kind", ["serial", "batched", "alternating"])
def test_ctrl_c_takes_effect_at_a_step_boundary_and_restores_the_handler(kind: str) -> None:
    """A real SIGINT (Python's default handler, as in a kernel) mid-collect: KeyboardInterrupt
    comes out of collect, the handler is restored, and what follows holds only real steps."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    torch.manual_seed(0)
    policy = SlowPolicy((4,), 2)
    with make(kind, num_envs=4, horizon=CARTPOLE_T, seed=0) as sampler:
        sampler.collect(policy)
        policy.delay.fill_(0.02)
        timer = threading.Timer(
            0.1, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)
        )
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                sampler.collect(policy)
        finally:
            timer.cancel()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        policy.delay.fill_(0.0)
        after = [sampler.collect(policy) for _ in range(2)]
    for rollout in after:
        assert not torch.isnan(rollout.rewards).any()
        assert fake_transitions(rollout) == []
    assert torch.equal(after[0].next_obs, after[1].obs[0])
