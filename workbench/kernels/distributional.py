"""Distributional RL: the C51 projection of a target distribution onto a fixed support."""

from __future__ import annotations

import torch

__all__ = ["categorical_projection"]


def categorical_projection(
    next_probs: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    support: torch.Tensor,
) -> torch.Tensor:
    """Project the distribution of ``r + d z`` back onto the fixed support (C51's target).

    Bellemare, Dabney, Munos 2017, *A Distributional Perspective on Reinforcement Learning*,
    https://arxiv.org/abs/1707.06887, Algorithm 1::

        for j in 0..N-1:
            Tz_j = clip(r + gamma z_j, V_MIN, V_MAX)
            b_j  = (Tz_j - V_MIN) / dz;   l = floor(b_j), u = ceil(b_j)
            m_l += p_j(x_{t+1}, a*) (u - b_j);   m_u += p_j(x_{t+1}, a*) (b_j - l)

    Algorithm 1 as printed loses the mass ``p_j`` when ``b_j`` is an integer (``l == u``, both
    weights 0). Here the upper neighbour is ``l + 1`` with weight ``b_j - l`` and the lower one
    has weight ``1 - (b_j - l)``, so an exact hit sends all of ``p_j`` to atom ``l``.

    Symbols to arguments: ``p_j(x_{t+1}, a*)`` = ``next_probs[:, j]`` (the target network's
    probabilities at the greedy next action), ``r`` = ``rewards``, ``gamma`` = ``discounts``
    (``gamma^n (1 - terminated)`` for n-step returns), ``z`` = ``support``.

    Args:
        next_probs: float ``[B, N]`` next-state probabilities, each row summing to 1.
        rewards: float ``[B]`` rewards (n-step discounted sums for n-step C51).
        discounts: float ``[B]`` discounts applied to the support.
        support: float ``[N]`` atoms ``z_0 < ... < z_{N-1}``, evenly spaced (``N >= 2``).

    Returns:
        float ``[B, N]`` projected probabilities; each row sums to its ``next_probs`` row's sum.
    """
    for name, t in (
        ("next_probs", next_probs),
        ("rewards", rewards),
        ("discounts", discounts),
        ("support", support),
    ):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"categorical_projection: {name} must be a torch.Tensor")
    if (
        next_probs.dim() != 2
        or support.dim() != 1
        or support.shape[0] != next_probs.shape[1]
        or rewards.shape != (next_probs.shape[0],)
        or discounts.shape != (next_probs.shape[0],)
    ):
        raise ValueError(
            "categorical_projection: expected next_probs [B, N], rewards [B], discounts [B], "
            f"support [N]; got next_probs {list(next_probs.shape)}, rewards {list(rewards.shape)}, "
            f"discounts {list(discounts.shape)}, support {list(support.shape)}. "
            "Pass one row per transition (flatten [T, B] batches to [T * B] first)."
        )
    N = support.shape[0]
    if N < 2:
        raise ValueError(f"categorical_projection: the support needs at least 2 atoms, got {N}")
    dtype = next_probs.dtype
    z = support.to(dtype)
    gaps = z[1:] - z[:-1]
    v_min, v_max = z[0], z[-1]
    dz = (v_max - v_min) / (N - 1)
    if not bool((gaps > 0).all()) or not torch.allclose(
        gaps, dz.expand_as(gaps), rtol=1e-4, atol=0
    ):
        raise ValueError(
            "categorical_projection: support must be increasing and evenly spaced, e.g. "
            "torch.linspace(v_min, v_max, num_atoms)"
        )
    tz = rewards.to(dtype).unsqueeze(1) + discounts.to(dtype).unsqueeze(1) * z  # [B, N]
    tz = torch.minimum(torch.maximum(tz, v_min), v_max)
    b = ((tz - v_min) / dz).clamp(min=0, max=N - 1)
    lower = b.floor()
    upper_weight = b - lower  # 0 when b lands exactly on an atom: all mass to `lower`
    lower_index = lower.long()
    upper_index = (lower_index + 1).clamp(max=N - 1)  # at b == N-1 the upper weight is 0
    projected = torch.zeros_like(next_probs)
    projected = projected.scatter_add(1, lower_index, next_probs * (1 - upper_weight))
    projected = projected.scatter_add(1, upper_index, next_probs * upper_weight)
    return projected
