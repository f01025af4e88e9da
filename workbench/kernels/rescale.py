"""R2D2's invertible value rescaling ``h`` and its exact inverse."""

from __future__ import annotations

import torch

__all__ = ["inverse_value_rescale", "value_rescale"]


def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """R2D2's invertible value rescaling ``h``.

    Kapturowski et al. 2019, *Recurrent Experience Replay in Distributed Reinforcement Learning*,
    https://openreview.net/forum?id=r1lyTjAqYX, Section 2 (from Pohlen et al. 2018,
    https://arxiv.org/abs/1805.11593, Section 3.2)::

        h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x

    computed as ``x / (sqrt(|x| + 1) + 1) + eps x``, the same value without cancellation near 0.

    Args:
        x: float tensor of any shape (e.g. ``[T, B]`` returns).
        eps: the small linear term ``eps`` >= 0 that keeps ``h^-1`` Lipschitz.

    Returns:
        float tensor, the shape of ``x``.
    """
    if eps < 0:
        raise ValueError(f"value_rescale: eps must be >= 0, got {eps}")
    return x / (torch.sqrt(x.abs() + 1) + 1) + eps * x


def inverse_value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """The exact inverse ``h^-1`` of ``value_rescale``.

    Pohlen et al. 2018, *Observe and Look Further*, https://arxiv.org/abs/1805.11593,
    Proposition A.2::

        h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)

    computed in an equivalent form without cancellation: with ``D = 1 + 4 eps (|x| + 1 + eps)
    = (1 + 2 eps)^2 + 4 eps |x|`` and ``u = 2 |x| / (1 + 2 eps + sqrt(D))`` (the root of
    ``eps u^2 + (1 + 2 eps) u = |x|``, i.e. ``u = sqrt(|h^-1(x)| + 1) - 1``),
    ``h^-1(x) = sign(x) u (u + 2)``. The form also holds at ``eps = 0``.

    Args:
        x: float tensor of any shape, rescaled values.
        eps: the ``eps`` used by ``value_rescale``.

    Returns:
        float tensor, the shape of ``x``.
    """
    if eps < 0:
        raise ValueError(f"inverse_value_rescale: eps must be >= 0, got {eps}")
    abs_x = x.abs()
    root = torch.sqrt((1 + 2 * eps) ** 2 + 4 * eps * abs_x)
    u = 2 * abs_x / (1 + 2 * eps + root)
    return torch.sign(x) * u * (u + 2)
