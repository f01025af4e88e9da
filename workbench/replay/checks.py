"""Argument checks shared by the replay's trees, storages and replays (numpy only)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "as_numpy",
    "check_batch_size",
    "check_capacity",
    "check_indices",
    "check_priorities",
    "last_write",
]


def as_numpy(x: Any) -> np.ndarray:
    """``x`` as a numpy array, without a copy where possible (CPU torch tensors included)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor; torch is not imported here
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def check_capacity(capacity: Any, who: str) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"{who}: capacity must be an integer >= 1, got {capacity!r}.")
    return int(capacity)


def check_batch_size(batch_size: Any, who: str) -> int:
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, (int, np.integer))
        or batch_size < 1
    ):
        raise ValueError(f"{who}: batch_size must be an integer >= 1, got {batch_size!r}.")
    return int(batch_size)


def check_indices(indices: Any, capacity: int, who: str) -> np.ndarray:
    idx = as_numpy(indices)
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


def check_priorities(priorities: Any, n: int, who: str) -> np.ndarray:
    p = as_numpy(priorities).astype(np.float64, copy=False).reshape(-1)
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


def last_write(indices: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop repeated indices, keeping each one's last value (numpy's fancy assignment does not
    promise which of several writes to one element survives)."""
    unique, first_from_end = np.unique(indices[::-1], return_index=True)
    if unique.size == indices.size:
        return indices, values
    return unique, values[::-1][first_from_end]
