"""``run_recipe``: a recipe's run to its target, its env-step budget or a time limit, with the
learning curve ``benchmarks/learning.py`` records. Every kind of recipe (``runs.recipes``,
``apex.recipes``, ``seed.recipes``) runs through it: it needs only what ``RunnableRecipe``
declares."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["RunnableRecipe", "actors_description", "run_recipe"]


@runtime_checkable
class RunnableRecipe(Protocol):
    """What every recipe is, whatever system it runs (``runs.recipes.Recipe``,
    ``apex.recipes.ApexRecipe``, ``seed.recipes.SeedRecipe``): a named run with its stated
    target, which ``run_recipe``, ``benchmarks/learning.py``, ``runs.evaluation`` and the
    terminal (``python -m workbench``) use alike."""

    name: str
    env_id: str
    target_return: float
    """The return its claim states (of the run's ``target_metric``)."""
    total_steps: int
    """Its env-step budget."""
    note: str

    def make_run(
        self,
        seed: int,
        *,
        runs_dir: str | None = None,
        name: str | None = None,
        resume_from: Any = None,
    ) -> Any:
        """Its run at ``seed`` (a ``RunLifecycle``), not started; ``resume_from`` continues a
        checkpoint of it."""

    def make_model(self, obs_shape: tuple[int, ...], num_actions: int) -> torch.nn.Module:
        """The network its run trains (what a checkpoint's weights fill to play)."""

    def describe(self) -> dict[str, Any]:
        """What a record says the recipe runs: its ``system`` and ``algorithm``, ``num_envs`` in
        all, and its system's own shape (a ``Run``'s sampler, workers and horizon; an Ape-X or
        SEED run's actors, envs per actor and transport)."""


def actors_description(system: str, algorithm: str, config: Any, **shape: Any) -> dict[str, Any]:
    """``describe()`` of a system of actors (Ape-X, SEED): its transport, actors and envs, and
    ``shape``, what else the system's own config says of them."""
    return {
        "system": system,
        "algorithm": algorithm,
        "transport": config.transport,
        "num_actors": config.num_actors,
        "envs_per_actor": config.envs_per_actor,
        "num_envs": config.num_actors * config.envs_per_actor,
        **shape,
    }


def run_recipe(
    recipe: RunnableRecipe,
    seed: int,
    *,
    max_seconds: float | None = None,
    on_update: Callable[[dict[str, Any]], None] | None = None,
    runs_dir: str | None = None,
    stop_at_target: bool = True,
    max_env_steps: int | None = None,
    resume_from: "str | os.PathLike | None" = None,
) -> dict[str, Any]:
    """Run ``recipe.make_run(seed)`` until its target, its env-step budget or ``max_seconds``
    (with ``stop_at_target=False`` it trains on past the target, to the budget or the time limit:
    a fixed budget whose last checkpoint an evaluation plays, the first crossing still recorded).

    Returns ``steps_to_target`` (env steps of the first row whose ``target_metric`` reached the
    target; None if none did), ``stopped`` (``"target"``, ``"budget"``, ``"time"``, or
    ``"stop"`` when it was stopped or interrupted), ``curve`` (one point per row:
    ``env_steps``, ``mean_return`` (the target metric), ``episodes``, ``seconds``, ``updates``,
    and ``gradient_steps`` where the learner counts its own), ``final_return`` and the ``run``
    itself. ``on_update`` gets each point as it comes (an interrupted hour keeps what it
    learned). ``max_env_steps`` stops it sooner than the budget (whose length still sets the
    learning rate's annealing); ``resume_from`` continues a checkpoint of the recipe's run
    (``Recipe.make_run``).
    """
    resuming = {} if resume_from is None else {"resume_from": resume_from}
    run = recipe.make_run(seed, runs_dir=runs_dir, **resuming)
    curve: list[dict[str, Any]] = []
    reached: list[int] = []

    def point(row: dict[str, Any]) -> None:
        if "event" in row:
            return
        value = row.get(run.target_metric)
        item = {
            "env_steps": row["charts/env_steps"],
            "mean_return": value,
            "episodes": row["charts/total_episodes"],
            "seconds": row["charts/wall_seconds"],
            "updates": row["charts/updates"],
        }
        if "charts/gradient_steps" in row:  # a replay learner: its Run's updates are iterations
            item["gradient_steps"] = int(row["charts/gradient_steps"])
        curve.append(item)
        if value is not None and value >= recipe.target_return and not reached:
            reached.append(row["charts/env_steps"])
        if on_update is not None:
            on_update(item)

    run.on_row(point)
    target = recipe.target_return if stop_at_target else None
    steps = recipe.total_steps if max_env_steps is None else min(max_env_steps, recipe.total_steps)
    run.run(env_steps=steps, seconds=max_seconds, target_return=target)
    stopped = {"target": "target", "seconds": "time", "env_steps": "budget"}.get(
        run.ended_by, run.ended_by or "budget"
    )
    return {
        "steps_to_target": reached[0] if reached else None,
        "stopped": stopped,
        "curve": curve,
        "final_return": curve[-1]["mean_return"] if curve else None,
        "run": run,
    }
