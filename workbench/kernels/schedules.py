"""Schedules: how a learning rate follows the batch size, and linear annealing."""

from __future__ import annotations

import math
from typing import Literal

from workbench.checks import positive_int

__all__ = ["ScaleRule", "linear_schedule", "scaled_learning_rate"]

ScaleRule = Literal["linear", "sqrt"]


def scaled_learning_rate(
    base_lr: float,
    batch_size: int,
    reference_batch_size: int,
    rule: ScaleRule = "linear",
    *,
    max_lr: float | None = None,
) -> float:
    """The learning rate for ``batch_size`` samples per update, from one tuned at another size.

    Stooke & Abbeel 2018, *Accelerated Methods for Deep Reinforcement Learning*,
    https://arxiv.org/abs/1803.02811, Section 4 ("Large batch training"): A2C and PPO keep their
    sample complexity at batch sizes far beyond the standard ones when the learning rate is raised
    with the batch, which is what makes many simulators per learner (and many GPUs) pay off. Two
    rules, with ``k = batch_size / reference_batch_size``::

        linear:  lr = base_lr * k          (Goyal et al. 2017, https://arxiv.org/abs/1706.02677)
        sqrt:    lr = base_lr * sqrt(k)    (Krizhevsky 2014, https://arxiv.org/abs/1404.5997;
                                            Hoffer et al. 2017, https://arxiv.org/abs/1705.08741)

    then ``lr = min(lr, max_lr)`` when ``max_lr`` is given.

    Why two: a k-times larger batch averages k times as many samples, so one step carries the
    information of k small steps. For plain SGD the linear rule keeps the distance moved per sample
    the same (k small steps ~ one step k times longer, while the gradient changes slowly). The
    square-root rule keeps the *variance* of the update the same instead (the gradient noise falls
    as 1/k). Adam and RMSProp divide by a running gradient scale, so their step is already
    insensitive to the gradient's size; the linear rule then overshoots sooner, and the sqrt rule
    is the conservative choice for them. Both rules break down beyond some batch size (Goyal et
    al.; Stooke & Abbeel observe the same for the largest batches), hence ``max_lr``.

    Args:
        base_lr: the learning rate tuned at ``reference_batch_size``.
        batch_size: samples per update now (``T * B`` of the rollout).
        reference_batch_size: samples per update at which ``base_lr`` was tuned.
        rule: ``"linear"`` or ``"sqrt"``.
        max_lr: optional cap on the result.

    Returns:
        The scaled learning rate (``base_lr`` when ``batch_size == reference_batch_size``).
    """
    if rule not in ("linear", "sqrt"):
        raise ValueError(f"scaled_learning_rate: rule must be 'linear' or 'sqrt', got {rule!r}")
    positive_int(batch_size, "scaled_learning_rate: batch_size")
    positive_int(reference_batch_size, "scaled_learning_rate: reference_batch_size")
    if not base_lr > 0:
        raise ValueError(f"scaled_learning_rate: base_lr must be positive, got {base_lr}")
    k = batch_size / reference_batch_size
    lr = base_lr * (k if rule == "linear" else math.sqrt(k))
    if max_lr is not None:
        lr = min(lr, max_lr)
    return lr


def linear_schedule(start: float, end: float, progress: float) -> float:
    """``start`` moving linearly to ``end`` as ``progress`` goes from 0 to 1 (then ``end``)."""
    progress = min(max(progress, 0.0), 1.0)
    return start + (end - start) * progress
