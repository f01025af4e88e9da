"""The panel of a run of samplers and a learner (notebooks 03-04): ``RunPanel``.

Sliders for the sampler's workers (processes), the envs ``B`` and horizon ``T`` (the batch is
``B * T``) and the minibatches per update; a learner picker (this machine's devices, and two gloo
learners when the run has a ``learner_factory``); Start, Pause, Resume and Stop; a progress bar
and live charts: episode return against env steps and against wall time, steps/s, and seconds per
stage. A control writes the run's ``RunSettings``; the run applies the change at its next
iteration boundary and records it as an event, which the charts mark with a dashed line. A change
the run cannot make (workers > envs, a minibatch that does not divide the batch, a device this
machine lacks) shows as a message and the control moves back.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from workbench import system
from workbench.lab.panels import Chart, Line, Panel, note

__all__ = ["RunPanel", "learner_choices"]

#: Lines of the stage chart (the collect's stages as in ``plots.STAGE_COLORS``).
STAGE_LINES = (
    Line("time/env", "env stepping", "#1f77b4"),
    Line("time/inference", "inference", "#ff7f0e"),
    Line("time/wait", "sampler waiting on workers", "#9467bd"),
    Line("time/learn", "learn (update)", "#2ca02c"),
    Line("time/batch_wait", "learner waiting for a batch", "#d62728"),
)
PANEL_ENVS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PANEL_HORIZONS = (8, 16, 32, 64, 128, 256, 512)
PANEL_MINIBATCHES = (1, 2, 4, 8, 16, 32)


def learner_choices(run: Any) -> dict[str, tuple[str, ...]]:
    """The learner placements this machine offers ``run``: label -> ``learner_devices``.

    One entry per device (``cpu``, ``cuda:0`` ...); with a data-parallel ``learner_factory``, also
    "2 learners (gloo, cpu)" and, with two or more GPUs, "N GPUs (NCCL)".
    """
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


def _with(value: int, options: tuple[int, ...]) -> list[int]:
    """The slider's options, with the run's own value among them."""
    return sorted(set(options) | {value})


def selection(description: str, css: str, value: int, options: tuple) -> widgets.SelectionSlider:
    """A slider over ``options`` (with ``value`` among them) that writes when released."""
    slider = widgets.SelectionSlider(
        options=_with(value, options),
        value=value,
        description=description,
        continuous_update=False,
        style={"description_width": "110px"},
    )
    slider.add_class(f"workbench-{css}")
    return slider


def run_charts(env_id: str) -> tuple[Chart, Chart, Chart]:
    """A run's return (against env steps and wall time), speed and seconds per stage."""
    returns = Chart(
        f"{env_id}: mean episode return (raw)",
        name="return",
        lines=[Line("charts/episode_return", "return", "#1f77b4")],
        x_keys=("charts/env_steps", "charts/wall_seconds"),
        y_title="return",
        column_titles=("against env steps", "against wall time"),
        mode="lines+markers",
        mark_keys=("charts/env_steps",),  # changes are marked on every chart against env steps
    )
    speed = Chart(
        "env steps per second",
        name="speed",
        y_title="steps/s",
        lines=[Line("charts/steps_per_second", "steps/s", "#2ca02c")],
    )
    stages = Chart(
        "seconds per iteration, by stage", name="stages", y_title="seconds", lines=STAGE_LINES
    )
    return returns, speed, stages


class RunPanel(Panel):
    """Watch a ``runs.Run`` and steer it while it goes (module docstring).

    Args:
        run: the run to steer (started with ``panel.start()`` or the Start button).
        max_workers: the workers slider's end (default: 2x the run's workers, at least 4).
        refresh_seconds: seconds between redraws.

    Attributes (beyond ``Panel``'s): ``workers`` (the count slider: the sampler's worker
    processes), ``envs``, ``horizon``, ``minibatches``, ``learner``: the controls; ``progress``;
    ``return_figure``, ``speed_figure``, ``stage_figure``: the charts.
    """

    def __init__(
        self, run: Any, *, max_workers: int | None = None, refresh_seconds: float = 0.5
    ) -> None:
        settings = run.settings.current
        uses_workers = run.sampler_kind != "serial"
        self.progress = widgets.FloatProgress(
            value=0.0, min=0.0, max=1.0, description="progress", layout=widgets.Layout(width="98%")
        )
        self.progress.add_class("workbench-progress")
        self.envs = selection("envs (B)", "envs", settings.num_envs, PANEL_ENVS)
        self.horizon = selection("horizon (T)", "horizon", settings.horizon, PANEL_HORIZONS)
        self.minibatches = selection(
            "minibatches", "minibatches", settings.num_minibatches, PANEL_MINIBATCHES
        )
        self.learner_options = learner_choices(run)
        self.learner = widgets.Dropdown(
            options=list(self.learner_options),
            description="learner",
            value=self._learner_label(settings.learner_devices),
            style={"description_width": "110px"},
        )
        self.learner.add_class("workbench-learner")
        self.batch_note = widgets.HTML()
        returns, speed, stages = run_charts(run.env_id)
        self.return_figure, self.speed_figure, self.stage_figure = (
            returns.figure,
            speed.figure,
            stages.figure,
        )
        super().__init__(
            run,
            charts=[returns, speed, stages],
            count_field="num_workers",
            max_count=max(max_workers or 2 * settings.num_workers, 4),
            count_enabled=uses_workers,
            controls=[self.envs, self.horizon],
            buttons=("start", "pause", "resume", "stop"),
            status_parts=self._status_parts,
            refresh_seconds=refresh_seconds,
            css="workbench-run-panel",
        )
        self.controls.children = (
            self.controls.children[0],
            widgets.HBox([self.minibatches, self.learner, self.batch_note]),
            *self.controls.children[1:],
        )
        self.widget.children = (self.status, self.progress, *self.widget.children[1:])
        for control in (self.envs, self.horizon, self.minibatches, self.learner):
            control.observe(self._on_control, names="value")
        self.refresh()

    @property
    def workers(self) -> widgets.IntSlider:
        """The workers slider: the parallel sampler's worker processes (``num_workers``)."""
        return self.count_slider

    def _on_control(self, change: dict) -> None:
        if self.syncing:
            return
        values = self._control_values()
        current = self.run.settings.current
        try:
            self.run.update_settings(
                **{key: value for key, value in values.items() if getattr(current, key) != value}
            )
            self.say("")
        except Exception as error:  # refused whole: say why and move the controls back
            self.say(f"not applied: {error}", "#b00020")
            self.sync_controls()
        self.refresh()

    def _control_values(self) -> dict[str, Any]:
        return dict(
            num_envs=self.envs.value,
            horizon=self.horizon.value,
            num_minibatches=self.minibatches.value,  # the settings refuse one that does not divide
            learner_devices=self.learner_options[self.learner.value],
        )

    def _learner_label(self, devices: tuple[str, ...]) -> str:
        for label, choice in self.learner_options.items():
            if tuple(choice) == tuple(devices):
                return label
        raise KeyError(devices)

    def sync_controls(self) -> None:
        super().sync_controls()
        settings = self.run.settings.current
        self.syncing = True
        try:
            # a continued run may bring values the sliders did not offer
            self.envs.options = _with(settings.num_envs, tuple(self.envs.options))
            self.horizon.options = _with(settings.horizon, tuple(self.horizon.options))
            self.envs.value = settings.num_envs
            self.horizon.value = settings.horizon
            self.minibatches.options = _with(
                settings.num_minibatches, tuple(self.minibatches.options)
            )
            self.minibatches.value = settings.num_minibatches
            self.learner.value = self._learner_label(settings.learner_devices)
        finally:
            self.syncing = False

    def resumed_run(self, folder: Any) -> Any:
        """``Run.from_checkpoint`` with this panel's run's learner, whose weights and optimizer
        the checkpoint's replace (a ``Run`` cannot rebuild its learner from a file)."""
        return type(self.run).from_checkpoint(
            folder, self.run.algo, learner_factory=self.run.learner_factory
        )

    def _status_parts(self, row: dict) -> list[str]:
        settings = self.run.settings.applied
        return [
            f"policy lag {row['charts/policy_lag']}",
            f"batch {settings.num_envs}×{settings.horizon} = {settings.batch_size:,}",
        ]

    def update_status(self) -> None:
        super().update_status()
        if not hasattr(self, "batch_note"):
            return
        run = self.run
        total = max(1, run.limits.env_steps or run.config.total_steps)
        self.progress.value = min(1.0, run.env_steps / total)
        current = run.settings.current
        self.batch_note.value = note(
            f"batch B×T = {current.batch_size:,}, minibatch {current.minibatch_size:,}"
        )
        self.status.value += f" · iteration {run.iteration:,} · {html.escape(run.name)}"
