"""A run's rows as they are written: the log (memory, file, callbacks) and the episodes behind them.

``RowLog`` keeps every row of a run in memory, appends it to ``metrics.jsonl`` and hands it to
the callbacks that asked for rows (a panel, a recipe's curve); a failing callback is reported,
never fatal; with tensorboard installed it writes the metric rows as event files beside the
file too (``runs.tensorboard``). ``EpisodeWindow`` keeps the returns that the shared
``charts/...`` keys are made of: the episodes since the last row, and the mean of the last
``RETURN_WINDOW``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from workbench.runs.records import jsonable, read_lines
from workbench.runs.tensorboard import STEP_KEY, TensorBoardRows

__all__ = ["RETURN_WINDOW", "EpisodeWindow", "RowLog", "iteration_of", "row_line"]

RETURN_WINDOW = 20
"""Episodes averaged in ``charts/mean_return``."""


class RowLog:
    """Rows in memory and in ``path`` (JSON lines), and the callbacks that get each new row; the
    metric rows in TensorBoard event files beside ``path`` too (``tensorboard``)."""

    def __init__(self, path: Path, label: str) -> None:
        self.path, self.label = path, label
        self.callback_errors: list[str] = []
        self._rows: list[dict] = []
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[dict], None]] = []
        self._failed: list[Callable[[dict], None]] = []
        self.tensorboard = TensorBoardRows(path.parent)

    @property
    def rows(self) -> list[dict]:
        """A snapshot of every row so far."""
        with self._lock:
            return list(self._rows)

    def on_row(self, fn: Callable[[dict], None]) -> None:
        self._callbacks.append(fn)

    def write_line(self, record: dict) -> None:
        """One line of the file (a row, or a header). A disk that takes no more is an error that
        names the fix; a line it cut short is left out when the file is read back."""
        try:
            with open(self.path, "a") as f:
                f.write(json.dumps(jsonable(record)) + "\n")
        except OSError as error:
            raise OSError(
                error.errno,
                f"could not append to {self.path} ({error.strerror or error}): free space there "
                "or give the run another runs_dir. The rows written so far and the last "
                "checkpoint are kept; from_checkpoint continues from it.",
            ) from error

    def record(self, row: dict) -> None:
        with self._lock:
            self._rows.append(row)
            self.write_line(row)
            self.tensorboard.add(row)
        for fn in list(self._callbacks):
            try:
                fn(row)
            except Exception:
                text = traceback.format_exc()
                if not any(fn is seen for seen in self._failed):  # printed once per callback
                    self._failed.append(fn)
                    print(
                        f"Run {self.label!r}: callback {getattr(fn, '__name__', fn)!r} raised "
                        "(the run goes on; later errors only in run.callback_errors):\n"
                        f"{text}",
                        file=sys.stderr,
                        flush=True,
                    )
                if len(self.callback_errors) < 100:
                    self.callback_errors.append(text)

    def reload(self, iteration: int) -> int:
        """Read back the file's rows up to row ``iteration`` (a checkpoint's). What lies past it,
        the rows and headers of a run killed after its checkpoint and an unfinished last line,
        goes from the file too, so that the continued run's rows follow without a duplicate or a
        gap. Returns the number of lines removed."""
        records = read_lines(self.path) if self.path.exists() else []
        kept = [record for record in records if iteration_of(record) <= iteration]
        removed = len(records) - len(kept) + self._unfinished_last_line()
        if removed:
            temporary = self.path.with_name(f".{self.path.name}.tmp")
            with open(temporary, "w") as f:
                f.writelines(json.dumps(record) + "\n" for record in kept)
            os.replace(temporary, self.path)
            print(
                f"{self.path}: {removed} line(s) written after the checkpoint at row {iteration} "
                "removed; the run continues from there.",
                file=sys.stderr,
                flush=True,
            )
            steps = [record[STEP_KEY] for record in kept if STEP_KEY in record]
            self.tensorboard.purge_after(max(steps, default=-1))  # their event files' rows too
        with self._lock:
            self._rows = [record for record in kept if record.get("type") != "header"]
        return removed

    def close(self) -> None:
        """The loop ended: flush and close what stays open between rows (the event files)."""
        self.tensorboard.close()

    def _unfinished_last_line(self) -> int:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return 0
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return int(f.read(1) != b"\n")


def iteration_of(record: dict) -> int:
    """The rows a run had written when a line of ``metrics.jsonl`` was (a header's, a row's)."""
    if record.get("type") == "header":
        return int(record["iteration"])
    return int(record.get("charts/iteration", 0))


class EpisodeWindow:
    """Finished episodes: those since the last row, the last ``RETURN_WINDOW``, the total."""

    def __init__(self) -> None:
        self.recent: deque = deque(maxlen=RETURN_WINDOW)
        self.total = 0
        self._returns: list[float] = []
        self._lengths: list[int] = []

    def record(self, returns: list[float], lengths: list[int] | None = None) -> None:
        self._returns.extend(float(r) for r in returns)
        self._lengths.extend(int(n) for n in (lengths or ()))
        self.recent.extend(float(r) for r in returns)
        self.total += len(returns)

    def mean(self) -> float | None:
        """The mean of the last ``RETURN_WINDOW`` episodes, once that many have ended."""
        return float(np.mean(self.recent)) if len(self.recent) == RETURN_WINDOW else None

    def take_interval(self) -> dict[str, Any]:
        """The shared keys of the episodes since the last call (and forget them)."""
        keys: dict[str, Any] = {
            "charts/episodes": len(self._returns),
            "charts/total_episodes": self.total,
            "charts/mean_return": self.mean(),
        }
        if self._returns:  # raw returns of the episodes that ended since the last row
            keys["charts/episode_return"] = float(np.mean(self._returns))
            if self._lengths:
                keys["charts/episode_length"] = float(np.mean(self._lengths))
        self._returns, self._lengths = [], []
        return keys

    def state_dict(self) -> dict[str, Any]:
        return {"recent": list(self.recent), "total": self.total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.recent.clear()
        self.recent.extend(state["recent"])
        self.total = int(state["total"])


def row_line(row: dict, target_metric: str) -> str:
    """One progress line of a row: env steps, updates, the target metric, steps/s."""
    value = row.get(target_metric)
    shown = "   n/a" if value is None else f"{value:7.1f}"
    return (
        f"env steps {row['charts/env_steps']:>9}  updates {row['charts/updates']:>7}  "
        f"return {shown}  {row['charts/steps_per_second']:8.0f} steps/s"
    )
