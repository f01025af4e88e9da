"""Experience replay: sum trees, uniform and prioritized sampling, and the storages behind them.

Two layers, composed by keyword (``PrioritizedReplay(capacity, storage=FrameStorage(...))``):

* a *replay* decides which stored transitions a batch holds: ``UniformReplay``, or
  ``PrioritizedReplay`` (Schaul et al. 2016, *Prioritized Experience Replay*,
  https://arxiv.org/abs/1511.05952, the proportional variant) on a ``SumTree`` and a ``MinTree``;
* a *storage* keeps the data in a ring of ``capacity`` slots, the oldest overwritten first:
  ``ArrayStorage`` (one array per key, one row per transition: vector observations, or n-step
  transitions an Ape-X actor has already assembled), or ``FrameStorage`` (Atari: each frame stored
  once, frame stacks and n-step windows rebuilt by index, as rlpyt's frame buffer does).

Every operation is vectorised over the batch: a Python loop runs over tree levels, frame-stack
positions or window steps, never over sampled items. This module imports numpy only (no torch), so
a replay server process stays small; ``add`` also takes CPU torch tensors.

A storage offers ``capacity``, ``len()``, ``extent`` (slots ``[0, extent)`` hold every stored
item), ``nbytes``, ``check(batch) -> (arrays, n)``,
``write(arrays) -> (written, touched)``, ``sampleable(indices) -> bool [N]`` and
``get(indices) -> dict``. ``written`` are the slots the batch's items went to, in batch order;
``touched`` are the slots whose sampleability may have changed (a window that just completed, a
frame history just overwritten). A slot that is stored but not yet sampleable keeps its priority
aside and joins the sum tree when it becomes sampleable.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

__all__ = [
    "ArrayStorage",
    "FrameStorage",
    "MinTree",
    "PrioritizedReplay",
    "SequenceReplay",
    "SumTree",
    "UniformReplay",
]

#: The level of a tree searched with one ``np.cumsum`` instead of being descended (see SumTree).
TOP_NODES = 1 << 12


# --------------------------------------------------------------------------------------------------
# Argument checks


def _numpy(x: Any) -> np.ndarray:
    """``x`` as a numpy array, without a copy where possible (CPU torch tensors included)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor; torch is not imported here
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _check_capacity(capacity: Any, who: str) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"{who}: capacity must be an integer >= 1, got {capacity!r}.")
    return int(capacity)


def _check_batch_size(batch_size: Any, who: str) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"{who}: batch_size must be an integer >= 1, got {batch_size!r}.")
    return int(batch_size)


def _check_indices(indices: Any, capacity: int, who: str) -> np.ndarray:
    idx = _numpy(indices)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(
            f"{who}: indices must be a 1-D integer array (as sample() returns them), "
            f"got dtype {idx.dtype} shape {list(idx.shape)}."
        )
    if idx.size and (idx.min() < 0 or idx.max() >= capacity):
        raise ValueError(
            f"{who}: indices must lie in [0, {capacity}), got {idx.min()}..{idx.max()}; "
            "pass the indices that sample() returned."
        )
    return idx.astype(np.int64, copy=False)


def _check_priorities(priorities: Any, n: int, who: str) -> np.ndarray:
    p = _numpy(priorities).astype(np.float64, copy=False).reshape(-1)
    if p.size != n:
        raise ValueError(
            f"{who}: got {p.size} priorities for {n} transitions; pass one per transition."
        )
    if n and not (np.isfinite(p).all() and p.min() >= 0):
        bad = p[~(np.isfinite(p) & (p >= 0))][:5]
        raise ValueError(
            f"{who}: priorities must be finite and >= 0 (pass |TD error|), got {bad.tolist()}; "
            "check the loss for NaN or inf before updating priorities."
        )
    return p


def _last_write(indices: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop repeated indices, keeping each one's last value (numpy's fancy assignment does not
    promise which of several writes to one element survives)."""
    unique, first_from_end = np.unique(indices[::-1], return_index=True)
    if unique.size == indices.size:
        return indices, values
    return unique, values[::-1][first_from_end]


# --------------------------------------------------------------------------------------------------
# Trees


class _Tree:
    """A complete binary tree over ``capacity`` leaves in heap layout, reduced by ``_combine``.

    Node ``i`` has children ``2i`` and ``2i + 1``; the leaves sit at ``[size, 2 size)``, ``size``
    the power of two at or above ``capacity`` (the padding leaves hold the neutral element, so any
    capacity works). Parents are recomputed from their children, never adjusted by deltas, so
    repeated updates leave no rounding drift, and a parent written twice in one vectorised step
    gets the same value twice.

    The tree stops at the level of ``TOP_NODES`` nodes: the levels above it would cost a
    vectorised step each on every update and descent, while one ``np.cumsum`` (or ``np.min``) over
    that level costs microseconds. ``top`` is that level's width.
    """

    _neutral = 0.0

    def __init__(self, capacity: int) -> None:
        self.capacity = _check_capacity(capacity, type(self).__name__)
        self._size = 1 << (self.capacity - 1).bit_length()  # leaves, padded to a power of two
        self._top = min(self._size, TOP_NODES)
        self._nodes = np.full(2 * self._size, self._neutral, dtype=np.float64)
        self._children = self._nodes.reshape(-1, 2)  # row i: the children 2i, 2i + 1 of node i
        self._top_cache: Any = None

    def update(self, indices: Any, priorities: Any) -> None:
        """Set the leaves ``indices`` to ``priorities`` (repeated indices: the last write wins).

        Args:
            indices: int ``[N]`` leaves in ``[0, capacity)``.
            priorities: float ``[N]`` their new values.
        """
        who = f"{type(self).__name__}.update"
        idx = _check_indices(indices, self.capacity, who)
        values = _numpy(priorities).astype(np.float64, copy=False).reshape(-1)
        if values.size != idx.size:
            raise ValueError(f"{who}: got {values.size} values for {idx.size} indices.")
        if values.size and not values.min() >= 0:  # also catches NaN
            raise ValueError(f"{who}: values must be >= 0 and not NaN, got min {values.min()}.")
        self._assign(*_last_write(idx, values))

    def _assign(self, idx: np.ndarray, values: np.ndarray) -> None:
        """``update`` without checks; repeated indices must carry equal values."""
        if idx.size == 0:
            return
        node = idx + self._size
        self._nodes[node] = values
        while node[0] >= 2 * self._top:  # every node of one step is on the same level
            node >>= 1
            self._nodes[node] = self._combine(self._children.take(node, axis=0))
        self._top_cache = None

    def __getitem__(self, indices: Any) -> np.ndarray:
        """The leaf values at ``indices`` (int ``[N]`` in ``[0, capacity)``)."""
        return self._leaves(_check_indices(indices, self.capacity, type(self).__name__))

    def _leaves(self, indices: np.ndarray) -> np.ndarray:
        return self._nodes.take(indices + self._size)

    def _top_level(self) -> np.ndarray:
        return self._nodes[self._top : 2 * self._top]

    @staticmethod
    def _combine(children: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class SumTree(_Tree):
    """Sums of priorities, for sampling proportionally to them (Schaul et al. 2016, Appendix B.2.1).

    ``find(values)`` returns, for each value ``v``, the first leaf whose prefix sum exceeds ``v``:
    ``np.searchsorted(np.cumsum(leaves), v, side="right")``. So a leaf of priority ``p`` is found for
    a share ``p / total`` of ``[0, total)``, and a leaf of priority 0 is never found. Values at or
    above ``total`` (which rounding can produce) give the last leaf with a positive priority.

    The descent is vectorised: the batch's values go down the tree together, one level per step.
    Above the ``top`` level the tree is not kept; ``find`` starts with ``np.searchsorted`` on the
    cumulative sums of that level.

    Args:
        capacity: number of leaves (any integer >= 1).
    """

    @staticmethod
    def _combine(children: np.ndarray) -> np.ndarray:
        return children[:, 0] + children[:, 1]

    def _prefix(self) -> np.ndarray:
        if self._top_cache is None:
            self._top_cache = np.cumsum(self._top_level())
        return self._top_cache

    def _last_positive_top(self) -> int:
        return int(np.flatnonzero(self._top_level())[-1])

    @property
    def total(self) -> float:
        """The sum of all leaves."""
        return float(self._prefix()[-1])

    def find(self, values: Any) -> np.ndarray:
        """The leaf each value falls in: int64 ``[N]`` (see the class docstring).

        Args:
            values: float ``[N]`` in ``[0, total)``.
        """
        v = np.array(_numpy(values), dtype=np.float64).reshape(-1)  # a copy: it is consumed
        prefix = self._prefix()
        if not prefix[-1] > 0:
            raise ValueError("SumTree.find: every leaf is 0 (nothing to find); update some first.")
        if v.size and not v.min() >= 0:  # also catches NaN
            raise ValueError(f"SumTree.find: values must be >= 0 and not NaN, got min {v.min()}.")
        # The top level, searched whole: the first node whose prefix sum exceeds v.
        node = np.searchsorted(prefix, v, side="right")
        if v.size and node.max() >= self._top:  # v >= total: the last node with a positive sum
            node = np.minimum(node, self._last_positive_top())
        v -= np.where(node > 0, prefix[node - 1], 0.0)
        node += self._top
        leaf = self._descend(node, v, guarded=False)
        # Rounding can carry v past a node's sum and down to a zero leaf (rarely): those values
        # go down again, turning right only where the right child has any priority.
        lost = self._leaves(leaf) == 0
        if lost.any():
            v = np.array(_numpy(values), dtype=np.float64).reshape(-1)[lost]
            block = np.minimum(np.searchsorted(prefix, v, side="right"), self._last_positive_top())
            v -= np.where(block > 0, prefix[block - 1], 0.0)
            leaf[lost] = self._descend(block + self._top, v, guarded=True)
        return leaf

    def _descend(self, node: np.ndarray, v: np.ndarray, *, guarded: bool) -> np.ndarray:
        """From top-level ``node``s down to leaves, one level per step: go right when ``v`` is
        past the left child's sum (guarded: and the right child's sum is positive)."""
        nodes = self._nodes
        while node[0] < self._size:
            node <<= 1  # the left child
            left = nodes.take(node)
            go_right = v >= left
            if guarded:
                go_right &= nodes.take(node + 1) > 0
            np.subtract(v, left, out=v, where=go_right)
            node += go_right
        return node - self._size


class MinTree(_Tree):
    """Minima of priorities: ``.min`` is the smallest leaf, for the importance-sampling weights'
    normaliser (Schaul et al. 2016, Sec. 3.4). Leaves never set are ``+inf``.

    Args:
        capacity: number of leaves (any integer >= 1).
    """

    _neutral = np.inf

    @staticmethod
    def _combine(children: np.ndarray) -> np.ndarray:
        return np.minimum(children[:, 0], children[:, 1])

    @property
    def min(self) -> float:
        """The smallest leaf (``inf`` while every leaf is ``inf``)."""
        if self._top_cache is None:
            self._top_cache = float(self._top_level().min())
        return self._top_cache


# --------------------------------------------------------------------------------------------------
# Storages


class ArrayStorage:
    """A ring of items, one array per key: ``arrays[key][slot]``; the oldest is overwritten first.

    The keys, per-item shapes and dtypes are fixed by the first ``add`` (arrays allocated once,
    from that example). For vector observations (CartPole) storing ``obs`` and ``next_obs`` per
    transition is cheap; for Atari use ``FrameStorage``.

    Args:
        capacity: items held (>= 1).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = _check_capacity(capacity, "ArrayStorage")
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
        arrays = {key: _numpy(value) for key, value in batch.items()}
        shapes = {key: list(a.shape) for key, a in arrays.items()}
        if any(a.ndim == 0 for a in arrays.values()) or len({a.shape[0] for a in arrays.values()}) != 1:
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

    def __init__(self, capacity: int, *, num_envs: int, n_step: int = 1, gamma: float = 0.99) -> None:
        capacity = _check_capacity(capacity, "FrameStorage")
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"FrameStorage: num_envs must be an integer >= 1, got {num_envs!r}.")
        if capacity % num_envs:
            fits = [c for c in (capacity // num_envs * num_envs, (capacity // num_envs + 1) * num_envs) if c]
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
        arrays = {key: _numpy(batch[key]) for key in self.KEYS}
        env_ids = batch.get("env_ids")
        env_ids = np.arange(self.num_envs) if env_ids is None else _numpy(env_ids).reshape(-1)
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
                    f"{[self.frame_stack, *self._arrays['frames'].shape[2:]]} (set by the first add)."
                )
        elif self.rows < self.n_step + obs.shape[2]:
            raise ValueError(
                f"add: {self.rows} rows per env cannot hold a window of n_step = {self.n_step} "
                f"with {obs.shape[2]}-frame stacks; raise capacity above "
                f"{(self.n_step + obs.shape[2]) * self.num_envs}."
            )
        return arrays, T * B

    def write(self, arrays: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Store a checked block; returns ``(written, touched)`` slots (see the module docstring)."""
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
        """The frame stacks ``[N, k, ...]`` of absolute steps ``a``, zeros before an episode start."""
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


# --------------------------------------------------------------------------------------------------
# Replays


class UniformReplay:
    """Uniform sampling from a storage, with ``PrioritizedReplay``'s interface (weights all 1).

    Args:
        capacity: transitions held; the oldest are overwritten first.
        storage: where the data lives (default ``ArrayStorage(capacity)``); its capacity must be
            ``capacity``.
        seed: seeds the sampling generator.
    """

    def __init__(self, capacity: int, *, storage: Any = None, seed: int | None = None) -> None:
        self.capacity = _check_capacity(capacity, "UniformReplay")
        self.storage = _check_storage(storage, self.capacity, "UniformReplay")
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self.storage)

    @property
    def nbytes(self) -> int:
        return self.storage.nbytes

    def add(self, batch: Mapping[str, Any], priorities: Any = None) -> np.ndarray:
        """Store ``batch`` (see the storage for its keys and shapes); ``priorities`` is ignored.
        Returns the slots written, in batch order."""
        arrays, _ = self.storage.check(batch)
        return self.storage.write(arrays)[0]

    def sample(self, batch_size: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """``(batch, indices, weights)``: ``batch_size`` sampleable slots drawn uniformly with
        replacement, their data, and float32 weights of 1."""
        batch_size = _check_batch_size(batch_size, "UniformReplay.sample")
        extent = self.storage.extent
        if len(self.storage) == 0:
            raise ValueError("sample: the replay is empty; add(batch) transitions before sampling.")
        indices = self._rng.integers(extent, size=batch_size)
        rejected = ~self.storage.sampleable(indices)
        for _ in range(8):  # redraw the few slots that are empty, or whose window is incomplete
            if not rejected.any():
                break
            redrawn = self._rng.integers(extent, size=int(rejected.sum()))
            indices[rejected] = redrawn
            rejected[rejected] = ~self.storage.sampleable(redrawn)
        if rejected.any():  # mostly unsampleable: draw among the sampleable ones exactly
            candidates = np.flatnonzero(self.storage.sampleable(np.arange(extent)))
            if candidates.size == 0:
                raise ValueError(
                    "sample: no stored transition is sampleable yet (their n-step windows are "
                    "incomplete); add more steps before sampling."
                )
            indices[rejected] = self._rng.choice(candidates, size=int(rejected.sum()))
        return self.storage.get(indices), indices, np.ones(batch_size, dtype=np.float32)


class PrioritizedReplay:
    """Proportional prioritized replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952).

    Transition i is sampled with probability (Eq. 1)::

        P(i) = p_i^alpha / sum_k p_k^alpha,     p_i = |delta_i| + eps

    and its loss is weighted by the importance-sampling weight (Sec. 3.4)::

        w_i = (N * P(i))^-beta / max_j (N * P(j))^-beta  =  (p_i^alpha / min_j p_j^alpha)^-beta

    with the max over the whole buffer (N sampleable transitions), not the batch, so weights are
    comparable across batches. A ``SumTree`` holds ``p^alpha`` for sampling, a ``MinTree`` for the
    normaliser. Sampling is stratified (Appendix B.2.1): ``[0, total)`` is cut into ``batch_size``
    equal segments and one value is drawn uniformly in each. New transitions without a priority
    get the largest ``p`` seen so far (Algorithm 1, line 6; 1 before any).

    ``alpha`` and ``beta`` are plain attributes: annealing beta is the learner's schedule.
    ``alpha`` applies when a priority is written.

    Args:
        capacity: transitions held; the oldest are overwritten first (a ring).
        alpha: priority exponent (0: uniform).
        beta: importance-sampling exponent (1: full correction).
        eps: added to ``|delta|`` so no transition has probability 0.
        storage: where the data lives (default ``ArrayStorage(capacity)``); its capacity must be
            ``capacity``.
        seed: seeds the sampling generator.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        *,
        storage: Any = None,
        seed: int | None = None,
    ) -> None:
        self.capacity = _check_capacity(capacity, "PrioritizedReplay")
        for name, value in (("alpha", alpha), ("beta", beta), ("eps", eps)):
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"PrioritizedReplay: {name} must be finite and >= 0, got {value}.")
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.storage = _check_storage(storage, self.capacity, "PrioritizedReplay")
        self._sums = SumTree(self.capacity)  # p^alpha of sampleable slots, 0 elsewhere
        self._mins = MinTree(self.capacity)  # the same, +inf elsewhere
        self._priorities = np.zeros(self.capacity)  # p^alpha of every stored slot
        self._max_priority = 1.0  # the largest p = |delta| + eps seen
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self.storage)

    @property
    def nbytes(self) -> int:
        """Bytes held: the storage's arrays, the two trees and the priorities."""
        trees = self._sums._nodes.nbytes + self._mins._nodes.nbytes
        return self.storage.nbytes + trees + self._priorities.nbytes

    def add(self, batch: Mapping[str, Any], priorities: Any = None) -> np.ndarray:
        """Store ``batch`` with priorities ``|delta|`` (float ``[N]``, one per transition in batch
        order), or the largest seen so far when None. Returns the slots written, in batch order."""
        arrays, n = self.storage.check(batch)
        if priorities is None:
            p = np.full(n, self._max_priority**self.alpha)
        else:
            raw = _check_priorities(priorities, n, "add") + self.eps
            if n:
                self._max_priority = max(self._max_priority, float(raw.max()))
            p = raw**self.alpha
        written, touched = self.storage.write(arrays)
        self._priorities[written] = p  # slots are distinct within one add
        self._refresh(touched)
        return written

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Set ``p = |delta| + eps`` for sampled ``indices`` (int ``[N]``) from ``priorities``
        (float ``[N]``, ``|delta| >= 0``); a repeated index keeps its last value.

        A slot overwritten since it was sampled (another process adding meanwhile) gets the
        priority meant for its old transition, as in other implementations: rare, and corrected
        the next time it is sampled. A slot that is no longer sampleable stays out of the tree."""
        idx = _check_indices(indices, self.capacity, "update_priorities")
        raw = _check_priorities(priorities, idx.size, "update_priorities") + self.eps
        if idx.size == 0:
            return
        self._max_priority = max(self._max_priority, float(raw.max()))
        idx, raw = _last_write(idx, raw)
        self._priorities[idx] = raw**self.alpha
        self._refresh(idx)

    def _refresh(self, indices: np.ndarray) -> None:
        """Copy the priorities of ``indices`` into the trees, where the storage can sample them."""
        p = np.where(self.storage.sampleable(indices), self._priorities[indices], 0.0)
        self._sums._assign(indices, p)
        self._mins._assign(indices, np.where(p > 0, p, np.inf))

    def sample(self, batch_size: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """``(batch, indices, weights)``: ``batch_size`` transitions drawn with probability P(i)
        (stratified), their data, their slots (int64 ``[N]``, for ``update_priorities``) and their
        importance-sampling weights (float32 ``[N]``, at most 1)."""
        batch_size = _check_batch_size(batch_size, "PrioritizedReplay.sample")
        total = self._sums.total
        if not total > 0:
            raise ValueError(
                "sample: the replay holds no sampleable transition; add(batch) transitions "
                "(and, with n-step windows, enough steps to complete them) before sampling."
            )
        values = (np.arange(batch_size) + self._rng.random(batch_size)) * (total / batch_size)
        indices = self._sums.find(values)
        weights = (self._sums._leaves(indices) / self._mins.min) ** -self.beta
        return self.storage.get(indices), indices, weights.astype(np.float32)


def _check_storage(storage: Any, capacity: int, who: str) -> Any:
    if storage is None:
        return ArrayStorage(capacity)
    if storage.capacity != capacity:
        raise ValueError(
            f"{who}: capacity {capacity} differs from the storage's {storage.capacity}; "
            "pass the same capacity to both."
        )
    return storage


# --------------------------------------------------------------------------------------------------
# Sequences (R2D2)


class SequenceReplay(PrioritizedReplay):
    """Prioritized replay of fixed-length sequences, for R2D2 (Kapturowski et al. 2019,
    https://openreview.net/forum?id=r1lyTjAqYX, Sec. 2-3): ``PrioritizedReplay`` on an
    ``ArrayStorage`` whose items are whole sequences, one priority per sequence.

    ``add`` takes batch-major sequences, one item per row: per-step keys ``[N, L, ...]`` (``obs``,
    ``actions``, ``rewards``, ...: L steps each, the same L for every key and every add) and
    per-sequence keys ``[N, ...]`` (``per_sequence_keys``: the recurrent state stored with each
    sequence, ``state_h`` and ``state_c`` ``[N, H]``, R2D2 Sec. 3). ``sample`` returns per-step
    keys time-major ``[L, B, ...]`` (what a learner unrolls) and per-sequence keys ``[B, ...]``.

    Priorities are as ``PrioritizedReplay``'s; R2D2's for a sequence is ``eta max_t |delta_t| +
    (1 - eta) mean_t |delta_t|`` (``algos.r2d2``), computed by the caller. Defaults are R2D2's
    Table 2: priority exponent 0.9, importance-sampling exponent 0.6.

    Args:
        capacity: sequences held; the oldest are overwritten first.
        alpha: priority exponent. beta: importance-sampling exponent. eps: added to priorities.
        per_sequence_keys: the keys stored once per sequence (when present in a batch).
        seed: seeds the sampling generator.
    """

    PER_SEQUENCE_KEYS: tuple[str, ...] = ("state_h", "state_c")

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.9,
        beta: float = 0.6,
        eps: float = 1e-6,
        *,
        per_sequence_keys: "tuple[str, ...] | None" = None,
        seed: int | None = None,
    ) -> None:
        capacity = _check_capacity(capacity, "SequenceReplay")
        super().__init__(capacity, alpha, beta, eps, storage=ArrayStorage(capacity), seed=seed)
        keys = self.PER_SEQUENCE_KEYS if per_sequence_keys is None else per_sequence_keys
        self.per_sequence_keys: tuple[str, ...] = tuple(keys)
        self.sequence_length: int | None = None
        """L, the steps per sequence (set by the first ``add``)."""

    def add(self, sequences: Mapping[str, Any], priorities: Any = None) -> np.ndarray:
        """Store ``sequences`` (per-step keys ``[N, L, ...]``, per-sequence keys ``[N, ...]``)
        with priorities (float ``[N]``, one per sequence; None: the largest seen so far).
        Returns the slots written, in batch order."""
        if not isinstance(sequences, Mapping) or not sequences:
            raise ValueError(
                "SequenceReplay.add: pass a non-empty dict of batch-major arrays, per-step keys "
                "[N, L, ...] (e.g. 'obs' [N, L, 4], 'actions' [N, L]) and per-sequence keys "
                f"{list(self.per_sequence_keys)} [N, ...]; got {type(sequences).__name__}."
            )
        steps = {k: _numpy(v) for k, v in sequences.items() if k not in self.per_sequence_keys}
        if not steps:
            raise ValueError(
                f"SequenceReplay.add: only per-sequence keys {sorted(sequences)} were given; "
                "add the per-step arrays [N, L, ...] (obs, actions, rewards, ...)."
            )
        lengths = {k: (a.shape[1] if a.ndim >= 2 else None) for k, a in steps.items()}
        expected = self.sequence_length if self.sequence_length is not None else next(iter(lengths.values()))
        if any(length is None or length != expected for length in lengths.values()):
            raise ValueError(
                f"SequenceReplay.add: every per-step array must be [N, L, ...] with one L"
                f"{f' (L = {self.sequence_length}, set by the first add)' if self.sequence_length else ''}; "
                f"got {{key: L}} = {lengths}. Batch-major: transpose time-major [L, N, ...] arrays "
                f"with np.swapaxes(x, 0, 1); per-sequence keys are {list(self.per_sequence_keys)}."
            )
        written = super().add(sequences, priorities)
        self.sequence_length = int(expected)
        return written

    def sample(self, batch_size: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """``(batch, indices, weights)`` as ``PrioritizedReplay.sample``, with per-step keys
        time-major ``[L, B, ...]`` (contiguous) and per-sequence keys ``[B, ...]``."""
        batch, indices, weights = super().sample(batch_size)
        for key, a in batch.items():
            if key not in self.per_sequence_keys:
                batch[key] = np.ascontiguousarray(np.swapaxes(a, 0, 1))
        return batch, indices, weights
