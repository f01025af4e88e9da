"""SEED's batching trade-off, for notebook 07 and ``benchmarks/seed_latency.py``: how the inference
server's two knobs move an actor's wait and the throughput.

The server answers when ``max_batch_size`` requests wait or when the oldest has waited ``timeout``
seconds (Espeholt et al. 2020, Sec. 3: batching on the learner's accelerator is what makes central
inference pay). A larger batch shares one forward pass among more env steps; a longer timeout lets
batches fill but holds every request in them. :func:`latency_sweep` measures SEED at one actor
count for each pair of the two (``central_inference.measure_seed``: local env-only actor processes,
the server in this process), and :func:`latency_figure` draws the latency percentiles and the
throughput against the batch size, a line per timeout.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.measure.central_inference import (
    SeedSettings,
    ThroughputResult,
    make_model,
    measure_seed,
)
from workbench.progress import each

__all__ = ["latency_figure", "latency_sweep", "recorded_latency", "tradeoff_figure"]

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


def latency_sweep(
    num_actors: int,
    max_batch_sizes: Sequence[int],
    timeouts: Sequence[float],
    seconds: float,
    *,
    env_id: str = "ALE/Pong-v5",
    warmup: float = 1.0,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One SEED measurement per (``max_batch_size``, ``timeout``) at ``num_actors`` actors, the
    same model served in each. Returns rows of ``max_batch_size``, ``timeout_ms``,
    ``steps_per_second``, ``cpu_ms_per_step``, ``mean_batch_size`` and the server's latency
    percentiles in ms (``latency_p50_ms``, ``latency_p99_ms``, ``queue_wait_p50_ms``,
    ``forward_p50_ms``)."""
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in max_batch_sizes):
        raise ValueError(f"max_batch_sizes must be positive ints, got {list(max_batch_sizes)}")
    if any(not t >= 0 for t in timeouts):
        raise ValueError(f"timeouts are seconds >= 0, got {list(timeouts)}")
    if any(b > num_actors for b in max_batch_sizes):
        raise ValueError(
            f"a batch of {max(max_batch_sizes)} never fills from {num_actors} actors (one env "
            "each); keep max_batch_sizes <= num_actors"
        )
    model = make_model(env_id, seed=seed)
    points = [(b, t) for b in max_batch_sizes for t in timeouts]
    rows = []
    for batch, timeout in each(points, f"server settings, {num_actors} actors", unit="setting"):
        settings = SeedSettings(max_batch_size=batch, timeout=timeout)
        result = measure_seed(
            env_id, num_actors, seconds, settings=settings, warmup=warmup, seed=seed, model=model
        )
        rows.append(row_of(result))
    return rows


def row_of(result: ThroughputResult) -> dict[str, Any]:
    """The figures of one measurement that the sweep keeps."""
    latency = result.latency
    return {
        "num_actors": result.num_actors,
        "max_batch_size": result.settings["max_batch_size"],
        "timeout_ms": 1000.0 * result.settings["timeout"],
        "steps_per_second": result.steps_per_second,
        "cpu_ms_per_step": result.cpu_ms_per_step,
        **{
            key: latency.get(key, float("nan"))
            for key in (
                "mean_batch_size",
                "latency_p50_ms",
                "latency_p99_ms",
                "queue_wait_p50_ms",
                "forward_p50_ms",
            )
        },
    }


def recorded_latency(path: "str | Path") -> list[dict[str, Any]]:
    """The rows of a ``benchmarks/seed_latency.py`` record ([] when the file is missing)."""
    path = Path(path)
    return json.loads(path.read_text())["rows"] if path.exists() else []


def latency_figure(
    rows: Sequence[dict[str, Any]],
    *,
    recorded: Sequence[dict[str, Any]] = (),
    title: str | None = None,
) -> go.Figure:
    """Request latency and env steps/s against ``max_batch_size``, a colour per timeout: each
    point is the p50 latency with a bar up to the p99. This run on the top row; ``recorded`` rows
    (another run, e.g. the full budget's) on a row of their own, so no axis holds more than one
    line per timeout."""
    sources = [("this run", rows)] + ([("recorded", recorded)] if recorded else [])
    figure = make_subplots(
        rows=len(sources),
        cols=2,
        shared_xaxes=True,
        subplot_titles=[
            text
            for group, _ in sources
            for text in (f"{group}: latency, ms (p50, bar to p99)", f"{group}: env steps / s")
        ],
        vertical_spacing=0.16,
    )
    timeouts = sorted({r["timeout_ms"] for r in [*rows, *recorded]})
    batches = sorted({r["max_batch_size"] for r in [*rows, *recorded]})
    for row, (_, source) in enumerate(sources, start=1):
        for index, timeout in enumerate(timeouts):
            mine = sorted(
                (r for r in source if r["timeout_ms"] == timeout), key=lambda r: r["max_batch_size"]
            )
            if not mine:
                continue
            color, x = COLORS[index % len(COLORS)], [r["max_batch_size"] for r in mine]
            name = f"timeout {timeout:g} ms"
            figure.add_trace(
                go.Scatter(
                    x=x,
                    y=[r["latency_p50_ms"] for r in mine],
                    error_y=dict(
                        type="data",
                        symmetric=False,
                        array=[r["latency_p99_ms"] - r["latency_p50_ms"] for r in mine],
                        arrayminus=[0.0] * len(mine),
                    ),
                    mode="lines+markers",
                    name=name,
                    legendgroup=name,
                    showlegend=row == 1,
                    line=dict(color=color),
                ),
                row=row,
                col=1,
            )
            figure.add_trace(
                go.Scatter(
                    x=x,
                    y=[r["steps_per_second"] for r in mine],
                    mode="lines+markers",
                    name=name,
                    legendgroup=name,
                    showlegend=False,
                    line=dict(color=color),
                ),
                row=row,
                col=2,
            )
    figure.update_xaxes(type="log", tickvals=batches)
    figure.update_xaxes(title_text="max_batch_size", row=len(sources))
    figure.update_yaxes(rangemode="tozero")
    figure.update_layout(title=title, height=300 + 260 * (len(sources) - 1))
    return figure


def tradeoff_figure(rows: Sequence[dict[str, Any]], *, title: str | None = None) -> go.Figure:
    """SEED's trade (Espeholt et al. 2020, Sec. 4.2): env steps/s against the p99 latency an actor
    waits, one curve per actor count, a point per server setting (labelled ``batch/timeout``), the
    points of a curve ordered by latency. Larger batches and timeouts move a point right (longer
    waits) and, while actors are free to fill them, up (more steps per second)."""
    figure = go.Figure()
    counts = sorted({r["num_actors"] for r in rows})
    for index, count in enumerate(counts):
        mine = sorted(
            (r for r in rows if r["num_actors"] == count), key=lambda r: r["latency_p99_ms"]
        )
        figure.add_trace(
            go.Scatter(
                x=[r["latency_p99_ms"] for r in mine],
                y=[r["steps_per_second"] for r in mine],
                mode="lines+markers+text",
                text=[f"{r['max_batch_size']}/{r['timeout_ms']:g}" for r in mine],
                textposition="top center",
                textfont=dict(size=9),
                name=f"{count} actors",
                line=dict(color=COLORS[index % len(COLORS)]),
            )
        )
    figure.update_xaxes(title_text="p99 latency an actor waits, ms", rangemode="tozero")
    figure.update_yaxes(title_text="env steps / s", rangemode="tozero")
    figure.update_layout(title=title, height=400)
    return figure
