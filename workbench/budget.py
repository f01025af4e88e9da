"""Run sizes for the whole course, chosen in one place.

``WORKBENCH_BUDGET=ci`` (the default) keeps every notebook and test to minutes on 2 CPU cores;
``full`` makes the same cells real experiments. Notebooks and tests read sizes from here only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

BUDGETS = ("ci", "full")


@dataclass(frozen=True)
class Budget:
    name: str
    measure_seconds: float
    """Seconds per throughput measurement (notebooks 01-02)."""
    env_counts: tuple[int, ...]
    """num_envs values swept in the many-simulators study (notebook 01)."""
    sampler_envs: int
    """Envs per sampler in the side-by-side comparison (notebook 02)."""
    sampler_horizon: int
    """Steps per collect (T of the [T, B] rollout) in notebook 02."""
    sampler_workers: int
    """Worker processes for the parallel samplers in notebook 02."""
    repeats: int
    """Short measurements per figure; the best is kept (a busy machine only ever slows one)."""
    inference_batch_sizes: tuple[int, ...]
    """Batch sizes of the inference study (notebook 01)."""


_BUDGETS = {
    "ci": Budget(
        name="ci",
        measure_seconds=1.0,
        env_counts=(1, 2, 4, 8, 16),
        sampler_envs=8,
        sampler_horizon=16,
        sampler_workers=2,
        repeats=3,
        inference_batch_sizes=(1, 8, 32),
    ),
    "full": Budget(
        name="full",
        measure_seconds=5.0,
        env_counts=(1, 2, 4, 8, 16, 32, 64),
        sampler_envs=32,
        sampler_horizon=64,
        sampler_workers=2,
        repeats=3,
        inference_batch_sizes=(1, 8, 32, 128),
    ),
}


def budget_name() -> str:
    """The active budget's name, from ``WORKBENCH_BUDGET`` (default ``ci``)."""
    name = os.environ.get("WORKBENCH_BUDGET", "ci").strip().lower()
    if name not in _BUDGETS:
        raise ValueError(
            f"WORKBENCH_BUDGET={name!r} is not a budget; set it to one of {', '.join(BUDGETS)}."
        )
    return name


def current() -> Budget:
    """The sizes for the active budget."""
    return _BUDGETS[budget_name()]
