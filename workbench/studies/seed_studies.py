"""Studies of the SEED system, for notebook 08 and the tests: does memory matter?

``memory_matters`` trains two agents on ``workbench/CartPoleNoVelocity-v1`` (cart position and pole
angle only) with the same experience: R2D2 through SEED (the ``seed-r2d2-cartpole-novelocity``
recipe: an LSTM Q-network, stored state, burn-in) and a feed-forward DQN (the ``dqn-cartpole``
recipe, which solves full-state CartPole in about 33k steps, with the env swapped) given as many env
steps as R2D2 needed to reach its target. From one
observation a feed-forward network cannot tell which way the pole moves; the LSTM infers the
velocities from consecutive ones (Hausknecht & Stone 2015, https://arxiv.org/abs/1507.06527;
Kapturowski et al. 2019, https://openreview.net/forum?id=r1lyTjAqYX).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from workbench.envs import CARTPOLE_NO_VELOCITY
from workbench.models import RecurrentQNetwork
from workbench.runs.recipes import RECIPES, Recipe
from workbench.seed.recipes import SEED_RECIPES, SeedRecipe
from workbench.seed.run import Seed
from workbench.studies.curves import study_dir

__all__ = ["MemoryStudy", "memory_matters"]


@dataclass
class MemoryStudy:
    """Both runs of ``memory_matters``. Curves are lists of ``{"env_steps", "return", "seconds"}``:
    R2D2's return is its recipe's ``target_metric`` (the last 10 episodes of the env exploring
    least), DQN's the mean of its last 20 training episodes (epsilon annealed to 0.04)."""

    total_steps: int
    """R2D2's budget."""
    dqn_steps: int
    """The DQN's: the env steps R2D2 took (its budget if it missed the target)."""
    target_return: float
    r2d2_steps_to_target: int | None
    r2d2_best: float
    r2d2_final: float
    dqn_best: float
    dqn_final: float
    r2d2_seconds: float
    dqn_seconds: float
    r2d2_curve: list[dict] = field(default_factory=list, repr=False)
    dqn_curve: list[dict] = field(default_factory=list, repr=False)
    r2d2_model: RecurrentQNetwork | None = field(default=None, repr=False)
    """The trained recurrent Q-network (the server's and the learner's, SEED-style)."""


def r2d2_recipe(transport: str | None = None) -> SeedRecipe:
    """The ``seed-r2d2-cartpole-novelocity`` recipe, on ``transport`` (None: the recipe's,
    local)."""
    recipe = SEED_RECIPES["seed-r2d2-cartpole-novelocity"]
    return (
        recipe
        if transport is None
        else replace(recipe, config=replace(recipe.config, transport=transport))
    )


def dqn_baseline(total_steps: int, target_return: float) -> Recipe:
    """The ``dqn-cartpole`` recipe (double, dueling, 3-step; 256x256 MLP) on CartPoleNoVelocity."""
    return replace(
        RECIPES["dqn-cartpole"],
        name="dqn-cartpole-novelocity",
        env_id=CARTPOLE_NO_VELOCITY,
        total_steps=total_steps,
        target_return=target_return,
        note="feed-forward baseline of memory_matters",
    )


def _summary(curve: list[dict]) -> tuple[float, float]:
    returns = [p["return"] for p in curve]
    return (max(returns), returns[-1]) if returns else (math.nan, math.nan)


def memory_matters(
    total_steps: int | None = None,
    seed: int = 0,
    *,
    transport: str | None = None,
    r2d2: bool = True,
    dqn: bool = True,
) -> MemoryStudy:
    """Train R2D2 (through SEED), then a feed-forward DQN with the env steps R2D2 took, on
    CartPoleNoVelocity.

    Args:
        total_steps: env steps R2D2 may take (None: the R2D2 recipe's budget). R2D2 stops at its
            target (300); DQN then runs as many env steps as R2D2 took (the whole budget if R2D2
            did not reach the target, or did not run), so both learn from the same experience.
        seed: of both runs.
        transport: SEED's actors, ``"local"`` (processes; the recipe's) or ``"serial"``.
        r2d2, dqn: run that agent (False: its curve stays empty, its returns NaN).
    """
    recipe = r2d2_recipe(transport)
    total_steps = recipe.total_steps if total_steps is None else int(total_steps)
    runs_dir = study_dir("workbench-memory-matters-")
    r2d2_curve: list[dict] = []
    dqn_curve: list[dict] = []
    model, r2d2_seconds, dqn_seconds, run = None, 0.0, 0.0, None
    if r2d2:
        run = Seed(
            replace(recipe.config, seed=seed),
            device=recipe.device,
            runs_dir=runs_dir,
            name=f"memory-r2d2-seed{seed}",
        )
        run.run(env_steps=total_steps, target_return=recipe.target_return)
        key = run.target_metric
        r2d2_curve = [
            {
                "env_steps": r["charts/env_steps"],
                "return": r[key],
                "seconds": r["charts/wall_seconds"],
            }
            for r in run.metrics
            if "event" not in r and r.get(key) is not None
        ]
        model, r2d2_seconds = run.model, run.wall_seconds
    dqn_steps = total_steps if run is None or run.ended_by != "target" else run.env_steps
    if dqn:
        baseline = dqn_baseline(dqn_steps, recipe.target_return)
        threads = torch.get_num_threads()
        torch.set_num_threads(
            baseline.torch_threads or threads
        )  # as benchmarks/learning.py runs it
        try:
            result = baseline.run(seed, runs_dir=runs_dir)
        finally:
            torch.set_num_threads(threads)
        dqn_curve = [
            {"env_steps": p["env_steps"], "return": p["mean_return"], "seconds": p["seconds"]}
            for p in result["curve"]
            if p["mean_return"] is not None
        ]
        dqn_seconds = result["run"].wall_seconds
    reached = next(
        (p["env_steps"] for p in r2d2_curve if p["return"] >= recipe.target_return), None
    )
    return MemoryStudy(
        total_steps,
        dqn_steps,
        recipe.target_return,
        reached,
        *_summary(r2d2_curve),
        *_summary(dqn_curve),
        r2d2_seconds,
        dqn_seconds,
        r2d2_curve,
        dqn_curve,
        model,
    )
