"""Data-parallel learners against their number (notebook 04, benchmarks/learner_scaling.py).

Stooke & Abbeel (2018, Sec. 3) split each large batch over several GPUs, each with a
replica of the network, and average the gradients with an all-reduce (NCCL): the update's time
falls nearly in proportion. :func:`learner_scaling` times the same PPO update on one rollout with
one learner in this process and with groups of ``DataParallelLearner`` replicas (gloo on CPU
"devices", NCCL on GPUs), from the same parameters. On a CPU the replicas share the same cores: a
group can only add the all-reduce and the processes' switching to the arithmetic, which is the
point the figure makes beside the paper's.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.learners import DataParallelLearner
from workbench.measure.throughput import torch_threads
from workbench.progress import each
from workbench.runs.recipes import RECIPES, Recipe
from workbench.sampling import SerialSampler
from workbench.system import usable_cores

__all__ = ["ScalingRow", "learner_scaling"]


@dataclass
class ScalingRow:
    """One learner count of :func:`learner_scaling`."""

    learners: int
    devices: tuple[str, ...]
    """Where each replica ran (``("cpu",)`` for the single learner in this process)."""
    threads_per_learner: int
    seconds_per_update: float
    """Mean wall seconds of one update (``update(rollout)`` returned), after the warm-up."""
    samples_per_second: float
    """Rollout samples (``T x B``) trained per second: the batch over ``seconds_per_update``."""


def learner_scaling(
    counts: Sequence[int] = (1, 2, 4),
    *,
    recipe: "str | Recipe" = "ppo-pong",
    updates: int = 3,
    warmup: int = 1,
    device_kind: str = "cpu",
    seed: int = 0,
) -> list[ScalingRow]:
    """Time ``updates`` PPO updates (after ``warmup`` untimed ones) of ``recipe``'s learner on one
    rollout of its ``[T, B]`` for each learner count: 1 is the learner in this process with every
    usable core's thread; N > 1 a ``DataParallelLearner`` on ``device_kind:0`` .. ``N-1`` (its
    default threads per learner), every group from the same parameters."""
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in counts):
        raise ValueError(f"learner counts must be positive ints, got {list(counts)}")
    if updates < 1 or warmup < 0:
        raise ValueError(f"updates must be >= 1 and warmup >= 0, got {updates} and {warmup}")
    recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
    learner = recipe.make_learner(seed)
    options = dict(recipe.env_options)
    with SerialSampler(
        recipe.env_id,
        num_envs=recipe.num_envs,
        horizon=recipe.horizon,
        seed=seed,
        env_options=options,
    ) as sampler:
        rollout = sampler.collect(learner.model)
    start = copy.deepcopy(learner.state_dict())  # updates below change the live tensors
    batch = recipe.num_envs * recipe.horizon
    rows = []
    for count in each(counts, "data-parallel learners", unit="group"):
        if count == 1:
            learner.load_state_dict(start)
            with torch_threads(usable_cores()) as threads:
                seconds = timed_updates(learner, rollout, updates, warmup)
            rows.append(ScalingRow(1, ("cpu",), threads, seconds, batch / seconds))
            continue
        devices = tuple(f"{device_kind}:{rank}" for rank in range(count))
        factory = functools.partial(type(learner), learner.model, learner.config, seed=seed)
        with DataParallelLearner(factory, devices) as group:
            group.load_state_dict(start)
            seconds = timed_updates(group, rollout, updates, warmup)
            threads = max(1, usable_cores() // count) if device_kind == "cpu" else 1
        rows.append(ScalingRow(count, devices, threads, seconds, batch / seconds))
    return rows


def timed_updates(learner, rollout, updates: int, warmup: int) -> float:
    """Mean seconds of ``updates`` calls of ``learner.update(rollout)`` after ``warmup`` more."""
    for _ in range(warmup):
        learner.update(rollout)
    started = time.perf_counter()
    for _ in range(updates):
        learner.update(rollout)
    return (time.perf_counter() - started) / updates
