"""A run's rows as what the notebooks draw and assert on: learning curves, a row waited for.

``learning_curve`` turns the rows of any run kind into the mean return of its last episodes
against env steps and wall seconds; ``wait_for_row`` waits for a row (or an event) of a run going
in the background; ``study_dir`` is a fresh folder for a study's runs.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.runs.lifecycle import ENDED, RunLifecycle

__all__ = ["LearningCurve", "learning_curve", "slug", "study_dir", "wait_for_row"]


@dataclass
class LearningCurve:
    """One run's progress: the mean raw return of (about) the last ``window`` episodes."""

    label: str
    env_steps: list[int] = field(default_factory=list)
    wall_seconds: list[float] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    steps_per_second: float = 0.0
    """Env steps per wall second over the whole run."""
    learning_rate: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def final_return(self) -> float:
        return self.returns[-1] if self.returns else float("nan")

    def steps_to(self, target: float) -> int | None:
        """Env steps at which the curve first reached ``target`` (None: never)."""
        return next(
            (steps for steps, value in zip(self.env_steps, self.returns) if value >= target), None
        )

    def seconds_to(self, target: float) -> float | None:
        """Wall seconds at which the curve first reached ``target`` (None: never)."""
        return next(
            (sec for sec, value in zip(self.wall_seconds, self.returns) if value >= target), None
        )


def learning_curve(rows: Sequence[dict], label: str, *, window: int = 20) -> LearningCurve:
    """The curve of a run's iteration rows: after each iteration with ended episodes, the mean
    return of the latest batches that hold at least ``window`` episodes (each batch's mean weighted
    by its episode count), as a row's ``charts/mean_return`` is over the last 20 single
    episodes."""
    curve = LearningCurve(label)
    recent: list[tuple[float, int]] = []  # (batch mean return, episodes), newest last
    rows = [row for row in rows if "event" not in row]
    for row in rows:
        if not row.get("charts/episodes") or row.get("charts/episode_return") is None:
            continue
        recent.append((row["charts/episode_return"], row["charts/episodes"]))
        while len(recent) > 1 and sum(count for _, count in recent[1:]) >= window:
            recent.pop(0)
        total = sum(count for _, count in recent)
        curve.env_steps.append(row["charts/env_steps"])
        curve.wall_seconds.append(row["charts/wall_seconds"])
        curve.returns.append(sum(mean * count for mean, count in recent) / total)
    if rows:
        curve.steps_per_second = rows[-1]["charts/env_steps"] / max(
            rows[-1]["charts/wall_seconds"], 1e-9
        )
        curve.learning_rate = rows[-1].get("charts/learning_rate")
    return curve


def wait_for_row(
    run: RunLifecycle, predicate: Callable[[dict], bool], *, timeout: float = 120.0
) -> dict:
    """The first row of ``run.metrics`` (any run kind: ``Run``, ``Apex``, ``Seed``) for which
    ``predicate(row)`` holds, waiting for it while the run goes. Raises TimeoutError after
    ``timeout`` seconds, RuntimeError if the run ends first."""
    deadline = time.monotonic() + timeout
    seen = 0
    while True:
        ended = run.status in ENDED or (run.status == "created" and run.error is not None)
        rows = run.metrics
        for row in rows[seen:]:
            if predicate(row):
                return row
        seen = len(rows)
        if ended:
            raise RuntimeError(
                f"run {run.name!r} ended ({run.status}) before the row came"
                + (f": {run.error}" if run.error else "")
            )
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no such row in run {run.name!r} after {timeout:g} s (status {run.status})"
            )
        time.sleep(0.05)


def study_dir(prefix: str) -> str:
    """A fresh folder for one study's runs: inside ``$WORKBENCH_RUNS_DIR`` when it is set (the
    tests and nbval set it to a folder they remove), else in the system's temporary folder."""
    parent = os.environ.get("WORKBENCH_RUNS_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=parent)


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-") or "run"
