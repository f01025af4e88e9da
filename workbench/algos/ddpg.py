"""n-step DDPG: the learner of Ape-X DPG (Horgan et al. 2018, https://arxiv.org/abs/1803.00933,
Sec. 3.2), also usable alone in a sampler loop.

* DDPG: Lillicrap et al. 2016, *Continuous control with deep RL*, https://arxiv.org/abs/1509.02971,
  Algorithm 1: a critic ``Q(s, a)`` regressed on bootstrapped targets from slowly moving target
  networks ``Q'``, ``mu'``, and a deterministic actor ``mu(s)`` that climbs the critic.
* Deterministic policy gradient: Silver et al. 2014, *Deterministic Policy Gradient Algorithms*,
  Eq. 6 (off-policy, Eq. 15)::

      grad_theta J = E_s[ grad_theta mu_theta(s) * grad_a Q(s, a) |_{a = mu_theta(s)} ]

  which is the gradient of ``-loss_actor = mean_s Q(s, mu_theta(s))`` with the critic held fixed.
* n-step targets (Ape-X DPG, Sec. 3.2)::

      y = returns + discounts * Q'(next_obs, mu'(next_obs))      (returns, discounts: dqn.py)

* Prioritized replay (Schaul et al. 2016): the critic's loss is importance weighted; the new
  priority of a sample is its |TD error| ``|y - Q(s, a)|``, taken *before* the step.
* Exploration: Gaussian noise on the action, ``a = clip(mu(s) + sigma * (high - low) / 2 * N(0, I))``
  (Fujimoto et al. 2018, TD3, showed it works as well as DDPG's Ornstein-Uhlenbeck noise); in
  Ape-X DPG each actor explores with its own noise scale ``sigma_i``.

Interface shared with ``DQN`` (what ``workbench.apex`` calls): ``act(obs, exploration)``,
``initial_priorities(transitions)``, ``learn(batch, weights) -> (metrics, priorities)``,
``actor_state()`` / ``load_actor_state(state)``, ``set_progress(progress)``, ``update(rollout)``,
``state_dict()`` / ``load_state_dict(state)``.

A batch of transitions holds ``obs`` float ``[N, obs_dim]``, ``actions`` float ``[N, act_dim]``,
``returns [N]``, ``discounts [N]`` (``gamma^m``, 0 after a terminal state) and ``next_obs
[N, obs_dim]``: ``NStepTransitions`` makes them from rollouts with ``actions [T, B, act_dim]``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from workbench.algos.dqn import NStepTransitions, linear_schedule, make_replay, replay_and_learn
from workbench.models import ContinuousQ, DeterministicPolicy
from workbench.rollout import Rollout

__all__ = ["DDPG", "DDPGConfig", "GaussianExploration", "gaussian_exploration"]

TRANSITION_KEYS = ("obs", "actions", "returns", "discounts", "next_obs")  # as in dqn.py


@dataclass
class DDPGConfig:
    """n-step DDPG hyperparameters. Defaults: TD3's (Fujimoto et al. 2018, Sec. 6.1: Adam 1e-3,
    batch 256, one gradient step per env step) with a 3-step return. With them, 4 envs reached a
    mean return of -200 on Pendulum-v1 in 4.8k-5.6k env steps (seeds 0-2); tests/test_ddpg.py
    uses a compact variant (128-unit layers, batch 128, half the updates): 6.4k-8k steps."""

    gamma: float = 0.99
    n_step: int = 3
    """Steps per return window (1 is DDPG's one-step target)."""
    actor_learning_rate: float = 1e-3
    critic_learning_rate: float = 1e-3
    batch_size: int = 256
    """Transitions per gradient step."""
    replay_ratio: float = 256.0
    """Samples trained per env step collected: ``updates = steps * replay_ratio / batch_size``
    (DDPG's one batch per env step is ``replay_ratio = batch_size``)."""
    replay_capacity: int = 100_000
    learning_starts: int = 1_000
    """Env steps collected before the first gradient step (the replay fills first)."""
    tau: float = 0.005
    """Target update ``theta' <- tau * theta + (1 - tau) * theta'`` (Lillicrap et al. 2016, Alg. 1),
    applied every ``target_update_interval`` gradient steps. ``tau=1`` with an interval of, say,
    100 is the periodic copy of DQN and Ape-X."""
    target_update_interval: int = 1
    max_grad_norm: float | None = None
    """Clip each network's global gradient norm (None: no clipping, as in DDPG)."""
    noise_scale: float = 0.1
    """Exploration noise std as a fraction of the half action range (``act`` with no scale, and
    ``model``'s default); Ape-X DPG actors each get their own."""
    prioritized: bool = False
    """Prioritized replay (proportional); otherwise uniform."""
    priority_alpha: float = 0.6
    priority_beta_start: float = 0.4
    """Importance-sampling exponent at the start; annealed linearly to 1 over the run."""
    priority_eps: float = 1e-6

    def __post_init__(self) -> None:
        if isinstance(self.n_step, bool) or not isinstance(self.n_step, int) or self.n_step < 1:
            raise ValueError(f"DDPGConfig.n_step must be an int >= 1, got {self.n_step!r}")
        for name in ("batch_size", "replay_capacity", "target_update_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"DDPGConfig.{name} must be a positive int, got {value!r}")
        if self.replay_capacity < self.batch_size:
            raise ValueError(f"DDPGConfig.replay_capacity {self.replay_capacity} < batch_size {self.batch_size}: "
                             "the replay must hold at least one batch.")
        if not self.replay_ratio > 0:
            raise ValueError(f"DDPGConfig.replay_ratio must be positive, got {self.replay_ratio}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"DDPGConfig.gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"DDPGConfig.tau must be in (0, 1] (1: copy the online networks), got {self.tau}")
        for name in ("actor_learning_rate", "critic_learning_rate"):
            if not getattr(self, name) > 0:
                raise ValueError(f"DDPGConfig.{name} must be positive, got {getattr(self, name)}")
        if not self.noise_scale >= 0:
            raise ValueError(f"DDPGConfig.noise_scale must be >= 0 (0: the deterministic policy), "
                             f"got {self.noise_scale}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(f"DDPGConfig.max_grad_norm must be positive or None (no clipping), "
                             f"got {self.max_grad_norm}")


@torch.no_grad()
def gaussian_exploration(policy: DeterministicPolicy, obs: torch.Tensor,
                         exploration: "float | torch.Tensor") -> torch.Tensor:
    """``clip(mu(s) + exploration * (high - low) / 2 * N(0, I), low, high)``.

    Args:
        policy: the deterministic actor ``mu``.
        obs: ``[B, obs_dim]`` on the policy's device.
        exploration: noise std in half action ranges: a float, or ``[B]``, one per row (one per
            actor in Ape-X DPG).

    Returns float32 ``[B, act_dim]`` inside the bounds.
    """
    action = policy(obs)
    scale = torch.as_tensor(exploration, dtype=action.dtype, device=action.device)
    if scale.dim() == 1 and scale.shape[0] == action.shape[0] and action.dim() == 2:
        scale = scale.unsqueeze(1)  # [B, 1]: one std per row
    elif scale.dim() != 0:
        raise ValueError(f"exploration of shape {tuple(scale.shape)} does not match {action.shape[0]} "
                         "observations; pass a float or one noise scale per row [B]")
    if (scale < 0).any():
        raise ValueError("exploration noise scales must be >= 0")
    noise = torch.randn_like(action) * scale * policy.action_scale
    return torch.maximum(torch.minimum(action + noise, policy.action_high), policy.action_low)


class GaussianExploration(nn.Module):
    """A ``DeterministicPolicy`` that explores with its own, settable noise scale: what a sampler
    collects with (``policy.act(obs) -> {"action": ...}``), like ``models.EpsilonGreedy`` for DQN.

    ``noise_scale`` is a buffer (a float or ``[B]``), so it travels with ``state_dict``.
    """

    def __init__(self, policy: DeterministicPolicy, noise_scale: "float | torch.Tensor" = 0.1) -> None:
        super().__init__()
        self.policy = policy
        self.register_buffer("noise_scale", torch.as_tensor(noise_scale, dtype=torch.float32).clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy(obs)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"action": gaussian_exploration(self.policy, obs, self.noise_scale)}


class DDPG:
    """n-step DDPG on a ``DeterministicPolicy`` and a ``ContinuousQ``: ``learn`` on a sampled batch,
    or ``update`` on a rollout.

    Args:
        policy: the actor ``mu(s)``. critic: ``Q(s, a)``.
        config: a ``DDPGConfig``.
        device: where the networks learn.
        replay: the replay ``update`` adds to and samples from; default made from the config.
        seed: seeds the default replay's sampling (the noise uses torch's global generator).

    Attributes:
        model: the ``GaussianExploration`` policy samplers collect with.
        target_policy, target_critic: ``mu'`` and ``Q'``.
        num_updates: gradient steps taken. env_steps: steps added by ``update``.
    """

    def __init__(self, policy: DeterministicPolicy, critic: ContinuousQ, config: DDPGConfig | None = None, *,
                 device: "str | torch.device" = "cpu", replay: Any = None, seed: int | None = None) -> None:
        if not isinstance(policy, DeterministicPolicy) or not isinstance(critic, ContinuousQ):
            raise TypeError("DDPG needs a workbench.models.DeterministicPolicy and a ContinuousQ, got "
                            f"{type(policy).__name__} and {type(critic).__name__}")
        if policy.action_dim != critic.action_dim or policy.obs_shape != critic.obs_shape:
            raise ValueError(f"the policy ({policy.obs_shape} -> {policy.action_dim}) and the critic "
                             f"({critic.obs_shape}, {critic.action_dim}) disagree on obs_dim or action_dim")
        self.config = config = config or DDPGConfig()
        self.device = torch.device(device)
        self.policy = policy.to(self.device)
        self.critic = critic.to(self.device)
        self.target_policy = copy.deepcopy(self.policy).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.model = GaussianExploration(self.policy, config.noise_scale).to(self.device)
        self.actor_optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.actor_learning_rate)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.critic_learning_rate)
        self.replay = replay if replay is not None else make_replay(config, seed)
        self.nstep = NStepTransitions(config.n_step, config.gamma)
        self.num_updates = 0
        self.env_steps = 0
        self.progress = 0.0
        self._owed_updates = 0.0

    # --- acting -----------------------------------------------------------------------------------

    def act(self, obs: torch.Tensor, exploration: "float | torch.Tensor | None" = None) -> torch.Tensor:
        """Exploring actions float32 ``[B, act_dim]`` (on ``device``) for ``obs [B, obs_dim]``:
        ``mu(s)`` plus Gaussian noise of std ``exploration * (high - low) / 2`` per row, clipped to
        the bounds. ``exploration``: a float or ``[B]`` (None: ``config.noise_scale``)."""
        scale = self.config.noise_scale if exploration is None else exploration
        return gaussian_exploration(self.policy, torch.as_tensor(obs).to(self.device), scale)

    @torch.no_grad()
    def initial_priorities(self, transitions: dict[str, torch.Tensor]) -> torch.Tensor:
        """|n-step TD error| ``[N]`` (CPU) of transitions under the current networks, without
        changing anything: what an Ape-X actor computes with its copy before sending data
        (Horgan et al. 2018, Algorithm 1, line 11)."""
        batch = self._as_batch(transitions, "initial_priorities")
        return (self._targets(batch) - self.critic(batch["obs"], batch["actions"])).abs().cpu()

    # --- schedules --------------------------------------------------------------------------------

    def set_progress(self, progress: float) -> None:
        """Fraction of the run done: the prioritized replay's beta rises to 1 over it (Schaul et al.
        2016, Sec. 3.4)."""
        self.progress = min(max(float(progress), 0.0), 1.0)
        if hasattr(self.replay, "beta"):
            self.replay.beta = linear_schedule(self.config.priority_beta_start, 1.0, self.progress)

    # --- one gradient step ------------------------------------------------------------------------

    def _as_batch(self, batch: dict[str, Any], who: str) -> dict[str, torch.Tensor]:
        missing = [key for key in TRANSITION_KEYS if key not in batch]
        if missing:
            raise ValueError(f"DDPG.{who}: the batch lacks {missing}; it needs {list(TRANSITION_KEYS)} "
                             "(NStepTransitions.add makes them).")
        return {key: torch.as_tensor(batch[key]).to(self.device, torch.float32) for key in TRANSITION_KEYS}

    @torch.no_grad()
    def _targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``y = returns + discounts * Q'(next_obs, mu'(next_obs))`` ``[N]``."""
        next_obs = batch["next_obs"]
        return batch["returns"] + batch["discounts"] * self.target_critic(next_obs, self.target_policy(next_obs))

    def learn(self, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None
              ) -> tuple[dict[str, float], torch.Tensor]:
        """One critic step, one actor step and a target update on a batch of n-step transitions.

        Critic: importance-weighted squared TD error ``mean_i w_i (y_i - Q(s_i, a_i))^2``
        (Lillicrap et al. 2016, Alg. 1; ``w = 1`` when ``weights`` is None). Actor, with the updated
        critic: ``-mean_i Q(s_i, mu(s_i))`` (Silver et al. 2014, Eq. 6; not importance weighted).
        Targets: Polyak averaging with ``tau`` every ``target_update_interval`` steps.

        Returns the metrics and each sample's new priority ``|y - Q(s, a)|`` before the step,
        ``[N]`` on the CPU.
        """
        c = self.config
        batch = self._as_batch(batch, "learn")
        n = batch["returns"].shape[0]
        weights = (torch.ones(n, device=self.device) if weights is None
                   else torch.as_tensor(weights).to(self.device, torch.float32))
        max_norm = math.inf if c.max_grad_norm is None else c.max_grad_norm

        q_taken = self.critic(batch["obs"], batch["actions"])
        td_error = self._targets(batch) - q_taken
        critic_loss = (weights * td_error.pow(2)).mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_norm = nn.utils.clip_grad_norm_(self.critic.parameters(), max_norm)
        self.critic_optimizer.step()

        self.critic.requires_grad_(False)  # the actor's gradient flows through Q to a only
        actor_loss = -self.critic(batch["obs"], self.policy(batch["obs"])).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_norm = nn.utils.clip_grad_norm_(self.policy.parameters(), max_norm)
        self.actor_optimizer.step()
        self.critic.requires_grad_(True)

        self.num_updates += 1
        if self.num_updates % c.target_update_interval == 0:
            self._update_targets(c.tau)
        metrics = {
            "losses/critic": critic_loss.item(),
            "losses/actor": actor_loss.item(),
            "losses/critic_grad_norm": float(critic_norm),
            "losses/actor_grad_norm": float(actor_norm),
            "charts/q_values": q_taken.detach().mean().item(),
        }
        return metrics, td_error.detach().abs().cpu()

    @torch.no_grad()
    def _update_targets(self, tau: float) -> None:
        """``theta' <- tau * theta + (1 - tau) * theta'`` for both networks."""
        for target, online in ((self.target_policy, self.policy), (self.target_critic, self.critic)):
            for t, o in zip(target.parameters(), online.parameters()):
                t.lerp_(o, tau)

    # --- the agent in a sampler loop --------------------------------------------------------------

    def update(self, rollout: Rollout) -> dict[str, float]:
        """Add the rollout's n-step transitions to the replay, then take the gradient steps the
        replay ratio owes (none before ``learning_starts``). ``rollout.actions``: ``[T, B, act_dim]``."""
        metrics = replay_and_learn(self, rollout)
        return {
            **metrics,
            "charts/noise_scale": float(self.model.noise_scale.mean()),
            "charts/replay_size": float(len(self.replay)),
            "charts/gradient_steps": float(self.num_updates),
        }

    # --- parameters for actors, and checkpoints ---------------------------------------------------

    def actor_state(self) -> dict[str, torch.Tensor]:
        """What an Ape-X DPG actor needs, as CPU copies: the policy to act, and the critic and both
        target networks to compute initial priorities exactly as the learner would. Keys
        ``policy.*``, ``critic.*``, ``target_policy.*``, ``target_critic.*``."""
        return {f"{name}.{key}": value.detach().to("cpu", copy=True)
                for name, module in self._networks().items() for key, value in module.state_dict().items()}

    def load_actor_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load ``actor_state()`` (from a learner) into these networks."""
        for name, module in self._networks().items():
            prefix = f"{name}."
            module.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})

    def _networks(self) -> dict[str, nn.Module]:
        return {"policy": self.policy, "critic": self.critic,
                "target_policy": self.target_policy, "target_critic": self.target_critic}

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizers, counters and schedules (not the replay: refilled on resume)."""
        return {
            **{name: module.state_dict() for name, module in self._networks().items()},
            "model": self.model.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "num_updates": self.num_updates,
            "env_steps": self.env_steps,
            "progress": self.progress,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, module in self._networks().items():
            module.load_state_dict(state[name])
        self.model.load_state_dict(state["model"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.num_updates, self.env_steps = state["num_updates"], state["env_steps"]
        self.set_progress(state["progress"])
        self.nstep.reset()

    def __repr__(self) -> str:
        c = self.config
        return (f"DDPG(n_step={c.n_step}, tau={c.tau}, target_update_interval={c.target_update_interval}, "
                f"{'prioritized' if c.prioritized else 'uniform'})")
