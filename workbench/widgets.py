"""Widgets for the notebooks: ipywidgets controls with live plotly ``FigureWidget`` charts.

:class:`SamplerPanel` measures any sampler at any size from a dropdown, two sliders and a button;
each measurement adds one bar. Its :meth:`SamplerPanel.measure` is also callable from code (so an
executed notebook exercises it), and errors such as ``workers > envs`` show as a message in the
panel, not as a traceback.

:class:`RunPanel` steers a running :class:`workbench.runners.Run`: its controls write the run's
settings, which the run applies at its next iteration boundary; its charts redraw as the run goes.

:class:`ApexPanel` does the same for an Ape-X run (:class:`workbench.apex.Apex`): an actors slider,
Start and Stop, and live charts of return, throughput and what each actor sent to the replay.
"""

from __future__ import annotations

import html
import time
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go

from workbench import budget as budget_module
from workbench import samplers, throughput

__all__ = ["SamplerPanel", "RunPanel", "ApexPanel", "learner_choices"]

#: One color per sampler kind, the same in every chart of the course.
SAMPLER_COLORS = {
    "serial": "#1f77b4",
    "parallel": "#2ca02c",
    "batched": "#ff7f0e",
    "alternating": "#d62728",
}


class SamplerPanel:
    """Pick a sampler and its size, press Measure, see its steps/s as a new bar.

    Args:
        env_id: gymnasium id, e.g. ``"ALE/Pong-v5"``.
        policy: a policy (``act(obs) -> dict``) or a function of no arguments that makes one
            (called once, at the first measurement). ParallelSampler's workers get copies of it,
            so it must be an ``nn.Module`` of an importable class (e.g. ``models.ActorCritic``).
        kind: sampler shown first (one of ``samplers.SAMPLERS``).
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
        if kind not in samplers.SAMPLERS:
            raise ValueError(f"kind={kind!r} is not a sampler; use one of {', '.join(samplers.SAMPLERS)}.")
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

        self.kind = widgets.Dropdown(options=list(samplers.SAMPLERS), value=kind, description="sampler")
        self.envs = widgets.IntSlider(
            value=num_envs, min=1, max=max_envs or 4 * num_envs, description="envs (B)",
            continuous_update=False,
        )
        self.workers = widgets.IntSlider(
            value=num_workers, min=1, max=max_workers or 2 * num_workers, description="workers",
            continuous_update=False,
        )
        self.button = widgets.Button(description="Measure", button_style="primary", icon="play")
        self.button.on_click(lambda _: self.measure())
        self.message = widgets.HTML(value=self._note(f"T = {self.horizon} steps per collect, "
                                                     f"{self.seconds:g} s per measurement."))
        self.figure = go.FigureWidget(
            data=[go.Bar(x=[], y=[], marker_color=[], hovertemplate="%{x}<br>%{y:,.0f} steps/s<extra></extra>")],
            layout=go.Layout(
                title=f"{env_id}: steps per second, one bar per measurement",
                yaxis=dict(title="steps per second", rangemode="tozero"),
                height=350,
                margin=dict(l=60, r=20, t=50, b=80),
            ),
        )
        controls = widgets.HBox([self.kind, self.envs, self.workers, self.button])
        self.widget = widgets.VBox([controls, self.message, self.figure])

    @staticmethod
    def _note(text: str, color: str = "#555") -> str:
        return f'<span style="color:{color}">{html.escape(text)}</span>'

    def policy(self) -> Any:
        """The policy, made on first use when a factory was given."""
        if self._policy is None:
            given = self._policy_or_factory
            self._policy = given if hasattr(given, "act") else given()
        return self._policy

    def measure(
        self, kind: str | None = None, *, num_envs: int | None = None, num_workers: int | None = None
    ) -> "throughput.Throughput | None":
        """Measure one sampler (arguments default to the widgets' values, and set them).

        Makes the sampler, measures it for ``seconds`` (after one warm-up collect), closes it, and
        adds a bar. Returns the ``Throughput``, or None after an error, whose message is shown in
        the panel (``self.message``) and kept in ``self.last_error``.
        """
        label = f"{kind or self.kind.value}"
        self.button.disabled = True
        try:
            if kind is not None and kind not in samplers.SAMPLERS:
                raise ValueError(f"unknown sampler {kind!r}; choose one of {', '.join(samplers.SAMPLERS)}.")
            self._set(kind, num_envs, num_workers)
            kind, envs, workers = self.kind.value, self.envs.value, self.workers.value
            label = f"{kind} B={envs}" + ("" if kind == "serial" else f" W={workers}")
            self.message.value = self._note(f"measuring {label} ...")
            result = self._measure(kind, envs, workers, label)
        except Exception as error:  # shown in the panel: the learner changes a setting and retries
            self.last_error = f"{label}: {type(error).__name__}: {error}"
            self.message.value = self._note(self.last_error, "#b00020")
            return None
        finally:
            self.button.disabled = False
        self.last_error = None
        self.results.append(result)
        self._add_bar(kind, result)
        self.message.value = self._note(
            f"{label}: {result.steps_per_second:,.0f} steps/s ({result.frames_per_second:,.0f} frames/s)"
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
        with samplers.make_sampler(kind, self.env_id, **options) as sampler:
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


# --------------------------------------------------------------------------------------------------
# The run control panel

#: Lines of the stage chart: metric key, label, color (the collect's stages as in plots.STAGE_COLORS).
_STAGE_LINES = (
    ("time/env", "env stepping", "#1f77b4"),
    ("time/inference", "inference", "#ff7f0e"),
    ("time/wait", "sampler waiting on workers", "#9467bd"),
    ("time/learn", "learn (update)", "#2ca02c"),
    ("time/batch_wait", "learner waiting for a batch", "#d62728"),
)
_PANEL_ENVS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_PANEL_HORIZONS = (8, 16, 32, 64, 128, 256, 512)
_PANEL_MINIBATCHES = (1, 2, 4, 8, 16, 32)


def learner_choices(run: Any) -> dict[str, tuple[str, ...]]:
    """The learner placements this machine offers ``run``: label -> ``learner_devices``.

    One entry per device (``cpu``, ``cuda:0`` ...); with a data-parallel ``learner_factory``, also
    "2 learners (gloo, cpu)" and, with two or more GPUs, "N GPUs (NCCL)".
    """
    from workbench import system

    devices = system.available_devices()
    choices = {device: (device,) for device in devices}
    if run.learner_factory is not None:
        choices["2 learners (gloo, cpu)"] = ("cpu:0", "cpu:1")
        gpus = [device for device in devices if device.startswith("cuda")]
        if len(gpus) >= 2:
            choices[f"{len(gpus)} GPUs (NCCL)"] = tuple(gpus)
    current = tuple(run.settings.current.learner_devices)
    if current not in choices.values():  # whatever the run was given is always on the list
        choices[", ".join(current)] = current
    return choices


class RunPanel:
    """Watch a :class:`workbench.runners.Run` and steer it while it goes.

    Sliders for the actors (worker processes), the envs ``B`` and horizon ``T`` (the batch is
    ``B * T``) and the minibatches per update; a learner picker (this machine's devices, and two
    gloo learners when the run has a ``learner_factory``); Start, Pause, Resume and Stop; a
    progress bar and live charts: episode return against env steps and against wall time, steps/s,
    and seconds per stage. A control writes the run's :class:`workbench.control.RunSettings`; the
    run applies the change at its next iteration boundary and records it as an event, which the
    charts mark with a dashed line. A change the run cannot make (actors > envs, a minibatch that
    does not divide the batch, a device this machine lacks) shows as a message and the control
    moves back.

    The charts redraw from a background thread every ``refresh_seconds`` while the run is live, so
    the cell that shows the panel returns at once and the kernel stays free for the widgets (a cell
    that blocks, such as ``run.wait()``, also holds back the widgets' messages until it ends).

    Args:
        run: the run to steer (started with ``panel.start()`` or the Start button).
        max_actors: the actors slider's end (default: 2x the run's actors, at least 4).
        refresh_seconds: seconds between redraws.

    Attributes:
        widget: the whole panel (an ``ipywidgets.VBox``); the notebook shows it.
        actors, envs, horizon, minibatches, learner: the controls.
        return_figure, speed_figure, stage_figure: the live ``go.FigureWidget`` charts.
        status, message: HTML lines: the run's state, and the last refusal or error.
        events: the event rows drawn so far.
    """

    def __init__(self, run: Any, *, max_actors: int | None = None, refresh_seconds: float = 0.5) -> None:
        import threading

        self.run = run
        self.refresh_seconds = refresh_seconds
        self.events: list[dict] = []
        self._drawn = 0  # rows of run.metrics already drawn
        self._last_return: float | None = None
        self._draw_lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._syncing = False  # True while the panel moves its own controls (no write back)
        settings = run.settings.current
        uses_workers = run.sampler_kind != "serial"

        self.status = widgets.HTML()
        self.status.add_class("workbench-status")
        self.message = widgets.HTML()
        self.message.add_class("workbench-message")
        self.progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, description="progress",
                                              layout=widgets.Layout(width="98%"))
        self.progress.add_class("workbench-progress")

        slider = dict(continuous_update=False, style={"description_width": "110px"})
        self.actors = widgets.IntSlider(value=settings.num_actors, min=1,
                                        max=max(max_actors or 2 * settings.num_actors, settings.num_actors, 4),
                                        description="actors", disabled=not uses_workers,
                                        tooltip=None if uses_workers else "the serial sampler has no workers",
                                        **slider)
        self.actors.add_class("workbench-actors")
        self.envs = widgets.SelectionSlider(options=_with(settings.num_envs, _PANEL_ENVS),
                                            value=settings.num_envs, description="envs (B)", **slider)
        self.envs.add_class("workbench-envs")
        self.horizon = widgets.SelectionSlider(options=_with(settings.horizon, _PANEL_HORIZONS),
                                               value=settings.horizon, description="horizon (T)", **slider)
        self.horizon.add_class("workbench-horizon")
        minibatches = settings.batch_size // settings.minibatch_size
        self.minibatches = widgets.SelectionSlider(options=_with(minibatches, _PANEL_MINIBATCHES),
                                                   value=minibatches, description="minibatches", **slider)
        self.minibatches.add_class("workbench-minibatches")
        self._learner_choices = learner_choices(run)
        self.learner = widgets.Dropdown(options=list(self._learner_choices),
                                        value=self._learner_label(settings.learner_devices),
                                        description="learner", style={"description_width": "110px"})
        self.learner.add_class("workbench-learner")
        self.batch_note = widgets.HTML()
        for control in (self.actors, self.envs, self.horizon, self.minibatches, self.learner):
            control.observe(self._on_control, names="value")

        self.buttons = {}
        for name, icon, style in (("start", "play", "primary"), ("pause", "pause", ""),
                                  ("resume", "step-forward", ""), ("stop", "stop", "danger")):
            button = widgets.Button(description=name.capitalize(), icon=icon, button_style=style,
                                    layout=widgets.Layout(width="100px"))
            button.add_class(f"workbench-{name}")
            button.on_click(lambda _, name=name: self._press(name))
            self.buttons[name] = button

        self.return_figure = _figure(
            f"{run.env_id}: mean episode return (raw)", rows=1, cols=2,
            subplot_titles=("against env steps", "against wall time"),
            xaxes=("env steps", "wall seconds"), yaxis="return",
            traces=[go.Scatter(x=[], y=[], mode="lines+markers", name="return", line_color="#1f77b4",
                               marker_size=4, showlegend=False),
                    go.Scatter(x=[], y=[], mode="lines+markers", name="return (wall)", line_color="#1f77b4",
                               marker_size=4, showlegend=False)],
        )
        self.speed_figure = _figure(
            "env steps per second", xaxes=("env steps",), yaxis="steps/s",
            traces=[go.Scatter(x=[], y=[], mode="lines", name="steps/s", line_color="#2ca02c")],
        )
        self.stage_figure = _figure(
            "seconds per iteration, by stage", xaxes=("env steps",), yaxis="seconds",
            traces=[go.Scatter(x=[], y=[], mode="lines", name=label, line_color=color)
                    for _, label, color in _STAGE_LINES],
        )
        charts = []
        for figure, name in ((self.return_figure, "return"), (self.speed_figure, "speed"),
                             (self.stage_figure, "stages")):
            box = widgets.Box([figure], layout=widgets.Layout(width="100%"))
            box.add_class(f"workbench-chart-{name}")
            charts.append(box)

        controls = widgets.VBox([
            widgets.HBox([self.actors, self.envs, self.horizon]),
            widgets.HBox([self.minibatches, self.learner, self.batch_note]),
            widgets.HBox(list(self.buttons.values())),
        ])
        self.widget = widgets.VBox([self.status, self.progress, controls, self.message, charts[0],
                                    widgets.HBox([charts[1], charts[2]])])
        self.widget.add_class("workbench-run-panel")
        self.refresh()

    # --- actions ----------------------------------------------------------------------------------

    def start(self) -> "RunPanel":
        """Start the run in its background thread and the redraws; returns the panel (to show it)."""
        self.run.start()
        self._watch()
        self.refresh()
        return self

    def wait(self, timeout: float | None = None) -> str:
        """``run.wait()`` (the interrupt button stops the run cleanly), then a last redraw."""
        try:
            return self.run.wait(timeout)
        finally:
            self.refresh()

    def _press(self, name: str) -> None:
        try:
            if name == "start":
                self.start()
            elif name == "pause":
                self.run.pause(wait=False)
            elif name == "resume":
                self.run.resume()
            else:
                self.run.stop(wait=False)
            self._say("")
        except Exception as error:  # e.g. Start on a failed run: say what to do instead
            self._say(f"{name}: {type(error).__name__}: {error}", "#b00020")
        self._watch()
        self.refresh()

    def _on_control(self, change: dict) -> None:
        if self._syncing:
            return
        values = self._control_values()
        current = self.run.settings.current
        try:
            self.run.update_settings(**{key: value for key, value in values.items()
                                        if getattr(current, key) != value})
            self._say("")
        except Exception as error:  # refused whole: say why and move the controls back
            self._say(f"not applied: {error}", "#b00020")
            self._sync_controls()
        self.refresh()

    def _control_values(self) -> dict[str, Any]:
        batch = self.envs.value * self.horizon.value
        minibatches = self.minibatches.value
        return dict(
            num_actors=self.actors.value,
            num_envs=self.envs.value,
            horizon=self.horizon.value,
            # a minibatch count that does not divide the batch gives a minibatch size that the
            # settings' check refuses, with its message
            minibatch_size=max(1, batch // minibatches) if batch % minibatches == 0 else batch + 1,
            learner_devices=self._learner_choices[self.learner.value],
        )

    def _learner_label(self, devices: tuple[str, ...]) -> str:
        for label, choice in self._learner_choices.items():
            if tuple(choice) == tuple(devices):
                return label
        raise KeyError(devices)

    def _sync_controls(self) -> None:
        """Move the controls to the run's current settings (without writing them back)."""
        settings = self.run.settings.current
        self._syncing = True
        try:
            self.actors.max = max(self.actors.max, settings.num_actors)
            self.actors.value = settings.num_actors
            self.envs.value = settings.num_envs
            self.horizon.value = settings.horizon
            minibatches = settings.batch_size // settings.minibatch_size
            if minibatches in self.minibatches.options:
                self.minibatches.value = minibatches
            self.learner.value = self._learner_label(settings.learner_devices)
        finally:
            self._syncing = False

    def _say(self, text: str, color: str = "#555") -> None:
        self.message.value = SamplerPanel._note(text, color) if text else ""

    # --- drawing ----------------------------------------------------------------------------------

    def _watch(self) -> None:
        """Redraw every ``refresh_seconds`` until the run ends (one thread at a time)."""
        import threading

        if self._watcher is not None and self._watcher.is_alive():
            return

        def watch() -> None:
            from workbench.runners import ENDED

            while True:
                ended = self.run.status in ENDED
                self.refresh()
                if ended:
                    return
                time.sleep(self.refresh_seconds)

        self._watcher = threading.Thread(target=watch, name="workbench-run-panel", daemon=True)
        self._watcher.start()

    def refresh(self) -> None:
        """Draw the rows recorded since the last redraw and update the status line."""
        with self._draw_lock:
            rows = self.run.metrics[self._drawn:]
            self._drawn += len(rows)
            iterations = [row for row in rows if "event" not in row]
            events = [row for row in rows if "event" in row]
            if iterations:
                self._extend(iterations)
            for event in events:
                self._mark(event)
            self._update_status()

    def _extend(self, rows: list[dict]) -> None:
        with_return = [row for row in rows if "charts/episode_return" in row]
        if with_return:
            steps = [row["charts/env_steps"] for row in with_return]
            seconds = [row["charts/wall_seconds"] for row in with_return]
            returns = [row["charts/episode_return"] for row in with_return]
            self._last_return = returns[-1]
            with self.return_figure.batch_update():
                _append(self.return_figure.data[0], steps, returns)
                _append(self.return_figure.data[1], seconds, returns)
        steps = [row["charts/env_steps"] for row in rows]
        with self.speed_figure.batch_update():
            _append(self.speed_figure.data[0], steps, [row["charts/steps_per_second"] for row in rows])
        with self.stage_figure.batch_update():
            for trace, (key, _, _) in zip(self.stage_figure.data, _STAGE_LINES):
                _append(trace, steps, [row.get(key) for row in rows])

    def _mark(self, event: dict) -> None:
        """A dashed line at the event's env step on every chart against env steps."""
        self.events.append(event)
        if event["event"] == "settings_refused":
            self._say(f"the run refused {event['new']}: {event.get('error', '')}", "#b00020")
            self._sync_controls()
            return
        if event["event"] != "settings":
            return
        label = ", ".join(f"{_SHORT.get(key, key)} {_value(event['old'].get(key))}→{_value(value)}"
                          for key, value in event["new"].items())
        for figure, kwargs in ((self.return_figure, dict(row=1, col=1)), (self.speed_figure, {}),
                               (self.stage_figure, {})):
            figure.add_vline(x=event["env_steps"], line_dash="dash", line_color="#888",
                             annotation_text=label, annotation_font_size=10, **kwargs)

    def _update_status(self) -> None:
        run = self.run
        rows = [row for row in run.metrics[-5:] if "event" not in row]
        last = rows[-1] if rows else {}
        total = max(1, run.config.total_steps)
        self.progress.value = min(1.0, run.env_steps / total)
        settings = run.settings.applied
        parts = [
            f"<b>{html.escape(run.status)}</b>",
            f"iteration {run.iteration:,}",
            f"{run.env_steps:,} / {run.config.total_steps:,} env steps",
        ]
        if last:
            parts.append(f"{last['charts/steps_per_second']:,.0f} steps/s")
            if self._last_return is not None:
                parts.append(f"return {self._last_return:.1f}")
            parts.append(f"policy lag {last['charts/policy_lag']}")
        parts.append(f"batch {settings.num_envs}×{settings.horizon} = {settings.batch_size:,}")
        if run.error is not None:
            parts.append(f'<span style="color:#b00020">{html.escape(type(run.error).__name__)}: '
                         f"{html.escape(str(run.error))}</span>")
        self.status.value = " · ".join(parts)
        from workbench.runners import ENDED

        status = run.status
        self.buttons["start"].disabled = status not in ("created", "stopped", "finished")
        self.buttons["pause"].disabled = status != "running"
        self.buttons["resume"].disabled = status != "paused"
        self.buttons["stop"].disabled = status in ENDED or status == "created"
        current = run.settings.current
        self.batch_note.value = SamplerPanel._note(
            f"batch B×T = {current.batch_size:,}, minibatch {current.minibatch_size:,}")

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


_SHORT = {"num_actors": "actors", "num_envs": "B", "horizon": "T", "minibatch_size": "minibatch",
          "learner_devices": "learner"}


def _value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "+".join(str(item) for item in value)
    return str(value)


def _with(value: int, options: tuple[int, ...]) -> list[int]:
    """The slider's options, with the run's own value among them."""
    return sorted(set(options) | {value})


def _append(trace: Any, xs: list, ys: list) -> None:
    trace.x = list(trace.x or ()) + list(xs)
    trace.y = list(trace.y or ()) + list(ys)


def _figure(title: str, *, xaxes: tuple[str, ...], yaxis: str, traces: list, rows: int = 1, cols: int = 1,
            subplot_titles: tuple[str, ...] | None = None) -> go.FigureWidget:
    from plotly.subplots import make_subplots

    figure = go.FigureWidget(make_subplots(rows=rows, cols=cols, subplot_titles=subplot_titles))
    for index, trace in enumerate(traces):
        col = index + 1 if cols > 1 else 1
        figure.add_trace(trace, row=1, col=col)
    for index, title_x in enumerate(xaxes):
        figure.update_xaxes(title_text=title_x, row=1, col=index + 1)
    figure.update_yaxes(title_text=yaxis, row=1, col=1)
    figure.update_layout(title=title, height=320, margin=dict(l=60, r=20, t=60, b=50),
                         legend=dict(orientation="h", y=-0.25))
    return figure


# --------------------------------------------------------------------------------------------------
# The Ape-X panel (notebook 06)

_APEX_ENDED = ("stopped", "finished", "failed")


class ApexPanel:
    """Watch an Ape-X run (:class:`workbench.apex.Apex`) and add or remove actors while it goes.

    An *actors* slider (1 to ``config.max_actors``) calls ``apex.set_num_actors``: the learner
    applies it at its next step, starting or ending actor processes and giving every actor its
    epsilon for the new count (Horgan et al. 2018, Sec. 4.1). Start and Stop buttons, a status
    line, and live charts: the return of all actors and of the actor exploring least against env
    steps; transitions/s into the replay and learner updates/s against wall time; and one bar per
    actor, the transitions it sent, colored and labelled by its epsilon (grey: an actor no longer
    running). Actor changes and restarts of dead actors are dashed lines on the line charts.

    The charts redraw from a background thread every ``refresh_seconds`` while the run goes, so
    the cell that shows the panel returns at once (as :class:`RunPanel`'s do).

    Args:
        apex: the run (started with ``panel.start()`` or the Start button).
        limits: ``Apex.train`` limits for Start (default ``max_seconds`` from
            ``budget.current().apex_live_seconds``).
        refresh_seconds: seconds between redraws.

    Attributes:
        widget: the whole panel (an ``ipywidgets.VBox``).
        actors, buttons: the controls.
        return_figure, rate_figure, actor_figure: the live ``go.FigureWidget`` charts.
        status, message: HTML lines: the run's state, and the last refusal or error.
        events: the events drawn so far (``Apex.events`` entries).
    """

    def __init__(self, apex: Any, *, limits: dict | None = None, refresh_seconds: float = 0.5) -> None:
        import threading

        self.apex = apex
        self.limits = dict(limits) if limits else {"max_seconds": budget_module.current().apex_live_seconds}
        self.refresh_seconds = refresh_seconds
        self.events: list[dict] = []
        self._event_keys: set = set()
        self._drawn = 0  # rows of apex.metrics already drawn
        self._time_offset = 0.0  # a restarted run counts its time from 0 again; the charts go on
        self._last_time = 0.0
        self._draw_lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._syncing = False

        self.status = widgets.HTML()
        self.status.add_class("workbench-status")
        self.message = widgets.HTML()
        self.message.add_class("workbench-message")
        self.actors = widgets.IntSlider(value=apex.settings.current.num_actors, min=1,
                                        max=apex.config.max_actors or apex.config.num_actors,
                                        description="actors", continuous_update=False,
                                        style={"description_width": "60px"})
        self.actors.add_class("workbench-actors")
        self.actors.observe(self._on_actors, names="value")
        self.buttons = {}
        for name, icon, style in (("start", "play", "primary"), ("stop", "stop", "danger")):
            button = widgets.Button(description=name.capitalize(), icon=icon, button_style=style,
                                    layout=widgets.Layout(width="100px"))
            button.add_class(f"workbench-{name}")
            button.on_click(lambda _, name=name: self._press(name))
            self.buttons[name] = button

        self._make_figures()
        charts = []
        for figure, name in ((self.return_figure, "return"), (self.rate_figure, "rates"),
                             (self.actor_figure, "actors")):
            box = widgets.Box([figure], layout=widgets.Layout(width="100%"))
            box.add_class(f"workbench-chart-{name}")
            charts.append(box)
        controls = widgets.HBox([self.actors, *self.buttons.values()])
        self.widget = widgets.VBox([self.status, controls, self.message, charts[0],
                                    widgets.HBox([charts[1], charts[2]])])
        self.widget.add_class("workbench-apex-panel")
        self.refresh()

    def _make_figures(self) -> None:
        """The three live charts: ``return_figure``, ``rate_figure``, ``actor_figure``."""
        from plotly.subplots import make_subplots

        apex = self.apex
        self.return_figure = _figure(
            f"Ape-X on {apex.config.env_id}: episode return", xaxes=("env steps",), yaxis="return",
            traces=[go.Scatter(x=[], y=[], mode="lines+markers", name="all actors (last 20 episodes)",
                               line_color="#7f7f7f", marker_size=4),
                    go.Scatter(x=[], y=[], mode="lines+markers", name="actor exploring least (last 10)",
                               line_color="#1f77b4", marker_size=4)],
        )
        rates = go.FigureWidget(make_subplots(specs=[[{"secondary_y": True}]]))
        rates.add_trace(go.Scatter(x=[], y=[], mode="lines", name="transitions/s into replay", line_color="#ff7f0e"),
                        secondary_y=False)
        rates.add_trace(go.Scatter(x=[], y=[], mode="lines", name="learner updates/s", line_color="#2ca02c"),
                        secondary_y=True)
        rates.update_xaxes(title_text="wall seconds")
        rates.update_yaxes(title_text="transitions/s", rangemode="tozero", secondary_y=False)
        rates.update_yaxes(title_text="updates/s", rangemode="tozero", secondary_y=True)
        rates.update_layout(title="throughput", height=320, margin=dict(l=60, r=60, t=60, b=50),
                            legend=dict(orientation="h", y=-0.25))
        self.rate_figure = rates
        self.actor_figure = go.FigureWidget(
            data=[go.Bar(x=[], y=[], marker_color=[], hovertemplate="%{x}<br>%{y:,} transitions<extra></extra>")],
            layout=go.Layout(title="transitions sent, per actor (red: explores most; grey: stopped)",
                             yaxis=dict(title="transitions", rangemode="tozero"), height=320,
                             margin=dict(l=60, r=20, t=60, b=70)),
        )

    # --- actions ----------------------------------------------------------------------------------

    def start(self, **limits: Any) -> "ApexPanel":
        """Start the run in its background thread (``limits``: ``Apex.train``'s, default the
        panel's) and the redraws; returns the panel (to show it)."""
        self.apex.start(**(limits or self.limits))
        self._watch()
        self.refresh()
        return self

    def stop(self, timeout: float = 30.0) -> str:
        """Stop the run and wait (up to ``timeout`` seconds) for its processes to end; returns its status."""
        self.apex.stop(timeout)
        if self._watcher is not None:
            self._watcher.join(timeout)
        self.refresh()
        return self.apex.status

    def _press(self, name: str) -> None:
        try:
            if name == "start":
                self.start()
            else:
                self.apex.stop(timeout=0)  # the button returns at once; the run ends in its thread
            self._say("")
        except Exception as error:  # e.g. Start while the run goes: say so
            self._say(f"{name}: {type(error).__name__}: {error}", "#b00020")
        self.refresh()

    def _on_actors(self, change: dict) -> None:
        if self._syncing:
            return
        try:
            self.apex.set_num_actors(int(change["new"]))
            self._say(f"asked for {change['new']} actors: the learner applies it at its next step")
        except Exception as error:  # refused: say why and move the slider back
            self._say(f"not applied: {error}", "#b00020")
            self._syncing = True
            try:
                self.actors.value = self.apex.settings.current.num_actors
            finally:
                self._syncing = False
        self.refresh()

    def _say(self, text: str, color: str = "#555") -> None:
        self.message.value = SamplerPanel._note(text, color) if text else ""

    # --- drawing ----------------------------------------------------------------------------------

    def _watch(self) -> None:
        """Redraw every ``refresh_seconds`` until the run ends (one thread at a time)."""
        import threading

        if self._watcher is not None and self._watcher.is_alive():
            return

        def watch() -> None:
            seen_running = False
            while True:
                status = self.apex.status
                seen_running = seen_running or status == "running"
                ended = (seen_running and status in _APEX_ENDED) or self.apex.error is not None
                self.refresh()
                if ended:
                    return
                time.sleep(self.refresh_seconds)

        self._watcher = threading.Thread(target=watch, name="workbench-apex-panel", daemon=True)
        self._watcher.start()

    def refresh(self) -> None:
        """Draw the rows recorded since the last redraw and update the status line."""
        with self._draw_lock:
            rows = self.apex.metrics[self._drawn:]
            self._drawn += len(rows)
            if rows:
                self._extend(rows)
            self._update_status()

    def _extend(self, rows: list[dict]) -> None:
        seconds = []
        for row in rows:
            if row["time"] < self._last_time:  # the run was started again
                self._time_offset += self._last_time
            self._last_time = row["time"]
            seconds.append(row["time"] + self._time_offset)
        with self.return_figure.batch_update():
            for trace, key in zip(self.return_figure.data, ("return_all_actors", "return_least_exploring")):
                points = [(row["env_steps"], row[key]) for row in rows if row.get(key) is not None]
                if points:
                    _append(trace, [x for x, _ in points], [y for _, y in points])
        with self.rate_figure.batch_update():
            _append(self.rate_figure.data[0], seconds, [row["transitions_per_second"] for row in rows])
            _append(self.rate_figure.data[1], seconds, [row["updates_per_second"] for row in rows])
        for row, second in zip(rows, seconds):
            for event in row.get("events", ()):
                self._mark(event, row, second - row["time"])
        last = rows[-1]
        from workbench.plots import apex_actor_bars

        bars = apex_actor_bars(last["per_actor"])
        colors = [color if index < last["num_actors"] else "#c7c7c7"
                  for index, color in zip(sorted(last["per_actor"]), bars["colors"])]
        with self.actor_figure.batch_update():
            bar = self.actor_figure.data[0]
            bar.x, bar.y, bar.marker.color = bars["labels"], bars["transitions"], colors

    def _mark(self, event: dict, row: dict, offset: float) -> None:
        """A dashed line where the event happened: at the row's env step and at the event's time."""
        key = tuple(sorted((k, repr(v)) for k, v in event.items()))  # a restarted run lists old events again
        if key in self._event_keys:
            return
        self._event_keys.add(key)
        self.events.append(event)
        if event["event"] == "actors":
            label = f"actors {event['old']}→{event['new']}"
        elif event["event"] == "restart":
            label = f"actor {event['actor']} restarted"
        else:
            label = event["event"]
        self.return_figure.add_vline(x=row["env_steps"], line_dash="dash", line_color="#888",
                                     annotation_text=label, annotation_font_size=10)
        self.rate_figure.add_vline(x=event["time"] + offset, line_dash="dash", line_color="#888",
                                   annotation_text=label, annotation_font_size=10)

    def _update_status(self) -> None:
        apex = self.apex
        status = apex.status
        rows = apex.metrics[-1:]
        parts = [f"<b>{html.escape(status)}</b>"]
        if rows:
            row = rows[0]
            parts += [f"{row['time']:.0f} s", f"{row['num_actors']} actors",
                      f"{row['learner_updates']:,} learner updates", f"{row['env_steps']:,} env steps",
                      f"replay {row['replay_size']:,}", f"{row['transitions_per_second']:,.0f} transitions/s",
                      f"{row['updates_per_second']:,.0f} updates/s"]
            if row.get("return_least_exploring") is not None:
                parts.append(f"return (exploring least) {row['return_least_exploring']:.0f}")
        else:
            parts.append(f"{apex.settings.current.num_actors} actors")
        if apex.restarts:
            parts.append(f"{apex.restarts} restart(s)")
        if apex.error is not None:
            parts.append(f'<span style="color:#b00020">{html.escape(type(apex.error).__name__)}: '
                         f"{html.escape(str(apex.error))}</span>")
        self.status.value = " · ".join(parts)
        running = status == "running"
        self.buttons["start"].disabled = running
        self.buttons["stop"].disabled = not running

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


class SeedPanel(ApexPanel):
    """Watch a SEED run (:class:`workbench.seed.Seed`) and steer its actors and its server's batch.

    The *actors* slider calls ``seed.set_num_actors`` (the learner starts or retires env-only
    actor processes at its next step; R2D2 recomputes each actor's epsilon). The *batch* slider
    sets the inference server's ``max_batch_size`` at once (the serving thread reads it before each
    batch). Charts: the return against env steps; env steps/s and learner updates/s against wall
    time; the server's mean batch and p99 latency per row. Changes are dashed lines, as in
    :class:`ApexPanel`, whose controls and redraw loop this panel shares.

    Args:
        seed: the run (started with ``panel.start()`` or the Start button).
        limits: ``Seed.train`` limits for Start (default ``max_seconds`` from
            ``budget.current().seed_live_seconds``).
        refresh_seconds: seconds between redraws.

    Attributes (beyond ``ApexPanel``'s): ``batch``, the batch slider; ``server_figure``.
    """

    def __init__(self, seed: Any, *, limits: dict | None = None, refresh_seconds: float = 0.5) -> None:
        limits = dict(limits) if limits else {"max_seconds": budget_module.current().seed_live_seconds}
        super().__init__(seed, limits=limits, refresh_seconds=refresh_seconds)
        self.batch = widgets.IntSlider(value=seed.server.max_batch_size, min=1, max=seed.config.slots,
                                       description="batch", continuous_update=False,
                                       style={"description_width": "60px"})
        self.batch.add_class("workbench-batch")
        self.batch.observe(self._on_batch, names="value")
        controls = self.widget.children[1]
        controls.children = (self.actors, self.batch, *self.buttons.values())
        self.widget.remove_class("workbench-apex-panel")
        self.widget.add_class("workbench-seed-panel")

    def _make_figures(self) -> None:
        from plotly.subplots import make_subplots

        seed = self.apex
        algorithm = "V-trace" if seed.config.algorithm == "vtrace" else "R2D2"
        self.return_figure = _figure(
            f"SEED {algorithm} on {seed.config.env_id}: episode return", xaxes=("env steps",), yaxis="return",
            traces=[go.Scatter(x=[], y=[], mode="lines+markers", name="every env (last 20 episodes)",
                               line_color="#7f7f7f", marker_size=4),
                    go.Scatter(x=[], y=[], mode="lines+markers", name="env exploring least (last 10)",
                               line_color="#1f77b4", marker_size=4)],
        )
        figures = []
        for title, left, right in (("throughput", "env steps/s", "learner updates/s"),
                                   ("inference server", "requests per forward pass", "p99 latency (ms)")):
            figure = go.FigureWidget(make_subplots(specs=[[{"secondary_y": True}]]))
            figure.add_trace(go.Scatter(x=[], y=[], mode="lines", name=left, line_color="#ff7f0e"), secondary_y=False)
            figure.add_trace(go.Scatter(x=[], y=[], mode="lines", name=right, line_color="#2ca02c"), secondary_y=True)
            figure.update_xaxes(title_text="wall seconds")
            figure.update_yaxes(title_text=left, rangemode="tozero", secondary_y=False)
            figure.update_yaxes(title_text=right, rangemode="tozero", secondary_y=True)
            figure.update_layout(title=title, height=320, margin=dict(l=60, r=60, t=60, b=50),
                                 legend=dict(orientation="h", y=-0.25))
            figures.append(figure)
        self.rate_figure, self.server_figure = figures
        self.actor_figure = self.server_figure  # the slot ApexPanel lays out beside the rates

    def _on_batch(self, change: dict) -> None:
        seed = self.apex
        old, new = seed.server.max_batch_size, int(change["new"])
        seed.server.max_batch_size = new
        start = getattr(seed, "_start_time", None)
        if start is not None and seed.status == "running":
            seed.events.append({"event": "batch", "time": time.monotonic() - start, "updates": seed.updates,
                                "old": old, "new": new})
        self._say(f"the server now answers up to {new} requests per forward pass")

    def _extend(self, rows: list[dict]) -> None:
        seconds = []
        for row in rows:
            if row["time"] < self._last_time:
                self._time_offset += self._last_time
            self._last_time = row["time"]
            seconds.append(row["time"] + self._time_offset)
        with self.return_figure.batch_update():
            for trace, key in zip(self.return_figure.data, ("return", "return_least_exploring")):
                points = [(row["env_steps"], row[key]) for row in rows if row.get(key) is not None]
                if points:
                    _append(trace, [x for x, _ in points], [y for _, y in points])
        for figure, keys in ((self.rate_figure, ("steps_per_second", "updates_per_second")),
                             (self.server_figure, ("mean_batch_size", "latency_p99_ms"))):
            with figure.batch_update():
                for trace, key in zip(figure.data, keys):
                    points = [(s, row[key]) for s, row in zip(seconds, rows) if row.get(key) is not None]
                    if points:
                        _append(trace, [x for x, _ in points], [y for _, y in points])

    def _mark(self, event: dict, row: dict, offset: float) -> None:
        key = tuple(sorted((k, repr(v)) for k, v in event.items()))
        if key in self._event_keys:
            return
        self._event_keys.add(key)
        self.events.append(event)
        label = (f"actors {event['old']}→{event['new']}" if event["event"] == "actors"
                 else f"batch {event['old']}→{event['new']}" if event["event"] == "batch" else event["event"])
        self.return_figure.add_vline(x=row["env_steps"], line_dash="dash", line_color="#888",
                                     annotation_text=label, annotation_font_size=10)
        for figure in (self.rate_figure, self.server_figure):
            figure.add_vline(x=event["time"] + offset, line_dash="dash", line_color="#888",
                             annotation_text=label, annotation_font_size=10)

    def _update_status(self) -> None:
        seed = self.apex
        status = seed.status
        rows = seed.metrics[-1:]
        if rows:
            for event in list(seed.events):  # each is drawn once (_mark skips those drawn)
                self._mark(event, rows[0], self._time_offset)
        parts = [f"<b>{html.escape(status)}</b>"]
        if rows:
            row = rows[0]
            parts += [f"{row['time']:.0f} s", f"{row['num_actors']} actors", f"{row['updates']:,} updates",
                      f"{row['env_steps']:,} env steps", f"{row['steps_per_second']:,.0f} steps/s"]
            if row.get("mean_batch_size") is not None:
                parts.append(f"batch {row['mean_batch_size']:.1f} of {seed.server.max_batch_size}, "
                             f"p99 {row['latency_p99_ms']:.1f} ms")
            if row.get("target_metric") is not None:
                parts.append(f"return {row['target_metric']:.0f}")
        else:
            parts.append(f"{seed.settings.current.num_actors} actors")
        if seed.error is not None:
            parts.append(f'<span style="color:#b00020">{html.escape(type(seed.error).__name__)}: '
                         f"{html.escape(str(seed.error))}</span>")
        self.status.value = " · ".join(parts)
        running = status == "running"
        self.buttons["start"].disabled = running
        self.buttons["stop"].disabled = not running
