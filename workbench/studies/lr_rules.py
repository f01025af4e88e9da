"""Learning-rate rules for large batches, for notebook 03 and ``benchmarks/lr_rules.py``.

Stooke & Abbeel (2018, Sec. 4) keep A2C's and PPO's sample efficiency at large batches by raising
the learning rate with the batch. :func:`lr_rules_study` trains one recipe (tuned at its own
``B x T``) at other batch sizes under each rule, ``none`` (the tuned rate as it is), ``sqrt`` and
``linear`` (``kernels.scaled_learning_rate``), for several seeds, each run stopping at the
recipe's target: env steps and wall seconds to the target are the study's answer.
:func:`rules_summary` reduces the seeds to a median and a range, :func:`rules_figure` draws them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.kernels import scaled_learning_rate
from workbench.progress import each
from workbench.runs.recipes import RECIPES, Recipe
from workbench.studies.curves import learning_curve, study_dir
from workbench.studies.pg_studies import make_recipe_run

__all__ = ["RULES", "RuleRun", "lr_rules_study", "rules_figure", "rules_summary"]

RULES = ("none", "sqrt", "linear")
COLORS = {"none": "#7f7f7f", "sqrt": "#1f77b4", "linear": "#d62728"}


@dataclass
class RuleRun:
    """One run of the study: a rule, a batch shape and a seed."""

    rule: str
    num_envs: int
    horizon: int
    batch_size: int
    seed: int
    learning_rate: float
    """The rate the rule gives this batch (before any annealing over the run)."""
    steps_to_target: int | None
    """Env steps when the mean return of the last 20 episodes first reached the target; None:
    never within the budget."""
    seconds_to_target: float | None
    best_return: float
    env_steps: int
    steps_per_second: float


def lr_rules_study(
    recipe: "str | Recipe",
    shapes: Sequence[tuple[int, int]],
    *,
    total_steps: int,
    rules: Sequence[str] = RULES,
    seeds: Sequence[int] = (0,),
    runs_dir: str | None = None,
) -> list[RuleRun]:
    """Train ``recipe`` at each ``(B, T)`` of ``shapes`` under each rule and seed, each run to the
    recipe's target or ``total_steps`` env steps, whichever comes first."""
    recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
    unknown = [rule for rule in rules if rule not in RULES]
    if unknown:
        raise ValueError(f"unknown rule(s) {unknown}; the rules are {list(RULES)}")
    if recipe.target_return is None:
        raise ValueError(f"{recipe.name} has no target_return: the study measures time to it")
    runs_dir = runs_dir or study_dir("workbench-lr-rules-")
    reference = recipe.num_envs * recipe.horizon
    runs = []
    points = list(product(rules, shapes, seeds))
    for rule, (num_envs, horizon), seed in each(points, f"{recipe.name}: rules x batches x seeds"):
        scale = None if rule == "none" else rule
        run = make_recipe_run(
            recipe,
            seed=seed,
            num_envs=num_envs,
            horizon=horizon,
            total_steps=total_steps,
            name=f"{recipe.name}-{rule}-{num_envs}x{horizon}-seed{seed}",
            runs_dir=runs_dir,
            scale_learning_rate=scale,
            reference_batch_size=reference,
        )
        run.run(target_return=recipe.target_return)
        curve = learning_curve(run.metrics, rule)
        runs.append(
            RuleRun(
                rule=rule,
                num_envs=num_envs,
                horizon=horizon,
                batch_size=num_envs * horizon,
                seed=seed,
                learning_rate=recipe.config.learning_rate
                if scale is None
                else scaled_learning_rate(
                    recipe.config.learning_rate,
                    num_envs * horizon,
                    reference,
                    scale,
                    max_lr=getattr(recipe.config, "max_learning_rate", None),
                ),
                steps_to_target=curve.steps_to(recipe.target_return),
                seconds_to_target=curve.seconds_to(recipe.target_return),
                best_return=max(curve.returns, default=float("nan")),
                env_steps=run.env_steps,
                steps_per_second=curve.steps_per_second,
            )
        )
    return runs


def rules_summary(runs: Sequence[RuleRun]) -> list[dict[str, Any]]:
    """Per rule and batch size: runs, how many reached the target, and the median, lowest and
    highest env steps and seconds to it over the runs that did."""
    rows = []
    keys = dict.fromkeys((r.rule, r.batch_size) for r in runs)
    for rule, batch in keys:
        mine = [r for r in runs if (r.rule, r.batch_size) == (rule, batch)]
        reached = [r for r in mine if r.steps_to_target is not None]
        steps = [r.steps_to_target for r in reached]
        seconds = [r.seconds_to_target for r in reached]
        rows.append(
            {
                "rule": rule,
                "batch_size": batch,
                "learning_rate": mine[0].learning_rate,
                "runs": len(mine),
                "reached": len(reached),
                "median_steps": statistics.median(steps) if steps else None,
                "steps_range": (min(steps), max(steps)) if steps else None,
                "median_seconds": statistics.median(seconds) if seconds else None,
                "seconds_range": (min(seconds), max(seconds)) if seconds else None,
            }
        )
    return rows


def rules_figure(
    runs: Sequence[RuleRun], *, title: str | None = None, target: float | None = None
) -> go.Figure:
    """Env steps and wall seconds to the target against the batch size, a line per rule: the
    median over seeds, bars from the lowest to the highest, each point labelled with the seeds
    that reached the target (``2/3``); a batch where no seed reached it has no point."""
    figure = make_subplots(rows=1, cols=2, subplot_titles=("env steps to target", "seconds"))
    summary = rules_summary(runs)
    for rule in dict.fromkeys(row["rule"] for row in summary):
        mine = sorted(
            (r for r in summary if r["rule"] == rule and r["reached"]),
            key=lambda r: r["batch_size"],
        )
        if not mine:
            continue
        x = [r["batch_size"] for r in mine]
        for col, median, spread in (
            (1, "median_steps", "steps_range"),
            (2, "median_seconds", "seconds_range"),
        ):
            y = [r[median] for r in mine]
            figure.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    mode="lines+markers+text",
                    text=[f"{r['reached']}/{r['runs']}" for r in mine],
                    textposition="top left",
                    name=rule,
                    legendgroup=rule,
                    showlegend=col == 1,
                    line_color=COLORS.get(rule),
                    error_y=dict(
                        type="data",
                        symmetric=False,
                        array=[r[spread][1] - v for r, v in zip(mine, y)],
                        arrayminus=[v - r[spread][0] for r, v in zip(mine, y)],
                    ),
                ),
                row=1,
                col=col,
            )
    figure.update_xaxes(title_text="batch B x T", type="log")
    suffix = f" {target:g}" if target is not None else ""
    figure.update_layout(title=title or f"time to a return of{suffix} under each rule", height=380)
    return figure
