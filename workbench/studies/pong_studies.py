"""Notebook 09's figures: Pong learned on two cores, from what `benchmarks/` recorded in `data/`.

``recorded_curves`` reads the runs of a recipe from a ``benchmarks/learning.py`` file as learning
curves; ``wall_time_figure`` draws return against wall minutes, a colour per recipe and a line per
seed; ``levers_figure`` draws ``benchmarks/pong_levers.py``'s table: the speed each lever bought
and the minutes to a return of 0 and of 18 that speed gives.

``live_claim`` sizes the ci budget's live run to the machine: it continues a recorded checkpoint
(``data/ppo_pong_fast_climb.pt``: seed 0's run where its return first reached -18, the foot of
Pong's climb), and the return it must reach within N more env steps is what every recorded
continuation of that checkpoint had reached by then
(``data/learning_ppo_pong_fast_from_climb.json``), less a margin. N is what this machine runs in
the cell's wall budget at the speed its first seconds measured (``steps_per_second_after``), but
never fewer than the recorded continuations needed to climb ``least_gain`` points: on a slow CPU
the claim keeps its meaning and the cell takes longer.

``level_claim`` is the claim where a climb does not fit a notebook cell (Ape-X on two cores climbs
a point in about 190k env steps): the level every recorded continuation held once its first
games ended, less a margin, within a fixed count of env steps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.runs import RunLifecycle
from workbench.studies.curves import LearningCurve, wait_for_row

__all__ = [
    "LevelClaim",
    "LiveClaim",
    "continued_runs",
    "first_crossing",
    "level_claim",
    "levers_figure",
    "live_claim",
    "load_json",
    "recorded_curves",
    "steps_per_second_after",
    "wall_time_figure",
]

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def load_json(path: "str | Path") -> dict[str, Any]:
    """A ``data/`` file, with an error that names the command that writes it when it is missing."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is not there; data/README.md names the benchmark command that writes it"
        )
    with open(path) as f:
        return json.load(f)


def recorded_curves(
    path: "str | Path", recipe: str, *, label: str | None = None
) -> list[LearningCurve]:
    """One ``LearningCurve`` per recorded run of ``recipe`` in ``path`` (points without a return
    yet, before the first 20 games ended, are left out)."""
    report = load_json(path)
    if recipe not in report["recipes"]:
        raise KeyError(f"{path} holds no runs of {recipe!r}; it has {sorted(report['recipes'])}")
    curves = []
    for run in report["recipes"][recipe]["runs"]:
        points = [p for p in run["curve"] if p["mean_return"] is not None]
        curve = LearningCurve(f"{label or recipe}, seed {run['seed']}")
        curve.env_steps = [p["env_steps"] for p in points]
        curve.wall_seconds = [p["seconds"] for p in points]
        curve.returns = [p["mean_return"] for p in points]
        if points:
            curve.steps_per_second = points[-1]["env_steps"] / max(points[-1]["seconds"], 1e-9)
        curves.append(curve)
    return curves


def first_crossing(run: dict[str, Any], level: float) -> tuple[int, float] | None:
    """(env steps, wall seconds) of a recorded run's first curve point whose mean return of the
    last 20 games is at least ``level``; None if its curve never got there."""
    for point in run["curve"]:
        if point["mean_return"] is not None and point["mean_return"] >= level:
            return point["env_steps"], point["seconds"]
    return None


def wall_time_figure(
    groups: dict[str, Sequence[LearningCurve]],
    *,
    target: float | None = 18.0,
    minutes: float = 60.0,
    title: str | None = None,
    games: str = "last 20 games",
) -> go.Figure:
    """Mean return against wall minutes: a colour per group (a recipe), a line per curve (a
    seed); ``target`` and the ``minutes`` limit as dashed lines. ``games``: what the records'
    return averages (Ape-X and R2D2: the last 10 games of the actor exploring least)."""
    figure = go.Figure()
    for index, (name, curves) in enumerate(groups.items()):
        color = COLORS[index % len(COLORS)]
        for number, curve in enumerate(curves):
            figure.add_trace(
                go.Scatter(
                    x=[s / 60 for s in curve.wall_seconds],
                    y=curve.returns,
                    mode="lines",
                    name=name if len(curves) == 1 else curve.label,
                    legendgroup=name,
                    line=dict(color=color, width=2, dash=("solid", "dot", "dash")[number % 3]),
                )
            )
    if target is not None:
        figure.add_hline(
            y=target, line_dash="dash", line_color="#888", annotation_text=f"{target:g}"
        )
    figure.add_vline(x=minutes, line_dash="dash", line_color="#888")
    figure.update_layout(
        title=title,
        xaxis_title="wall minutes (2 CPU cores)",
        yaxis_title=f"mean return, {games}",
        yaxis_range=[-21.5, 21.5],
        height=420,
        margin=dict(l=60, r=20, t=60, b=50),
    )
    return figure


def levers_figure(levers: dict[str, Any], *, title: str | None = None) -> go.Figure:
    """``data/pong_levers.json``: env steps per second of each row (left) and the minutes to a
    return of 0 and of 18 at that speed (right); the ladder in blue, the single changes beside the
    recipe in grey."""
    rows = levers["rows"]
    labels = [row["lever"] for row in rows]
    colors = ["#1f77b4" if row["group"] == "ladder" else "#999" for row in rows]
    figure = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        subplot_titles=("env steps per second", "minutes to a return of 0 / 18"),
        horizontal_spacing=0.04,
    )
    figure.add_trace(
        go.Bar(
            y=labels,
            x=[row["steps_per_second"] for row in rows],
            orientation="h",
            marker_color=colors,
            text=[f"{row['steps_per_second']:,.0f} ({row['vs_cleanrl']:.1f}x)" for row in rows],
            textposition="auto",
            showlegend=False,
        ),
        row=1,
        col=1,
    )
    for key, name, color in (
        ("minutes_to_0", "to 0", "#aec7e8"),
        ("minutes_to_18", "to 18", "#1f77b4"),
    ):
        figure.add_trace(
            go.Bar(
                y=labels,
                x=[row[key] for row in rows],
                orientation="h",
                name=name,
                marker_color=color,
            ),
            row=1,
            col=2,
        )
    figure.update_yaxes(autorange="reversed")
    figure.update_layout(
        title=title,
        barmode="group",
        height=120 + 45 * len(rows),
        margin=dict(l=320, r=20, t=60, b=40),
    )
    return figure


@dataclass(frozen=True)
class LiveClaim:
    """What a continuation of a recorded checkpoint must show, sized to this machine: from
    ``start`` env steps, a mean return of the last 20 games of at least ``target`` within
    ``env_steps`` more."""

    start: int
    env_steps: int
    target: float
    start_return: float
    """The best first return of the recorded continuations (the checkpoint's level)."""
    least_steps: int
    """Env steps after which every recorded continuation had climbed ``least_gain``."""
    steps_per_second: float
    wall_seconds: float

    @property
    def limit(self) -> int:
        """The run's env-step limit (its counter continues the checkpoint's)."""
        return self.start + self.env_steps

    def describe(self) -> str:
        afford = self.steps_per_second * self.wall_seconds
        sized = (
            f"{self.wall_seconds:.0f} s at {self.steps_per_second:,.0f} env steps/s afford "
            f"{afford:,.0f}"
        )
        if afford < self.least_steps:
            sized += f", fewer than the {self.least_steps:,} the claim needs: it runs those"
        return (
            f"from the checkpoint at {self.start:,} env steps (return {self.start_return:+.1f}): "
            f"reach {self.target:+.1f} within {self.env_steps:,} more ({sized})"
        )


def reached_by(run: dict[str, Any], env_steps: int) -> float | None:
    """The best mean return a recorded run's curve reached by ``env_steps`` (None before its
    first 20 games ended)."""
    values = [
        p["mean_return"]
        for p in run["curve"]
        if p["env_steps"] <= env_steps and p["mean_return"] is not None
    ]
    return max(values) if values else None


def continued_runs(continuations: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The runs of a ``benchmarks/learning.py --resume-from`` record (one recipe) and the env steps
    of the checkpoint they all continued; a record whose runs continued different checkpoints (or
    none) is refused."""
    (recipe,) = continuations["recipes"].values()
    runs = recipe["runs"]
    starts = {run.get("resumed_at_env_steps") for run in runs}
    if len(starts) != 1 or None in starts:
        raise ValueError(
            "the record's runs must continue one checkpoint (benchmarks/learning.py "
            f"--resume-from): resumed_at_env_steps {sorted(starts, key=str)}"
        )
    (start,) = starts
    return runs, start


def live_claim(
    continuations: dict[str, Any],
    *,
    steps_per_second: float,
    wall_seconds: float,
    margin: float = 1.0,
    least_gain: float = 2.0,
    grid: int = 8_192,
) -> LiveClaim:
    """The claim for a continuation of the checkpoint that ``continuations`` (a
    ``benchmarks/learning.py --resume-from`` record, one recipe) continued at several seeds.

    N = this machine's ``steps_per_second * wall_seconds`` (a multiple of ``grid``), at least the
    ``least_steps`` by which every recorded continuation climbed ``least_gain`` points above the
    checkpoint's level and at most the shortest recorded continuation; the target is the least
    best return the recorded continuations reached within N, minus ``margin``."""
    runs, start = continued_runs(continuations)
    first = [
        next(p["mean_return"] for p in run["curve"] if p["mean_return"] is not None) for run in runs
    ]
    start_return = max(first)
    longest = min(run["curve"][-1]["env_steps"] for run in runs) - start

    def target_at(steps: int) -> float:
        reached = [reached_by(run, start + steps) for run in runs]
        return -math.inf if None in reached else min(reached) - margin

    least = next(
        (n for n in range(grid, longest + 1, grid) if target_at(n) >= start_return + least_gain),
        None,
    )
    if least is None:
        raise ValueError(
            f"no recorded continuation climbed {least_gain} points within {longest:,} env steps; "
            "record longer ones"
        )
    afford = int(steps_per_second * wall_seconds) // grid * grid
    steps = max(least, min(afford, longest // grid * grid))
    return LiveClaim(
        start=start,
        env_steps=steps,
        target=target_at(steps),
        start_return=start_return,
        least_steps=least,
        steps_per_second=steps_per_second,
        wall_seconds=wall_seconds,
    )


@dataclass(frozen=True)
class LevelClaim:
    """What a continuation of a recorded checkpoint must hold: from ``start`` env steps, a reading
    of at least ``target`` within ``env_steps`` more (``level_claim``)."""

    start: int
    env_steps: int
    target: float
    first_steps: int
    """Env steps after which every recorded continuation had its first reading."""
    first_returns: tuple[float, ...]
    """The recorded continuations' first readings (the checkpoint's level, seed by seed)."""

    @property
    def limit(self) -> int:
        """The run's env-step limit (its counter continues the checkpoint's)."""
        return self.start + self.env_steps

    def describe(self) -> str:
        firsts = ", ".join(f"{r:+.1f}" for r in self.first_returns)
        return (
            f"from the checkpoint at {self.start:,} env steps: reach {self.target:+.1f} within "
            f"{self.env_steps:,} more (the recorded continuations first read {firsts}, each within "
            f"{self.first_steps:,})"
        )


def level_claim(
    continuations: dict[str, Any], *, margin: float, slack: float = 0.25, grid: int = 8_192
) -> LevelClaim:
    """The level claim for a continuation of the checkpoint ``continuations`` (a
    ``benchmarks/learning.py --resume-from`` record, one recipe) continued at several seeds.

    N = the env steps by which every recorded continuation had its first reading, ``slack`` more
    (a live run's games end at their own pace), on the ``grid``; the target is the least best
    reading the recorded continuations reached within N, minus ``margin``."""
    runs, start = continued_runs(continuations)
    firsts = []
    for run in runs:
        first = next((p for p in run["curve"] if p["mean_return"] is not None), None)
        if first is None:
            raise ValueError(
                f"the continuation at seed {run.get('seed')} has no reading in "
                f"{run['curve'][-1]['env_steps'] - start:,} env steps; record a longer one"
            )
        firsts.append(first)
    first_steps = max(p["env_steps"] for p in firsts) - start
    steps = math.ceil(first_steps * (1 + slack) / grid) * grid
    shortest = min(run["curve"][-1]["env_steps"] for run in runs) - start
    if steps > shortest:
        raise ValueError(
            f"the claim needs {steps:,} env steps of every recorded continuation; the shortest "
            f"ran {shortest:,}: record longer ones"
        )
    return LevelClaim(
        start=start,
        env_steps=steps,
        target=min(reached_by(run, start + steps) for run in runs) - margin,
        first_steps=first_steps,
        first_returns=tuple(p["mean_return"] for p in firsts),
    )


def steps_per_second_after(run: RunLifecycle, seconds: float, *, timeout: float = 600.0) -> float:
    """The env steps/s of a run that goes, measured over its rows from its first (start-up and the
    first update left out) until ``seconds`` later: its machine's speed, measured at start."""
    first = wait_for_row(run, lambda row: "event" not in row, timeout=timeout)
    last = wait_for_row(
        run,
        lambda row: (
            "event" not in row
            and row["charts/wall_seconds"] >= first["charts/wall_seconds"] + seconds
        ),
        timeout=timeout,
    )
    steps = last["charts/env_steps"] - first["charts/env_steps"]
    return steps / max(last["charts/wall_seconds"] - first["charts/wall_seconds"], 1e-9)
