"""Measure any sampler at any size from a dropdown, two sliders and a button (notebook 02).

Each measurement adds one bar. ``SamplerPanel.measure`` is also callable from code (so an executed
notebook exercises it), and errors such as ``workers > envs`` show as a message in the panel, not
as a traceback.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from workbench import sampling
from workbench.course import budget as budget_module
from workbench.lab.panels import note
from workbench.measure import throughput

__all__ = ["SAMPLER_COLORS", "SamplerPanel"]

#: One color per sampler kind, the same in every chart of the course.
SAMPLER_COLORS = {
    "serial": "#1f77b4",
    "parallel": "#2ca02c",
    "batched": "#ff7f0e",
    "alternating": "#d62728",
}


def measurements_figure(env_id: str) -> go.FigureWidget:
    """An empty bar chart that each measurement adds a bar to (steps per second)."""
    return go.FigureWidget(
        data=[
            go.Bar(
                x=[],
                y=[],
                marker_color=[],
                hovertemplate="%{x}<br>%{y:,.0f} steps/s<extra></extra>",
            )
        ],
        layout=go.Layout(
            title=f"{env_id}: steps per second, one bar per measurement",
            yaxis=dict(title="steps per second", rangemode="tozero"),
            height=350,
            margin=dict(l=60, r=20, t=50, b=80),
        ),
    )


class SamplerPanel:
    """Pick a sampler and its size, press Measure, see its steps/s as a new bar.

    Args:
        env_id: gymnasium id, e.g. ``"ALE/Pong-v5"``.
        policy: a policy (``act(obs) -> dict``) or a function of no arguments that makes one
            (called once, at the first measurement). ParallelSampler's workers get copies of it,
            so it must be an ``nn.Module`` of an importable class (e.g. ``models.ActorCritic``).
        kind: sampler shown first (one of ``sampling.SAMPLERS``).
        num_envs, num_workers, horizon: initial sizes; default from ``budget.current()``.
        max_envs, max_workers: slider ends (default: 4x the envs, 2x the workers).
        seconds: seconds per measurement (default ``budget.current().measure_seconds``).
        seed: env seed of every sampler.
        device: inference device of the serial, batched and alternating samplers (``"auto"``:
            cuda:0 when present); ParallelSampler's workers always infer on the CPU.
        num_threads: torch threads in this process while measuring (None: unchanged).

    Attributes:
        results: the ``Throughput`` of every successful measurement, in order.
        last_error: the message of the last measurement's error (None after a success).
        message: the HTML widget that shows the last status or error.
        figure: the ``go.FigureWidget`` with one bar per measurement.
    """

    def __init__(
        self,
        env_id: str,
        policy: Any,
        *,
        kind: str = "batched",
        num_envs: int | None = None,
        num_workers: int | None = None,
        horizon: int | None = None,
        max_envs: int | None = None,
        max_workers: int | None = None,
        seconds: float | None = None,
        seed: int = 0,
        device: Any = "cpu",
        num_threads: int | None = None,
    ) -> None:
        if kind not in sampling.SAMPLERS:
            raise ValueError(
                f"kind={kind!r} is not a sampler; use one of {', '.join(sampling.SAMPLERS)}."
            )
        sizes = budget_module.current()
        num_envs = num_envs or sizes.sampler_envs
        num_workers = num_workers or sizes.sampler_workers
        self.env_id = env_id
        self.horizon = horizon or sizes.sampler_horizon
        self.seconds = seconds or sizes.measure_seconds
        self.seed = seed
        self.device = device
        self.num_threads = num_threads
        self._policy_or_factory = policy
        self._policy: Any = None
        self.results: list[throughput.Throughput] = []
        self.last_error: str | None = None

        self.kind = widgets.Dropdown(
            options=list(sampling.SAMPLERS), value=kind, description="sampler"
        )
        self.envs = widgets.IntSlider(
            value=num_envs,
            min=1,
            max=max_envs or 4 * num_envs,
            description="envs (B)",
            continuous_update=False,
        )
        self.workers = widgets.IntSlider(
            value=num_workers,
            min=1,
            max=max_workers or 2 * num_workers,
            description="workers",
            continuous_update=False,
        )
        self.button = widgets.Button(description="Measure", button_style="primary", icon="play")
        self.button.on_click(lambda _: self.measure())
        self.message = widgets.HTML(
            value=note(f"T = {self.horizon} steps per collect, {self.seconds:g} s per measurement.")
        )
        self.figure = measurements_figure(env_id)
        controls = widgets.HBox([self.kind, self.envs, self.workers, self.button])
        self.widget = widgets.VBox([controls, self.message, self.figure])

    def policy(self) -> Any:
        """The policy, made on first use when a factory was given."""
        if self._policy is None:
            given = self._policy_or_factory
            self._policy = given if hasattr(given, "act") else given()
        return self._policy

    def measure(
        self,
        kind: str | None = None,
        *,
        num_envs: int | None = None,
        num_workers: int | None = None,
    ) -> "throughput.Throughput | None":
        """Measure one sampler (arguments default to the widgets' values, and set them).

        Makes the sampler, measures it for ``seconds`` (after one warm-up collect), closes it, and
        adds a bar. Returns the ``Throughput``, or None after an error, whose message is shown in
        the panel (``self.message``) and kept in ``self.last_error``.
        """
        label = f"{kind or self.kind.value}"
        self.button.disabled = True
        try:
            if kind is not None and kind not in sampling.SAMPLERS:
                raise ValueError(
                    f"unknown sampler {kind!r}; choose one of {', '.join(sampling.SAMPLERS)}."
                )
            self._set(kind, num_envs, num_workers)
            kind, envs, workers = self.kind.value, self.envs.value, self.workers.value
            label = f"{kind} B={envs}" + ("" if kind == "serial" else f" W={workers}")
            self.message.value = note(f"measuring {label} ...")
            result = self._measure(kind, envs, workers, label)
        except Exception as error:  # shown in the panel: the learner changes a setting and retries
            self.last_error = f"{label}: {type(error).__name__}: {error}"
            self.message.value = note(self.last_error, "#b00020")
            return None
        finally:
            self.button.disabled = False
        self.last_error = None
        self.results.append(result)
        self._add_bar(kind, result)
        self.message.value = note(
            f"{label}: {result.steps_per_second:,.0f} steps/s "
            f"({result.frames_per_second:,.0f} frames/s)"
        )
        return result

    def _set(self, kind: str | None, num_envs: int | None, num_workers: int | None) -> None:
        """Move the widgets to the values asked for from code (sliders widen to fit)."""
        if kind is not None:
            self.kind.value = kind
        for slider, value in ((self.envs, num_envs), (self.workers, num_workers)):
            if value is not None:
                slider.max = max(slider.max, value)
                slider.value = value

    def _measure(self, kind: str, envs: int, workers: int, label: str) -> "throughput.Throughput":
        policy = self.policy()
        options: dict[str, Any] = dict(num_envs=envs, horizon=self.horizon, seed=self.seed)
        if kind != "serial":
            options["num_workers"] = workers
        if kind in ("serial", "batched", "alternating"):
            options["device"] = self.device
        with sampling.make_sampler(kind, self.env_id, **options) as sampler:
            return throughput.measure_sampler(
                sampler, policy, self.seconds, label=label, num_threads=self.num_threads
            )

    def _add_bar(self, kind: str, result: "throughput.Throughput") -> None:
        bar = self.figure.data[0]
        with self.figure.batch_update():
            bar.x = list(bar.x) + [f"#{len(self.results)} {result.label}"]
            bar.y = list(bar.y) + [result.steps_per_second]
            bar.marker.color = list(bar.marker.color or []) + [SAMPLER_COLORS.get(kind, "#7f7f7f")]

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
