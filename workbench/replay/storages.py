"""Where replayed data lives: a ring of items (``ArrayStorage``), or Atari frames kept once
(``FrameStorage``, as rlpyt's frame buffer), behind one storage interface (``replay`` package)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from workbench.replay.checks import as_numpy, check_capacity

__all__ = ["ArrayStorage", "FrameStorage"]


class ArrayStorage:
    """A ring of items, one array per key: ``arrays[key][slot]``; the oldest is overwritten first.

    The keys, per-item shapes and dtypes are fixed by the first ``add`` (arrays allocated once,
    from that example). For vector observations (CartPole) storing ``obs`` and ``next_obs`` per
    transition is cheap; for Atari use ``FrameStorage``.

    Args:
        capacity: items held (>= 1).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = check_capacity(capacity, "ArrayStorage")
        self._arrays: dict[str, np.ndarray] = {}
        self._next = 0  # the slot the next item goes to
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def extent(self) -> int:
        """Slots ``[0, extent)`` hold every stored item (the ring fills from 0)."""
        return self._size

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays.values())

    def check(self, batch: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        """``batch`` as numpy arrays, checked: every array ``[N, ...]`` with one N, the keys and
        per-item shapes of the first add. Returns the arrays and N."""
        if not isinstance(batch, Mapping) or not batch:
            raise ValueError(
                "add: batch must be a non-empty dict of arrays, one row per transition, "
                f"e.g. {{'obs': [N, 4], 'actions': [N], ...}}; got {type(batch).__name__}."
            )
        arrays = {key: as_numpy(value) for key, value in batch.items()}
        shapes = {key: list(a.shape) for key, a in arrays.items()}
        if (
            any(a.ndim == 0 for a in arrays.values())
            or len({a.shape[0] for a in arrays.values()}) != 1
        ):
            raise ValueError(
                f"add: every array needs the same first dimension N (one row per transition); "
                f"got shapes {shapes}."
            )
        n = next(iter(arrays.values())).shape[0]
        if n > self.capacity:
            raise ValueError(
                f"add: {n} transitions do not fit in capacity {self.capacity}; "
                f"add them in blocks of at most {self.capacity}."
            )
        if self._arrays:
            if set(arrays) != set(self._arrays):
                raise ValueError(
                    f"add: batch keys {sorted(arrays)} differ from the stored keys "
                    f"{sorted(self._arrays)}; every add must carry the same keys."
                )
            for key, a in arrays.items():
                if a.shape[1:] != self._arrays[key].shape[1:]:
                    raise ValueError(
                        f"add: batch[{key!r}] has per-item shape {list(a.shape[1:])}, the storage "
                        f"holds {list(self._arrays[key].shape[1:])} (set by the first add); "
                        "pass arrays [N, *item_shape]."
                    )
        return arrays, n

    def write(self, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Store checked arrays; returns ``(written, touched)``, here the same slots."""
        if not self._arrays:
            self._arrays = {
                key: np.zeros((self.capacity, *a.shape[1:]), dtype=a.dtype)
                for key, a in arrays.items()
            }
        n = next(iter(arrays.values())).shape[0]
        slots = (self._next + np.arange(n)) % self.capacity
        for key, a in arrays.items():
            self._arrays[key][slots] = a
        self._next = (self._next + n) % self.capacity
        self._size = min(self._size + n, self.capacity)
        return slots, slots

    def sampleable(self, indices: np.ndarray) -> np.ndarray:
        """bool ``[N]``: the slot holds an item (slots fill from 0)."""
        return indices < self._size

    def get(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """``{key: array[indices]}``: copies, ``[N, ...]``."""
        return {key: a.take(indices, axis=0) for key, a in self._arrays.items()}


class FrameStorage:
    """Atari steps in a ``[rows, B]`` ring, one stream per env, each frame stored once; stacks and
    n-step windows are rebuilt by index. The model is rlpyt's frame buffer (Stooke & Abbeel 2019,
    https://arxiv.org/abs/1909.01500; ``rlpyt/replays/frame.py`` and ``n_step.py``).

    ``add`` takes time-major blocks ``[T, B]`` of steps, as samplers produce them (``Rollout``'s
    names): ``obs`` uint8 ``[T, B, k, H, W]`` (frame stacks, newest last), ``actions [T, B]``,
    ``rewards [T, B]``, ``terminated [T, B]``, ``truncated [T, B]``; and optionally ``env_ids``
    int ``[B']`` when the block holds ``B' <= B`` of the envs (an Ape-X actor's own envs, or the
    envs an asynchronous vector env returned: ``info["env_id"]``), whose arrays are then
    ``[T, B', ...]``. Each env's stream has its own cursor, so blocks of different envs may
    interleave freely. Per step it keeps the newest frame of ``obs``, the action, the reward and
    the flags (about 7.1 KB for 84x84 frames, against 56 KB for ``obs`` and ``next_obs`` stacks).
    Slot ``row * B + b`` holds a step of env ``b``.

    ``get`` returns what ``algos.dqn`` learns from: ``obs``, ``actions``, ``returns``,
    ``discounts``, ``next_obs``. For a window of ``m`` steps from step ``t`` (``m = n_step``, or
    fewer when the episode ends inside it)::

        returns   = sum_{j<m} gamma^j r_{t+j}
        discounts = gamma^m, or 0 when the window ends in a terminal state
        next_obs  = obs_{t+m}, or zeros when the window ends in a terminal state

    so the target is ``returns + discounts * Q(next_obs)`` (the n-step target of ``nstep_targets``
    for a window starting at t). A window that reaches a truncated step is not sampleable: its
    bootstrap would need the episode's final observation, which is not stored (as in
    ``algos.dqn.NStepTransitions``); this loses at most ``n_step`` steps per truncated episode.

    Episode starts: ale_py's vector env pads a new episode's stack with zero frames (as rlpyt
    does). A step whose frames older than the newest are all zero is marked as a start, and the
    rebuilt stacks of it and the steps after it get zeros for frames from before it. So no frame of
    one episode appears in another's stack, and the rule is exact even where it fires inside an
    episode (those frames were zero). A lost life under ``episodic_life`` is ``terminated`` but
    the game's frames go on: stacks run across it, windows stop at it.

    Not sampleable: a step whose window runs past its stream's newest step (it becomes sampleable
    when the steps arrive), and a step whose stack reaches back past its stream's oldest step (the
    oldest ``k - 1`` rows of a full stream, unless an episode starts within them).

    Args:
        capacity: steps held, a multiple of ``num_envs`` (``capacity / num_envs`` per stream).
        num_envs: B, the number of env streams.
        n_step: steps per window (>= 1).
        gamma: the discount in ``[0, 1]``.
    """

    KEYS = ("obs", "actions", "rewards", "terminated", "truncated")

    def __init__(
        self, capacity: int, *, num_envs: int, n_step: int = 1, gamma: float = 0.99
    ) -> None:
        capacity = check_capacity(capacity, "FrameStorage")
        if (
            isinstance(num_envs, bool)
            or not isinstance(num_envs, (int, np.integer))
            or num_envs < 1
        ):
            raise ValueError(f"FrameStorage: num_envs must be an integer >= 1, got {num_envs!r}.")
        if capacity % num_envs:
            fits = [
                c
                for c in (capacity // num_envs * num_envs, (capacity // num_envs + 1) * num_envs)
                if c
            ]
            raise ValueError(
                f"FrameStorage: capacity {capacity} is not a multiple of num_envs {num_envs}; "
                f"use {' or '.join(map(str, fits))}."
            )
        if isinstance(n_step, bool) or not isinstance(n_step, (int, np.integer)) or n_step < 1:
            raise ValueError(f"FrameStorage: n_step must be an integer >= 1, got {n_step!r}.")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"FrameStorage: gamma must be in [0, 1], got {gamma}.")
        self.capacity = capacity
        self.num_envs = int(num_envs)
        self.rows = capacity // num_envs
        self.n_step = int(n_step)
        self.gamma = float(gamma)
        self.frame_stack = 0  # k, set by the first add
        # Steps ever written per stream: step a (absolute) of env b lives in row a % rows.
        self._count = np.zeros(self.num_envs, dtype=np.int64)
        self._arrays: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return int(np.minimum(self._count, self.rows).sum())

    @property
    def extent(self) -> int:
        """Slots ``[0, extent)`` hold every stored step (streams fill their rows from 0)."""
        return int(min(self._count.max(), self.rows)) * self.num_envs

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._arrays.values())

    # --- adding ---------------------------------------------------------------------------------

    def check(self, batch: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        """``batch`` as numpy arrays, checked (see the class docstring); returns them and T * B'."""
        keys = set(batch) - {"env_ids"} if isinstance(batch, Mapping) else None
        if keys != set(self.KEYS):
            got = sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__
            raise ValueError(
                f"add: FrameStorage takes blocks of steps with keys {list(self.KEYS)} "
                f"(time-major [T, B], as in a Rollout) and optionally 'env_ids'; got {got}."
            )
        arrays = {key: as_numpy(batch[key]) for key in self.KEYS}
        env_ids = batch.get("env_ids")
        env_ids = np.arange(self.num_envs) if env_ids is None else as_numpy(env_ids).reshape(-1)
        if (
            not np.issubdtype(env_ids.dtype, np.integer)
            or np.unique(env_ids).size != env_ids.size
            or env_ids.min() < 0
            or env_ids.max() >= self.num_envs
        ):
            raise ValueError(
                f"add: env_ids must be distinct integers in [0, {self.num_envs}), got {env_ids}."
            )
        arrays["env_ids"] = env_ids.astype(np.int64)
        obs, B = arrays["obs"], env_ids.size
        if obs.ndim < 4 or obs.shape[1] != B:
            raise ValueError(
                f"add: obs must be [T, B={B}, frame_stack, H, W] (time-major stacks, newest frame "
                f"last; B = num_envs, or the number of env_ids), got {list(obs.shape)}."
            )
        T = obs.shape[0]
        for key in self.KEYS[1:]:
            if arrays[key].shape[:2] != (T, B):
                raise ValueError(
                    f"add: {key} must be [T, B] = {[T, B]} like obs, got {list(arrays[key].shape)}."
                )
        if not 1 <= T <= self.rows:
            raise ValueError(f"add: T = {T} steps must be in [1, {self.rows}] (the rows per env).")
        if self._arrays:
            if obs.shape[2:] != (self.frame_stack, *self._arrays["frames"].shape[2:]):
                raise ValueError(
                    f"add: obs stacks are {list(obs.shape[2:])}, the storage holds "
                    f"{[self.frame_stack, *self._arrays['frames'].shape[2:]]} "
                    "(set by the first add)."
                )
        elif self.rows < self.n_step + obs.shape[2]:
            raise ValueError(
                f"add: {self.rows} rows per env cannot hold a window of n_step = {self.n_step} "
                f"with {obs.shape[2]}-frame stacks; raise capacity above "
                f"{(self.n_step + obs.shape[2]) * self.num_envs}."
            )
        return arrays, T * B

    def write(self, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Store a checked block; returns ``(written, touched)`` slots (see the module
        docstring)."""
        obs, envs = arrays["obs"], arrays["env_ids"]
        T = obs.shape[0]
        if not self._arrays:
            self.frame_stack = obs.shape[2]
            shape = (self.rows, self.num_envs)
            actions = arrays["actions"]
            self._arrays = {
                "frames": np.zeros((*shape, *obs.shape[3:]), dtype=obs.dtype),
                "actions": np.zeros((*shape, *actions.shape[2:]), dtype=actions.dtype),
                "rewards": np.zeros(shape, dtype=np.float32),
                "terminated": np.zeros(shape, dtype=bool),
                "truncated": np.zeros(shape, dtype=bool),
                "first": np.zeros(shape, dtype=bool),  # the step starts an episode
            }
        f = self._arrays
        before = self._count[envs]  # [B']
        steps = before + np.arange(T)[:, None]  # [T, B'] absolute steps of each stream
        rows = steps % self.rows
        f["frames"][rows, envs] = obs[:, :, -1]
        f["first"][rows, envs] = self._episode_starts(obs)
        for key in ("actions", "rewards", "terminated", "truncated"):
            f[key][rows, envs] = arrays[key]
        self._count[envs] += T

        written = (rows * self.num_envs + envs).reshape(-1)
        # Sampleability changes for the new steps, for the n steps before them (their windows may
        # now be complete) and for the oldest k - 1 steps (their stacks may reach overwritten rows).
        oldest = self._oldest(envs)
        last_n = before - np.arange(1, self.n_step + 1)[:, None]  # [n, B']
        oldest_k = oldest + np.arange(self.frame_stack - 1)[:, None]  # [k - 1, B']
        changed = np.concatenate([last_n, oldest_k])
        keep = (changed >= oldest) & (changed < before)
        touched = (changed % self.rows * self.num_envs + envs)[keep]
        return written, np.concatenate([written, touched])

    def _episode_starts(self, obs: np.ndarray) -> np.ndarray:
        """bool ``[T, B]``: every frame before the newest is zero (a fresh episode's padding)."""
        T, B, k = obs.shape[:3]
        if k == 1:
            return np.zeros((T, B), dtype=bool)
        # Cheap first pass on the frame before the newest, then the full test on candidates.
        starts = ~obs[:, :, -2].reshape(T, B, -1).any(axis=2)
        if starts.any() and k > 2:
            older = obs[starts][:, : k - 2]
            starts[starts] = ~older.reshape(older.shape[0], -1).any(axis=1)
        return starts

    # --- reading --------------------------------------------------------------------------------

    def _oldest(self, envs: np.ndarray) -> np.ndarray:
        """The oldest stored absolute step of each env's stream."""
        return np.maximum(self._count[envs] - self.rows, 0)

    def _locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Slots to (absolute step, env); a never-written slot gets a negative step."""
        rows, envs = np.divmod(indices, self.num_envs)
        newest = self._count[envs] - 1
        return newest - (newest - rows) % self.rows, envs

    def _windows(self, a: np.ndarray, envs: np.ndarray) -> tuple[np.ndarray, ...]:
        """For windows starting at absolute steps ``a``: ``(m, terminal, returns, complete)``;
        ``complete`` is False where the window runs past the newest step or reaches a truncation."""
        f = self._arrays
        newest = self._count[envs] - 1
        m = np.zeros(a.shape, dtype=np.int64)
        returns = np.zeros(a.shape, dtype=np.float64)
        discount = np.ones(a.shape, dtype=np.float64)
        alive = np.ones(a.shape, dtype=bool)  # the window goes on to step a + j
        terminal = np.zeros(a.shape, dtype=bool)
        incomplete = np.zeros(a.shape, dtype=bool)
        for j in range(self.n_step):
            missing = alive & (a + j > newest)
            incomplete |= missing
            alive &= ~missing
            rows = (a + j) % self.rows
            returns += np.where(alive, discount * f["rewards"][rows, envs], 0.0)
            discount = np.where(alive, discount * self.gamma, discount)
            m += alive
            terminated, truncated = f["terminated"][rows, envs], f["truncated"][rows, envs]
            terminal |= alive & terminated
            incomplete |= alive & truncated & ~terminated  # its bootstrap is not stored
            alive &= ~(terminated | truncated)
        incomplete |= alive & (a + self.n_step > newest)  # next_obs = obs_{t+n} is not stored yet
        return m, terminal, returns, ~incomplete

    def _stacks(self, a: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """The frame stacks ``[N, k, ...]`` of absolute steps ``a``, zeros before an episode
        start."""
        k, f = self.frame_stack, self._arrays
        rows = (a[:, None] - np.arange(k - 1, -1, -1)) % self.rows  # [N, k], oldest frame first
        slots = (rows * self.num_envs + envs[:, None]).reshape(-1)
        frames = f["frames"].reshape(-1, *f["frames"].shape[2:])  # [rows * B, H, W], a view
        stacks = frames.take(slots, axis=0).reshape(a.shape[0], k, *frames.shape[1:])
        # Frame j is from before an episode start if a later frame of the stack starts one.
        first = f["first"].reshape(-1).take(slots).reshape(a.shape[0], k)
        starts_after = np.logical_or.accumulate(first[:, :0:-1], axis=1)[:, ::-1]  # [N, k - 1]
        stacks[:, :-1][starts_after] = 0
        return stacks

    def sampleable(self, indices: np.ndarray) -> np.ndarray:
        """bool ``[N]``: the slot holds a step whose stack and window are complete."""
        if not self._arrays:
            return np.zeros(indices.shape, dtype=bool)
        a, envs = self._locate(indices)
        oldest = self._oldest(envs)
        stored = a >= oldest
        a = np.maximum(a, oldest)  # never-written slots: any valid step, masked by `stored`
        history = a - (self.frame_stack - 1) >= oldest
        for back in range(self.frame_stack - 1):  # or an episode starts within the stack
            history |= (a - back >= oldest) & self._arrays["first"][(a - back) % self.rows, envs]
        return stored & history & self._windows(a, envs)[3]

    def get(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions at ``indices`` (sampleable ones): ``obs``, ``actions``, ``returns``
        (float32), ``discounts`` (float32), ``next_obs``; see the class docstring."""
        a, envs = self._locate(indices)
        m, terminal, returns, _ = self._windows(a, envs)
        next_obs = self._stacks(a + m, envs)
        next_obs[terminal] = 0  # the next episode's frames never appear
        return {
            "obs": self._stacks(a, envs),
            "actions": self._arrays["actions"][a % self.rows, envs],
            "returns": returns.astype(np.float32),
            "discounts": np.where(terminal, 0.0, self.gamma**m).astype(np.float32),
            "next_obs": next_obs,
        }
