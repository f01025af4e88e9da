"""R2D2's Sec. 3 study, for notebook 08: how should a replayed sequence's LSTM state start?

Kapturowski et al. (2019, https://openreview.net/forum?id=r1lyTjAqYX, Sec. 3 and Fig. 1) compare
four ways on a network that has moved on since the actor acted: a **zero state** or the **stored
state** (the actor's, kept in replay), each with or without a **burn-in** (the learner's network
unrolled over the rows before the trained ones, without gradient). They measure the Q-value
discrepancy against the state the learner's own network would have reached from the episode's
start:

    ΔQ = ||q(ŝ_t; θ) - q(s_t; θ)||_2 / |max_j q(s_t; θ)_j|

with ``θ`` the learner's parameters, ``s_t`` the "true" state and ``ŝ_t`` the strategy's. The stored
state is stale (it came from the actor's older parameters); a zero state is wrong whenever the
episode began before the sequence. Burn-in lets the learner's network rebuild the state from
either start.
"""

from __future__ import annotations

import torch

from workbench.models import RecurrentQNetwork

__all__ = ["STRATEGIES", "burn_in_strategies", "q_value_discrepancy"]

STRATEGIES = ("zero state", "zero state + burn-in", "stored state", "stored state + burn-in")


def q_value_discrepancy(q_hat: torch.Tensor, q_true: torch.Tensor) -> torch.Tensor:
    """ΔQ per row (R2D2, Sec. 3): ``||q_hat - q_true||_2 / |max_j q_true_j|`` over the actions
    (last dim); ``q_hat`` and ``q_true`` of the same shape ``[..., actions]``."""
    if q_hat.shape != q_true.shape:
        raise ValueError(f"q_hat {tuple(q_hat.shape)} and q_true {tuple(q_true.shape)} differ")
    return (q_hat - q_true).norm(dim=-1) / q_true.max(dim=-1).values.abs()


def burn_in_strategies(
    current: RecurrentQNetwork,
    stale: RecurrentQNetwork,
    obs: torch.Tensor,
    first: torch.Tensor,
    *,
    start: int,
    burn_in: int,
    length: int,
) -> dict[str, torch.Tensor]:
    """ΔQ of each of R2D2's four strategies on one trajectory, row by row over a sequence.

    Args:
        current: the learner's network (``θ``): it computes every Q-value.
        stale: the actors' network when they acted: the stored states are its.
        obs, first: ``[T, 1, ...]`` and ``[T, 1]`` of one env, from an episode's start (row 0).
        start: the sequence's first trained row; ``burn_in`` rows before it are burned in.
        length: trained rows.

    Returns:
        ``{strategy: ΔQ [length]}`` in ``STRATEGIES`` order; row 0 is the first trained row.
    """
    steps = obs.shape[0]
    if burn_in < 0 or start - burn_in < 0:
        raise ValueError(
            f"start={start} leaves no room for burn_in={burn_in}: the burn-in starts at row "
            f"{start - burn_in}; pick start >= burn_in >= 0"
        )
    if length < 1 or start + length > steps:
        raise ValueError(
            f"rows {start}..{start + length - 1} pass the trajectory's {steps} rows; shorten "
            "length or record a longer trajectory"
        )
    end = start + length

    def stored_at(row: int) -> tuple[torch.Tensor, torch.Tensor]:
        # what the actor's network carried into `row`, acting from the episode's start
        if row == 0:
            return stale.initial_state(1)
        return stale(obs[:row], stale.initial_state(1), first[:row])[1]

    def unroll(state: tuple[torch.Tensor, torch.Tensor], begin: int) -> torch.Tensor:
        q, _ = current(obs[begin:end], state, first[begin:end])
        return q[start - begin :]

    with torch.no_grad():
        q_true = current(obs[:end], current.initial_state(1), first[:end])[0][start:]
        q_hats = {
            "zero state": unroll(current.initial_state(1), start),
            "zero state + burn-in": unroll(current.initial_state(1), start - burn_in),
            "stored state": unroll(stored_at(start), start),
            "stored state + burn-in": unroll(stored_at(start - burn_in), start - burn_in),
        }
        return {name: q_value_discrepancy(q_hats[name], q_true)[:, 0] for name in STRATEGIES}
