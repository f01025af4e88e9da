"""Four ways to collect a ``[T, B]`` rollout (Stooke & Abbeel 2018, Section 3 and Figure 1).

One interface: ``sampler.collect(policy) -> Rollout``; ``sampler.resize(...)``; ``sampler.close()``.

* ``SerialSampler``: one process steps a vector env (C++ threads for Atari) and runs inference.
* ``ParallelSampler``: worker processes, each with its envs and its own copy of the policy on the
  CPU; parameters (in shared memory) are refreshed at every collect.
* ``BatchedSampler``: workers only step envs into shared memory; the sampler's process runs one
  batched forward pass for all envs on the chosen device (the paper's GPU sampler).
* ``AlternatingSampler``: the envs form two groups; while one group steps, the other's actions
  are computed, so env stepping and inference overlap (the paper's alternating GPU sampler).

The policy is any object with ``act(obs [B, *obs_shape]) -> dict`` of ``[B, ...]`` tensors that
holds at least ``"action"``; every other entry is stored per step in ``Rollout.policy_outputs``,
and ``"value"``, when present, also bootstraps truncated episodes (``Rollout.truncation_values``).

Env ``i`` is seeded ``seed + i`` in every sampler, so with a deterministic policy all four
samplers collect the same rollout. Buffers are allocated once (at the first collect, from an
example of the policy's outputs) and reallocated only by ``resize``.
"""

from __future__ import annotations

import copy
import math
import os
import signal
import struct
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
import torch.multiprocessing

from workbench import workers
from workbench.envs import env_spaces, make_vector_env
from workbench.rollout import EpisodeStats, Rollout
from workbench.system import resolve_device


class Policy(Protocol):
    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]: ...


@dataclass(frozen=True)
class _OutputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


def _output_specs(policy: Policy, obs_example: np.ndarray, device: torch.device) -> dict[str, _OutputSpec]:
    """Names, per-env shapes and dtypes of what ``policy.act`` returns, from one example."""
    with torch.no_grad():
        out = policy.act(torch.as_tensor(obs_example[None]).to(device))
    if not isinstance(out, dict) or "action" not in out:
        raise TypeError(
            "policy.act(obs) must return a dict of [B, ...] tensors with an 'action' entry "
            f"(got {type(out).__name__}); see workbench.models.ActorCritic.act."
        )
    return {name: _OutputSpec(tuple(v.shape[1:]), v.dtype) for name, v in out.items()}


class _StepBoundaryInterrupts:
    """A Ctrl-C (the kernel's interrupt button) during a collect takes effect between steps.

    KeyboardInterrupt can otherwise land between sending a worker its command and recording that
    a reply is owed, and the pipe's conversation would slip out of step. While a collect runs in
    the main thread, SIGINT only sets a flag; ``check()`` raises at the next step boundary, where
    the bookkeeping is whole. Elsewhere (a run's background thread) signals never arrive anyway.
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handler(self, signum, frame) -> None:
        self.requested = True

    def __enter__(self) -> "_StepBoundaryInterrupts":
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if previous not in (signal.SIG_IGN, signal.SIG_DFL, None):
                self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def check(self) -> None:
        if self.requested:
            self.requested = False
            raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        if exc[0] is None:
            self.check()  # it came during the last step: the rollout is dropped, as it would be


class _PolicyMemory:
    """Which policy a sampler last prepared for (its buffers, copies and workers depend on it).

    The same object again means "new parameters, same policy": they are copied. Any other object
    is a new policy: output buffers are re-derived and copies remade. A weak reference, so a
    policy that was freed is never mistaken for a new one at the same address.
    """

    def __init__(self) -> None:
        self._ref: Any = None

    def is_new(self, policy: Any) -> bool:
        return self._ref is None or self._ref() is not policy

    def remember(self, policy: Any) -> None:
        try:
            self._ref = weakref.ref(policy)
        except TypeError:  # objects without weakref support: remembered strongly
            self._ref = lambda: policy


def _split(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous env slices ``[lo, hi)`` as even as possible, one per worker."""
    bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int)
    return [(int(bounds[i]), int(bounds[i + 1])) for i in range(num_workers)]


def _keep(new: int | None, current: int) -> int:
    """``resize`` arguments: None keeps the current value (0 is a value, and is refused)."""
    return current if new is None else new


def _check_sizes(num_envs: int, horizon: int, num_workers: int | None = None) -> None:
    for name, value in (("num_envs", num_envs), ("horizon", horizon)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    if num_workers is not None:
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}.")
        if num_workers > num_envs:
            raise ValueError(
                f"num_workers={num_workers} > num_envs={num_envs}: each worker needs at least one "
                f"env. Use num_workers <= {num_envs}, or more envs."
            )


class _Buffers:
    """The rollout's arrays, ``[T + 1, B]`` for observations (row T is ``next_obs``)."""

    def __init__(self, allocate, horizon: int, num_envs: int, obs_space, action_space) -> None:
        T, B = horizon, num_envs
        obs_shape, obs_dtype = tuple(obs_space.shape), obs_space.dtype
        action_shape = tuple(action_space.shape)
        action_dtype = np.int64 if np.issubdtype(action_space.dtype, np.integer) else np.float32
        self.arrays: dict[str, np.ndarray] = {}
        self.shared: dict[str, Any] = {}
        for name, shape, dtype, fill in (
            ("obs", (T + 1, B, *obs_shape), obs_dtype, 0),
            ("actions", (T, B, *action_shape), action_dtype, 0),
            ("rewards", (T, B), np.float32, np.nan),
            ("terminated", (T, B), np.bool_, False),
            ("truncated", (T, B), np.bool_, False),
            ("truncation_values", (T, B), np.float32, 0.0),
            ("episode_done", (T, B), np.bool_, False),
            ("episode_return", (T, B), np.float64, np.nan),
            ("episode_length", (T, B), np.int64, 0),
            ("final_obs", (B, *obs_shape), obs_dtype, 0),
        ):
            self.add(allocate, name, shape, dtype, fill)
        # Row of `obs` that holds each env's newest observation: T after a whole collect, less
        # after an interrupted one. The next collect starts from it, so no step is invented.
        self.latest_row = np.zeros(B, dtype=np.int64)
        self._obs_pool: list[np.ndarray] = []

    def add(self, allocate, name: str, shape, dtype, fill) -> None:
        array, shared = allocate(tuple(shape), dtype, fill)
        self.arrays[name] = array
        if shared is not None:
            self.shared[name] = shared

    def start_collect(self) -> None:
        """Carry each env's newest observation over as the first, and clear the step rows."""
        a, rows = self.arrays, self.latest_row
        if (rows == rows[0]).all():
            if rows[0] != 0:
                a["obs"][0] = a["obs"][rows[0]]
        else:
            a["obs"][0] = a["obs"][rows, np.arange(len(rows))]
        rows[:] = 0
        a["truncation_values"][...] = 0.0
        a["episode_done"][...] = False
        a["rewards"][...] = np.nan  # sentinel: an unwritten step is obvious

    def _copy_obs(self) -> np.ndarray:
        """A copy of ``obs`` in an array that nothing else refers to any more.

        Observations are the bulk of a rollout (117 MB for Pong at T=64, B=64). Fresh memory of
        that size costs page faults, and with transparent huge pages a compaction stall (measured:
        0.01 s to copy into reused memory, up to 0.26 s into fresh). So arrays are recycled, but
        only once no tensor or view of an earlier rollout holds them: its refcount tells.
        """
        source = self.arrays["obs"]
        for array in self._obs_pool:
            # References: the pool's list, and getrefcount's own argument. Any more is a Rollout.
            if sys.getrefcount(array) <= 3 and array.shape == source.shape:
                np.copyto(array, source)
                return array
        array = source.copy()
        if len(self._obs_pool) < 4:  # a loop holds one or two rollouts; keep no more than that
            self._obs_pool.append(array)
        return array

    def rollout(self, outputs: dict[str, torch.Tensor], timings: dict[str, float]) -> Rollout:
        """A copy of the buffers as a Rollout (the buffers are reused by the next collect)."""
        a = self.arrays
        done = a["episode_done"]
        episodes = EpisodeStats(
            returns=a["episode_return"][done].tolist(), lengths=a["episode_length"][done].tolist()
        )
        obs = torch.from_numpy(self._copy_obs())
        return Rollout(
            obs=obs[:-1],
            actions=torch.from_numpy(a["actions"].copy()),
            rewards=torch.from_numpy(a["rewards"].copy()),
            terminated=torch.from_numpy(a["terminated"].copy()),
            truncated=torch.from_numpy(a["truncated"].copy()),
            truncation_values=torch.from_numpy(a["truncation_values"].copy()),
            policy_outputs={k: v.clone() for k, v in outputs.items()},
            next_obs=obs[-1],
            episodes=episodes,
            timings=timings,
        )


def _local_allocate(shape, dtype, fill):
    return np.full(shape, fill, dtype=dtype), None


class _Sampler:
    """What every sampler shares: sizes, seeds, the inference copy of the policy, timing."""

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        horizon: int,
        seed: int,
        device: "str | torch.device",
        env_options: dict | None,
    ) -> None:
        _check_sizes(num_envs, horizon)
        self.env_id = env_id
        self.num_envs = num_envs
        self.horizon = horizon
        self.seed = seed
        self.env_options = dict(env_options or {})
        self.device = resolve_device(device)
        # Checks the id and options once, here, with a clear error, before any worker starts.
        self.observation_space, self.action_space = env_spaces(env_id, **self.env_options)
        self._inference_policy: Any = None
        self._inference_memory = _PolicyMemory()
        self._generation = 0  # bumped by resize so that new envs do not replay old episodes
        self._closed = False

    def _env_seed(self) -> int:
        return self.seed + 1_000_003 * self._generation

    def _inference_copy(self, policy: Any) -> Any:
        """The policy on ``self.device``: itself if it is there, else a synced copy."""
        params = list(policy.parameters()) if isinstance(policy, torch.nn.Module) else []
        if not params or params[0].device == self.device:
            return policy
        if self._inference_policy is None or self._inference_memory.is_new(policy):
            self._inference_memory.remember(policy)
            self._inference_policy = copy.deepcopy(policy).to(self.device)
        self._inference_policy.load_state_dict(policy.state_dict())
        return self._inference_policy

    def _act(self, policy: Any, obs: np.ndarray) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return policy.act(torch.from_numpy(obs).to(self.device, non_blocking=True))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.env_id!r}, num_envs={self.num_envs}, "
            f"horizon={self.horizon}, device={self.device})"
        )


class _SteppingLoop(_Sampler):
    """The step loop shared by the samplers whose own process runs inference.

    Subclasses provide ``_send(t, lo, hi)``: start stepping envs ``[lo, hi)`` with the actions in
    row t, and ``_receive(t, lo, hi) -> env seconds``: wait until they have written row t + 1.
    """

    def _start_buffers(self, allocate) -> None:
        self.buffers = _Buffers(allocate, self.horizon, self.num_envs, self.observation_space, self.action_space)
        self._outputs: dict[str, torch.Tensor] | None = None
        self._outputs_memory = _PolicyMemory()

    def _allocate_outputs(self, policy: Any) -> None:
        obs_example = self.buffers.arrays["obs"][0, 0]
        specs = _output_specs(policy, obs_example, self.device)
        self._outputs = {
            name: torch.zeros((self.horizon, self.num_envs, *spec.shape), dtype=spec.dtype)
            for name, spec in specs.items()
            if name != "action"
        }
        self._has_value = "value" in specs

    def _infer(self, policy: Any, t: int, lo: int, hi: int) -> None:
        a = self.buffers.arrays
        out = self._act(policy, a["obs"][t, lo:hi])
        a["actions"][t, lo:hi] = out["action"].cpu().numpy()
        for name, buffer in self._outputs.items():
            buffer[t, lo:hi] = out[name].cpu()

    def _bootstrap_truncated(self, policy: Any, t: int, lo: int, hi: int) -> None:
        """Value of the final observation of episodes cut by a time limit at step t."""
        a = self.buffers.arrays
        truncated = a["truncated"][t, lo:hi]
        if not truncated.any():
            return
        if not self._has_value:
            a["truncation_values"][t, lo:hi][truncated] = np.nan
            return
        final = np.ascontiguousarray(a["final_obs"][lo:hi][truncated])
        values = self._act(policy, final)["value"].float().cpu().numpy()
        a["truncation_values"][t, lo:hi][truncated] = values

    def _prepare(self, policy: Any) -> Any:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed; make a new sampler.")
        new_policy = self._outputs_memory.is_new(policy)
        self._outputs_memory.remember(policy)
        policy = self._inference_copy(policy)
        if self._outputs is None or new_policy:
            self._allocate_outputs(policy)  # another policy: its outputs may differ
        self.buffers.start_collect()
        return policy


class SerialSampler(_SteppingLoop):
    """One process: a vector env (ALE's C++ threads for Atari) and the policy, step by step.

    Args:
        env_id: gymnasium id (``ALE/Pong-v5``, ``CartPole-v1``).
        num_envs: B, the number of environments.
        horizon: T, steps per environment per collect.
        seed: env ``i`` is seeded ``seed + i``.
        device: where inference runs (``"auto"``: cuda:0 when present, else cpu).
        env_threads: C++ stepping threads for Atari (default: one per core).
        env_options: options for ``make_vector_env`` (e.g. ``{"episodic_life": False}``).
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        horizon: int,
        seed: int = 0,
        device: "str | torch.device" = "cpu",
        env_threads: int | None = None,
        env_options: dict | None = None,
    ) -> None:
        super().__init__(env_id, num_envs=num_envs, horizon=horizon, seed=seed, device=device, env_options=env_options)
        self.env_threads = env_threads
        self._start()

    def _start(self) -> None:
        self._start_buffers(_local_allocate)
        self.env = make_vector_env(
            self.env_id, self.num_envs, num_threads=self.env_threads, **self.env_options
        )
        obs, _ = self.env.reset(seed=self._env_seed())
        self.buffers.arrays["obs"][0] = obs

    def collect(self, policy: Policy) -> Rollout:
        policy = self._prepare(policy)
        a = self.buffers.arrays
        env_s = inference_s = 0.0
        start = time.perf_counter()
        with _StepBoundaryInterrupts() as interrupts:
            for t in range(self.horizon):
                interrupts.check()
                t0 = time.perf_counter()
                self._infer(policy, t, 0, self.num_envs)
                t1 = time.perf_counter()
                workers._write_step(a, t, slice(None), self.env.step(a["actions"][t]))
                self.buffers.latest_row[:] = t + 1
                t2 = time.perf_counter()
                self._bootstrap_truncated(policy, t, 0, self.num_envs)
                inference_s += (t1 - t0) + (time.perf_counter() - t2)
                env_s += t2 - t1
        total = time.perf_counter() - start
        timings = {"env": env_s, "inference": inference_s, "wait": 0.0, "total": total}
        return self.buffers.rollout(self._outputs, timings)

    def resize(
        self, *, num_workers: int | None = None, num_envs: int | None = None, horizon: int | None = None
    ) -> None:
        """Change B or T between collects (the envs restart). A serial sampler has no workers:
        ``num_workers`` is accepted, for one interface across samplers, and must be None or 1."""
        num_envs = _keep(num_envs, self.num_envs)
        horizon = _keep(horizon, self.horizon)
        _check_sizes(num_envs, horizon)
        if num_workers not in (None, 1):
            raise ValueError(
                f"SerialSampler has no worker processes (num_workers={num_workers!r}); use "
                "ParallelSampler, BatchedSampler or AlternatingSampler for workers."
            )
        self.env.close()
        self.num_envs, self.horizon = num_envs, horizon
        self._generation += 1
        self._start()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.env.close()


class _WorkerSampler(_SteppingLoop):
    """Samplers whose envs live in worker processes (Batched, Alternating)."""

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        horizon: int,
        num_workers: int,
        seed: int,
        device: "str | torch.device",
        env_options: dict | None,
    ) -> None:
        super().__init__(env_id, num_envs=num_envs, horizon=horizon, seed=seed, device=device, env_options=env_options)
        self._check_workers(num_envs, num_workers, horizon)
        self.num_workers = num_workers
        self._pending: dict[int, int] = {}  # worker index -> the step it was sent and has not answered
        self._interrupts = _StepBoundaryInterrupts()
        self._pool: workers.WorkerPool | None = None
        self._start()

    def _check_workers(self, num_envs: int, num_workers: int, horizon: int) -> None:
        _check_sizes(num_envs, horizon, num_workers)

    def _worker_slices(self) -> list[tuple[int, int]]:
        return _split(self.num_envs, self.num_workers)

    def _start(self) -> None:
        context = torch.multiprocessing.get_context("spawn")

        def allocate(shape, dtype, fill):
            shared = workers.SharedArray.allocate(context, shape, dtype, fill)
            return shared.array(), shared

        self._start_buffers(allocate)
        self.slices = self._worker_slices()
        specs = [
            workers.WorkerSpec(
                self.env_id, lo, hi, self.seed, self.env_options, 1, os.getpid(), index
            )
            for index, (lo, hi) in enumerate(self.slices)
        ]
        self._pool = workers.WorkerPool(context, workers.env_worker, specs, [(self.buffers.shared,)] * len(specs))
        self._pending = {}
        for index, (lo, _) in enumerate(self.slices):
            self._pool.send(index, workers.RESET, self._env_seed() + lo)
        for index in range(len(self.slices)):
            self._pool.receive(index)

    @property
    def worker_pids(self) -> list[int]:
        return self._pool.pids if self._pool else []

    def _send_group(self, t: int, indices: list[int]) -> None:
        for index in indices:
            self._pool.send(index, workers.STEP, t)
            self._pending[index] = t

    def _receive_group(self, indices: list[int]) -> float:
        """Wait for these workers' step; returns the mean seconds they spent stepping."""
        busy = 0.0
        for index in indices:
            payload = self._pool.receive(index)
            lo, hi = self.slices[index]
            self.buffers.latest_row[lo:hi] = self._pending.pop(index) + 1
            busy += struct.unpack("<d", payload)[0]
        return busy / max(1, len(indices))

    def _drain(self) -> None:
        """After an interrupted collect: take the replies still owed, so the next collect starts clean."""
        self._receive_group(sorted(self._pending))

    def collect(self, policy: Policy) -> Rollout:
        if self._pending:
            self._drain()
        policy = self._prepare(policy)
        try:
            with _StepBoundaryInterrupts() as self._interrupts:
                return self._collect(policy)
        except KeyboardInterrupt:
            self._drain()
            raise

    def resize(self, *, num_workers: int | None = None, num_envs: int | None = None, horizon: int | None = None) -> None:
        """Change the number of workers, envs (B) or steps (T) between collects: workers restart."""
        num_workers = _keep(num_workers, self.num_workers)
        num_envs = _keep(num_envs, self.num_envs)
        horizon = _keep(horizon, self.horizon)
        self._check_workers(num_envs, num_workers, horizon)
        self._pool.close()
        self.num_workers, self.num_envs, self.horizon = num_workers, num_envs, horizon
        self._generation += 1
        self._start()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._pool is not None:
                self._pool.close()


class BatchedSampler(_WorkerSampler):
    """Env-only workers step into shared memory; one batched forward here, on ``device``.

    Each step: write all actions, signal every worker, wait for all, run one forward pass over
    all B observations. The paper's GPU sampler (Stooke & Abbeel 2018, Sec. 3.1, Fig. 1b).

    Args:
        env_id, num_envs, horizon, seed, env_options: as for :class:`SerialSampler`.
        num_workers: env worker processes; envs are split among them as evenly as possible.
        device: where the batched forward pass runs (``"auto"``: cuda:0 when present).
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        horizon: int,
        num_workers: int = 2,
        seed: int = 0,
        device: "str | torch.device" = "auto",
        env_options: dict | None = None,
    ) -> None:
        super().__init__(env_id, num_envs=num_envs, horizon=horizon, num_workers=num_workers, seed=seed, device=device, env_options=env_options)

    def _collect(self, policy: Any) -> Rollout:
        everyone = list(range(self.num_workers))
        env_s = inference_s = wait_s = 0.0
        start = time.perf_counter()
        for t in range(self.horizon):
            self._interrupts.check()
            t0 = time.perf_counter()
            self._infer(policy, t, 0, self.num_envs)
            t1 = time.perf_counter()
            self._send_group(t, everyone)
            env_s += self._receive_group(everyone)
            t2 = time.perf_counter()
            self._bootstrap_truncated(policy, t, 0, self.num_envs)
            inference_s += (t1 - t0) + (time.perf_counter() - t2)
            wait_s += t2 - t1
        total = time.perf_counter() - start
        timings = {"env": env_s, "inference": inference_s, "wait": wait_s, "total": total}
        return self.buffers.rollout(self._outputs, timings)


class AlternatingSampler(_WorkerSampler):
    """Two env groups take turns: one steps while the other's actions are computed.

    With group A's step in flight, the forward pass for group B runs; then B steps while A's next
    actions are computed. Inference hides behind env stepping (or the reverse), so neither the
    workers nor the inference device sit idle (Stooke & Abbeel 2018, Sec. 3.1, Fig. 1c).

    Args:
        as for :class:`BatchedSampler`; ``num_workers`` must be even (half per group) and
        ``num_envs`` a multiple of 2.
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        horizon: int,
        num_workers: int = 2,
        seed: int = 0,
        device: "str | torch.device" = "auto",
        env_options: dict | None = None,
    ) -> None:
        super().__init__(env_id, num_envs=num_envs, horizon=horizon, num_workers=num_workers, seed=seed, device=device, env_options=env_options)

    def _check_workers(self, num_envs: int, num_workers: int, horizon: int) -> None:
        _check_sizes(num_envs, horizon, num_workers)
        if num_workers % 2 or num_envs % 2:
            raise ValueError(
                f"AlternatingSampler splits envs and workers into two equal groups, so num_workers "
                f"and num_envs must be even (got num_workers={num_workers}, num_envs={num_envs}). "
                f"Use num_workers={max(2, num_workers + num_workers % 2)}, "
                f"num_envs={num_envs + num_envs % 2}."
            )
        if num_workers > num_envs:
            raise ValueError(f"num_workers={num_workers} > num_envs={num_envs}; use more envs.")

    def _worker_slices(self) -> list[tuple[int, int]]:
        half_envs, half_workers = self.num_envs // 2, self.num_workers // 2
        first = _split(half_envs, half_workers)
        return first + [(lo + half_envs, hi + half_envs) for lo, hi in first]

    def _collect(self, policy: Any) -> Rollout:
        half = self.num_envs // 2
        groups = [list(range(self.num_workers // 2)), list(range(self.num_workers // 2, self.num_workers))]
        bounds = [(0, half), (half, self.num_envs)]
        env_s = inference_s = wait_s = 0.0
        start = time.perf_counter()

        def infer_and_send(group: int, t: int) -> None:
            nonlocal inference_s, wait_s
            t0 = time.perf_counter()
            self._infer(policy, t, *bounds[group])
            t1 = time.perf_counter()
            self._send_group(t, groups[group])
            inference_s += t1 - t0
            wait_s += time.perf_counter() - t1  # messaging counts as waiting, as in BatchedSampler

        def receive(group: int, t: int) -> None:
            nonlocal env_s, wait_s, inference_s
            t0 = time.perf_counter()
            env_s += self._receive_group(groups[group]) / 2  # each group is half the envs
            t1 = time.perf_counter()
            self._bootstrap_truncated(policy, t, *bounds[group])
            wait_s += t1 - t0
            inference_s += time.perf_counter() - t1

        infer_and_send(0, 0)
        for t in range(self.horizon):
            self._interrupts.check()  # group 0's step t is in flight and recorded: drain takes it
            infer_and_send(1, t)  # group 1 is computed while group 0 steps
            receive(0, t)
            if t + 1 < self.horizon:
                infer_and_send(0, t + 1)  # group 0 is computed while group 1 steps
            receive(1, t)
        total = time.perf_counter() - start
        timings = {"env": env_s * 2, "inference": inference_s, "wait": wait_s, "total": total}
        return self.buffers.rollout(self._outputs, timings)


class ParallelSampler(_Sampler):
    """Worker processes that each step their envs and run their own CPU copy of the policy.

    The policy's parameters live in shared memory; each collect copies the caller's current
    parameters into them, then every worker runs T steps on its own (Stooke & Abbeel 2018,
    Sec. 3.1, Fig. 1a: the CPU sampler).

    Args:
        env_id, num_envs, horizon, seed, env_options: as for :class:`SerialSampler`.
        num_workers: worker processes (one torch thread each).
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        horizon: int,
        num_workers: int = 2,
        seed: int = 0,
        env_options: dict | None = None,
    ) -> None:
        super().__init__(env_id, num_envs=num_envs, horizon=horizon, seed=seed, device="cpu", env_options=env_options)
        _check_sizes(num_envs, horizon, num_workers)
        self.num_workers = num_workers
        self._pool: workers.WorkerPool | None = None
        self._shared_policy: Any = None
        self._policy_memory = _PolicyMemory()
        self._pending: set[int] = set()  # workers sent a COLLECT that have not answered

    @property
    def worker_pids(self) -> list[int]:
        return self._pool.pids if self._pool else []

    def _start(self, policy: Any) -> None:
        """Workers start at the first collect: they need a copy of the policy."""
        if not isinstance(policy, torch.nn.Module):
            raise TypeError("ParallelSampler needs a torch.nn.Module policy (its workers hold copies of it).")
        context = torch.multiprocessing.get_context("spawn")

        def allocate(shape, dtype, fill):
            shared = workers.SharedArray.allocate(context, shape, dtype, fill)
            return shared.array(), shared

        self.buffers = _Buffers(allocate, self.horizon, self.num_envs, self.observation_space, self.action_space)
        self._shared_policy = copy.deepcopy(policy).cpu().share_memory()
        obs_example = np.zeros(self.observation_space.shape, self.observation_space.dtype)
        specs = _output_specs(self._shared_policy, obs_example, torch.device("cpu"))
        for name, spec in specs.items():
            if name != "action":
                self.buffers.add(allocate, "out_" + name, (self.horizon, self.num_envs, *spec.shape), _numpy_dtype(spec.dtype), 0)
        self.slices = _split(self.num_envs, self.num_workers)
        worker_specs = [
            workers.WorkerSpec(self.env_id, lo, hi, self.seed, self.env_options, 1, os.getpid(), index)
            for index, (lo, hi) in enumerate(self.slices)
        ]
        args = [(self.buffers.shared, self._shared_policy)] * len(worker_specs)
        self._pool = workers.WorkerPool(context, workers.policy_worker, worker_specs, args)
        for index, (lo, _) in enumerate(self.slices):
            self._pool.send(index, workers.RESET, self._env_seed() + lo)
        for index in range(len(self.slices)):
            self._pool.receive(index)

    def _sync_parameters(self, policy: Any) -> None:
        with torch.no_grad():
            for shared, current in zip(self._shared_policy.state_dict().values(), policy.state_dict().values()):
                shared.copy_(current)

    def _drain(self) -> None:
        """Take the replies still owed: a worker always finishes its T steps."""
        for index in sorted(self._pending):
            self._pool.receive(index)
        self._pending.clear()
        self.buffers.latest_row[:] = self.horizon

    def collect(self, policy: Policy) -> Rollout:
        if self._closed:
            raise RuntimeError("ParallelSampler is closed; make a new sampler.")
        if self._pool is not None and self._policy_memory.is_new(policy):
            self.resize()  # another policy: workers restart with a copy of it
        if self._pool is None:
            self._start(policy)
            self._policy_memory.remember(policy)
        if self._pending:
            self._drain()
        self._sync_parameters(policy)
        self.buffers.start_collect()
        everyone = range(self.num_workers)
        start = time.perf_counter()
        try:
            # Workers run the whole collect on their own: an interrupt takes effect once they end.
            with _StepBoundaryInterrupts():
                for index in everyone:
                    self._pool.send(index, workers.COLLECT, self.horizon)
                    self._pending.add(index)
                env_s = inference_s = 0.0
                for index in everyone:
                    worker_env, worker_inference = struct.unpack("<dd", self._pool.receive(index))
                    self._pending.discard(index)
                    env_s += worker_env / self.num_workers
                    inference_s += worker_inference / self.num_workers
        except KeyboardInterrupt:
            self._drain()
            raise
        total = time.perf_counter() - start
        self.buffers.latest_row[:] = self.horizon
        a = self.buffers.arrays
        outputs = {name[4:]: torch.from_numpy(a[name]) for name in a if name.startswith("out_")}
        timings = {"env": env_s, "inference": inference_s, "wait": total, "total": total}
        return self.buffers.rollout(outputs, timings)

    def resize(self, *, num_workers: int | None = None, num_envs: int | None = None, horizon: int | None = None) -> None:
        """Change workers, envs (B) or steps (T) between collects: workers restart at the next collect."""
        num_workers = _keep(num_workers, self.num_workers)
        num_envs = _keep(num_envs, self.num_envs)
        horizon = _keep(horizon, self.horizon)
        _check_sizes(num_envs, horizon, num_workers)
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self.num_workers, self.num_envs, self.horizon = num_workers, num_envs, horizon
        self._generation += 1

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._pool is not None:
                self._pool.close()


SAMPLERS = {
    "serial": SerialSampler,
    "parallel": ParallelSampler,
    "batched": BatchedSampler,
    "alternating": AlternatingSampler,
}


def make_sampler(kind: str, env_id: str, **kwargs: Any):
    """A sampler by name: ``serial``, ``parallel``, ``batched`` or ``alternating``."""
    if kind not in SAMPLERS:
        raise ValueError(f"Unknown sampler {kind!r}; choose one of {', '.join(SAMPLERS)}.")
    if kind in ("serial",):
        kwargs.pop("num_workers", None)
    if kind == "parallel":
        kwargs.pop("device", None)
    return SAMPLERS[kind](env_id, **kwargs)
