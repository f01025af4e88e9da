"""Sliders over the performance model (notebook 11): cores, accelerators, actors, the network, what
the server spends on a request, a link's latency and the prices; each architecture's throughput,
bottleneck and cost per million frames redrawn at once, with this machine's measured points on
the same axes.

Nothing is measured here: the panel reads the costs calibrated on this machine
(``data/performance_model_cpu.json``) and a GPU's (``data/component_costs_cuda_h100.json``), and
every change of a slider recomputes the model (``measure.model_figures``). ``ModelPanel.show``
sets the sliders from code, as a reader's hand would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from workbench.lab.panels import note
from workbench.measure.costs import MachineCosts
from workbench.measure.model_figures import (
    Hardware,
    architectures,
    cost_per_million_frames,
    throughput_figure,
)
from workbench.measure.projection import FRAMESKIP

__all__ = ["ModelPanel"]

ACTOR_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
SLIDERS = (
    "network",
    "cores",
    "accelerators",
    "actors",
    "server_request_us",
    "link_latency_us",
    "core_price",
    "gpu_price",
)


class ModelPanel:
    """The model's answer for any machine, from sliders.

    Args:
        networks: the calibrated costs per network (``{"nature-84": MachineCosts, ...}``), each
            carrying an accelerator's costs for the accelerator slider.
        measured: this machine's measured systems (the validation record's ``systems``).
    """

    def __init__(
        self, networks: Mapping[str, MachineCosts], measured: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        if not networks:
            raise ValueError("ModelPanel needs the costs of at least one network")
        self.networks = dict(networks)
        self.measured = list(measured)
        first = next(iter(self.networks.values()))
        style = {"description_width": "150px"}
        layout = widgets.Layout(width="420px")
        self.network = widgets.Dropdown(
            options=list(self.networks), description="network", style=style
        )
        self.cores = widgets.IntSlider(
            value=first.cores, min=1, max=512, description="cores", style=style, layout=layout
        )
        self.accelerators = widgets.IntSlider(
            value=0, min=0, max=8, description="GPUs", style=style, layout=layout
        )
        self.actors = widgets.SelectionSlider(
            options=ACTOR_COUNTS, value=16, description="actors", style=style, layout=layout
        )
        self.server_request_us = widgets.FloatLogSlider(
            value=first.request_cpu_seconds * 1e6 or 100.0,
            base=10,
            min=0,
            max=4,
            description="server's cost per request (us)",
            style=style,
            layout=layout,
        )
        self.link_latency_us = widgets.FloatSlider(
            value=0.0,
            min=0.0,
            max=2000.0,
            step=10.0,
            description="link latency (us)",
            style=style,
            layout=layout,
        )
        self.core_price = widgets.FloatSlider(
            value=0.05, min=0.0, max=0.5, step=0.01, description="$ per core-hour", style=style
        )
        self.gpu_price = widgets.FloatSlider(
            value=2.0, min=0.0, max=10.0, step=0.1, description="$ per GPU-hour", style=style
        )
        self.message = widgets.HTML()
        self.figure = go.FigureWidget()
        self.table = widgets.HTML()
        for control in self.controls():
            control.observe(lambda change: self.redraw(), names="value")
        self.widget = widgets.VBox(
            [
                widgets.HBox(
                    [widgets.VBox(self.controls()[:4]), widgets.VBox(self.controls()[4:])]
                ),
                self.message,
                self.table,
                self.figure,
            ]
        )
        self.redraw()

    def controls(self) -> list[widgets.Widget]:
        return [
            self.network,
            self.cores,
            self.accelerators,
            self.actors,
            self.server_request_us,
            self.link_latency_us,
            self.core_price,
            self.gpu_price,
        ]

    def hardware(self) -> Hardware:
        return Hardware(
            cores=self.cores.value,
            accelerators=self.accelerators.value,
            server_request_us=self.server_request_us.value,
            link_latency_us=self.link_latency_us.value,
            core_dollars_per_hour=self.core_price.value,
            accelerator_dollars_per_hour=self.gpu_price.value,
        )

    def show(self, **values: Any) -> dict[str, dict[str, Any]]:
        """Set sliders by name (``cores=64, accelerators=1, actors=256``, ...) and return what the
        panel then shows, per architecture."""
        unknown = sorted(set(values) - set(SLIDERS))
        if unknown:
            raise ValueError(f"no slider {unknown}; the panel has {', '.join(SLIDERS)}")
        with self.figure.batch_update():
            for name, value in values.items():
                getattr(self, name).value = value
        return self.redraw()

    def redraw(self) -> dict[str, dict[str, Any]]:
        costs = self.networks[self.network.value]
        hardware = self.hardware()
        try:
            predictions = architectures(costs, hardware, self.actors.value)
        except ValueError as error:
            self.message.value = note(str(error), "#b00")
            return {}
        self.message.value = ""
        shown = {}
        rows = []
        for name, prediction in predictions.items():
            frames = FRAMESKIP * prediction.env_steps_per_second
            dollars = cost_per_million_frames(hardware, frames)
            shown[name] = {
                "frames_per_second": frames,
                "bottleneck": prediction.bottleneck,
                "dollars_per_million_frames": dollars,
            }
            rows.append(
                f"<tr><td>{name}</td><td>{frames:,.0f}</td><td>{prediction.bottleneck}</td>"
                f"<td>${dollars:.3f}</td></tr>"
            )
        self.table.value = (
            "<table><tr><th>architecture</th><th>frames/s</th><th>bound by</th>"
            "<th>per million frames</th></tr>" + "".join(rows) + "</table>"
        )
        figure = throughput_figure(costs, hardware, ACTOR_COUNTS, self.measured)
        with self.figure.batch_update():
            self.figure.data = ()
            self.figure.add_traces(figure.data)
            self.figure.layout = figure.layout
        return shown

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
