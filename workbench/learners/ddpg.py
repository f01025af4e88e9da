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

      y = returns + discounts * Q'(next_obs, mu'(next_obs))      (returns, discounts: replay.nstep)

* Prioritized replay (Schaul et al. 2016): the critic's loss is importance weighted; the new
  priority of a sample is its |TD error| ``|y - Q(s, a)|``, taken *before* the step.
* Exploration: Gaussian noise on the action,
  ``a = clip(mu(s) + sigma * (high - low) / 2 * N(0, I))`` (Fujimoto et al. 2018, TD3, showed it
  works as well as DDPG's Ornstein-Uhlenbeck noise); in Ape-X DPG each actor explores with its own
  noise scale ``sigma_i``.

The ``Learner`` interface (``update(batch) -> metrics``, ``priorities`` after it), and what an Ape-X
actor calls, as ``DQN``: ``act(obs, exploration)``, ``initial_priorities(transitions)``,
``actor_state()`` / ``load_actor_state(state)``. In a sampler loop:
``ReplayAgent(DDPG(...), DDPG_REPLAY)``.

A batch of transitions holds ``obs`` float ``[N, obs_dim]``, ``actions`` float ``[N, act_dim]``,
``returns [N]``, ``discounts [N]`` (``gamma^m``, 0 after a terminal state) and ``next_obs
[N, obs_dim]`` (and optionally ``weights [N]``): ``replay.NStepTransitions`` makes them from
rollouts with ``actions [T, B, act_dim]``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from workbench.checks import positive_int
from workbench.learners.base import GradientStep, Reduction, move_optimizer_state
from workbench.learners.dqn import transition_batch
from workbench.models import ContinuousQ, DeterministicPolicy

__all__ = [
    "DDPG",
    "DDPGConfig",
    "DPGActor",
    "GaussianExploration",
    "dpg_targets",
    "gaussian_exploration",
    "load_networks",
]


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
    """Transitions per gradient step (in a sampler loop, ``replay_agent.DDPG_REPLAY`` trains one
    batch per env step)."""
    tau: float = 0.005
    """Target update ``theta' <- tau * theta + (1 - tau) * theta'`` (Lillicrap et al. 2016, Alg. 1),
    applied every ``target_update_interval`` gradient steps. ``tau=1`` with an interval of, say,
    100 is the periodic copy of DQN and Ape-X."""
    target_update_interval: int = 1
    max_grad_norm: float | None = None
    """Clip each network's global gradient norm (None: no clipping, as in DDPG)."""

    retired: ClassVar[frozenset[str]] = frozenset(
        {"replay_ratio", "replay_capacity", "learning_starts", "noise_scale", "prioritized"}
        | {"priority_alpha", "priority_beta_start", "priority_eps"}
    )
    """Fields a saved DDPGConfig may have from before they moved to ``ReplayAgentConfig`` (and
    Ape-X DPG's ``ApexConfig``): ``config_from_dict`` leaves them out."""

    def __post_init__(self) -> None:
        for name in ("n_step", "batch_size", "target_update_interval"):
            positive_int(getattr(self, name), f"DDPGConfig.{name}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"DDPGConfig.gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(
                f"DDPGConfig.tau must be in (0, 1] (1: copy the online networks), got {self.tau}"
            )
        for name in ("actor_learning_rate", "critic_learning_rate"):
            if not getattr(self, name) > 0:
                raise ValueError(f"DDPGConfig.{name} must be positive, got {getattr(self, name)}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            raise ValueError(
                f"DDPGConfig.max_grad_norm must be positive or None (no clipping), "
                f"got {self.max_grad_norm}"
            )


@torch.no_grad()
def gaussian_exploration(
    policy: DeterministicPolicy, obs: torch.Tensor, exploration: "float | torch.Tensor"
) -> torch.Tensor:
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
        raise ValueError(
            f"exploration of shape {tuple(scale.shape)} does not match {action.shape[0]} "
            "observations; pass a float or one noise scale per row [B]"
        )
    if (scale < 0).any():
        raise ValueError("exploration noise scales must be >= 0")
    noise = torch.randn_like(action) * scale * policy.action_scale
    return torch.maximum(torch.minimum(action + noise, policy.action_high), policy.action_low)


class GaussianExploration(nn.Module):
    """A ``DeterministicPolicy`` that explores with its own, settable noise scale: what a sampler
    collects with (``policy.act(obs) -> {"action": ...}``), like ``models.EpsilonGreedy`` for DQN.

    ``noise_scale`` is a buffer (a float or ``[B]``), so it travels with ``state_dict``.
    """

    def __init__(
        self, policy: DeterministicPolicy, noise_scale: "float | torch.Tensor" = 0.1
    ) -> None:
        super().__init__()
        self.policy = policy
        self.register_buffer(
            "noise_scale", torch.as_tensor(noise_scale, dtype=torch.float32).clone()
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy(obs)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"action": gaussian_exploration(self.policy, obs, self.noise_scale)}


@torch.no_grad()
def dpg_targets(
    target_policy: DeterministicPolicy, target_critic: ContinuousQ, batch: dict[str, torch.Tensor]
) -> torch.Tensor:
    """``y = returns + discounts * Q'(next_obs, mu'(next_obs))`` ``[N]`` (Lillicrap et al. 2016,
    Alg. 1, with n-step returns)."""
    next_obs = batch["next_obs"]
    return batch["returns"] + batch["discounts"] * target_critic(next_obs, target_policy(next_obs))


def float_transitions(
    batch: dict[str, Any], device: torch.device, who: str
) -> dict[str, torch.Tensor]:
    """A batch of n-step transitions as float32 tensors on ``device`` (weights default 1)."""
    batch = transition_batch(batch, device, who)
    return {key: value.to(torch.float32) for key, value in batch.items()}


def load_networks(networks: dict[str, nn.Module], state: dict[str, torch.Tensor]) -> None:
    """Load ``DDPG.actor_state()``'s ``<name>.<key>`` entries into the networks of those names."""
    for name, module in networks.items():
        prefix = f"{name}."
        module.load_state_dict(
            {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        )


class DPGActor:
    """What an Ape-X DPG actor acts and prioritizes with: the policy plus Gaussian noise of its
    own scale, and the |n-step TD error| of its new transitions under copies of the critic and
    both target networks, exactly as the learner would compute it (Horgan et al. 2018, Alg. 1,
    line 11). No optimizer: acting apart from learning. It loads what ``DDPG.actor_state``
    publishes (keys ``policy.*``, ``critic.*``, ``target_policy.*``, ``target_critic.*``).
    """

    def __init__(
        self,
        policy: DeterministicPolicy,
        critic: ContinuousQ,
        *,
        device: "str | torch.device" = "cpu",
    ) -> None:
        self.device = torch.device(device)
        self.policy = policy.to(self.device).requires_grad_(False)
        self.critic = critic.to(self.device).requires_grad_(False)
        self.target_policy = copy.deepcopy(self.policy)
        self.target_critic = copy.deepcopy(self.critic)

    def networks(self) -> dict[str, nn.Module]:
        """The four networks by name, as ``DDPG.networks`` names the learner's."""
        return {
            "policy": self.policy,
            "critic": self.critic,
            "target_policy": self.target_policy,
            "target_critic": self.target_critic,
        }

    @torch.no_grad()
    def act(self, obs: torch.Tensor, exploration: "float | torch.Tensor") -> torch.Tensor:
        """``mu(s)`` plus Gaussian noise of std ``exploration * (high - low) / 2`` per row."""
        return gaussian_exploration(self.policy, torch.as_tensor(obs).to(self.device), exploration)

    @torch.no_grad()
    def initial_priorities(self, transitions: dict[str, Any]) -> torch.Tensor:
        """|n-step TD error| ``[N]`` on the CPU."""
        batch = float_transitions(transitions, self.device, "DPGActor.initial_priorities")
        td_target = dpg_targets(self.target_policy, self.target_critic, batch)
        return (td_target - self.critic(batch["obs"], batch["actions"])).abs().cpu()

    def load_actor_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load ``DDPG.actor_state()`` (from a learner) into these networks."""
        load_networks(self.networks(), state)


class DDPG:
    """n-step DDPG on a ``DeterministicPolicy`` and a ``ContinuousQ``: one critic step, one actor
    step and a target update per ``update(batch)``.

    Args:
        policy: the actor ``mu(s)``. critic: ``Q(s, a)``.
        config: a ``DDPGConfig`` (one update's settings; the replay around it is its
            ``ReplayAgent``'s or Ape-X's).
        device: where the networks learn.

    Attributes:
        model: the ``GaussianExploration`` policy samplers collect with.
        target_policy, target_critic: ``mu'`` and ``Q'``.
        num_updates: gradient steps taken. priorities: ``|y - Q(s, a)|`` of the last update's
            samples, before its step, float ``[N]`` on the CPU.
    """

    batch_axis = 0  # one row per transition

    def __init__(
        self,
        policy: DeterministicPolicy,
        critic: ContinuousQ,
        config: DDPGConfig | None = None,
        *,
        device: "str | torch.device" = "cpu",
    ) -> None:
        if not isinstance(policy, DeterministicPolicy) or not isinstance(critic, ContinuousQ):
            raise TypeError(
                "DDPG needs a workbench.models.DeterministicPolicy and a ContinuousQ, got "
                f"{type(policy).__name__} and {type(critic).__name__}"
            )
        if policy.action_dim != critic.action_dim or policy.obs_shape != critic.obs_shape:
            raise ValueError(
                f"the policy ({policy.obs_shape} -> {policy.action_dim}) and the critic "
                f"({critic.obs_shape}, {critic.action_dim}) disagree on obs_dim or action_dim"
            )
        self.config = config = config or DDPGConfig()
        self.device = torch.device(device)
        self.policy = policy.to(self.device)
        self.critic = critic.to(self.device)
        self.target_policy = copy.deepcopy(self.policy).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        # TD3's noise until told otherwise (``set_exploration``: its ReplayAgent's schedule)
        self.model = GaussianExploration(self.policy, 0.1).to(self.device)
        self.actor_optimizer = torch.optim.Adam(
            self.policy.parameters(), lr=config.actor_learning_rate
        )
        self.critic_optimizer = torch.optim.Adam(
            self.critic.parameters(), lr=config.critic_learning_rate
        )
        self.actor_step = GradientStep(self.actor_optimizer, max_grad_norm=config.max_grad_norm)
        self.critic_step = GradientStep(self.critic_optimizer, max_grad_norm=config.max_grad_norm)
        self.reduction = Reduction()
        self.num_updates = 0
        self.progress = 0.0
        self.priorities: torch.Tensor | None = None

    # --- acting -----------------------------------------------------------------------------------

    def act(
        self, obs: torch.Tensor, exploration: "float | torch.Tensor | None" = None
    ) -> torch.Tensor:
        """Exploring actions float32 ``[B, act_dim]`` (on ``device``) for ``obs [B, obs_dim]``:
        ``mu(s)`` plus Gaussian noise of std ``exploration * (high - low) / 2`` per row, clipped to
        the bounds. ``exploration``: a float or ``[B]`` (None: the acting policy's, ``model``)."""
        scale = self.model.noise_scale if exploration is None else exploration
        return gaussian_exploration(self.policy, torch.as_tensor(obs).to(self.device), scale)

    @torch.no_grad()
    def initial_priorities(self, transitions: dict[str, torch.Tensor]) -> torch.Tensor:
        """|n-step TD error| ``[N]`` (CPU) of transitions under the current networks, without
        changing anything: what an Ape-X actor computes with its copy before sending data
        (Horgan et al. 2018, Algorithm 1, line 11)."""
        batch = self.transitions(transitions, "initial_priorities")
        return (self.targets(batch) - self.critic(batch["obs"], batch["actions"])).abs().cpu()

    def set_progress(self, progress: float) -> None:
        """Fraction of the run done (DDPG's update has no schedule; kept for checkpoints)."""
        self.progress = min(max(float(progress), 0.0), 1.0)

    def set_exploration(self, noise_scale: float) -> None:
        """The acting policy's noise scale (``model``; a ``ReplayAgent`` sets it over the run)."""
        if not noise_scale >= 0:
            raise ValueError(
                f"a noise scale must be >= 0 (0: the deterministic policy), got {noise_scale}"
            )
        self.model.noise_scale.fill_(float(noise_scale))

    def schedule_metrics(self) -> dict[str, float]:
        """What the acting policy does now: its noise scale."""
        return {"charts/noise_scale": float(self.model.noise_scale.mean())}

    # --- one update -------------------------------------------------------------------------------

    def transitions(self, batch: dict[str, Any], who: str) -> dict[str, torch.Tensor]:
        """A batch of n-step transitions as float32 tensors on the device (weights default 1)."""
        return float_transitions(batch, self.device, f"DDPG.{who}")

    def targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``dpg_targets`` of the target networks."""
        return dpg_targets(self.target_policy, self.target_critic, batch)

    def update(self, batch: dict[str, Any]) -> dict[str, float]:
        """One critic step, one actor step and a target update on a batch of n-step transitions.

        Critic: importance-weighted squared TD error ``mean_i w_i (y_i - Q(s_i, a_i))^2``
        (Lillicrap et al. 2016, Alg. 1; ``w = 1`` without ``weights``). Actor, with the updated
        critic: ``-mean_i Q(s_i, mu(s_i))`` (Silver et al. 2014, Eq. 6; not importance weighted).
        Targets: Polyak averaging with ``tau`` every ``target_update_interval`` steps. The new
        priorities ``|y - Q(s, a)|`` (before the step) are in ``self.priorities`` afterwards.
        """
        c, reduce = self.config, self.reduction
        batch = self.transitions(batch, "update")
        q_taken = self.critic(batch["obs"], batch["actions"])
        td_error = self.targets(batch) - q_taken
        critic_loss = reduce.mean(batch["weights"] * td_error.pow(2))
        critic_norm = self.critic_step.step(critic_loss, reduce)

        self.critic.requires_grad_(False)  # the actor's gradient flows through Q to a only
        actor_loss = -reduce.mean(self.critic(batch["obs"], self.policy(batch["obs"])))
        actor_norm = self.actor_step.step(actor_loss, reduce)
        self.critic.requires_grad_(True)

        self.num_updates += 1
        if self.num_updates % c.target_update_interval == 0:
            self.update_targets(c.tau)
        self.priorities = td_error.detach().abs().cpu()
        return {
            "losses/critic": critic_loss.item(),
            "losses/actor": actor_loss.item(),
            "losses/critic_grad_norm": critic_norm,
            "losses/actor_grad_norm": actor_norm,
            "charts/q_values": float(reduce.mean(q_taken.detach())),
        }

    @torch.no_grad()
    def update_targets(self, tau: float) -> None:
        """``theta' <- tau * theta + (1 - tau) * theta'`` for both networks."""
        for target, online in (
            (self.target_policy, self.policy),
            (self.target_critic, self.critic),
        ):
            for t, o in zip(target.parameters(), online.parameters()):
                t.lerp_(o, tau)

    # --- parameters for actors, checkpoints and devices -------------------------------------------

    def actor_state(self) -> dict[str, torch.Tensor]:
        """What an Ape-X DPG actor needs, as CPU copies: the policy to act, and the critic and both
        target networks to compute initial priorities exactly as the learner would. Keys
        ``policy.*``, ``critic.*``, ``target_policy.*``, ``target_critic.*``."""
        return {
            f"{name}.{key}": value.detach().to("cpu", copy=True)
            for name, module in self.networks().items()
            for key, value in module.state_dict().items()
        }

    def load_actor_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load ``actor_state()`` (from a learner) into these networks."""
        load_networks(self.networks(), state)

    def networks(self) -> dict[str, nn.Module]:
        """The four networks by name: ``policy``, ``critic``, ``target_policy``,
        ``target_critic``."""
        return {
            "policy": self.policy,
            "critic": self.critic,
            "target_policy": self.target_policy,
            "target_critic": self.target_critic,
        }

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizers, counters and schedules."""
        return {
            **{name: module.state_dict() for name, module in self.networks().items()},
            "model": self.model.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "num_updates": self.num_updates,
            "progress": self.progress,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, module in self.networks().items():
            module.load_state_dict(state[name])
        self.model.load_state_dict(state["model"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.num_updates = int(state["num_updates"])
        self.set_progress(state["progress"])

    def to(self, device: "str | torch.device") -> None:
        """Move the networks and the optimizers' state to ``device``."""
        self.device = torch.device(device)
        for module in (*self.networks().values(), self.model):
            module.to(self.device)
        for optimizer in (self.actor_optimizer, self.critic_optimizer):
            move_optimizer_state(optimizer, self.device)

    def __repr__(self) -> str:
        c = self.config
        return (
            f"DDPG(n_step={c.n_step}, tau={c.tau}, "
            f"target_update_interval={c.target_update_interval})"
        )
