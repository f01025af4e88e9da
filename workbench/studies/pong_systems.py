"""Notebook 09's chart of every system on Pong: PPO, SEED V-trace, Ape-X DQN, single-process DQN
and R2D2, each from its ``benchmarks/learning.py`` record in ``data/``, on one machine.

``system_rows`` turns each recorded run into the table's row: minutes to a return of 0 and of 18,
env steps to 18, gradient steps per second and samples trained per env step (how often the
learner sees each step it collected, the lever that separates the systems on two cores), and the
CPU's instruction sets the run recorded (the same recipe runs about 3x slower on an AVX2-only EPYC
than on an AVX-512 bf16 one; records older than the flags say "not recorded").
``systems_figure`` draws return against wall minutes and against env steps side by side, a colour
per system and a dash per seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.seed.algorithms import seed_algorithm
from workbench.studies.pong_studies import COLORS, first_crossing, load_json

__all__ = ["gradient_steps", "samples_per_gradient_step", "system_rows", "systems_figure"]


def record_kind(entry: dict[str, Any]) -> str:
    """A recorded recipe's run kind: its learner for a ``Run`` (``PPO``, ``A2C``, ``DQN``),
    ``Apex`` or ``Seed`` for a system of actors. Records written since recipes describe themselves
    name their ``system``; earlier ones wrote the kind in ``algorithm``."""
    system = entry.get("system")
    return {"apex": "Apex", "seed": "Seed"}.get(system, entry["algorithm"])


def gradient_steps(entry: dict[str, Any], point: dict[str, Any]) -> int:
    """Gradient steps behind a recorded curve ``point``: a replay learner's own count where the
    point has it (a DQN run's ``updates`` are its iterations, each a varying number of steps),
    PPO and A2C an iteration's epochs x minibatches, every other learner one step per update."""
    if point.get("gradient_steps") is not None:
        return int(point["gradient_steps"])
    kind, config = record_kind(entry), entry["config"]
    if kind in ITERATION_COUNTS:
        raise ValueError(
            f"this {kind} record's points count iterations, not gradient steps; record it again "
            "with benchmarks/learning.py, whose points now carry gradient_steps"
        )
    updates = point.get("updates", point.get("learner_updates", 0))
    if kind in EPOCHS_OF_MINIBATCHES:
        return updates * config.get("num_epochs", 1) * config.get("num_minibatches", 1)
    return updates


def samples_per_gradient_step(entry: dict[str, Any]) -> int:
    """Samples one gradient step of a recorded recipe trains on (``entry``: a recipe's record in a
    ``benchmarks/learning.py`` file): PPO and A2C a minibatch of the rollout, V-trace its batch of
    unrolls (B x T), R2D2 its batch of sequences (B x trained length), Ape-X and DQN a batch of
    transitions."""
    kind = record_kind(entry)
    if kind not in SAMPLES_PER_STEP:
        raise ValueError(f"no rule for the samples of a {kind} update; add one to SAMPLES_PER_STEP")
    return SAMPLES_PER_STEP[kind](entry, entry["config"])


def seed_samples(entry: dict[str, Any], config: dict[str, Any]) -> int:
    """A SEED update: its batch of windows x the rows its algorithm trains of each."""
    learner = config["learner"]
    return learner["batch_size"] * learner[seed_algorithm(config["algorithm"]).trained_field]


ITERATION_COUNTS = ("DQN",)
"""Record kinds whose points counted iterations, each a varying number of gradient steps."""
EPOCHS_OF_MINIBATCHES = ("PPO", "A2C")
"""Record kinds whose update is epochs x minibatches of gradient steps."""
SAMPLES_PER_STEP = {
    "PPO": lambda entry, config: (
        entry["num_envs"] * entry["horizon"] // config.get("num_minibatches", 1)
    ),
    "A2C": lambda entry, config: (
        entry["num_envs"] * entry["horizon"] // config.get("num_minibatches", 1)
    ),
    "Seed": seed_samples,
    # an Ape-X config named its learner's settings "agent" until it called them "learner"
    "Apex": lambda entry, config: config.get("learner", config.get("agent"))["batch_size"],
    "DQN": lambda entry, config: config["batch_size"],
}
"""Samples one gradient step trains on, by the record's run kind (``record_kind``)."""


def system_rows(
    systems: Mapping[str, tuple[str, str]], data_dir: "str | Path", *, target: float = 18.0
) -> list[dict[str, Any]]:
    """A row per recorded run of each system: ``systems`` maps a label to (record file in
    ``data_dir``, recipe name). Times and steps are None where the run never got there; at the
    recipe's own target and at 0 they are the run's exact crossings (``steps_to_target``,
    ``seconds_to_target``, ``seconds_to_zero``: its log rows), else its curve's."""
    rows = []
    for label, (file, recipe) in systems.items():
        entry = load_json(Path(data_dir) / file)["recipes"][recipe]
        per_step = samples_per_gradient_step(entry)
        for run in entry["runs"]:
            curve = run["curve"]
            last = curve[-1]
            steps = gradient_steps(entry, last)
            exact = run.get("seconds_to_target") is not None and target == entry["target_return"]
            reached = (
                (run["steps_to_target"], run["seconds_to_target"])
                if exact
                else first_crossing(run, target)
            )
            zero = (
                (None, run["seconds_to_zero"])
                if run.get("seconds_to_zero") is not None
                else first_crossing(run, 0.0)
            )
            rows.append(
                {
                    "system": label,
                    "recipe": recipe,
                    "seed": run["seed"],
                    "minutes": last["seconds"] / 60,
                    "minutes_to_0": zero[1] / 60 if zero else None,
                    "minutes_to_target": reached[1] / 60 if reached else None,
                    "env_steps_to_target": reached[0] if reached else None,
                    "final_return": last["mean_return"],
                    "gradient_steps_per_second": steps / max(last["seconds"], 1e-9),
                    "samples_per_env_step": steps * per_step / max(last["env_steps"], 1),
                    "env_steps_per_second": last["env_steps"] / max(last["seconds"], 1e-9),
                    "cpu_flags": ", ".join(
                        run.get("machine", {}).get("cpu_flags") or ["not recorded"]
                    ),
                }
            )
    return rows


def systems_figure(
    systems: Mapping[str, tuple[str, str]],
    data_dir: "str | Path",
    *,
    target: float = 18.0,
    title: str | None = None,
) -> go.Figure:
    """Mean return of the last games against wall minutes (left) and env steps (right, millions):
    a colour per system, a dash per seed, the target dashed."""
    figure = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        subplot_titles=("against wall time (2 CPU cores)", "against env steps"),
        horizontal_spacing=0.05,
    )
    for index, (label, (file, recipe)) in enumerate(systems.items()):
        color = COLORS[index % len(COLORS)]
        runs = load_json(Path(data_dir) / file)["recipes"][recipe]["runs"]
        for number, run in enumerate(runs):
            points = [p for p in run["curve"] if p["mean_return"] is not None]
            line = dict(color=color, width=2, dash=("solid", "dot", "dash")[number % 3])
            shown = dict(name=f"{label}, seed {run['seed']}", legendgroup=label, line=line)
            returns = [p["mean_return"] for p in points]
            minutes = [p["seconds"] / 60 for p in points]
            steps = [p["env_steps"] / 1e6 for p in points]
            figure.add_trace(go.Scatter(x=minutes, y=returns, mode="lines", **shown), 1, 1)
            figure.add_trace(
                go.Scatter(x=steps, y=returns, mode="lines", showlegend=False, **shown), 1, 2
            )
    for column in (1, 2):
        figure.add_hline(y=target, line_dash="dash", line_color="#888", row=1, col=column)
    figure.update_xaxes(title_text="wall minutes", row=1, col=1)
    figure.update_xaxes(title_text="env steps (millions)", row=1, col=2)
    figure.update_yaxes(title_text="mean return, last games", range=[-21.5, 21.5], row=1, col=1)
    figure.update_layout(title=title, height=460, margin=dict(l=60, r=20, t=70, b=50))
    return figure
