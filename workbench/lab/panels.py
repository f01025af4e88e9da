"""One panel base for every run kind: controls that steer a run while it goes, charts that redraw.

Every run (``Run``, ``Apex``, ``Seed``) has the same life cycle and one row schema
(``runs.records``), so one ``Panel`` serves them all: a status line, a message line, Start / Stop
(and Pause / Resume where the kind pauses), an *actors* slider that writes the run's settings (the
run applies them at its next step, and its ``max_actors`` lets the slider grow past the count the
run started with), and live charts (``Chart``: row keys against env steps or wall seconds, with a
dashed line where an event happened). A panel per run kind composes its own controls and charts
(``run_panel.RunPanel``, ``system_panels.ApexPanel`` and ``SeedPanel``).

The charts redraw from a background thread every ``refresh_seconds`` while the run is live, so
the cell that shows the panel returns at once and the kernel stays free for the widgets.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.runs.control import earlier_run
from workbench.runs.lifecycle import ENDED

__all__ = ["Chart", "Line", "Panel", "event_label", "note"]

_SHORT = {
    "num_actors": "actors",
    "num_workers": "workers",
    "num_envs": "B",
    "horizon": "T",
    "num_minibatches": "minibatches",
    "learner_devices": "learner",
}

BUTTON_ICONS = {  # a panel button's font-awesome icon and style
    "continue": ("history", "info"),
    "start": ("play", "primary"),
    "pause": ("pause", ""),
    "resume": ("step-forward", ""),
    "stop": ("stop", "danger"),
}


def note(text: str, color: str = "#555") -> str:
    """``text`` as an HTML line in ``color``."""
    return f'<span style="color:{color}">{html.escape(text)}</span>'


def _value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "+".join(str(item) for item in value)
    return str(value)


def event_label(event: dict) -> str:
    """A short label of an event row, for its dashed line."""
    kind = event["event"]
    if kind in ("settings", "batch"):
        new = event["new"] if isinstance(event["new"], dict) else {"batch": event["new"]}
        old = event["old"] if isinstance(event["old"], dict) else {"batch": event["old"]}
        return ", ".join(
            f"{_SHORT.get(key, key)} {_value(old.get(key))}→{_value(value)}"
            for key, value in new.items()
        )
    if "actor" in event:
        return f"actor {event['actor']} {kind.replace('actor_', '')}"
    if "worker" in event:
        return f"worker {event['worker']} restarted"
    return kind


@dataclass(frozen=True)
class Line:
    """One trace of a chart: a row key, its legend name, its color, its y axis."""

    key: str
    name: str
    color: str
    secondary: bool = False


class Chart:
    """A live plotly chart of row keys (``lines``) against one or more x keys (one column each).

    ``extend(rows)`` appends the points of new rows (a row without a line's key, or with None,
    adds none); ``mark(event)`` draws a dashed line at the event's x in every column, or only in
    the columns of ``mark_keys`` when given.
    """

    def __init__(
        self,
        title: str,
        *,
        lines: Sequence[Line],
        x_keys: Sequence[str] = ("charts/env_steps",),
        y_title: str,
        secondary_title: str | None = None,
        column_titles: Sequence[str] | None = None,
        mode: str = "lines",
        name: str = "chart",
        mark_keys: Sequence[str] | None = None,
    ) -> None:
        self.lines, self.x_keys, self.name = tuple(lines), tuple(x_keys), name
        self.mark_keys = self.x_keys if mark_keys is None else tuple(mark_keys)
        secondary = secondary_title is not None
        specs = [[{"secondary_y": secondary} for _ in self.x_keys]]
        figure = go.FigureWidget(
            make_subplots(rows=1, cols=len(self.x_keys), specs=specs, subplot_titles=column_titles)
        )
        for col, x_key in enumerate(self.x_keys, start=1):
            for line in self.lines:
                trace = go.Scatter(
                    x=[],
                    y=[],
                    mode=mode,
                    name=line.name,
                    line_color=line.color,
                    marker_size=4,
                    showlegend=col == 1,
                )
                figure.add_trace(
                    trace, row=1, col=col, **({"secondary_y": line.secondary} if secondary else {})
                )
            figure.update_xaxes(title_text=_AXIS_TITLES.get(x_key, x_key), row=1, col=col)
        figure.update_yaxes(
            title_text=y_title,
            rangemode="tozero" if mode == "lines" else None,
            row=1,
            col=1,
            **({"secondary_y": False} if secondary else {}),
        )
        if secondary:
            figure.update_yaxes(title_text=secondary_title, rangemode="tozero", secondary_y=True)
        figure.update_layout(
            title=title,
            height=320,
            margin=dict(l=60, r=60 if secondary else 20, t=60, b=50),
            legend=dict(orientation="h", y=-0.25),
        )
        self.figure = figure

    def extend(self, rows: list[dict]) -> None:
        with self.figure.batch_update():
            for column, x_key in enumerate(self.x_keys):
                for index, line in enumerate(self.lines):
                    points = [
                        (row[x_key], row[line.key]) for row in rows if row.get(line.key) is not None
                    ]
                    if points:
                        trace = self.figure.data[column * len(self.lines) + index]
                        trace.x = list(trace.x or ()) + [x for x, _ in points]
                        trace.y = list(trace.y or ()) + [y for _, y in points]

    def mark(self, event: dict) -> None:
        for col, x_key in enumerate(self.x_keys, start=1):
            if x_key in self.mark_keys and event.get(x_key) is not None:
                self.figure.add_vline(
                    x=event[x_key],
                    line_dash="dash",
                    line_color="#888",
                    row=1,
                    col=col,
                    annotation_text=event_label(event),
                    annotation_font_size=10,
                )


_AXIS_TITLES = {"charts/env_steps": "env steps", "charts/wall_seconds": "wall seconds"}


class Panel:
    """A run's panel: status, message, buttons, an actors slider, more controls, live charts.

    Args:
        run: the run to watch and steer.
        charts: the live charts (``Chart``, or anything with ``figure``, ``name``, ``extend`` and
            ``mark``).
        controls: more widgets beside the count slider (a kind's own).
        count_field: the setting the count slider moves: ``num_actors`` (Ape-X's and SEED's
            actors) or ``num_workers`` (a ``Run``'s sampler workers).
        max_count: the count slider's end (None: no count slider).
        count_enabled: False greys the slider out (e.g. a serial sampler has no workers).
        limits: the limits ``start`` gives the run (``env_steps``, ``seconds`` ...; default none:
            the run's own).
        buttons: which of ``start``, ``pause``, ``resume``, ``stop`` to show.
        status_parts: the kind's own parts of the status line, from the last metric row.
        refresh_seconds: seconds between redraws.

    Attributes:
        widget: the whole panel (an ``ipywidgets.VBox``); the notebook shows it.
        count_slider, buttons: the controls (a kind names its slider: ``actors``, ``workers``).
        status, message: HTML lines. events: the event rows drawn.
    """

    def __init__(
        self,
        run: Any,
        *,
        charts: Sequence[Any],
        controls: Sequence[widgets.Widget] = (),
        count_field: str = "num_actors",
        max_count: int | None = None,
        count_enabled: bool = True,
        limits: dict | None = None,
        buttons: Sequence[str] = ("start", "stop"),
        status_parts: Callable[[dict], list[str]] | None = None,
        refresh_seconds: float = 0.5,
        css: str = "workbench-panel",
    ) -> None:
        self.run = run
        self.charts = list(charts)
        self.limits = dict(limits or {})
        self.status_parts = status_parts
        self.refresh_seconds = refresh_seconds
        self.events: list[dict] = []
        self._drawn = 0  # rows of run.metrics already drawn
        self._draw_lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self.syncing = False  # True while the panel moves its own controls (no write back)

        self.status = widgets.HTML()
        self.status.add_class("workbench-status")
        self.message = widgets.HTML()
        self.message.add_class("workbench-message")
        self.count_field = count_field
        self.count_slider = self._count_slider(max_count, count_enabled)
        # After a kernel restart: the newest checkpointed run of the same name, to carry on.
        self.earlier = None
        if run.status == "created" and run.resumed_from is None:
            self.earlier = earlier_run(run.dir.parent, run.name, run.label)
        if self.earlier is not None:
            buttons = ["continue", *buttons]
        self.buttons = {name: self._button(name) for name in buttons}
        row = [self.count_slider] if self.count_slider is not None else []
        self.controls = widgets.VBox(
            [widgets.HBox([*row, *controls]), widgets.HBox(list(self.buttons.values()))]
        )
        self.widget = widgets.VBox([self.status, self.controls, self.message, *self._chart_rows()])
        self.widget.add_class(css)
        if self.earlier is not None:
            self.say(
                f"{self.earlier.name} left a checkpoint here: Continue carries it on (panel.run "
                "becomes it); Start begins this new run."
            )
        self.refresh()

    @property
    def count(self) -> int:
        """The run's requested count of actors or workers (``count_field``)."""
        return getattr(self.run.settings.current, self.count_field)

    def _count_slider(self, max_count: int | None, enabled: bool) -> widgets.IntSlider | None:
        """The slider of ``count_field``, up to ``max_count`` (None: no slider)."""
        if max_count is None:
            return None
        current = self.count
        name = _SHORT[self.count_field]
        slider = widgets.IntSlider(
            value=current,
            min=1,
            max=max(max_count, current),
            description=name,
            continuous_update=False,
            disabled=not enabled,
            style={"description_width": "60px"},
        )
        slider.add_class(f"workbench-{name}")
        slider.observe(self._on_count, names="value")
        return slider

    def _button(self, name: str) -> widgets.Button:
        """The button that ``press``es ``name`` (continue, start, pause, resume, stop)."""
        icon, style = BUTTON_ICONS[name]
        button = widgets.Button(
            description=name.capitalize(),
            icon=icon,
            button_style=style,
            layout=widgets.Layout(width="100px"),
        )
        button.add_class(f"workbench-{name}")
        button.on_click(lambda _: self.press(name))
        return button

    def _chart_rows(self) -> list[widgets.Widget]:
        """The first chart on a row of its own, the others two to a row."""
        boxes = []
        for chart in self.charts:
            box = widgets.Box([chart.figure], layout=widgets.Layout(width="100%"))
            box.add_class(f"workbench-chart-{chart.name}")
            boxes.append(box)
        return boxes[:1] + [widgets.HBox(boxes[i : i + 2]) for i in range(1, len(boxes), 2)]

    # --- actions ----------------------------------------------------------------------------------

    def start(self, **limits: Any) -> "Panel":
        """Start the run in its background thread (``limits``, default the panel's) and the
        redraws; returns the panel (to show it)."""
        self.run.start(**(limits or self.limits))
        if "continue" in self.buttons:  # a new run began: the earlier one stays as it is
            self.buttons.pop("continue").layout.display = "none"
            self.earlier = None
        self.watch()
        self.refresh()
        return self

    def stop(self, timeout: float = 30.0) -> str:
        """Stop the run and wait (up to ``timeout`` seconds) for it to end; returns its status."""
        self.run.stop(wait=True, timeout=timeout)
        if self._watcher is not None:
            self._watcher.join(timeout)
        self.refresh()
        return self.run.status

    def wait(self, timeout: float | None = None) -> str:
        """``run.wait()`` (the interrupt button stops the run cleanly), then a last redraw."""
        try:
            return self.run.wait(timeout)
        finally:
            self.refresh()

    def press(self, name: str) -> None:
        """What a button does (callable from code too)."""
        try:
            if name == "start":
                self.start()
            elif name == "continue":
                self.continue_earlier()
                return
            elif name == "pause":
                self.run.pause(wait=False)
            elif name == "resume":
                self.run.resume()
            else:
                self.run.stop(wait=False)  # the button returns at once; the run ends in its thread
            self.say("")
        except Exception as error:  # e.g. Start on a failed run: say what to do instead
            self.say(f"{name}: {type(error).__name__}: {error}", "#b00020")
        self.watch()
        self.refresh()

    def _on_count(self, change: dict) -> None:
        if self.syncing:
            return
        try:
            self.run.update_settings(**{self.count_field: int(change["new"])})
            self.say(
                f"asked for {change['new']} {_SHORT[self.count_field]}: the run applies it at its "
                "next step"
            )
        except Exception as error:  # refused: say why and move the slider back
            self.say(f"not applied: {error}", "#b00020")
            self.sync_controls()
        self.refresh()

    def continue_earlier(self) -> Any:
        """Carry on the earlier run this panel found (``earlier``): ``panel.run`` becomes that run,
        continued from its checkpoint (``resumed_run``), its rows drawn; Start runs it on."""
        folder = self.earlier
        if folder is None:
            raise RuntimeError("this panel found no earlier run to continue")
        self.run = self.resumed_run(folder)
        self.earlier = None
        self.buttons.pop("continue").layout.display = "none"
        self._drawn = 0
        self.sync_controls()
        self.refresh()
        self.say(
            f"continuing {self.run.name} from {self.run.env_steps:,} env steps: panel.run is "
            "that run now; Start carries it on"
        )
        return self.run

    def resumed_run(self, folder: Any) -> Any:
        """The run of ``folder`` continued from its checkpoint (a kind whose ``from_checkpoint``
        needs more, such as ``Run``'s learner, says so in its panel)."""
        return type(self.run).from_checkpoint(folder)

    def sync_controls(self) -> None:
        """Move the controls to the run's current settings (without writing them back)."""
        if self.count_slider is None:
            return
        self.syncing = True
        try:
            current = self.count
            self.count_slider.max = max(self.count_slider.max, current)
            self.count_slider.value = current
        finally:
            self.syncing = False

    def say(self, text: str, color: str = "#555") -> None:
        self.message.value = note(text, color) if text else ""

    # --- drawing ----------------------------------------------------------------------------------

    def watch(self) -> None:
        """Redraw every ``refresh_seconds`` until the run ends (one thread at a time)."""
        if self._watcher is not None and self._watcher.is_alive():
            return

        def loop() -> None:
            while True:
                ended = self.run.status in ENDED
                self.refresh()
                if ended:
                    return
                time.sleep(self.refresh_seconds)

        self._watcher = threading.Thread(target=loop, name="workbench-panel", daemon=True)
        self._watcher.start()

    def refresh(self) -> None:
        """Draw the rows recorded since the last redraw and update the status line."""
        with self._draw_lock:
            rows = self.run.metrics[self._drawn :]
            self._drawn += len(rows)
            metric_rows = [row for row in rows if "event" not in row]
            if metric_rows:
                for chart in self.charts:
                    chart.extend(metric_rows)
            for event in (row for row in rows if "event" in row):
                self.events.append(event)
                if event["event"] == "checkpoint":  # every few minutes: not worth a line
                    continue
                if event["event"] == "settings_refused":
                    self.say(f"the run refused {event['new']}: {event.get('error', '')}", "#b00020")
                    self.sync_controls()
                    continue
                for chart in self.charts:
                    chart.mark(event)
            self.update_status()

    def update_status(self) -> None:
        run = self.run
        rows = [row for row in run.metrics[-5:] if "event" not in row]
        last = rows[-1] if rows else {}
        parts = [f"<b>{html.escape(run.status)}</b>"]
        if last:
            parts += [
                f"{last['charts/wall_seconds']:.0f} s",
                f"{run.env_steps:,} env steps",
                f"{run.updates:,} updates",
                f"{last['charts/steps_per_second']:,.0f} steps/s",
            ]
            value = last.get(run.target_metric)
            if value is not None:
                parts.append(f"return {value:.1f}")
            if self.status_parts is not None:
                parts += self.status_parts(last)
        parts.append(f"{self.count} {_SHORT[self.count_field]}")
        if run.error is not None:
            parts.append(
                f'<span style="color:#b00020">{html.escape(type(run.error).__name__)}: '
                f"{html.escape(str(run.error))}</span>"
            )
        self.status.value = " · ".join(parts)
        status = run.status
        for name, disabled in (
            ("start", status not in ("created", "stopped", "finished")),
            ("pause", status != "running"),
            ("resume", status != "paused"),
            ("stop", status in ENDED or status == "created"),
        ):
            if name in self.buttons:
                self.buttons[name].disabled = disabled

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
