"""A run's checkpoints on disk: written on a timer and when the loop ends, each one whole or not at
all, the one before it kept beside it, and read back from the previous one when the newest is
damaged.

What ends a run on a laptop or a shared machine is rarely a clean stop: a killed kernel, an
out-of-memory kill, a full disk. So a run (``RunLifecycle``) checkpoints every
``CHECKPOINT_SECONDS`` of wall time by default (RLlib and Sample Factory checkpoint on a timer
too), and every write follows one order:

1. ``torch.save`` to a temporary file in the same folder, flushed to the disk (``fsync``);
2. the current ``checkpoint.pt`` becomes ``checkpoint.previous.pt`` (``os.replace``);
3. the temporary file becomes ``checkpoint.pt`` (``os.replace``).

A kill between any two steps leaves a whole checkpoint under one of the two names, and
``load_checkpoint_file`` takes the newest one that loads. A failed write (a full disk) raises
``CheckpointError`` and removes its temporary file; what was on disk stays as it was.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "CHECKPOINT_SECONDS",
    "CheckpointError",
    "CheckpointWriter",
    "load_checkpoint_file",
    "previous_checkpoint",
    "save_atomically",
    "save_keeping_previous",
]

CHECKPOINT_SECONDS = 300.0
"""Wall seconds between a run's checkpoints by default (``checkpoint_seconds``; None: none on a
timer). Its cost is measured by ``benchmarks/checkpoint_cost.py``."""

DAMAGED = (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError, KeyError)
"""What ``torch.load`` raises on a truncated or corrupt file."""


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, or none beside a run could be read."""


def previous_checkpoint(path: "str | os.PathLike") -> Path:
    """Where the checkpoint before ``path`` is kept: ``checkpoint.previous.pt`` beside it."""
    path = Path(path)
    return path.with_name(f"{path.stem}.previous{path.suffix}")


def _write_temporary(state: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(temporary, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise CheckpointError(
                f"could not write a checkpoint to {path.parent} ({error.strerror or error}); "
                "free space there or give the run another runs_dir. The checkpoint already "
                "there is unchanged."
            ) from error
        raise
    return temporary


def save_atomically(state: dict[str, Any], path: Path) -> Path:
    """``torch.save`` to a temporary file, then ``os.replace``: a crash mid-write leaves the file
    that was there whole (for files no run resumes from: a policy, an export)."""
    temporary = _write_temporary(state, path)
    try:
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def save_keeping_previous(state: dict[str, Any], path: Path) -> int:
    """Write a run's checkpoint in the module's three steps; returns its size in bytes."""
    temporary = _write_temporary(state, path)
    try:
        if path.exists():
            os.replace(path, previous_checkpoint(path))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path.stat().st_size


def _load(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


def load_checkpoint_file(path: "str | os.PathLike") -> dict[str, Any]:
    """A checkpoint (a file, or a run's folder holding ``checkpoint.pt``), loaded on the CPU.

    A damaged file (truncated, corrupt) gives way to the one kept before it
    (``checkpoint.previous.pt``), with a warning that says so; when neither loads, or there is
    none, a ``CheckpointError`` names both files."""
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoint.pt"
    previous = previous_checkpoint(path)
    if not path.is_file() and not previous.is_file():
        raise FileNotFoundError(
            f"no checkpoint at {path}; pass a run's folder or its checkpoint.pt"
        )
    problems = []
    for candidate in (path, previous):
        if not candidate.is_file():
            problems.append(f"{candidate.name}: missing")
            continue
        try:
            saved = _load(candidate)
        except DAMAGED as error:
            problems.append(f"{candidate.name}: {type(error).__name__}: {str(error)[:200]}")
            continue
        if candidate != path:
            print(
                f"{path} could not be read ({problems[0]}); continuing from the checkpoint "
                f"before it, {candidate} (at {saved.get('env_steps', '?')} env steps).",
                file=sys.stderr,
                flush=True,
            )
        return saved
    raise CheckpointError(
        f"no readable checkpoint in {path.parent}: " + "; ".join(problems) + ". Start the run "
        "anew, or continue another run's checkpoint."
    )


class CheckpointWriter:
    """A run's checkpoints: when one is due, every ``every_rows`` rows (0: never by rows) and every
    ``every_seconds`` of the run's wall time (None: never by time) counted from the last one, and
    the write itself (``save_keeping_previous``), timed."""

    def __init__(
        self, path: Path, every_rows: int = 0, every_seconds: float | None = CHECKPOINT_SECONDS
    ) -> None:
        if isinstance(every_rows, bool) or not isinstance(every_rows, int) or every_rows < 0:
            raise ValueError(
                f"checkpoint_every={every_rows!r} must be an int >= 0 (0: not by rows)"
            )
        if every_seconds is not None and not every_seconds > 0:
            raise ValueError(
                f"checkpoint_seconds={every_seconds!r} must be > 0, or None for no timed "
                "checkpoints"
            )
        self.path, self.every_rows, self.every_seconds = path, every_rows, every_seconds
        self.last_wall: float | None = None
        """The run's wall seconds at the last checkpoint (None: none yet in this process)."""
        self.last_cost: dict[str, float] = {}
        """The last write's ``seconds`` and ``bytes``."""

    def start(self, wall_seconds: float) -> None:
        """A segment starts at ``wall_seconds``: the first period counts from here."""
        if self.last_wall is None:
            self.last_wall = wall_seconds

    def due(self, rows: int, wall_seconds: float) -> bool:
        by_rows = bool(self.every_rows) and rows % self.every_rows == 0
        by_time = (
            self.every_seconds is not None
            and self.last_wall is not None
            and wall_seconds - self.last_wall >= self.every_seconds
        )
        return by_rows or by_time

    def save(self, state: dict[str, Any], wall_seconds: float) -> Path:
        """Write ``state`` as the checkpoint (the previous one kept), at the run's
        ``wall_seconds``."""
        started = time.perf_counter()
        size = save_keeping_previous(state, self.path)
        self.last_cost = {"seconds": time.perf_counter() - started, "bytes": float(size)}
        self.last_wall = wall_seconds
        return self.path
