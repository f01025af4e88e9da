"""Figures of the performance model: each architecture's throughput against its actors on any
machine, with what this machine measured on the same axes (notebook 11).

A :class:`Hardware` is what the sliders of ``lab.model_panel`` change: cores, accelerators, the
network, what a request costs (a link's latency), and what a core and an accelerator cost by the
hour. :func:`architectures` predicts every architecture on it at one actor count;
:func:`throughput_figure` draws them over actor counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import plotly.graph_objects as go

from workbench.checks import positive_int
from workbench.measure import performance_model as model
from workbench.measure.costs import MachineCosts
from workbench.measure.projection import FRAMESKIP

__all__ = [
    "ARCHITECTURE_COLORS",
    "Hardware",
    "architectures",
    "cost_per_million_frames",
    "throughput_figure",
]

ARCHITECTURE_COLORS = {"SEED": "#d62728", "IMPALA-style": "#7f7f7f", "Ape-X": "#2ca02c"}


@dataclass(frozen=True)
class Hardware:
    """A machine to predict for: ``cores`` and ``accelerators`` of the calibrated kinds, what the
    server's loop spends on a request (``server_request_us``; None: as calibrated), the latency a
    link between the actors' machines and the server's adds to a request (``link_latency_us``),
    and prices."""

    cores: int = 2
    accelerators: int = 0
    server_request_us: float | None = None
    link_latency_us: float = 0.0
    core_dollars_per_hour: float = 0.05
    accelerator_dollars_per_hour: float = 2.0

    def __post_init__(self) -> None:
        positive_int(self.cores, "cores")
        if self.accelerators < 0:
            raise ValueError(f"accelerators must be 0 or more, got {self.accelerators}")

    def apply(self, costs: MachineCosts) -> MachineCosts:
        """``costs`` on this hardware."""
        if self.accelerators and costs.accelerator is None:
            raise ValueError(
                "accelerators > 0 needs a GPU's costs: machine_costs(..., gpu_record=...)"
            )
        costs = costs.with_hardware(cores=self.cores, accelerators=self.accelerators)
        cpu = costs.request_cpu_seconds
        if self.server_request_us is not None:
            cpu = self.server_request_us * 1e-6
        # A request's wall time: what the transport takes beyond its CPU, the CPU, the link.
        wall = costs.request_seconds - costs.request_cpu_seconds + cpu + self.link_latency_us * 1e-6
        return replace(costs, request_seconds=wall, request_cpu_seconds=cpu)

    def dollars_per_hour(self) -> float:
        return (
            self.cores * self.core_dollars_per_hour
            + self.accelerators * self.accelerator_dollars_per_hour
        )


def cost_per_million_frames(hardware: Hardware, frames_per_second: float) -> float:
    """Dollars to emulate a million raw frames at this rate on this hardware."""
    return hardware.dollars_per_hour() / 3600 / frames_per_second * 1e6


def architectures(
    costs: MachineCosts, hardware: Hardware, actors: int
) -> dict[str, model.Prediction]:
    """SEED (inference on the accelerator when there is one), IMPALA-style actors and Ape-X
    (its learner on the accelerator when there is one, free-running) at ``actors`` actors."""
    machine = hardware.apply(costs)
    on_gpu = machine.accelerators > 0
    return {
        "SEED": model.seed(machine, actors, on_accelerator=on_gpu),
        "IMPALA-style": model.impala_actors(machine, actors),
        "Ape-X": model.apex(machine, actors, minibatch=512, learner_on_accelerator=on_gpu),
    }


def throughput_figure(
    costs: MachineCosts,
    hardware: Hardware,
    actor_counts: Sequence[int],
    measured: Sequence[Mapping[str, Any]] = (),
    *,
    title: str | None = None,
) -> go.Figure:
    """Env frames/s of each architecture over ``actor_counts`` on ``hardware`` (lines, the
    bottleneck in the hover), and ``measured`` points (rows with ``system``, ``settings``
    ``num_actors``, ``steps_per_second``) from the calibrated machine, as markers."""
    figure = go.Figure()
    for name, color in ARCHITECTURE_COLORS.items():
        predictions = [architectures(costs, hardware, n)[name] for n in actor_counts]
        figure.add_trace(
            go.Scatter(
                x=list(actor_counts),
                y=[FRAMESKIP * p.env_steps_per_second for p in predictions],
                mode="lines",
                name=f"{name}, model",
                line=dict(color=color),
                customdata=[p.bottleneck for p in predictions],
                hovertemplate="%{x} actors: %{y:,.0f} frames/s, bound: %{customdata}"
                "<extra></extra>",
            )
        )
    for system, name in (("seed", "SEED"), ("impala", "IMPALA-style")):
        points = [row for row in measured if row["system"] == system]
        if points:
            figure.add_trace(
                go.Scatter(
                    x=[row["settings"]["num_actors"] for row in points],
                    y=[FRAMESKIP * row["steps_per_second"] for row in points],
                    mode="markers",
                    name=f"{name}, measured here ({costs.cores} cores)",
                    marker=dict(color=ARCHITECTURE_COLORS[name], size=9, symbol="circle-open"),
                )
            )
    figure.update_layout(
        title=title
        or f"{hardware.cores} cores, {hardware.accelerators} accelerator(s): frames/s by actors",
        xaxis=dict(title="actors", type="log"),
        yaxis=dict(title="raw frames per second (4 per env step)", rangemode="tozero"),
        height=420,
        margin=dict(l=70, r=20, t=50, b=50),
    )
    return figure
