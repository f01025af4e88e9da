"""Sum and min trees over priorities: vectorised updates and descents (Schaul et al. 2016,
App. B.2.1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.replay.checks import as_numpy, check_capacity, check_indices, last_write

__all__ = ["MinTree", "SumTree", "TOP_NODES"]

#: The level of a tree searched with one ``np.cumsum`` instead of being descended (see SumTree).
TOP_NODES = 1 << 12


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
        self.capacity = check_capacity(capacity, type(self).__name__)
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
        idx = check_indices(indices, self.capacity, who)
        values = as_numpy(priorities).astype(np.float64, copy=False).reshape(-1)
        if values.size != idx.size:
            raise ValueError(f"{who}: got {values.size} values for {idx.size} indices.")
        if values.size and not values.min() >= 0:  # also catches NaN
            raise ValueError(f"{who}: values must be >= 0 and not NaN, got min {values.min()}.")
        self.assign(*last_write(idx, values))

    def assign(self, idx: np.ndarray, values: np.ndarray) -> None:
        """``update`` without checks (int64 ``idx`` in range; repeated indices must carry equal
        values): the replay's own writes, already checked."""
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
        return self.leaves(check_indices(indices, self.capacity, type(self).__name__))

    def leaves(self, indices: np.ndarray) -> np.ndarray:
        """The leaf values at int64 ``indices``, unchecked (``tree[indices]`` checks them)."""
        return self._nodes.take(indices + self._size)

    @property
    def nbytes(self) -> int:
        """Bytes the tree's nodes take."""
        return self._nodes.nbytes

    def _top_level(self) -> np.ndarray:
        return self._nodes[self._top : 2 * self._top]

    @staticmethod
    def _combine(children: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class SumTree(_Tree):
    """Sums of priorities, for sampling proportionally to them (Schaul et al. 2016, Appendix B.2.1).

    ``find(values)`` returns, for each value ``v``, the first leaf whose prefix sum exceeds ``v``:
    ``np.searchsorted(np.cumsum(leaves), v, side="right")``. So a leaf of priority ``p`` is found
    for a share ``p / total`` of ``[0, total)``, and a leaf of priority 0 is never found. Values at
    or above ``total`` (which rounding can produce) give the last leaf with a positive priority.

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
        v = np.array(as_numpy(values), dtype=np.float64).reshape(-1)  # a copy: it is consumed
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
        lost = self.leaves(leaf) == 0
        if lost.any():
            v = np.array(as_numpy(values), dtype=np.float64).reshape(-1)[lost]
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
