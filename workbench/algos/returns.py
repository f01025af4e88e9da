"""Returns and targets: pure tensor functions, time-major ``[T, B]``, one bootstrap form.

Every function here takes tensors and returns tensors; none holds state, reads a global or touches
an environment. The conventions are the package's (DESIGN.md, "Names and contracts"):

* time-major: ``rewards``, ``values``, ``discounts`` are ``[T, B]`` (T steps, B environments);
* one bootstrap form: ``values [T, B]`` (``V(obs[t])``) plus ``bootstrap_value [B]`` (the value of
  the observation after the last step, ``V(next_obs)``);
* ``discounts[t] = gamma * (1 - terminated[t])``: termination zeroes the bootstrap;
* truncation (a time limit) is not termination. With same-step autoreset, ``obs[t + 1]`` after a
  truncation is the first observation of a *new* episode, so a truncated step bootstraps from the
  value of its own final observation and nothing flows back across it. ``gae`` and ``vtrace`` take
  two optional keywords for that, ``next_values`` and ``continuation``; ``nstep_targets`` takes
  ``continuation``. Their defaults give the textbook formulas (``next_values[t] = values[t + 1]``,
  no cut other than ``discounts == 0``); ``gae_from_rollout`` fills them from a ``Rollout``.

Gradients: ``vtrace`` runs under ``torch.no_grad`` (its outputs are targets). The other functions
are plain differentiable tensor code; detach inputs that should act as targets.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from workbench.rollout import Rollout

__all__ = [
    "GAEReturns",
    "VTraceReturns",
    "categorical_projection",
    "gae",
    "gae_from_rollout",
    "inverse_value_rescale",
    "nstep_targets",
    "value_rescale",
    "vtrace",
]


# --------------------------------------------------------------------------------------------------
# Argument checks (shared by every public function)


def _shape_error(fn: str, expected: dict[str, str], tensors: dict[str, torch.Tensor]) -> ValueError:
    want = ", ".join(f"{name} {shape}" for name, shape in expected.items())
    got = ", ".join(f"{name} {list(t.shape)}" for name, t in tensors.items())
    return ValueError(
        f"{fn}: expected {want} (time-major: T steps, B environments); got {got}. "
        f"Pass tensors time-major [T, B]; transpose batch-major data with x.transpose(0, 1)."
    )


def _check_time_major(
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
        raise _shape_error(fn, expected, tensors)
    T, B = first.shape
    if any(t.shape != (T, B) for t in present_tb.values()) or any(
        t.shape != (B,) for t in present_b.values()
    ):
        raise _shape_error(fn, expected, tensors)
    if T == 0:
        raise ValueError(
            f"{fn}: T (the first dimension) must be at least 1, got {list(first.shape)}"
        )
    return T, B


def _shifted(values: torch.Tensor, bootstrap_value: torch.Tensor) -> torch.Tensor:
    """``[V_1, ..., V_{T-1}, bootstrap_value]``: the value of the observation after each step."""
    return torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)


def _continuation(
    continuation: torch.Tensor | None, discounts: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    if continuation is None:
        return (discounts > 0).to(dtype)
    return continuation.to(dtype)


# --------------------------------------------------------------------------------------------------
# GAE


class GAEReturns(NamedTuple):
    """What ``gae_from_rollout`` returns; both are float ``[T, B]``.

    Attributes:
        advantages: ``A_t``, the GAE(gamma, lambda) advantage estimates.
        returns: ``A_t + V_t``, the value-function targets (the lambda-returns).
    """

    advantages: torch.Tensor
    returns: torch.Tensor


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounts: torch.Tensor,
    lam: float,
    *,
    next_values: torch.Tensor | None = None,
    continuation: torch.Tensor | None = None,
) -> torch.Tensor:
    """Generalized advantage estimation, computed by a reverse scan over T.

    Schulman et al. 2016, *High-Dimensional Continuous Control Using Generalized Advantage
    Estimation*, https://arxiv.org/abs/1506.02438, Eq. 11-16::

        delta_t = r_t + gamma V(s_{t+1}) - V(s_t)                                  (Eq. 10)
        A_t     = sum_{l >= 0} (gamma lambda)^l delta_{t+l}                       (Eq. 16)
                = delta_t + gamma lambda A_{t+1}

    With per-step discounts and episode boundaries, as implemented here::

        delta_t = r_t + d_t * next_values_t - V_t
        A_t     = delta_t + lam * d_t * c_t * A_{t+1},        A_T = 0

    Since ``d_t = gamma (1 - terminated_t)`` and ``c_t = 1 - done_t``, the factor
    ``d_t * c_t = gamma (1 - done_t)``: the recursion stops wherever an episode ended.

    * terminated at t: ``d_t = 0``, so ``delta_t = r_t - V_t`` and ``A_t = delta_t``;
    * truncated at t: ``d_t = gamma`` and ``next_values_t`` is the value of the episode's final
      observation, so ``delta_t = r_t + gamma V(final obs) - V_t``; ``c_t = 0`` stops the
      recursion, because ``obs[t + 1]`` belongs to the next episode.

    Symbols to arguments: ``r_t`` = ``rewards[t]``, ``V(s_t)`` = ``values[t]``, ``gamma`` (and the
    termination mask) = ``discounts[t]``, ``lambda`` = ``lam``, ``V(s_T)`` = ``bootstrap_value``.

    Args:
        rewards: float ``[T, B]`` rewards ``r_t``.
        values: float ``[T, B]`` value estimates ``V(s_t)`` of the observations acted from.
        bootstrap_value: float ``[B]`` ``V(s_T)``, the value of the observation after step T-1.
        discounts: float ``[T, B]`` ``gamma * (1 - terminated)``.
        lam: the GAE ``lambda`` in ``[0, 1]`` (0: one-step TD errors; 1: Monte Carlo returns minus
            values).
        next_values: optional float ``[T, B]``, the value of the observation that followed step t
            *within the same episode* (at a truncation: the value of the final observation).
            Default ``[values[1:], bootstrap_value]``.
        continuation: optional float or bool ``[T, B]``, 0 where an episode ended at step t (by
            termination or truncation), 1 elsewhere. Default ``discounts > 0``.

    Returns:
        float ``[T, B]`` advantages ``A_t``. The value targets are ``advantages + values``.
    """
    _check_time_major(
        "gae",
        {
            "rewards": rewards,
            "values": values,
            "discounts": discounts,
            "next_values": next_values,
            "continuation": continuation,
        },
        {"bootstrap_value": bootstrap_value},
    )
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"gae: lam must be in [0, 1], got {lam}")
    if next_values is None:
        next_values = _shifted(values, bootstrap_value)
    deltas = rewards + discounts * next_values - values
    c = _continuation(continuation, discounts, deltas.dtype)
    factors = lam * discounts * c
    advantages = []
    acc = torch.zeros_like(deltas[0])
    for t in reversed(range(deltas.shape[0])):
        acc = deltas[t] + factors[t] * acc
        advantages.append(acc)
    return torch.stack(advantages[::-1], dim=0)


def gae_from_rollout(
    rollout: Rollout,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    gamma: float,
    lam: float,
) -> GAEReturns:
    """GAE over a ``Rollout``, with termination and truncation handled as the rollout records them.

    Builds the arguments of ``gae`` from the rollout: ``discounts = gamma * (1 - terminated)``;
    ``next_values[t]`` is ``rollout.truncation_values[t]`` where the step was truncated (and not
    terminated), ``values[t + 1]`` (``bootstrap_value`` for the last step) elsewhere;
    ``continuation = 1 - dones``. See ``gae`` for the equations.

    Args:
        rollout: a ``Rollout`` of T steps and B environments.
        values: float ``[T, B]`` ``V(rollout.obs[t])`` under the current value function.
        bootstrap_value: float ``[B]`` ``V(rollout.next_obs)``.
        gamma: the discount factor in ``[0, 1]``.
        lam: the GAE ``lambda`` in ``[0, 1]``.

    Returns:
        ``GAEReturns(advantages, returns)``, both float ``[T, B]``;
        ``returns = advantages + values``.

    Raises:
        ValueError: on shapes that do not match the rollout, or a truncated step whose
            ``truncation_values`` entry is NaN (the policy gave no value: return a ``"value"``
            from the policy so the sampler can bootstrap truncated episodes).
    """
    T, B = rollout.horizon, rollout.num_envs
    if values.shape != (T, B) or bootstrap_value.shape != (B,):
        raise ValueError(
            f"gae_from_rollout: expected values [T, B] = {[T, B]} and bootstrap_value [B] = {[B]} "
            f"for this rollout; got values {list(values.shape)}, "
            f"bootstrap_value {list(bootstrap_value.shape)}"
        )
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gae_from_rollout: gamma must be in [0, 1], got {gamma}")
    device, dtype = values.device, values.dtype
    terminated = rollout.terminated.to(device)
    truncated = rollout.truncated.to(device) & ~terminated
    truncation_values = rollout.truncation_values.to(device=device, dtype=dtype)
    if torch.isnan(truncation_values[truncated]).any():
        raise ValueError(
            "gae_from_rollout: a truncated step has no truncation value (NaN): the policy must "
            'return a "value" beside the action so the sampler can bootstrap truncated episodes'
        )
    discounts = gamma * (~terminated).to(dtype)
    next_values = _shifted(values, bootstrap_value)
    next_values = torch.where(truncated, truncation_values, next_values)
    # A terminated step never bootstraps; zero it so a stray value (or NaN) cannot leak via 0 * x.
    next_values = torch.where(terminated, torch.zeros_like(next_values), next_values)
    continuation = (~(terminated | truncated)).to(dtype)
    advantages = gae(
        rollout.rewards.to(device=device, dtype=dtype),
        values,
        bootstrap_value,
        discounts,
        lam,
        next_values=next_values,
        continuation=continuation,
    )
    return GAEReturns(advantages=advantages, returns=advantages + values)


# --------------------------------------------------------------------------------------------------
# V-trace


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
    _check_time_major(
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
            next_values = _shifted(values, bootstrap_value)
        deltas = clipped_rhos * (rewards + discounts * next_values - values)
        k = _continuation(continuation, discounts, deltas.dtype)
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


# --------------------------------------------------------------------------------------------------
# n-step targets


def nstep_targets(
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    bootstrap_values: torch.Tensor,
    n: int,
    *,
    continuation: torch.Tensor | None = None,
) -> torch.Tensor:
    """n-step bootstrapped targets, with windows that run past T cut short.

    The multi-step target of Ape-X DQN (Horgan et al. 2018, *Distributed Prioritized Experience
    Replay*, https://arxiv.org/abs/1803.00933, Section 3.1; Sutton & Barto, Ch. 7), with per-step
    discounts and windows cut at T::

        G_t = sum_{k<m} (prod_{j<k} d_{t+j}) r_{t+k} + (prod_{j<m} d_{t+j}) q_{t+m-1},
        m = min(n, T - t)

    where ``q_t = bootstrap_values[t]`` is the value of the state after step t (for double DQN,
    ``Q_target(s_{t+1}, argmax_a Q(s_{t+1}, a))``). A termination inside the window sets a
    ``d`` to 0 and so removes everything after it.

    Truncation: with ``continuation`` given, a window also stops after the first step j where
    ``continuation[j] == 0`` (the episode ended there), i.e. ``m`` becomes
    ``min(n, T - t, j - t + 1)``, and bootstraps from ``bootstrap_values[j]``, which at a
    truncation should be the value of the episode's final observation.

    Symbols to arguments: ``r`` = ``rewards``, ``d`` = ``discounts``, ``q`` = ``bootstrap_values``.

    Args:
        rewards: float ``[T, B]`` rewards ``r_t``.
        discounts: float ``[T, B]`` ``gamma * (1 - terminated)``.
        bootstrap_values: float ``[T, B]`` value of the state after step t.
        n: the number of steps, at least 1.
        continuation: optional float or bool ``[T, B]``, 0 where an episode ended at step t (by
            termination or truncation), 1 elsewhere. Default: no cut besides ``discounts``.

    Returns:
        float ``[T, B]`` targets ``G_t``.
    """
    T, _ = _check_time_major(
        "nstep_targets",
        {
            "rewards": rewards,
            "discounts": discounts,
            "bootstrap_values": bootstrap_values,
            "continuation": continuation,
        },
        {},
    )
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"nstep_targets: n must be an integer >= 1, got {n!r}")
    dtype = torch.result_type(rewards, discounts)
    dtype = torch.promote_types(dtype, bootstrap_values.dtype)

    def shifted(x: torch.Tensor, k: int) -> torch.Tensor:
        """``x[t + k]`` at row t, zero where ``t + k >= T``."""
        x = x.to(dtype)
        return torch.cat([x[k:], torch.zeros_like(x[:k])], dim=0)

    rows = torch.arange(T, device=rewards.device).unsqueeze(1)  # [T, 1]
    c = None if continuation is None else continuation.to(dtype)
    targets = torch.zeros_like(rewards, dtype=dtype)
    discount = torch.ones_like(targets)  # prod_{j<k} d_{t+j}
    active = torch.ones_like(targets)  # the window of row t still includes step t + k
    for k in range(min(n, T)):
        targets = targets + active * discount * shifted(rewards, k)
        discount = discount * shifted(discounts, k)
        # The window goes on to step t + k + 1 if it is within n, within T, and in the episode.
        goes_on = ((rows + k + 1 < T) & (k + 1 < n)).to(dtype)
        if c is not None:
            goes_on = goes_on * shifted(c, k)
        ends = active * (1 - goes_on)
        targets = targets + ends * discount * shifted(bootstrap_values, k)
        active = active * goes_on
    return targets


# --------------------------------------------------------------------------------------------------
# C51 projection


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


# --------------------------------------------------------------------------------------------------
# R2D2 value rescaling


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
