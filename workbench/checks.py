"""Argument checks every layer shares, so that a bad value gets the same sentence everywhere.

A count (envs, actors, a batch, a capacity) is a positive integer; a bool is not one, though
Python counts it as an int, and a NumPy integer is one.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

__all__ = ["positive_int"]


def positive_int(value: Any, name: str, hint: str = "") -> int:
    """``value`` as an ``int`` when it is an integer >= 1, else a ValueError naming ``name``, the
    value and, when given, ``hint`` (how to choose one)."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(
            f"{name} must be a positive integer, got {value!r}" + (f"; {hint}" if hint else ".")
        )
    return int(value)
