"""Losses and batch statistics: pure tensor functions, checked against the papers in the tests.

* ``clipped_policy_loss`` (PPO, Eq. 7) and ``value_loss`` (optionally clipped, PPO2),
  ``normalize_advantages`` and ``explained_variance``;
* ``double_q_action``: the next action of a Q-learning target, chosen by the online network
  (double Q-learning) or by the target network;
* ``sequence_priority``: R2D2's mix of the max and the mean |TD error| of a sequence.

Each takes tensors of one shape (``[T, B]`` or a flattened minibatch ``[N]``) unless its docstring
says otherwise, and holds no state.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = [
    "clipped_policy_loss",
    "double_q_action",
    "explained_variance",
    "normalize_advantages",
    "sequence_priority",
    "value_loss",
]


def normalize_advantages(advantages: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(A - mean(A)) / (std(A) + eps)``: zero mean, unit standard deviation.

    Huang et al. 2022, *37 Implementation Details of PPO*, detail 7 (done per minibatch, as in
    OpenAI baselines). A single element has no spread: it is only centred (to 0).

    Args:
        advantages: float, any shape (``[T, B]`` or a flattened minibatch ``[N]``).
    """
    centred = advantages - advantages.mean()
    if advantages.numel() < 2:
        return centred
    return centred / (advantages.std() + eps)


def clipped_policy_loss(
    behaviour_logp: torch.Tensor,
    target_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_coef: float,
    *,
    reduction: Literal["mean", "none"] = "mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, as a loss to minimise.

    Schulman et al. 2017, https://arxiv.org/abs/1707.06347, Eq. 7::

        r_t(theta) = pi_theta(a_t|s_t) / pi_theta_old(a_t|s_t)
        L^CLIP     = E_t[ min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t) ]

    returned as ``mean(max(-r A, -clip(r, 1 - eps, 1 + eps) A)) = -L^CLIP``. Where the ratio has
    left ``[1 - eps, 1 + eps]`` in the direction the advantage favours (``r > 1 + eps`` with
    ``A > 0``, ``r < 1 - eps`` with ``A < 0``) the clipped term is the smaller one and is constant
    in theta: that sample gives no gradient.

    Symbols to arguments: ``pi_theta_old`` = ``exp(behaviour_logp)``, ``pi_theta`` =
    ``exp(target_logp)``, ``A_t`` = ``advantages``, ``eps`` = ``clip_coef``.

    Args:
        behaviour_logp: float ``[N]`` (or ``[T, B]``) log-probabilities of the actions under the
            policy that collected them.
        target_logp: float, same shape: the same actions under the policy being learned (with
            gradient).
        advantages: float, same shape; treated as constants.
        clip_coef: ``eps`` > 0.
        reduction: ``"mean"`` (the scalar loss) or ``"none"`` (one loss per sample, for a learner
            that reduces it itself, e.g. over data-parallel shards).

    Returns:
        ``(loss, ratio)``: the loss and the ratios ``r_t`` (same shape as the inputs).
    """
    if not behaviour_logp.shape == target_logp.shape == advantages.shape:
        raise ValueError(
            "clipped_policy_loss: behaviour_logp, target_logp and advantages must have one shape; "
            f"got {list(behaviour_logp.shape)}, {list(target_logp.shape)}, {list(advantages.shape)}"
        )
    ratio = torch.exp(target_logp - behaviour_logp)
    advantages = advantages.detach()
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    losses = torch.max(unclipped, clipped)
    return (losses.mean() if reduction == "mean" else losses), ratio


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    *,
    behaviour_values: torch.Tensor | None = None,
    clip_coef: float | None = None,
    reduction: Literal["mean", "none"] = "mean",
) -> torch.Tensor:
    """Half the mean squared error to the value targets, optionally clipped as in PPO2.

    Without clipping: ``0.5 * mean((V - R)^2)``. With ``clip_coef`` (OpenAI baselines' PPO2;
    Huang et al. 2022, detail 9; Engstrom et al. 2020, https://arxiv.org/abs/2005.12729, found it
    does not help and can hurt, so it is an option)::

        V_clip = V_old + clip(V - V_old, -eps, eps)
        loss   = 0.5 * mean(max((V - R)^2, (V_clip - R)^2))

    Symbols to arguments: ``V`` = ``values`` (with gradient), ``R`` = ``returns`` (targets),
    ``V_old`` = ``behaviour_values`` (the values stored at collection), ``eps`` = ``clip_coef``.

    Args:
        values: float ``[N]`` (or ``[T, B]``) predictions of the model being trained.
        returns: float, same shape: targets, treated as constants.
        behaviour_values: float, same shape; needed when ``clip_coef`` is given.
        clip_coef: None for the plain squared error.
        reduction: ``"mean"`` (the scalar loss) or ``"none"`` (``0.5 * max(...)`` per sample).

    Returns:
        The loss.
    """
    returns = returns.detach()
    if values.shape != returns.shape:
        raise ValueError(
            f"value_loss: values {list(values.shape)} and returns {list(returns.shape)} differ"
        )
    unclipped = (values - returns) ** 2
    if clip_coef is None:
        return 0.5 * unclipped.mean() if reduction == "mean" else 0.5 * unclipped
    if behaviour_values is None or behaviour_values.shape != values.shape:
        raise ValueError(
            "value_loss: clip_coef needs behaviour_values of the same shape as values (the values "
            "the sampler stored, rollout.policy_outputs['value'])"
        )
    behaviour_values = behaviour_values.detach()
    clipped = behaviour_values + torch.clamp(values - behaviour_values, -clip_coef, clip_coef)
    worst = torch.max(unclipped, (clipped - returns) ** 2)
    return 0.5 * worst.mean() if reduction == "mean" else 0.5 * worst


@torch.no_grad()
def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """``1 - Var(R - V) / Var(R)``: 1 is a perfect value function, 0 no better than a constant.

    NaN when the returns have no variance. Args: ``values`` and ``returns``, float, one shape.
    """
    var_returns = returns.float().var()
    if returns.numel() < 2 or var_returns == 0:
        return float("nan")
    return float(1 - (returns.float() - values.float()).var() / var_returns)


def double_q_action(target_q: torch.Tensor, online_q: torch.Tensor | None = None) -> torch.Tensor:
    """The action ``a*`` a Q-learning target bootstraps from, ``[...]`` (``argmax`` over the last
    axis).

    Double Q-learning (van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461, Eq. 4): the online
    network picks the action, the target network values it, which removes the upward bias of
    ``max_a Q_target(s', a)``::

        a* = argmax_a Q_online(s', a)      (double: pass ``online_q``)
        a* = argmax_a Q_target(s', a)      (plain DQN: ``online_q`` None)

    Args:
        target_q: float ``[..., A]`` ``Q_target(s', .)``.
        online_q: float ``[..., A]`` ``Q_online(s', .)``, or None for plain DQN.

    Returns:
        int64 ``[...]`` the chosen actions.
    """
    chooser = target_q if online_q is None else online_q
    if online_q is not None and online_q.shape != target_q.shape:
        raise ValueError(
            f"double_q_action: online_q {list(online_q.shape)} and target_q "
            f"{list(target_q.shape)} must have one shape [..., num_actions]"
        )
    return chooser.argmax(-1)


def sequence_priority(td: torch.Tensor, usable: torch.Tensor | None, eta: float) -> torch.Tensor:
    """R2D2's sequence priority (Kapturowski et al. 2019, Sec. 2)::

        p = eta max_t |delta_t| + (1 - eta) mean_t |delta_t|

    over the sequence's usable rows; 0 for a sequence without one.

    Args:
        td: float ``[S, B]`` TD errors ``delta_t`` of the trained rows.
        usable: bool ``[S, B]`` rows that count (None: all).
        eta: the mix in ``[0, 1]`` (0.9 in R2D2).

    Returns:
        float ``[B]`` priorities (the replay adds its eps and raises them to alpha).
    """
    if td.dim() != 2 or (usable is not None and usable.shape != td.shape):
        raise ValueError(
            f"sequence_priority: expected td [S, B] and usable [S, B] (time-major: S rows, B "
            f"sequences); got td {list(td.shape)}, usable "
            f"{None if usable is None else list(usable.shape)}"
        )
    if not 0.0 <= eta <= 1.0:
        raise ValueError(f"sequence_priority: eta must be in [0, 1], got {eta}")
    mask = torch.ones_like(td) if usable is None else usable.to(td.dtype)
    abs_td = td.abs() * mask
    mean = abs_td.sum(0) / mask.sum(0).clamp(min=1.0)
    return eta * abs_td.max(0).values + (1 - eta) * mean
