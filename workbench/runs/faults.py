"""Faults a run stops at instead of carrying them on: a loss that is no longer a number.

A NaN or infinite loss or gradient norm spreads into the weights at the next step and from there
into every later checkpoint, so each kind checks its learner's metrics after every update
(``check_finite``) and raises ``NonFiniteLoss`` with the batch that produced them. The run's loop
fails with it, writes no checkpoint over the last good one, and keeps the batch beside it
(``nonfinite_batch.pt``), so the failure can be replayed and looked at.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

__all__ = ["NonFiniteLoss", "check_finite"]


class NonFiniteLoss(FloatingPointError):
    """A learner update whose losses (or gradient norm) are not finite, with its batch."""

    def __init__(self, values: dict[str, float], where: str, batch: Any) -> None:
        self.values, self.where, self.batch = values, where, batch
        self.kept: str | None = None
        super().__init__(self.describe())

    def describe(self) -> str:
        shown = ", ".join(f"{key}={value}" for key, value in self.values.items())
        return f"{shown} at {self.where}: the run stopped there. " + (
            self.kept or "Lower the learning rate or clip gradients harder, then continue."
        )

    def keep(self, folder: Path, checkpoint: Path) -> None:
        """Save the batch in the run's ``folder`` and say where it and the last good checkpoint
        are (what the run's error message then ends with)."""
        path = folder / "nonfinite_batch.pt"
        try:
            torch.save(self.batch, path)
            batch = f"The batch that produced it is in {path} (torch.load(..., weights_only=False))"
        except Exception as error:  # a batch that does not pickle: say so, keep the message
            batch = f"Its batch could not be saved ({type(error).__name__}: {error})"
        self.kept = (
            f"{batch}; the last good checkpoint, {checkpoint}, is kept: continue it with "
            "from_checkpoint, with a lower learning rate or harder gradient clipping."
        )
        self.args = (self.describe(),)


def check_finite(metrics: dict[str, Any], batch: Any, where: str) -> None:
    """Raise ``NonFiniteLoss`` when a ``losses/...`` value of an update's ``metrics`` is NaN or
    infinite (``where``: which update, for the message; ``batch``: what it trained on)."""
    bad = {}
    for key, value in metrics.items():
        if key.startswith("losses/"):
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            if not math.isfinite(number):
                bad[key] = number
    if bad:
        raise NonFiniteLoss(bad, where, batch)
