"""A run's metric rows as TensorBoard event files too, beside its ``metrics.jsonl``.

When the ``tensorboard`` package is installed (``pip install -e '.[tensorboard]'``), every run
(``Run``, ``Apex``, ``Seed``: their ``RowLog``) also writes each metric row's numeric values as
scalars (``torch.utils.tensorboard.SummaryWriter``) into its own folder, so ``tensorboard
--logdir runs`` shows every run side by side. The x axis is ``charts/env_steps``, the one counter
every kind shares; each row key is a tag (``charts/mean_return``, ``losses/...``, ``seed/...``).
Event rows and values that are not numbers (None, strings, dicts, flags) are left out: the JSON
lines stay the record, and these files a view of them.

``WORKBENCH_TENSORBOARD=0`` turns it off; without tensorboard nothing changes. A writer that fails
(a full disk) says so once and stops; it never stops the run.
"""

from __future__ import annotations

import numbers
import os
import sys
import time
from pathlib import Path
from typing import Any

__all__ = [
    "ENV_SWITCH",
    "FLUSH_SECONDS",
    "STEP_KEY",
    "TensorBoardRows",
    "scalars",
    "switched_on",
    "wait_past_earlier_event_files",
]

ENV_SWITCH = "WORKBENCH_TENSORBOARD"
"""``0`` (or ``false``, ``no``, ``off``): no event files."""
STEP_KEY = "charts/env_steps"
"""The row key that is every scalar's step."""
FLUSH_SECONDS = 1.0
"""The event file is flushed at most this often (and when the loop ends): a live run shows up in
TensorBoard within a second, without a write per row of a run that makes hundreds a second."""


def switched_on() -> bool:
    """False when ``$WORKBENCH_TENSORBOARD`` says off."""
    value = os.environ.get(ENV_SWITCH, "").strip().lower()
    return value not in ("0", "false", "no", "off")


def scalars(row: dict[str, Any]) -> dict[str, float]:
    """The row's values that are plain numbers (flags, None, strings and dicts left out)."""
    return {
        key: float(value)
        for key, value in row.items()
        if isinstance(value, numbers.Real) and not isinstance(value, bool)
    }


def wait_past_earlier_event_files(folder: Path) -> None:
    """Wait, at most a second, until the clock's whole second is past every event file already
    in ``folder``. TensorBoard reads a folder's files in the order of their names,
    ``events.out.tfevents.<second>.<host>.<pid>.<n>``, and ``n`` is compared as text: a writer
    opened in the same second as an earlier one of the same process could sort before it
    (``.10`` before ``.9``), and a continued run's rows would then be read before the run they
    continue, and purged by it."""
    latest = -1
    if folder.is_dir():
        for path in folder.glob("events.out.tfevents.*"):
            second = path.name.split(".")[3]
            if second.isdigit():
                latest = max(latest, int(second))
    if latest >= int(time.time()):
        time.sleep(min(latest + 1 - time.time(), 1.0))


class TensorBoardRows:
    """Metric rows into event files in ``folder``; the writer is opened at the first row (no file
    for a run that never writes one) and again after ``close`` (a run started again)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.off = False
        """No more writing: tensorboard is missing, switched off, or its writer failed."""
        self._writer: Any = None
        self._purge_step: int | None = None
        self._flushed = 0.0

    def add(self, row: dict[str, Any]) -> None:
        """Write a metric row's scalars at its env steps (event rows are skipped)."""
        step = row.get(STEP_KEY)
        if "event" in row or self.off or not isinstance(step, numbers.Integral):
            return
        writer = self._open()
        if writer is None:
            return
        try:
            for tag, value in scalars(row).items():
                writer.add_scalar(tag, value, global_step=int(step))
            if time.monotonic() - self._flushed >= FLUSH_SECONDS:
                writer.flush()
                self._flushed = time.monotonic()
        except Exception as error:  # a view of the rows: its failure must not end the run
            self._give_up(error)

    def purge_after(self, env_steps: int) -> None:
        """A run continued in its folder from a checkpoint at ``env_steps``: TensorBoard hides
        what earlier event files hold past it (``purge_step``), as the metrics file drops it."""
        self.close()
        self._purge_step = int(env_steps) + 1

    def close(self) -> None:
        """Flush and close the event file (the loop ended); a later row opens a new one."""
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception as error:
                self._give_up(error)

    def _open(self) -> Any:
        if self._writer is not None:
            return self._writer
        if not switched_on():
            self.off = True
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # tensorboard is an optional extra: without it, no event files
            self.off = True
            return None
        wait_past_earlier_event_files(self.folder)
        try:
            self._writer = SummaryWriter(log_dir=str(self.folder), purge_step=self._purge_step)
        except Exception as error:
            self._give_up(error)
            return None
        self._purge_step, self._flushed = None, time.monotonic()
        return self._writer

    def _give_up(self, error: Exception) -> None:
        self.off, self._writer = True, None
        print(
            f"TensorBoard event files in {self.folder} stopped ({type(error).__name__}: {error}); "
            f"the run and its metrics.jsonl go on ({ENV_SWITCH}=0 turns these files off).",
            file=sys.stderr,
            flush=True,
        )
