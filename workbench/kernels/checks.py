"""Argument checks shared by the kernels: time-major ``[T, B]`` tensors, stated once.

Every kernel takes ``rewards``, ``values``, ``discounts`` ... as ``[T, B]`` (T steps, B
environments) and per-environment tensors such as ``bootstrap_value`` as ``[B]``. A tensor of any
other shape is refused at the kernel's entry with a message that names the fix.
"""

from __future__ import annotations

import torch

__all__ = ["check_time_major", "continuation_mask", "shape_error", "shifted_values"]


def shape_error(fn: str, expected: dict[str, str], tensors: dict[str, torch.Tensor]) -> ValueError:
    want = ", ".join(f"{name} {shape}" for name, shape in expected.items())
    got = ", ".join(f"{name} {list(t.shape)}" for name, t in tensors.items())
    return ValueError(
        f"{fn}: expected {want} (time-major: T steps, B environments); got {got}. "
        f"Pass tensors time-major [T, B]; transpose batch-major data with x.transpose(0, 1)."
    )


def check_time_major(
    fn: str,
    tb: dict[str, torch.Tensor | None],
    b: dict[str, torch.Tensor | None],
) -> tuple[int, int]:
    """Check that every tensor in ``tb`` is ``[T, B]`` and every tensor in ``b`` is ``[B]``."""
    present_tb = {k: v for k, v in tb.items() if v is not None}
    present_b = {k: v for k, v in b.items() if v is not None}
    for name, t in {**present_tb, **present_b}.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    expected = {k: "[T, B]" for k in present_tb} | {k: "[B]" for k in present_b}
    tensors = {**present_tb, **present_b}
    first = next(iter(present_tb.values()))
    if first.dim() != 2:
        raise shape_error(fn, expected, tensors)
    T, B = first.shape
    if any(t.shape != (T, B) for t in present_tb.values()) or any(
        t.shape != (B,) for t in present_b.values()
    ):
        raise shape_error(fn, expected, tensors)
    if T == 0:
        raise ValueError(
            f"{fn}: T (the first dimension) must be at least 1, got {list(first.shape)}"
        )
    return T, B


def shifted_values(values: torch.Tensor, bootstrap_value: torch.Tensor) -> torch.Tensor:
    """``[V_1, ..., V_{T-1}, bootstrap_value]``: the value of the observation after each step."""
    return torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)


def continuation_mask(
    continuation: torch.Tensor | None, discounts: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """``continuation`` as ``dtype`` (1: the episode goes on after step t, 0: it ended there);
    by default wherever ``discounts > 0``, i.e. no cut but terminations."""
    if continuation is None:
        return (discounts > 0).to(dtype)
    return continuation.to(dtype)
