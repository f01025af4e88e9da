"""V-trace (IMPALA's off-policy correction), a pure tensor function over time-major ``[T, B]``.

Conventions as in ``kernels.returns``: one bootstrap form (``values [T, B]`` plus
``bootstrap_value [B]``), ``discounts = gamma * (1 - terminated)``, truncation handled through
``next_values`` and ``continuation``. ``vtrace`` runs under ``torch.no_grad``: its outputs are
targets.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from workbench.kernels.checks import check_time_major, continuation_mask, shifted_values

__all__ = ["VTraceReturns", "vtrace"]


class VTraceReturns(NamedTuple):
    """What ``vtrace`` returns; both are float ``[T, B]`` targets and carry no gradient.

    Attributes:
        vs: ``v_s``, the V-trace value targets (regress ``V(x_s)`` toward them).
        pg_advantages: ``rho_s (r_s + gamma v_{s+1} - V(x_s))``, the policy-gradient advantages.
    """

    vs: torch.Tensor
    pg_advantages: torch.Tensor


def vtrace(
    behaviour_logp: torch.Tensor,
    target_logp: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounts: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    clip_c_threshold: float | None = 1.0,
    *,
    next_values: torch.Tensor | None = None,
    continuation: torch.Tensor | None = None,
) -> VTraceReturns:
    """V-trace targets and policy-gradient advantages, by a reverse scan over T, without gradient.

    Espeholt et al. 2018, *IMPALA: Scalable Distributed Deep-RL with Importance Weighted
    Actor-Learner Architectures*, https://arxiv.org/abs/1802.01561, Eq. 1 and Remark 1::

        v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V      (Eq. 1)
        delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
        rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t))
        c_i   = min(c_bar, pi(a_i|x_i) / mu(a_i|x_i))

        v_s - V(x_s) = delta_s V + gamma c_s (v_{s+1} - V(x_{s+1}))                  (Remark 1)

    and the policy-gradient advantage of Section 4.2::

        pg_advantage_s = rho_pg_s (r_s + gamma v_{s+1} - V(x_s)),
        rho_pg_s = min(rho_bar_pg, pi(a_s|x_s) / mu(a_s|x_s))

    with ``v_T = V(x_T) = bootstrap_value``. ``gamma`` is per step here (``discounts[t]``), and
    episode boundaries are handled as in ``gae``::

        delta_t V    = rho_t (r_t + d_t * next_values_t - V_t)
        v_t - V_t    = delta_t V + d_t * k_t * c_t * (v_{t+1} - V_{t+1}),    v_T - V_T = 0
        pg_adv_t     = rho_pg_t (r_t + d_t * (next_values_t + k_t * (v_{t+1} - V_{t+1})) - V_t)

    where ``k_t`` is ``continuation[t]``; with the defaults (``next_values_t = V_{t+1}``,
    ``k_t = 1`` wherever ``d_t > 0``) these are exactly Remark 1 and Section 4.2.

    Symbols to arguments: ``mu`` = behaviour policy (``behaviour_logp = log mu(a_t|x_t)``), ``pi``
    = target policy (``target_logp = log pi(a_t|x_t)``), ``r_t`` = ``rewards``, ``V(x_t)`` =
    ``values``, ``V(x_T)`` = ``bootstrap_value``, ``gamma`` = ``discounts``, ``rho_bar`` =
    ``clip_rho_threshold``, ``rho_bar_pg`` = ``clip_pg_rho_threshold``, ``c_bar`` =
    ``clip_c_threshold``.

    Args:
        behaviour_logp: float ``[T, B]`` ``log mu(a_t|x_t)``, log-probabilities of the actions taken
            under the policy that acted (the actor's, stored in the rollout).
        target_logp: float ``[T, B]`` ``log pi(a_t|x_t)``, log-probabilities of the same actions
            under the policy being learned (the learner's current one).
        rewards: float ``[T, B]`` rewards ``r_t``.
        values: float ``[T, B]`` ``V(x_t)`` under the learner's value function.
        bootstrap_value: float ``[B]`` ``V(x_T)``, the value of the observation after step T-1.
        discounts: float ``[T, B]`` ``gamma * (1 - terminated)``.
        clip_rho_threshold: ``rho_bar``, clips the importance weights in ``delta_t V``; None: no
            clipping.
        clip_pg_rho_threshold: ``rho_bar_pg``, clips the weights of the policy-gradient advantage;
            None: no clipping.
        clip_c_threshold: ``c_bar``, clips the trace coefficients ``c_i``; None: no clipping.
        next_values: optional float ``[T, B]``, as in ``gae``: the value of the observation that
            followed step t within the same episode. Default ``[values[1:], bootstrap_value]``.
        continuation: optional float or bool ``[T, B]``, as in ``gae``: 0 where an episode ended at
            step t, 1 elsewhere. Default ``discounts > 0``.

    Returns:
        ``VTraceReturns(vs, pg_advantages)``, both float ``[T, B]`` with no gradient.
    """
    check_time_major(
        "vtrace",
        {
            "behaviour_logp": behaviour_logp,
            "target_logp": target_logp,
            "rewards": rewards,
            "values": values,
            "discounts": discounts,
            "next_values": next_values,
            "continuation": continuation,
        },
        {"bootstrap_value": bootstrap_value},
    )
    for name, threshold in (
        ("clip_rho_threshold", clip_rho_threshold),
        ("clip_pg_rho_threshold", clip_pg_rho_threshold),
        ("clip_c_threshold", clip_c_threshold),
    ):
        if threshold is not None and not threshold > 0:
            raise ValueError(f"vtrace: {name} must be positive or None, got {threshold}")

    with torch.no_grad():
        rhos = torch.exp(target_logp - behaviour_logp)
        clipped_rhos = rhos if clip_rho_threshold is None else rhos.clamp(max=clip_rho_threshold)
        cs = rhos if clip_c_threshold is None else rhos.clamp(max=clip_c_threshold)
        pg_rhos = rhos if clip_pg_rho_threshold is None else rhos.clamp(max=clip_pg_rho_threshold)
        if next_values is None:
            next_values = shifted_values(values, bootstrap_value)
        deltas = clipped_rhos * (rewards + discounts * next_values - values)
        k = continuation_mask(continuation, discounts, deltas.dtype)
        factors = discounts * k * cs
        # Remark 1: v_s - V(x_s) = delta_s V + gamma c_s (v_{s+1} - V(x_{s+1})), scanned backwards.
        corrections = []
        acc = torch.zeros_like(deltas[0])
        for t in reversed(range(deltas.shape[0])):
            acc = deltas[t] + factors[t] * acc
            corrections.append(acc)
        vs_minus_values = torch.stack(corrections[::-1], dim=0)
        vs = values + vs_minus_values
        # v_{s+1} seen from step s: the next value plus its V-trace correction, within the episode.
        next_corrections = torch.cat([vs_minus_values[1:], torch.zeros_like(deltas[:1])], dim=0)
        vs_next = next_values + k * next_corrections
        pg_advantages = pg_rhos * (rewards + discounts * vs_next - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)
