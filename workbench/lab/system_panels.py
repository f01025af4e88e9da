"""The panels of the distributed systems (notebooks 06-08): ``ApexPanel`` and ``SeedPanel``.

Both are a ``panels.Panel`` with their own charts: the return of all actors and of the actor
exploring least against env steps, rates against wall time; Ape-X adds one bar per actor (the
transitions it sent, colored by its epsilon), SEED a *batch* slider (the inference server's
``max_batch_size``, applied at once) and the server's batch and p99 latency. The *actors* slider
reaches the run's ``max_actors`` (Ape-X's ``ApexConfig.max_actors``, SEED's ``actor_limit``), so
a run can grow past the count it started with.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from workbench.course import budget as budget_module
from workbench.lab.panels import Chart, Line, Panel

__all__ = ["ActorBars", "ApexPanel", "SeedPanel"]


class ActorBars:
    """One bar per Ape-X actor: the transitions it sent to the replay, colored by its exploration
    (red: explores most), grey once it no longer runs; redrawn from the last row."""

    name = "actors"

    def __init__(self) -> None:
        self.figure = go.FigureWidget(
            data=[
                go.Bar(
                    x=[],
                    y=[],
                    marker_color=[],
                    hovertemplate="%{x}<br>%{y:,} transitions<extra></extra>",
                )
            ],
            layout=go.Layout(
                title="transitions sent, per actor (red: explores most; grey: stopped)",
                yaxis=dict(title="transitions", rangemode="tozero"),
                height=320,
                margin=dict(l=60, r=20, t=60, b=70),
            ),
        )

    def extend(self, rows: list[dict]) -> None:
        from workbench.lab.plots import apex_actor_bars

        last = rows[-1]
        per_actor = last["apex/per_actor"]
        bars = apex_actor_bars(per_actor)
        colors = [
            color if index < last["charts/num_actors"] else "#c7c7c7"
            for index, color in zip(sorted(per_actor), bars["colors"])
        ]
        with self.figure.batch_update():
            bar = self.figure.data[0]
            bar.x, bar.y, bar.marker.color = bars["labels"], bars["transitions"], colors

    def mark(self, event: dict) -> None:
        """Bars have no time axis: events show on the other charts."""


def _returns_chart(title: str, least_key: str) -> Chart:
    return Chart(
        title,
        name="return",
        y_title="return",
        mode="lines+markers",
        lines=[
            Line("charts/mean_return", "all actors (last 20 episodes)", "#7f7f7f"),
            Line(least_key, "actor exploring least (last 10)", "#1f77b4"),
        ],
    )


class ApexPanel(Panel):
    """Watch an Ape-X run (``apex.Apex``) and add or remove actors while it goes.

    The *actors* slider (1 to ``config.max_actors``) calls ``apex.set_num_actors``: the learner
    applies it at its next step, starting or ending actor processes and giving every actor its
    epsilon for the new count (Horgan et al. 2018, Sec. 4.1).

    Args:
        apex: the run (started with ``panel.start()`` or the Start button).
        limits: the limits of Start (default ``seconds`` from
            ``budget.current().apex_live_seconds``).
        refresh_seconds: seconds between redraws.

    Attributes (beyond ``Panel``'s): ``actors`` (the count slider), ``return_figure``,
    ``rate_figure``, ``actor_figure``.
    """

    def __init__(
        self, apex: Any, *, limits: dict | None = None, refresh_seconds: float = 0.5
    ) -> None:
        returns = _returns_chart(
            f"Ape-X on {apex.config.env_id}: episode return", "apex/return_least_exploring"
        )
        rates = Chart(
            "throughput",
            name="rates",
            x_keys=("charts/wall_seconds",),
            y_title="transitions/s",
            secondary_title="updates/s",
            lines=[
                Line("apex/transitions_per_second", "transitions/s into replay", "#ff7f0e"),
                Line("charts/updates_per_second", "learner updates/s", "#2ca02c", secondary=True),
            ],
        )
        bars = ActorBars()
        self.return_figure, self.rate_figure, self.actor_figure = (
            returns.figure,
            rates.figure,
            bars.figure,
        )
        limits = dict(limits) if limits else {"seconds": budget_module.current().apex_live_seconds}
        super().__init__(
            apex,
            charts=[returns, rates, bars],
            max_count=apex.config.max_actors,
            limits=limits,
            status_parts=self._status_parts,
            refresh_seconds=refresh_seconds,
            css="workbench-apex-panel",
        )

    @property
    def actors(self) -> widgets.IntSlider:
        """The actors slider (``num_actors``)."""
        return self.count_slider

    def resumed_run(self, folder: Any) -> Any:
        """``Apex.from_checkpoint`` on this run's device (its saved config names its transport)."""
        run = self.run
        return type(run).from_checkpoint(folder, device=str(run.device))

    def _status_parts(self, row: dict) -> list[str]:
        parts = [
            f"replay {row['apex/replay_size']:,}",
            f"{row['apex/transitions_per_second']:,.0f} transitions/s",
        ]
        if row.get("apex/return_least_exploring") is not None:
            parts.append(f"return (exploring least) {row['apex/return_least_exploring']:.0f}")
        if row.get("apex/restarts"):
            parts.append(f"{row['apex/restarts']} restart(s)")
        return parts


class SeedPanel(Panel):
    """Watch a SEED run (``seed.Seed``) and steer its actors and its server's batch.

    The *actors* slider calls ``seed.set_num_actors`` (the learner starts or retires env-only
    actor processes at its next step; R2D2 recomputes each actor's epsilon). The *batch* slider
    sets the inference server's ``max_batch_size`` at once (the serving thread reads it before each
    batch; the run records a ``batch`` event). Charts: the return against env steps; env steps/s
    and learner updates/s against wall time; the server's mean batch and p99 latency per row.

    Args:
        seed: the run (started with ``panel.start()`` or the Start button).
        limits: the limits of Start (default ``seconds`` from
            ``budget.current().seed_live_seconds``).
        refresh_seconds: seconds between redraws.

    Attributes (beyond ``Panel``'s): ``actors`` (the count slider), ``batch``, the batch slider;
    ``return_figure``, ``rate_figure``, ``server_figure``.
    """

    def __init__(
        self, seed: Any, *, limits: dict | None = None, refresh_seconds: float = 0.5
    ) -> None:
        algorithm = seed.config.algorithm_class.title
        returns = _returns_chart(
            f"SEED {algorithm} on {seed.config.env_id}: episode return",
            "seed/return_least_exploring",
        )
        rates = Chart(
            "throughput",
            name="rates",
            x_keys=("charts/wall_seconds",),
            y_title="env steps/s",
            secondary_title="learner updates/s",
            lines=[
                Line("charts/steps_per_second", "env steps/s", "#ff7f0e"),
                Line("charts/updates_per_second", "learner updates/s", "#2ca02c", secondary=True),
            ],
        )
        server = Chart(
            "inference server",
            name="server",
            x_keys=("charts/wall_seconds",),
            y_title="observations per forward pass",
            secondary_title="p99 latency (ms)",
            lines=[
                Line("seed/mean_batch_size", "observations per forward pass", "#ff7f0e"),
                Line("seed/latency_p99_ms", "p99 latency (ms)", "#2ca02c", secondary=True),
            ],
        )
        self.return_figure, self.rate_figure, self.server_figure = (
            returns.figure,
            rates.figure,
            server.figure,
        )
        self.batch = widgets.IntSlider(
            value=seed.max_batch_size,
            min=1,
            max=seed.config.slots,
            description="batch",
            continuous_update=False,
            style={"description_width": "60px"},
        )
        self.batch.add_class("workbench-batch")
        self.batch.observe(self._on_batch, names="value")
        limits = dict(limits) if limits else {"seconds": budget_module.current().seed_live_seconds}
        actors_enabled = seed.config.transport != "serial"
        super().__init__(
            seed,
            charts=[returns, rates, server],
            controls=[self.batch],
            max_count=seed.config.actor_limit,
            count_enabled=actors_enabled,
            limits=limits,
            status_parts=self._status_parts,
            refresh_seconds=refresh_seconds,
            css="workbench-seed-panel",
        )

    @property
    def actors(self) -> widgets.IntSlider:
        """The actors slider (``num_actors``)."""
        return self.count_slider

    def _on_batch(self, change: dict) -> None:
        seed = self.run
        old, new = seed.max_batch_size, int(change["new"])
        seed.set_max_batch_size(new)
        if seed.status == "running":
            seed.event("batch", old=old, new=new)
        self.say(f"the server now answers up to {new} requests per forward pass")
        self.refresh()

    def _status_parts(self, row: dict) -> list[str]:
        if row.get("seed/mean_batch_size") is None:
            return []
        return [
            f"batch {row['seed/mean_batch_size']:.1f} of {self.run.max_batch_size}, "
            f"p99 {row['seed/latency_p99_ms']:.1f} ms"
        ]
