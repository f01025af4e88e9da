"""The batch that samplers hand to algorithms: time-major ``[T, B, ...]``, stated once, here.

T is the number of steps per collect (the horizon), B the number of environments. Row ``t`` holds
the transition ``(obs[t], actions[t]) -> (rewards[t], terminated[t], truncated[t])``; the
observation after the last row is ``next_obs`` (``[B, ...]``), from which algorithms bootstrap.

Every row is a real transition: samplers use same-step autoreset, so after an episode ends
``obs[t + 1]`` is already the first observation of the next episode, and the episode's final
observation is consumed at collection time. Termination and truncation are kept apart:

* ``discounts[t] = gamma * (1 - terminated[t])``;
* a truncated step (time limit) is not terminal: it bootstraps from the value of its final
  observation, which the sampler computes with the behaviour policy and stores in
  ``truncation_values[t]`` (0 where the step was not truncated; NaN when the policy gives no
  value). Where ``done = terminated | truncated``, ``obs[t + 1]`` belongs to a new episode, so
  returns must not flow across it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class EpisodeStats:
    """Episodes that ended during one collect, on raw (unclipped) rewards."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    def extend(self, other: "EpisodeStats") -> None:
        self.returns.extend(other.returns)
        self.lengths.extend(other.lengths)

    def __len__(self) -> int:
        return len(self.returns)


@dataclass
class Rollout:
    """One collect: ``T`` steps of ``B`` environments, time-major.

    Attributes:
        obs: ``[T, B, *obs_shape]`` observations the actions were chosen from (uint8 for Atari).
        actions: ``[T, B, *action_shape]`` actions taken.
        rewards: float32 ``[T, B]`` training rewards (clipped when the env clips them).
        terminated: bool ``[T, B]`` the episode ended in a terminal state (or a life was lost
            under ``episodic_life``): no bootstrap.
        truncated: bool ``[T, B]`` the episode was cut by a time limit: bootstrap from
            ``truncation_values``.
        truncation_values: float32 ``[T, B]`` behaviour-policy value of the final observation
            where ``truncated``, else 0.
        policy_outputs: ``[T, B, ...]`` tensors the policy returned beside the action at each
            step (for example ``logp`` and ``value``), keyed by name.
        next_obs: ``[B, *obs_shape]`` observation after the last step, for the bootstrap value.
        episodes: episodes that ended during this collect (raw returns and lengths).
        timings: seconds spent per stage during the collect: ``env`` (stepping environments,
            averaged over workers), ``inference`` (forward passes), ``wait`` (the collecting
            process blocked on workers), ``total`` (wall clock).
    """

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    truncation_values: torch.Tensor
    policy_outputs: dict[str, torch.Tensor]
    next_obs: torch.Tensor
    episodes: EpisodeStats = field(default_factory=EpisodeStats)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def horizon(self) -> int:
        """T, the number of steps per environment."""
        return self.rewards.shape[0]

    @property
    def num_envs(self) -> int:
        """B, the number of environments."""
        return self.rewards.shape[1]

    @property
    def num_steps(self) -> int:
        """T * B, the number of environment steps (agent steps; frames = steps * frameskip)."""
        return self.rewards.numel()

    @property
    def dones(self) -> torch.Tensor:
        """bool ``[T, B]``: the episode ended at this step, by termination or truncation."""
        return self.terminated | self.truncated

    def discounts(self, gamma: float) -> torch.Tensor:
        """float32 ``[T, B]``: ``gamma * (1 - terminated)`` (truncation is not terminal)."""
        return gamma * (~self.terminated).to(torch.float32)

    def to(self, device: "torch.device | str") -> "Rollout":
        """The same rollout with every tensor on ``device`` (episodes and timings kept)."""
        return Rollout(
            obs=self.obs.to(device),
            actions=self.actions.to(device),
            rewards=self.rewards.to(device),
            terminated=self.terminated.to(device),
            truncated=self.truncated.to(device),
            truncation_values=self.truncation_values.to(device),
            policy_outputs={k: v.to(device) for k, v in self.policy_outputs.items()},
            next_obs=self.next_obs.to(device),
            episodes=self.episodes,
            timings=dict(self.timings),
        )
