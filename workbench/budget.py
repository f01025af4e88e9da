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
    live_steps: int
    """Env steps of the live, steerable PPO CartPole run (notebooks 03-04)."""
    batch_shapes: tuple[tuple[int, int], ...]
    """``(B, T)`` of the PPO batch-size study (notebook 03); B x T is the batch."""
    batch_study_steps: int
    """Env steps per run of the PPO batch-size study."""
    a2c_batch_shapes: tuple[tuple[int, int], ...]
    """``(B, T)`` of the A2C batch-size study (notebook 03)."""
    a2c_study_steps: int
    """Env steps per run of the A2C batch-size study."""
    async_iterations: int
    """Iterations of PPO on Pong per mode in the sync-against-async comparison (notebook 04)."""


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
        live_steps=60_000,
        batch_shapes=((8, 32), (32, 32), (128, 32)),
        batch_study_steps=120_000,
        a2c_batch_shapes=((8, 5), (32, 5), (128, 5)),
        a2c_study_steps=60_000,
        async_iterations=4,
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
        live_steps=300_000,
        batch_shapes=((8, 32), (32, 32), (128, 32), (512, 32)),
        batch_study_steps=500_000,
        a2c_batch_shapes=((8, 5), (32, 5), (128, 5), (512, 5)),
        a2c_study_steps=400_000,
        async_iterations=20,
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
