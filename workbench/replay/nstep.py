"""n-step transitions from time-major rollouts: what DQN, DDPG and Ape-X's actors put in replay."""

from __future__ import annotations

import torch

from workbench.rollout import Rollout

__all__ = ["TRANSITION_KEYS", "NStepTransitions"]

#: The keys of a batch of n-step transitions, each ``[N, ...]``: the target of each is
#: ``returns + discounts * Q_target(next_obs, a*)``.
TRANSITION_KEYS = ("obs", "actions", "returns", "discounts", "next_obs")


class NStepTransitions:
    """Turns consecutive ``[T, B]`` rollouts of the same envs into n-step transitions.

    A window starts at every step ``t`` and runs ``m = n`` steps, or fewer when the episode ends
    inside it (Hessel et al. 2018, Eq. 2)::

        returns   = sum_{k<m} gamma^k r_{t+k}
        discounts = gamma^m,  or 0 when the window ends in a terminal state
        next_obs  = obs_{t+m}

    The last ``n - 1`` steps of a rollout wait for the next rollout to complete their windows
    (``add`` keeps them). A window that reaches a *truncated* step is dropped: its bootstrap would
    need the episode's final observation, which a rollout does not keep; CartPole and Atari lose
    at most ``n`` transitions per truncated episode, and no target is ever wrong. With same-step
    autoreset ``obs_{t+1}`` after an episode's end belongs to the next episode; a window never
    reaches past the end, and a terminal window's ``next_obs`` is multiplied by a zero discount.
    """

    def __init__(self, n: int, gamma: float) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        self.n, self.gamma = n, float(gamma)
        self._pending: dict[str, torch.Tensor] | None = None  # the last n-1 steps, [P, B, ...]

    def reset(self) -> None:
        """Forget the pending steps (the envs were reset, or the sampler was resized)."""
        self._pending = None

    def add(self, rollout: Rollout) -> dict[str, torch.Tensor]:
        """The transitions this rollout completes, flattened to ``[N, ...]`` (on the CPU)."""
        steps = {
            "obs": rollout.obs.cpu(),
            "actions": rollout.actions.cpu(),
            "rewards": rollout.rewards.float().cpu(),
            "terminated": rollout.terminated.cpu(),
            "truncated": rollout.truncated.cpu(),
            "emitted": torch.zeros(rollout.rewards.shape, dtype=torch.bool),
        }
        pending = self._pending
        if pending is not None and pending["obs"].shape[1:] != steps["obs"].shape[1:]:
            pending = None  # another number of envs: those windows cannot continue
        if pending is not None:
            steps = {key: torch.cat([pending[key], value]) for key, value in steps.items()}
        length = steps["rewards"].shape[0]
        obs_after = torch.cat([steps["obs"][1:], rollout.next_obs.cpu().unsqueeze(0)])  # obs_{t+1}

        n, gamma = self.n, self.gamma
        t = torch.arange(length).unsqueeze(1)  # [L, 1]
        returns = torch.zeros(steps["rewards"].shape)
        discounts = torch.ones(steps["rewards"].shape)
        window = torch.zeros(steps["rewards"].shape, dtype=torch.long)
        active = torch.ones(steps["rewards"].shape, dtype=torch.bool)
        ended = torch.zeros_like(active)
        hit_truncation = torch.zeros_like(active)
        for k in range(n):  # n is small; every (t, b) moves one step of its window at once
            index = (t + k).clamp(max=length - 1).expand_as(returns)
            step = active & (t + k < length)
            reward = steps["rewards"].gather(0, index)
            terminated = steps["terminated"].gather(0, index)
            truncated = steps["truncated"].gather(0, index)
            returns = torch.where(step, returns + discounts * reward, returns)
            discounts = torch.where(step, discounts * gamma * (~terminated).float(), discounts)
            window += step.long()
            hit_truncation |= step & truncated & ~terminated
            done = terminated | truncated
            ended |= step & done
            active = step & ~done
        complete = ended | (window == n)
        keep = complete & ~hit_truncation & ~steps["emitted"]
        self.kept = (
            keep  # [L, B] over the pending rows and this rollout's: which windows were emitted
        )
        steps["emitted"] = steps["emitted"] | complete

        next_index = (t + window - 1).clamp(min=0)  # obs_{t+m} = obs_after[t + m - 1]
        next_obs = obs_after[next_index, torch.arange(returns.shape[1]).unsqueeze(0)]
        keep_pending = min(n - 1, length)
        self._pending = (
            {key: value[length - keep_pending :] for key, value in steps.items()}
            if keep_pending
            else None
        )
        return {
            "obs": steps["obs"][keep],
            "actions": steps["actions"][keep],
            "returns": returns[keep],
            "discounts": discounts[keep],
            "next_obs": next_obs[keep],
        }
