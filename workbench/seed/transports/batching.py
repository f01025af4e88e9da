"""What the Ray inference server batches: a request for a block of envs, the checks of the batching
settings, latency percentiles, and a recorder of what was served (for tests and measurements).
The module never imports torch: env actors' processes load it."""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.checks import positive_int

__all__ = ["Request", "StepRecorder", "check_batching", "check_max_batch_size", "percentiles_ms"]


def check_batching(max_batch_size: Any, timeout: Any) -> None:
    positive_int(max_batch_size, "max_batch_size")
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout >= 0):
        raise ValueError(f"timeout must be seconds >= 0, got {timeout!r}")


def check_max_batch_size(max_batch_size: Any, slots: int) -> int:
    """``max_batch_size`` if it is an int in ``1..slots`` (the server's slots), else ValueError."""
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int):
        raise ValueError(f"max_batch_size must be a positive int, got {max_batch_size!r}")
    if not 1 <= max_batch_size <= slots:
        raise ValueError(
            f"max_batch_size must be in 1..{slots} (the server's slots), got {max_batch_size}"
        )
    return max_batch_size


def percentiles_ms(values: Sequence[float], name: str) -> dict[str, float]:
    if not len(values):
        return {}
    p50, p99 = np.percentile(np.asarray(values, dtype=np.float64), [50, 99]) * 1000.0
    return {f"{name}_p50_ms": float(p50), f"{name}_p99_ms": float(p99)}


@dataclass
class Request:
    """One actor's request: a block of ``n`` envs in consecutive slots, one row each."""

    slots: np.ndarray  # int64 [n]
    obs: np.ndarray  # [n, *obs_shape]
    reward: np.ndarray  # float32 [n]
    flags: np.ndarray  # uint8 [n]
    final_obs: np.ndarray | None  # [n, *obs_shape], or None when no row is truncated
    episode_return: np.ndarray  # float64 [n]
    episode_length: np.ndarray  # int64 [n]
    arrived: float  # time.perf_counter() on the server: queue wait is measured on one clock
    future: asyncio.Future


class StepRecorder:
    """A listener inside the server actor that keeps what it saw for ``take_steps`` (tests and
    measurements read what was served)."""

    def __init__(self, limit: int) -> None:
        self.items: deque = deque()
        self.limit = limit
        self.dropped = 0

    def _keep(self, item: tuple) -> None:
        if len(self.items) >= self.limit:
            self.items.popleft()
            self.dropped += 1
        self.items.append(item)

    def on_step(self, batch: Any) -> None:
        self._keep(("step", batch))

    def on_restart(self, slots: np.ndarray) -> None:
        self._keep(("restart", np.array(slots)))
