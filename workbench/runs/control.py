"""A run's loop in a thread: its status, and how it is stopped, paused and waited for.

``RunControl`` is the state machine every run kind shares::

    created -> running <-> paused -> stopping -> finished | stopped | failed

``stop()`` and ``pause()`` take effect at the loop's next step boundary (``proceed()``), and
every wait polls a flag (``POLL``), so none is unbounded. Live runs are stopped by an ``atexit``
hook at interpreter exit (a kernel restart), keeping their metrics and checkpoint; in the main
thread, Ctrl-C asks a run to stop at the end of its step (``interrupt_stops``).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
import re
import signal
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "ENDED",
    "POLL",
    "STATUSES",
    "RunControl",
    "default_name",
    "default_runs_dir",
    "earlier_run",
    "interrupt_stops",
    "safe_label",
]

STATUSES = ("created", "running", "paused", "stopping", "finished", "stopped", "failed")
ENDED = ("finished", "stopped", "failed")
POLL = 0.1
"""Seconds between looks at the stop flag in every wait: no wait in a run is unbounded."""

_LIVE_RUNS: weakref.WeakSet = weakref.WeakSet()
"""Runs whose loop is going: the atexit hook stops them (the one piece of module state it needs)."""


def _stop_live_runs() -> None:
    """At interpreter exit (a kernel restart): stop every live run, keeping metrics and
    checkpoint."""
    for run in list(_LIVE_RUNS):
        run.stop(wait=True, timeout=60.0)


def default_runs_dir() -> str:
    """``$WORKBENCH_RUNS_DIR``, else ``runs`` (relative to the working directory)."""
    return os.environ.get("WORKBENCH_RUNS_DIR", "runs")


def safe_label(label: str) -> str:
    """``label`` as it ends a default run name (characters a folder name may hold)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label)


def earlier_run(runs_dir: Path, name: str, label: str) -> Path | None:
    """What a kernel restart left to continue: the newest folder in ``runs_dir`` holding a
    checkpoint that is either ``name``'s own (a run named by hand, made again) or one of the
    default names of ``label`` (``<date>_<time>_<label>``) other than ``name``."""
    pattern = re.compile(
        r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_" + re.escape(safe_label(label)) + r"(-\d+)?"
    )
    found = [
        folder
        for folder in (runs_dir.iterdir() if runs_dir.is_dir() else ())
        if (folder.name == name or pattern.fullmatch(folder.name))
        and (folder / "checkpoint.pt").is_file()
    ]
    return max(found, key=lambda folder: (folder / "checkpoint.pt").stat().st_mtime, default=None)


def default_name(label: str, runs_dir: Path) -> str:
    """The creation time and ``label``, made unique in ``runs_dir``."""
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    base = f"{stamp}_{safe_label(label)}"
    name, n = base, 1
    while (runs_dir / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


class RunControl:
    """The status of ``run``'s loop, and the flags its loop and its callers meet at.

    ``run`` is what the exit hook stops (anything with ``stop(wait, timeout)``).
    """

    def __init__(self, run: Any) -> None:
        self.run = run
        self.loop_thread: threading.Thread | None = None
        self._status = "created"
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._unpaused = threading.Event()
        self._unpaused.set()
        self._done = threading.Event()

    @property
    def status(self) -> str:
        return self._status

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    @property
    def stop_event(self) -> threading.Event:
        """Set by ``stop()``: what a wait inside a step polls (a collector waiting for a batch)."""
        return self._stop

    def begin(self, name: str) -> None:
        """The loop starts (again): raise if it cannot, from a failed or live status."""
        with self._changed:
            if self._status not in ("created", "stopped", "finished"):
                fix = (
                    "make a new run (or from_checkpoint)."
                    if self._status == "failed"
                    else "stop it first."
                )
                raise RuntimeError(f"run {name!r} is {self._status}; {fix}")
            self._stop.clear()
            self._done.clear()
            self._set("running")
            _LIVE_RUNS.add(self.run)
        self.exit_hook_first()

    @staticmethod
    def exit_hook_first() -> None:
        """Make stopping the live runs the first thing done at interpreter exit (exit hooks run last
        registered first). Called when a loop starts and again once it has opened what it uses
        (child processes, a Ray instance), whose own exit hooks would otherwise shut them down
        under the running loop."""
        atexit.unregister(_stop_live_runs)
        atexit.register(_stop_live_runs)

    def end(self, outcome: str) -> None:
        """The loop ended with ``outcome`` (``finished``, ``stopped`` or ``failed``)."""
        with self._changed:
            self._set(outcome)
            _LIVE_RUNS.discard(self.run)
            self._done.set()

    def proceed(self) -> bool:
        """False once stop() was called; blocks here, at a step boundary, while paused."""
        if not self._unpaused.is_set() and not self._stop.is_set():
            with self._changed:
                if self._status == "running":
                    self._set("paused")
            while not self._unpaused.wait(POLL):
                pass
            with self._changed:
                if self._status == "paused":
                    self._set("running")
        return not self._stop.is_set()

    def pause(self, wait: bool, timeout: float | None) -> str:
        self._unpaused.clear()
        if wait and threading.current_thread() is not self.loop_thread:
            self.wait_for(lambda: self._status in ("paused", "created", *ENDED), timeout)
        return self._status

    def resume(self) -> str:
        self._unpaused.set()
        return self._status

    def stop(self, wait: bool, timeout: float | None) -> str:
        self._stop.set()
        self._unpaused.set()
        with self._changed:
            if self._status == "created":
                self._set("stopped")
                self._done.set()
            elif self._status in ("running", "paused"):
                self._set("stopping")
        if wait and threading.current_thread() is not self.loop_thread:
            self.wait_for(self._done.is_set, timeout)
        return self._status

    def wait_done(self, timeout: float | None) -> bool:
        """Wait until the loop has ended (or ``timeout`` passed); True if it has."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done.wait(POLL):
            if deadline is not None and time.monotonic() > deadline:
                return False
        return True

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while not predicate() and not self._done.is_set():
                if deadline is not None and time.monotonic() > deadline:
                    return
                self._changed.wait(POLL)

    def _set(self, status: str) -> None:  # with _changed held
        self._status = status
        self._changed.notify_all()


@contextlib.contextmanager
def interrupt_stops(run: Any):
    """In the main thread: the first SIGINT asks ``run`` to stop at the step's end; the handler
    then steps aside, so a second SIGINT raises KeyboardInterrupt as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    previous = signal.default_int_handler if previous is None else previous

    def handler(signum, frame):
        signal.signal(signal.SIGINT, previous)
        print(
            f"Interrupted: stopping run {run.name!r} at the end of this step (interrupt again to "
            "stop at once) ...",
            flush=True,
        )
        run.stop(wait=False)

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


atexit.register(_stop_live_runs)
