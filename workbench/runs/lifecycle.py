"""The one life cycle every run shares: ``Run`` (samplers and a learner), ``Apex`` and ``Seed``.

A run is a loop of steps in a background thread, so that a notebook stays live::

    run.start(env_steps=100_000)      # or updates=, seconds=, target_return=; returns at once
    run.update_settings(num_envs=32)  # at the next step boundary, an event (Ape-X: num_actors)
    run.stop()                        # or pause() / resume(); wait() makes Ctrl-C a clean stop
    run.metrics, run.events, run.status

``run(**limits)`` is the same loop in the calling thread (scripts, tests, benchmarks), where the
first Ctrl-C stops it cleanly at the step's end. Every run writes ``<runs_dir>/<name>/``:
``metrics.jsonl`` (a header per segment, a row per step or interval, a row per event, one schema:
``records``) and ``checkpoint.pt`` (every ``checkpoint_seconds`` of wall time, every
``checkpoint_every`` rows if set, and when the loop ends; the one before kept: ``checkpoints``),
and ``Kind.from_checkpoint(...)`` continues a run from its counters, weights and RNG states.

The four limits are one vocabulary (``Limits``): env steps, updates, wall seconds (over the run's
segments) and a target return (the kind's ``target_metric``). A kind provides its loop's steps:

* ``open_loop()`` / ``close_loop()`` / ``final_row()``: start and end what the loop needs, a row
  at its end;
* ``step() -> dict | None``: one step of the loop; a row of the kind's own metrics, or None when
  no row is due. The life cycle counts rows (``iteration``), adds the shared ``charts/...`` keys,
  writes the row, and checks the limits;
* ``apply_settings(new, change)``: apply a change of the live settings (raise to refuse it);
* ``run_state()`` / ``load_run_state(state)``: what a checkpoint holds beyond the shared counters
  (model, optimizer, counters of the kind); ``header()``: what a header line says of the kind.

A kind counts ``env_steps`` and ``updates`` and reports episodes (``record_episodes``). A failure
is never silent: ``status == "failed"``, ``error``, ``error_traceback`` (printed). ``control``.
"""

from __future__ import annotations

import datetime
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Self

from workbench import system
from workbench.progress import follow as progress_bar
from workbench.restarts import RoleLost
from workbench.runs.checkpoints import CHECKPOINT_SECONDS, CheckpointWriter, save_atomically
from workbench.runs.control import (
    ENDED,
    POLL,
    STATUSES,
    RunControl,
    default_name,
    default_runs_dir,
    interrupt_stops,
)
from workbench.runs.faults import NonFiniteLoss
from workbench.runs.records import git_commit, rng_states, set_rng_states
from workbench.runs.rows import EpisodeWindow, RowLog, row_line
from workbench.runs.settings import ActorSettings, Limits, RunSettings, Settings

__all__ = ["ENDED", "POLL", "STATUSES", "Limits", "RunLifecycle", "default_runs_dir"]


class RunLifecycle:
    """Start / stop / wait, limits, metrics, events, checkpoints: the base of every run kind.

    Args:
        name: the run's folder under ``runs_dir`` (None: the creation time and ``label``).
        runs_dir: where run folders go (None: ``$WORKBENCH_RUNS_DIR``, else ``runs``).
        label: a short name of what runs (the env id), for default names.
        settings: the live settings (``runs.settings.RunSettings``).
        limits: the default limits of ``start()`` / ``run()``.
        checkpoint_every: rows between checkpoints; 0: not by rows.
        checkpoint_seconds: wall seconds between checkpoints; None: not on a timer.
        log_every: print one line every this many rows; 0: silent.
    """

    kind = "run"
    target_metric = "charts/mean_return"

    def __init__(
        self,
        *,
        name: str | None,
        runs_dir: str | None,
        label: str,
        settings: RunSettings,
        limits: Limits,
        checkpoint_every: int = 0,
        checkpoint_seconds: float | None = CHECKPOINT_SECONDS,
        log_every: int = 0,
    ) -> None:
        runs = Path(runs_dir if runs_dir is not None else default_runs_dir())
        self.name, self.label = name or default_name(label, runs), label
        self.dir = runs / self.name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.dir / "metrics.jsonl"
        self.checkpoint_path = self.dir / "checkpoint.pt"
        self.settings = settings
        self.limits = limits
        self.checkpoints = CheckpointWriter(
            self.checkpoint_path, checkpoint_every, checkpoint_seconds
        )
        self.log_every = log_every
        self.iteration = 0
        self.env_steps = 0
        self.updates = 0
        self.ended_by: str | None = None
        """What ended the last segment: a limit's name (``"env_steps"`` ...), ``"target"``,
        ``"stop"`` or ``"error"``."""
        self.error: BaseException | None = None
        self.error_traceback: str | None = None
        self.log = RowLog(self.metrics_path, self.name)
        self.episodes_window = EpisodeWindow()
        self.state_lock = threading.RLock()
        """Held by a step's update, and by a checkpoint of its result."""
        self.control = RunControl(self)
        self._thread: threading.Thread | None = None
        self._wall_offset = 0.0  # seconds of earlier segments (restarts, checkpoints resumed)
        self._segment_start: float | None = None
        self._segments = 0  # loop starts (each writes a header line)
        self.resumed_from: str | None = None
        self._last_row: dict[str, float] = {"wall": 0.0, "env_steps": 0, "updates": 0}

    # --- what a kind provides -------------------------------------------------------------------

    def open_loop(self) -> None:
        """Start what the loop needs (samplers, processes), in the loop's thread."""

    def step(self) -> dict[str, Any] | None:
        raise NotImplementedError(f"{type(self).__name__} must define step()")

    def close_loop(self) -> None:
        """End what ``open_loop`` started; called however the loop ended."""

    def final_row(self) -> dict[str, Any] | None:
        """A last row for the steps taken since the previous one, when the loop ends by a limit or
        a stop between rows (kinds that write a row every few seconds); None: no row."""
        return None

    def apply_settings(self, new: Settings | ActorSettings, old: Settings | ActorSettings) -> None:
        """Apply a change of the live settings between steps; raise to refuse it whole."""

    def run_state(self) -> dict[str, Any]:
        """What a checkpoint holds of the kind (model, optimizer, its counters)."""
        return {}

    def load_run_state(self, state: dict[str, Any]) -> None:
        """Restore ``run_state()``."""

    def header(self) -> dict[str, Any]:
        """What the kind's header line says of it (config, env, algorithm)."""
        return {}

    # --- life cycle -------------------------------------------------------------------------------

    @property
    def status(self) -> str:
        return self.control.status

    @property
    def wall_seconds(self) -> float:
        running = 0.0 if self._segment_start is None else time.perf_counter() - self._segment_start
        return self._wall_offset + running

    def start(self, **limits: Any) -> "RunLifecycle":
        """Run the loop in a background (daemon) thread and return at once. ``limits`` replace the
        run's limits (``env_steps``, ``updates``, ``seconds``, ``target_return``) from now on."""
        self._begin(limits)
        self._thread = threading.Thread(
            target=self._main, name=f"{self.kind}-{self.name}", daemon=True
        )
        self._thread.start()
        return self

    def update_limits(self, **limits: Any) -> None:
        """Replace some of the limits while the run goes: the loop checks them at its next row.
        Recorded as a ``limits`` event (e.g. a budget chosen from the run's first minute)."""
        self.limits = self.limits.replace(**limits)
        self.event("limits", **limits)

    def run(self, **limits: Any) -> "RunLifecycle":
        """Run the loop in this thread until it ends (scripts, tests). In the main thread, Ctrl-C
        stops it cleanly at the end of the step (a second Ctrl-C stops it at once). In a notebook
        a progress bar follows the limit. Raises the loop's error if it failed."""
        self._begin(limits)
        with interrupt_stops(self), progress_bar(self):
            self._main()
        if self.status == "failed":
            raise self.error
        return self

    def wait(self, timeout: float | None = None) -> str:
        """Block until the run ends (or ``timeout`` seconds pass); returns the status.

        In a notebook, call ``run.wait()`` in a cell to make the kernel's interrupt button stop the
        run: the KeyboardInterrupt becomes a clean stop (metrics and checkpoint kept), and the cell
        returns normally with a message. Re-raises the loop's error if the run failed.
        """
        if self.status == "created":
            return self.status
        try:
            if not self.control.wait_done(timeout):
                return self.status
        except KeyboardInterrupt:
            print(
                f"Interrupted: stopping run {self.name!r} at the end of this step ...", flush=True
            )
            self.stop(wait=True)
            print(
                f"Run {self.name!r} {self.status} after {self.env_steps} env steps; metrics in "
                f"{self.metrics_path}, checkpoint {self.checkpoint_path}.",
                flush=True,
            )
            return self.status
        if self.status == "failed":
            raise self.error
        return self.status

    def pause(self, wait: bool = True, timeout: float | None = None) -> str:
        """Pause at the next step boundary (``wait``: until then). Settings may change meanwhile."""
        return self.control.pause(wait, timeout)

    def resume(self) -> str:
        """Continue a paused run (to continue from a checkpoint, see ``from_checkpoint``)."""
        return self.control.resume()

    def stop(self, wait: bool = True, timeout: float | None = None) -> str:
        """End the run at the next step boundary (a paused run at once); ``wait``: until it has
        ended, with its last row and checkpoint written and its processes closed."""
        return self.control.stop(wait, timeout)

    def __enter__(self) -> "RunLifecycle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def update_settings(self, **values: Any) -> Settings:
        """``settings.update(**values)``: validated now (raises, changing nothing, when the values
        cannot work together), applied by the loop at its next step boundary."""
        return self.settings.update(**values)

    # --- rows and events ------------------------------------------------------------------------

    @property
    def metrics(self) -> list[dict]:
        """A snapshot of every row so far: metric rows, and event rows (an ``"event"`` key)."""
        return self.log.rows

    @property
    def events(self) -> list[dict]:
        """The event rows so far (settings applied or refused, actors added, restarts ...)."""
        return [row for row in self.log.rows if "event" in row]

    @property
    def callback_errors(self) -> list[str]:
        return self.log.callback_errors

    @property
    def total_episodes(self) -> int:
        return self.episodes_window.total

    def on_row(self, fn: Callable[[dict], None]) -> Callable[[dict], None]:
        """Call ``fn(row)`` from the loop's thread with each new row (metric and event rows). Its
        exceptions are reported (printed, and kept in ``callback_errors``), not fatal. Returns
        ``fn``, so it also works as a decorator."""
        self.log.on_row(fn)
        return fn

    def record_episodes(self, returns: list[float], lengths: list[int] | None = None) -> None:
        """Episodes that ended (raw returns): they feed the next row's returns."""
        self.episodes_window.record(returns, lengths)

    def event(self, kind: str, **details: Any) -> dict:
        """Record an event row (``kind`` and the counters at which it happened)."""
        row = {"event": kind, **self._counters(), **details}
        self.log.record(row)
        return row

    def _counters(self) -> dict[str, Any]:
        return {
            "charts/iteration": self.iteration,
            "charts/env_steps": self.env_steps,
            "charts/updates": self.updates,
            "charts/wall_seconds": self.wall_seconds,
        }

    def _complete(self, row: dict[str, Any]) -> dict[str, Any]:
        """The kind's row with the shared ``charts/...`` keys."""
        counters = self._counters()
        wall = counters["charts/wall_seconds"]
        elapsed = max(wall - self._last_row["wall"], 1e-9)
        shared = {
            **counters,
            "charts/steps_per_second": (self.env_steps - self._last_row["env_steps"]) / elapsed,
            "charts/updates_per_second": (self.updates - self._last_row["updates"]) / elapsed,
            **self.episodes_window.take_interval(),
        }
        self._last_row = {"wall": wall, "env_steps": self.env_steps, "updates": self.updates}
        return {**row, **shared}

    # --- the loop ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        rows = 0
        self.open_loop()
        self.control.exit_hook_first()  # stop this run before what it opened shuts down at exit
        try:
            row_due = False  # steps were taken since the last row
            while self.control.proceed():  # waits while paused
                self.ended_by = self.limits.reached(self.env_steps, self.updates, self.wall_seconds)
                if self.ended_by is not None:
                    break
                self._take_settings()
                with self.state_lock:
                    row = self.step()
                    row_due = row is None
                    if row is None:
                        continue
                    self.iteration += 1
                rows += 1
                if self._write_row(row, rows):
                    self.ended_by = "target"
                    row_due = False
                    break
            if self.control.stop_requested and self.ended_by is None:
                self.ended_by = "stop"
            if row_due:  # the steps since the last row get one (a kind that writes rows by time)
                with self.state_lock:
                    row = self.final_row()
                    if row is not None:
                        self.iteration += 1
                if row is not None:
                    self._write_row(row, rows + 1)
        finally:
            self.close_loop()

    def _write_row(self, row: dict[str, Any], rows: int) -> bool:
        """Complete, record and log a row, checkpoint when due; True if it reached the target."""
        row = self._complete(row)
        self.log.record(row)
        if self.log_every and rows % self.log_every == 0:
            print(f"[{self.name}] {row_line(row, self.target_metric)}", flush=True)
        if self.checkpoints.due(rows, self.wall_seconds):
            self.save_checkpoint()
            self.event("checkpoint", **self.checkpoints.last_cost)
        value, target = row.get(self.target_metric), self.limits.target_return
        return target is not None and value is not None and value >= target

    def _take_settings(self) -> None:
        """Take the settings' changes at this boundary and apply them, or refuse them whole."""
        taken = self.settings.apply_changes(self.iteration, self.apply_settings)
        if taken is None:
            return
        kind, details = taken
        self.event(kind, **details)
        if kind == "settings_refused":
            print(
                f"Run {self.name!r}: settings {details['new']} refused, keeping "
                f"{details['old']}: {details['error']}",
                file=sys.stderr,
                flush=True,
            )

    def _main(self) -> None:
        """The loop, then whatever ended it: status, checkpoint, error report."""
        self.control.loop_thread = threading.current_thread()
        outcome, error = "finished", None
        try:
            self._write_header()
            self._loop()
        except KeyboardInterrupt:  # run() in the main thread, interrupted twice: still a clean stop
            self.control.stop(wait=False, timeout=None)
            self.ended_by = "stop"
        except BaseException as exc:  # never die silently
            outcome, error = "failed", exc
            self.ended_by = "error"
        if outcome != "failed" and self.control.stop_requested:
            outcome = "stopped"
        if outcome != "failed":
            try:
                self.save_checkpoint()
            except Exception as exc:
                outcome, error = "failed", exc
        if isinstance(error, (NonFiniteLoss, RoleLost)):  # the last good checkpoint named
            error.keep(self.dir, self.checkpoint_path)
        if error is not None:
            self.error = error
            self.error_traceback = "".join(traceback.format_exception(error))
            kept = self.checkpoint_path.exists() and f"; {self.checkpoint_path} is kept"
            print(
                f"Run {self.name!r} failed after {self.env_steps} env steps{kept or ''}:\n"
                f"{self.error_traceback}",
                file=sys.stderr,
                flush=True,
            )
        self.log.close()  # TensorBoard's event files flushed (runs.tensorboard), however it ended
        self._wall_offset, self._segment_start = self.wall_seconds, None
        self.control.end(outcome)

    def _begin(self, limits: dict[str, Any]) -> None:
        new_limits = self.limits.replace(**limits)
        new_limits.refuse_passed(limits, self.name, self.env_steps, self.updates, self.wall_seconds)
        if self._segments == 0 and self.resumed_from is None and self.metrics_path.exists():
            raise FileExistsError(
                f"{self.metrics_path} exists: another run wrote there. Use another name (None "
                "picks a fresh one), or continue that run with from_checkpoint(...)."
            )
        self.control.begin(self.name)
        self.limits = new_limits
        self.error = self.error_traceback = None
        self.ended_by = None

    def _write_header(self) -> None:
        header = {
            "type": "header",
            "kind": self.kind,
            "name": self.name,
            **self.header(),
            "settings": asdict(self.settings.applied),
            "limits": asdict(self.limits),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "updates": self.updates,
            "resumed_from": self.resumed_from if self._segments == 0 else None,
            "git_commit": git_commit(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": asdict(system.machine_info()),
        }
        self._segments += 1
        self._segment_start = time.perf_counter()
        self.checkpoints.start(self.wall_seconds)
        self._last_row = {
            "wall": self.wall_seconds,
            "env_steps": self.env_steps,
            "updates": self.updates,
        }
        self.log.write_line(header)

    # --- checkpoints ------------------------------------------------------------------------------

    def checkpoint_state(self) -> dict[str, Any]:
        """Everything a checkpoint holds: the shared counters, settings, limits, RNG states, the
        recent returns, and the kind's ``run_state()``."""
        with self.state_lock:  # no update half-way through what is saved
            return {
                "kind": self.kind,
                "name": self.name,
                "iteration": self.iteration,
                "env_steps": self.env_steps,
                "updates": self.updates,
                "wall_seconds": self.wall_seconds,
                "episodes": self.episodes_window.state_dict(),
                "settings": asdict(self.settings.applied),
                "limits": asdict(self.limits),
                "rng": rng_states(),
                "state": self.run_state(),
            }

    def save_checkpoint(self, path: "str | Path | None" = None) -> Path:
        """Write ``checkpoint_state()``: to ``path`` atomically, or as the run's checkpoint, the
        previous one kept (``CheckpointWriter.save``; its cost in ``checkpoints.last_cost``)."""
        if path is not None:
            return save_atomically(self.checkpoint_state(), Path(path))
        return self.checkpoints.save(self.checkpoint_state(), self.wall_seconds)

    def load_checkpoint(self, checkpoint: dict, path: str, seed: int | None = None) -> Self:
        """Continue from a loaded checkpoint: the kind's state, the counters, the wall clock, the
        recent returns and the RNG states (``seed`` reseeds torch after them: ``set_rng_states``);
        the checkpoint's rows of this run's metrics file are read back, new ones appended."""
        if self.status not in ("created", "stopped", "finished"):
            raise RuntimeError(
                f"run {self.name!r} is {self.status}; load a checkpoint before starting it."
            )
        if checkpoint.get("kind", self.kind) != self.kind:
            raise ValueError(
                f"{path} is a checkpoint of a {checkpoint['kind']!r} run; continue it with that "
                f"kind's from_checkpoint, not {type(self).__name__}'s."
            )
        with self.state_lock:
            self.load_run_state(checkpoint["state"])
            self.iteration = int(checkpoint["iteration"])
            self.env_steps = int(checkpoint["env_steps"])
            self.updates = int(checkpoint["updates"])
            self._wall_offset = float(checkpoint["wall_seconds"])
            self.episodes_window.load_state_dict(checkpoint["episodes"])
            set_rng_states(checkpoint["rng"], reseed=seed)
        self.log.reload(self.iteration)  # rows past the checkpoint (a kill after it) are left out
        self.resumed_from = str(path)
        return self

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name!r}, status={self.status!r}, "
            f"env_steps={self.env_steps}, updates={self.updates})"
        )
