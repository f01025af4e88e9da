"""Plotly figures for the notebooks: each function takes measurements and returns a ``go.Figure``.

Measurements are :class:`workbench.measure.throughput.Throughput` rows. Nothing here measures or
runs anything; it only draws, so every function is cheap and safe to call again with new data.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

__all__ = [
    "STAGE_COLORS",
    "learning_curves",
    "size_colors",
    "frame_and_stack",
    "throughput_vs",
    "throughput_bars",
    "throughput_table",
    "stage_shares",
    "stage_breakdown",
    "apex_actor_bars",
    "apex_actors",
    "apex_throughput",
]

#: One color per stage of a collect, the same in every chart of the course.
STAGE_COLORS = {
    "env": "#1f77b4",
    "inference": "#ff7f0e",
    "wait": "#9467bd",
    "other": "#c7c7c7",
}

_STAGE_NAMES = {
    "env": "env stepping",
    "inference": "inference",
    "wait": "waiting (sync, IPC)",
    "other": "untimed (Python, sends, preemption)",
}


def frame_and_stack(frame: np.ndarray, obs: np.ndarray, *, title: str | None = None) -> go.Figure:
    """The game as a person sees it (RGB ``[H, W, 3]``) beside what the agent sees.

    Args:
        frame: uint8 ``[H, W, 3]`` rendered screen (``envs.render_frames``).
        obs: uint8 ``[C, h, w]`` stacked observation, oldest frame first (C = frame stack).
    """
    frame, obs = np.asarray(frame), np.asarray(obs)
    if frame.ndim != 3 or frame.shape[-1] != 3:
        raise ValueError(f"frame must be RGB [H, W, 3], got shape {frame.shape}.")
    if obs.ndim != 3:
        raise ValueError(f"obs must be a frame stack [C, h, w], got shape {obs.shape}.")
    stack = obs.shape[0]
    names = [f"screen {frame.shape[0]}x{frame.shape[1]} RGB"] + [
        f"obs[{i}]" + (" (newest)" if i == stack - 1 else "") for i in range(stack)
    ]
    fig = make_subplots(
        rows=1,
        cols=1 + stack,
        subplot_titles=names,
        column_widths=[frame.shape[1] / frame.shape[0]] + [1.0] * stack,
    )
    fig.add_trace(go.Image(z=frame), row=1, col=1)
    for i in range(stack):
        fig.add_trace(
            go.Heatmap(z=obs[i], colorscale="gray", zmin=0, zmax=255, showscale=False),
            row=1,
            col=2 + i,
        )
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{2 + i}", row=1, col=2 + i)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False)
    fig.update_layout(title=title, height=300, margin=dict(l=10, r=10, t=60, b=10))
    return fig


def throughput_vs(
    xs: Sequence[float],
    throughputs: Sequence,
    x_title: str,
    *,
    name: str = "measured",
    y_title: str = "steps per second",
    log_x: bool = True,
    references: Sequence = (),
    samples: Sequence[Sequence] | None = None,
    fig: go.Figure | None = None,
    title: str | None = None,
) -> go.Figure:
    """``steps_per_second`` of each measurement against ``xs`` (e.g. num_envs or batch size).

    Args:
        xs: one x value per throughput.
        throughputs: ``Throughput`` rows, in the order of ``xs``.
        x_title, y_title, title: axis and chart titles.
        name: legend name of this line.
        log_x: log-scale x axis (sizes that double).
        references: ``Throughput`` rows drawn as dashed horizontal lines, labelled with their
            label (baselines such as the naive loop).
        samples: every repeat behind each point (one list per x), drawn as faint dots, so the
            machine's noise is visible beside the line.
        fig: add the line to this figure instead of a new one.
    """
    if len(xs) != len(throughputs):
        raise ValueError(
            f"got {len(xs)} x values for {len(throughputs)} throughputs; pass one each."
        )
    fig = fig if fig is not None else go.Figure()
    if samples is not None:
        if len(samples) != len(xs):
            raise ValueError(
                f"got {len(samples)} sample lists for {len(xs)} x values; pass one each."
            )
        fig.add_trace(
            go.Scatter(
                x=[x for x, repeats in zip(xs, samples) for _ in repeats],
                y=[tp.steps_per_second for repeats in samples for tp in repeats],
                mode="markers",
                marker=dict(color="gray", size=6, opacity=0.4),
                name=f"{name}: each repeat",
                hovertemplate="%{y:,.0f}/s<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=list(xs),
            y=[tp.steps_per_second for tp in throughputs],
            mode="lines+markers",
            name=name,
            text=[tp.label for tp in throughputs],
            hovertemplate="%{text}<br>%{y:,.0f}/s<extra></extra>",
        )
    )
    for tp in references:
        fig.add_hline(
            y=tp.steps_per_second,
            line_dash="dash",
            line_color="gray",
            annotation_text=f"{tp.label}: {tp.steps_per_second:,.0f}/s",
            annotation_position="top left",
        )
    # On a log axis plotly labels its own minor ticks (8 9 1 2 3 ...); label the sizes measured.
    ticks = sorted(set(xs) | set(fig.layout.xaxis.tickvals or ())) if log_x else None
    fig.update_xaxes(title=x_title, type="log" if log_x else "linear", tickvals=ticks)
    fig.update_yaxes(title=y_title, rangemode="tozero")
    fig.update_layout(title=title, height=400, hovermode="closest")
    return fig


def throughput_bars(
    throughputs: Sequence,
    *,
    limit: float | None = None,
    title: str | None = None,
    y_title: str = "steps per second",
) -> go.Figure:
    """One bar of ``steps_per_second`` per measurement; ``limit``: a dashed line (e.g. the most
    these cores allow, ``throughput.limit_steps_per_second``)."""
    fig = go.Figure(
        go.Bar(
            x=[tp.label for tp in throughputs],
            y=[tp.steps_per_second for tp in throughputs],
            text=[f"{tp.steps_per_second:,.0f}" for tp in throughputs],
            textposition="outside",
            hovertemplate="%{x}<br>%{y:,.0f} steps/s<extra></extra>",
        )
    )
    if limit is not None:
        fig.add_hline(
            y=limit,
            line_dash="dash",
            line_color="gray",
            annotation_text=f"limit on these cores: {limit:,.0f}/s",
            annotation_position="top left",
        )
    fig.update_yaxes(title=y_title, rangemode="tozero")
    fig.update_layout(title=title, height=400)
    return fig


def throughput_table(throughputs: Sequence, *, title: str | None = None) -> go.Figure:
    """A table: label, steps/s, frames/s (steps x frameskip), steps and seconds measured."""
    rows = [
        [tp.label for tp in throughputs],
        [f"{tp.steps_per_second:,.0f}" for tp in throughputs],
        [f"{tp.frames_per_second:,.0f}" for tp in throughputs],
        [f"{tp.steps:,}" for tp in throughputs],
        [f"{tp.seconds:.2f}" for tp in throughputs],
    ]
    fig = go.Figure(
        go.Table(
            header=dict(
                values=["measured", "steps/s", "frames/s", "steps", "seconds"], align="left"
            ),
            cells=dict(values=rows, align="left"),
        )
    )
    fig.update_layout(
        title=title,
        height=80 + 30 * len(throughputs),
        margin=dict(l=10, r=10, t=40 if title else 10, b=10),
    )
    return fig


def stage_shares(tp) -> dict[str, float]:
    """Where the collecting process's wall clock went, as fractions that sum to 1.

    ``Rollout.timings`` stages overlap (workers step while the collector waits), so they are made
    disjoint here, on the collector's critical path:

    * the collector itself steps envs (``wait == 0``, SerialSampler): ``env`` as measured;
    * it only waits on workers that step *and* infer (``wait == total``, ParallelSampler): the
      workers' ``env`` and ``inference``; what is left of the wait is synchronisation;
    * it infers and waits on env-only workers (Batched, Alternating): ``inference`` as measured;
      the part of ``wait`` the workers spent stepping is ``env``, the rest synchronisation. Env
      time hidden behind inference (the alternating sampler's aim) is not on the critical path,
      so it does not show.

    Returns ``env``, ``inference``, ``wait`` (synchronisation) and ``other`` (the remainder, which
    no stage's timer covered: Python between stages, and on a busy machine time spent descheduled
    there), each ``>= 0``; all 0 when nothing was timed.
    """
    stages = tp.stages
    total = float(stages.get("total", 0.0))
    if total <= 0:
        return dict.fromkeys(STAGE_COLORS, 0.0)
    env, inference, wait = (float(stages.get(k, 0.0)) for k in ("env", "inference", "wait"))
    if wait <= 0:
        parts = {"env": env, "inference": inference, "wait": 0.0}
    elif wait >= 0.999 * total:
        work = min(env + inference, total)
        scale = work / (env + inference) if env + inference > 0 else 0.0
        parts = {"env": env * scale, "inference": inference * scale, "wait": total - work}
    else:
        stepping = min(env, wait)
        parts = {"env": stepping, "inference": inference, "wait": wait - stepping}
    timed = sum(parts.values())
    if timed > total:  # timer overlap of a few microseconds per step
        parts = {k: v * total / timed for k, v in parts.items()}
        timed = total
    parts["other"] = total - timed
    return {k: v / total for k, v in parts.items()}


def stage_breakdown(throughputs: Sequence, *, title: str | None = None) -> go.Figure:
    """Stacked bars, one per measurement: the fraction of wall clock per stage
    (:func:`stage_shares`)."""
    labels = [tp.label for tp in throughputs]
    shares = [stage_shares(tp) for tp in throughputs]
    fig = go.Figure()
    for stage, color in STAGE_COLORS.items():
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[s[stage] for s in shares],
                name=_STAGE_NAMES[stage],
                marker_color=color,
                hovertemplate="%{x}<br>" + _STAGE_NAMES[stage] + ": %{y:.0%}<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack", title=title, height=400)
    fig.update_yaxes(title="share of wall-clock time", tickformat=".0%", range=[0, 1.02])
    return fig


def size_colors(count: int) -> list[str]:
    """One color per curve ordered by size, each told apart from its neighbours: Viridis sampled
    evenly (small: purple; large: yellow), so seven batch sizes get seven colors."""
    if count <= 1:
        return ["#1f77b4"] * count
    return sample_colorscale("Viridis", [0.9 * i / (count - 1) for i in range(count)])


def learning_curves(
    curves: Sequence, *, title: str | None = None, target: float | None = None
) -> go.Figure:
    """Return against env steps (left) and against wall time (right), one line per curve.

    ``curves`` are :class:`workbench.studies.curves.LearningCurve` rows, ordered by size (their
    color darkens with it); ``target`` draws a dashed line at that return on both panels.
    """
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("against env steps", "against wall time"),
        horizontal_spacing=0.08,
    )
    for curve, color in zip(curves, size_colors(len(curves))):
        for col, xs in ((1, curve.env_steps), (2, curve.wall_seconds)):
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=curve.returns,
                    mode="lines",
                    name=curve.label,
                    legendgroup=curve.label,
                    showlegend=col == 1,
                    line=dict(color=color, width=2),
                ),
                row=1,
                col=col,
            )
    if target is not None:
        fig.add_hline(
            y=target, line_dash="dash", line_color="#888", annotation_text=f"target {target:g}"
        )
    fig.update_xaxes(title_text="env steps", row=1, col=1)
    fig.update_xaxes(title_text="wall seconds", row=1, col=2)
    fig.update_yaxes(title_text="mean return, last 20 episodes", row=1, col=1)
    fig.update_layout(title=title, height=380, margin=dict(l=60, r=20, t=60, b=50))
    return fig


# --- Ape-X (notebook 06) --------------------------------------------------------------------------


def apex_actor_bars(per_actor: dict) -> dict[str, list]:
    """What a bar chart of Ape-X's actors needs, from a metrics row's ``per_actor`` (actor index ->
    ``transitions``, ``exploration``, ``mean_return`` ...): labels ``"actor i<br>ε=..."``, the
    transitions each sent, their mean returns (None: no episode yet) and one color per actor, from
    red (explores most) to blue (least), by ``log ε``."""
    indices = sorted(per_actor)
    explorations = [per_actor[i].get("exploration") for i in indices]
    logs = [np.log(e) for e in explorations if e]
    low, high = (min(logs), max(logs)) if logs else (0.0, 0.0)
    colors = []
    for e in explorations:
        share = (
            0.5 if not e or high == low else (np.log(e) - low) / (high - low)
        )  # 1: explores most
        red, green = int(40 + 200 * share), int(90 + 30 * (1 - abs(2 * share - 1)))
        colors.append(f"rgb({red}, {green}, {int(40 + 200 * (1 - share))})")
    return {
        "labels": [
            f"actor {i}<br>ε={e:.3g}" if e is not None else f"actor {i}"
            for i, e in zip(indices, explorations)
        ],
        "transitions": [per_actor[i]["transitions"] for i in indices],
        "returns": [per_actor[i].get("mean_return") for i in indices],
        "colors": colors,
    }


def apex_actors(per_actor: dict, *, title: str | None = None) -> go.Figure:
    """Per Ape-X actor (a metrics row's ``per_actor``): the transitions it sent to the central
    replay (left) and the mean return of its last episodes (right), labelled and colored by its
    ε."""
    bars = apex_actor_bars(per_actor)
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("transitions sent to the replay", "mean return, its last 20 episodes"),
    )
    fig.add_trace(
        go.Bar(
            x=bars["labels"],
            y=bars["transitions"],
            marker_color=bars["colors"],
            showlegend=False,
            hovertemplate="%{x}<br>%{y:,} transitions<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=bars["labels"],
            y=bars["returns"],
            marker_color=bars["colors"],
            showlegend=False,
            hovertemplate="%{x}<br>return %{y:.1f}<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.update_yaxes(title_text="transitions", row=1, col=1)
    fig.update_yaxes(title_text="return", row=1, col=2)
    fig.update_layout(title=title, height=360, margin=dict(l=60, r=20, t=60, b=60))
    return fig


def apex_throughput(results: Sequence, *, title: str | None = None) -> go.Figure:
    """Ape-X throughput against the number of actors (``experiments.ApexThroughput`` rows): data
    into the central replay (transitions/s, left) and the learner's pace (updates/s, right, with
    samples trained per transition added on hover)."""
    actors = [r.num_actors for r in results]
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            "into the replay: transitions per second",
            "the learner: updates per second",
        ),
        horizontal_spacing=0.1,
    )
    for trace, col in apex_throughput_traces(results):
        fig.add_trace(trace, row=1, col=col)
    for col in (1, 2):
        fig.update_xaxes(
            title_text="actors",
            type="log",
            tickvals=actors,
            ticktext=[str(a) for a in actors],
            row=1,
            col=col,
        )
        fig.update_yaxes(rangemode="tozero", row=1, col=col)
    fig.update_yaxes(title_text="transitions/s", row=1, col=1)
    fig.update_yaxes(title_text="updates/s", row=1, col=2)
    fig.update_layout(
        title=title,
        height=380,
        margin=dict(l=60, r=20, t=60, b=50),
        legend=dict(orientation="h", y=-0.2),
    )
    return fig


def apex_throughput_traces(results: Sequence) -> list[tuple[go.Scatter, int]]:
    """:func:`apex_throughput`'s traces and their columns: transitions/s with the line linear
    in actors from the first count (1), the learner's updates/s (2)."""
    actors = [r.num_actors for r in results]
    traces = [
        (
            go.Scatter(
                x=actors,
                y=[r.transitions_per_second for r in results],
                mode="lines+markers",
                name="transitions/s",
                line_color="#1f77b4",
                hovertemplate="%{x} actors<br>%{y:,.0f} transitions/s<extra></extra>",
            ),
            1,
        )
    ]
    if actors:
        base = results[0].transitions_per_second / actors[0]
        linear = go.Scatter(
            x=actors,
            y=[base * a for a in actors],
            mode="lines",
            name="linear in actors",
            line=dict(color="#888", dash="dash"),
            hoverinfo="skip",
        )
        traces.append((linear, 1))
    updates = go.Scatter(
        x=actors,
        y=[r.updates_per_second for r in results],
        mode="lines+markers",
        name="learner updates/s",
        line_color="#2ca02c",
        customdata=[[r.samples_per_second, r.replay_ratio] for r in results],
        hovertemplate="%{x} actors<br>%{y:,.0f} updates/s (%{customdata[0]:,.0f} samples/s)"
        "<br>%{customdata[1]:.1f} samples trained per transition<extra></extra>",
    )
    return [*traces, (updates, 2)]
