"""Returns: GAE and n-step targets, pure tensor functions, time-major ``[T, B]``, one bootstrap
form.

Every function here takes tensors and returns tensors; none holds state, reads a global or touches
an environment. The conventions are the package's (``docs/architecture.md``, "Contracts"):

* time-major: ``rewards``, ``values``, ``discounts`` are ``[T, B]`` (T steps, B environments);
* one bootstrap form: ``values [T, B]`` (``V(obs[t])``) plus ``bootstrap_value [B]`` (the value of
  the observation after the last step, ``V(next_obs)``);
* ``discounts[t] = gamma * (1 - terminated[t])``: termination zeroes the bootstrap;
* truncation (a time limit) is not termination. With same-step autoreset, ``obs[t + 1]`` after a
  truncation is the first observation of a *new* episode, so a truncated step bootstraps from the
  value of its own final observation and nothing flows back across it. ``gae`` (and ``vtrace``)
  take two optional keywords for that, ``next_values`` and ``continuation``; ``nstep_targets``
  takes ``continuation``. Their defaults give the textbook formulas (``next_values[t] =
  values[t + 1]``, no cut other than ``discounts == 0``); ``gae_from_rollout`` fills them from a
  ``Rollout``.

These functions are plain differentiable tensor code; detach inputs that should act as targets.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from workbench.kernels.checks import check_time_major, continuation_mask, shifted_values
from workbench.rollout import Rollout

__all__ = ["GAEReturns", "gae", "gae_from_rollout", "nstep_targets"]


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
    check_time_major(
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
        next_values = shifted_values(values, bootstrap_value)
    deltas = rewards + discounts * next_values - values
    c = continuation_mask(continuation, discounts, deltas.dtype)
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
    next_values = shifted_values(values, bootstrap_value)
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
    T, _ = check_time_major(
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
