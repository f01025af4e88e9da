"""Which stored items a batch holds: uniform, proportional prioritized, and sequence replay."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from workbench.replay.checks import (
    as_numpy,
    check_batch_size,
    check_capacity,
    check_indices,
    check_priorities,
    last_write,
)
from workbench.replay.storages import ArrayStorage
from workbench.replay.trees import MinTree, SumTree

__all__ = ["PrioritizedReplay", "SequenceReplay", "UniformReplay"]


class UniformReplay:
    """Uniform sampling from a storage, with ``PrioritizedReplay``'s interface (weights all 1).

    Args:
        capacity: transitions held; the oldest are overwritten first.
        storage: where the data lives (default ``ArrayStorage(capacity)``); its capacity must be
            ``capacity``.
        seed: seeds the sampling generator.
    """

    def __init__(self, capacity: int, *, storage: Any = None, seed: int | None = None) -> None:
        self.capacity = check_capacity(capacity, "UniformReplay")
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
        batch_size = check_batch_size(batch_size, "UniformReplay.sample")
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
        self.capacity = check_capacity(capacity, "PrioritizedReplay")
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
        trees = self._sums.nbytes + self._mins.nbytes
        return self.storage.nbytes + trees + self._priorities.nbytes

    def add(self, batch: Mapping[str, Any], priorities: Any = None) -> np.ndarray:
        """Store ``batch`` with priorities ``|delta|`` (float ``[N]``, one per transition in batch
        order), or the largest seen so far when None. Returns the slots written, in batch order."""
        arrays, n = self.storage.check(batch)
        if priorities is None:
            p = np.full(n, self._max_priority**self.alpha)
        else:
            raw = check_priorities(priorities, n, "add") + self.eps
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
        idx = check_indices(indices, self.capacity, "update_priorities")
        raw = check_priorities(priorities, idx.size, "update_priorities") + self.eps
        if idx.size == 0:
            return
        self._max_priority = max(self._max_priority, float(raw.max()))
        idx, raw = last_write(idx, raw)
        self._priorities[idx] = raw**self.alpha
        self._refresh(idx)

    def _refresh(self, indices: np.ndarray) -> None:
        """Copy the priorities of ``indices`` into the trees, where the storage can sample them."""
        p = np.where(self.storage.sampleable(indices), self._priorities[indices], 0.0)
        self._sums.assign(indices, p)
        self._mins.assign(indices, np.where(p > 0, p, np.inf))

    def sample(self, batch_size: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """``(batch, indices, weights)``: ``batch_size`` transitions drawn with probability P(i)
        (stratified), their data, their slots (int64 ``[N]``, for ``update_priorities``) and their
        importance-sampling weights (float32 ``[N]``, at most 1)."""
        batch_size = check_batch_size(batch_size, "PrioritizedReplay.sample")
        total = self._sums.total
        if not total > 0:
            raise ValueError(
                "sample: the replay holds no sampleable transition; add(batch) transitions "
                "(and, with n-step windows, enough steps to complete them) before sampling."
            )
        values = (np.arange(batch_size) + self._rng.random(batch_size)) * (total / batch_size)
        indices = self._sums.find(values)
        weights = (self._sums.leaves(indices) / self._mins.min) ** -self.beta
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
        capacity = check_capacity(capacity, "SequenceReplay")
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
        steps = {k: as_numpy(v) for k, v in sequences.items() if k not in self.per_sequence_keys}
        if not steps:
            raise ValueError(
                f"SequenceReplay.add: only per-sequence keys {sorted(sequences)} were given; "
                "add the per-step arrays [N, L, ...] (obs, actions, rewards, ...)."
            )
        lengths = {k: (a.shape[1] if a.ndim >= 2 else None) for k, a in steps.items()}
        expected = (
            self.sequence_length
            if self.sequence_length is not None
            else next(iter(lengths.values()))
        )
        if any(length is None or length != expected for length in lengths.values()):
            known_length = (
                f" (L = {self.sequence_length}, set by the first add)"
                if self.sequence_length
                else ""
            )
            raise ValueError(
                f"SequenceReplay.add: every per-step array must be [N, L, ...] with one L"
                f"{known_length}; "
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
