"""The rollout's buffers and what every sampler needs around them.

``RolloutBuffers`` holds one collect's arrays, allocated once (from the env's spaces) and reused:
``obs`` ``[T + 1, B, ...]`` (row T is ``next_obs``), ``actions``, ``rewards``, ``terminated``,
``truncated``, ``truncation_values`` ``[T, B]``, episode statistics, and the final observation of
episodes cut by a time limit. Allocated locally (``local_allocate``) for the serial sampler, in
shared memory (``shared_allocate``) when workers write into them. ``rollout()`` copies them into
a ``Rollout``.
"""

from __future__ import annotations

import signal
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from workbench.checks import positive_int
from workbench.processes import SharedArray
from workbench.rollout import EpisodeStats, Rollout

__all__ = [
    "OutputSpec",
    "Policy",
    "PolicyMemory",
    "RolloutBuffers",
    "StepBoundaryInterrupts",
    "check_sizes",
    "keep_size",
    "local_allocate",
    "numpy_dtype",
    "output_specs",
    "shared_allocate",
    "split_envs",
]


class Policy(Protocol):
    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]: ...


@dataclass(frozen=True)
class OutputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty((), dtype=dtype).numpy().dtype


def output_specs(
    policy: Policy, obs_example: np.ndarray, device: torch.device
) -> dict[str, OutputSpec]:
    """Names, per-env shapes and dtypes of what ``policy.act`` returns, from one example."""
    with torch.no_grad():
        out = policy.act(torch.as_tensor(obs_example[None]).to(device))
    if not isinstance(out, dict) or "action" not in out:
        raise TypeError(
            "policy.act(obs) must return a dict of [B, ...] tensors with an 'action' entry "
            f"(got {type(out).__name__}); see workbench.models.ActorCritic.act."
        )
    return {name: OutputSpec(tuple(v.shape[1:]), v.dtype) for name, v in out.items()}


class StepBoundaryInterrupts:
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

    def __enter__(self) -> "StepBoundaryInterrupts":
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


class PolicyMemory:
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


def split_envs(num_envs: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous env slices ``[lo, hi)`` as even as possible, one per worker."""
    bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int)
    return [(int(bounds[i]), int(bounds[i + 1])) for i in range(num_workers)]


def keep_size(new: int | None, current: int) -> int:
    """``resize`` arguments: None keeps the current value (0 is a value, and is refused)."""
    return current if new is None else new


def check_sizes(num_envs: int, horizon: int, num_workers: int | None = None) -> None:
    positive_int(num_envs, "num_envs")
    positive_int(horizon, "horizon")
    if num_workers is not None:
        positive_int(num_workers, "num_workers")
        if num_workers > num_envs:
            raise ValueError(
                f"num_workers={num_workers} > num_envs={num_envs}: each worker needs at least one "
                f"env. Use num_workers <= {num_envs}, or more envs."
            )


class RolloutBuffers:
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


def local_allocate(shape, dtype, fill):
    return np.full(shape, fill, dtype=dtype), None


def shared_allocate(context: Any) -> Callable[..., tuple[np.ndarray, SharedArray]]:
    """An ``allocate(shape, dtype, fill)`` for ``RolloutBuffers`` in shared memory (workers
    write)."""

    def allocate(shape: tuple[int, ...], dtype: Any, fill: Any) -> tuple[np.ndarray, SharedArray]:
        shared = SharedArray.allocate(context, shape, dtype, fill)
        return shared.array(), shared

    return allocate
