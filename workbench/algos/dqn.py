"""DQN and its extensions, one learner with options: double, dueling, n-step, categorical (C51),
prioritized replay, and all of them together (Rainbow without noisy nets).

* DQN: Mnih et al. 2015, *Human-level control through deep RL*: Q-learning on replayed
  transitions against a periodically copied target network, Huber loss.
* Double DQN: van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461, Eq. 4: the online network
  picks the next action, the target network values it.
* Dueling: Wang et al. 2016 (``models.QNetwork(dueling=True)``; nothing here changes).
* n-step returns: Sutton 1988; Hessel et al. 2018 (Rainbow), Eq. 2; Horgan et al. 2018 (Ape-X),
  Sec. 3.1. ``NStepTransitions`` turns ``[T, B]`` rollouts into n-step transitions.
* Categorical: Bellemare et al. 2017, https://arxiv.org/abs/1707.06887, Algorithm 1
  (``QNetwork(num_atoms=51)``; the target distribution is ``returns.categorical_projection``).
* Prioritized replay: Schaul et al. 2016, https://arxiv.org/abs/1511.05952 (``replay.PrioritizedReplay``):
  the loss of each sample is weighted by its importance weight and its |TD error| (C51: its
  cross-entropy, as in Rainbow) becomes its new priority.

Two layers. ``DQN.learn(batch, weights) -> (metrics, priorities)`` is one gradient step on a
sampled batch of n-step transitions, for any caller that owns the replay (the Ape-X learner).
``DQN.update(rollout)`` is the whole agent for a sampler-driven loop (``pg.train``, ``Run``):
it turns the rollout into n-step transitions, adds them to its replay, and takes as many gradient
steps as the replay ratio owes (Stooke & Abbeel 2018, Sec. 4: the replay ratio, samples trained
per sample collected, is what to hold fixed when the batch grows).

A batch of transitions holds ``obs [N, ...]``, ``actions [N]``, ``returns [N]`` (the discounted sum
of the window's rewards), ``discounts [N]`` (``gamma^m`` for a window of ``m`` steps, 0 when it
ended in a terminal state) and ``next_obs [N, ...]`` (the observation after the window). The
target is ``returns + discounts * Q_target(next_obs, a*)``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from workbench.algos.returns import categorical_projection
from workbench.models import EpsilonGreedy, QNetwork
from workbench.rollout import Rollout

__all__ = ["DQN", "DQNConfig", "NStepTransitions", "linear_schedule", "make_replay", "replay_and_learn"]

TRANSITION_KEYS = ("obs", "actions", "returns", "discounts", "next_obs")


def linear_schedule(start: float, end: float, progress: float) -> float:
    """``start`` moving linearly to ``end`` as ``progress`` goes from 0 to 1 (then ``end``)."""
    progress = min(max(progress, 0.0), 1.0)
    return start + (end - start) * progress


@dataclass
class DQNConfig:
    """DQN hyperparameters. Defaults: Rainbow's where it states them (Hessel et al. 2018,
    Table 1), else CleanRL's ``dqn.py``; model options (dueling, atoms) are the ``QNetwork``'s."""

    gamma: float = 0.99
    n_step: int = 3
    """Steps per return window (Ape-X and Rainbow use 3; 1 is the classic one-step target)."""
    double: bool = True
    """Double Q-learning: the online network picks ``a*``, the target network values it."""
    learning_rate: float = 6.25e-5
    adam_eps: float = 1.5e-4
    batch_size: int = 32
    """Transitions per gradient step."""
    replay_ratio: float = 8.0
    """Samples trained per env step collected: ``updates = steps * replay_ratio / batch_size``
    (DQN's one batch of 32 every 4 steps is 8)."""
    replay_capacity: int = 100_000
    learning_starts: int = 1_000
    """Env steps collected before the first gradient step (the replay fills first)."""
    target_update_interval: int = 2_000
    """Gradient steps between copies of the online network into the target network."""
    max_grad_norm: float | None = 10.0
    """Clip the global gradient norm (Wang et al. 2016 clip the dueling network's at 10)."""
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    exploration_fraction: float = 0.1
    """Fraction of the run over which epsilon falls linearly from start to end (``set_progress``)."""
    prioritized: bool = False
    """Prioritized replay (proportional); otherwise uniform."""
    priority_alpha: float = 0.5
    priority_beta_start: float = 0.4
    """Importance-sampling exponent at the start; annealed linearly to 1 over the run."""
    priority_eps: float = 1e-6
    scale_learning_rate: str | None = None
    """None, ``"linear"`` or ``"sqrt"``: scale ``learning_rate`` with ``batch_size`` against
    ``reference_batch_size`` (Stooke & Abbeel 2018, Sec. 4; ``pg.scaled_learning_rate``)."""
    reference_batch_size: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.n_step, bool) or not isinstance(self.n_step, int) or self.n_step < 1:
            raise ValueError(f"DQNConfig.n_step must be an int >= 1, got {self.n_step!r}")
        for name in ("batch_size", "replay_capacity", "target_update_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"DQNConfig.{name} must be a positive int, got {value!r}")
        if self.replay_capacity < self.batch_size:
            raise ValueError(f"DQNConfig.replay_capacity {self.replay_capacity} < batch_size {self.batch_size}: "
                             "the replay must hold at least one batch.")
        if not self.replay_ratio > 0:
            raise ValueError(f"DQNConfig.replay_ratio must be positive, got {self.replay_ratio}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"DQNConfig.gamma must be in [0, 1], got {self.gamma}")
        if self.scale_learning_rate is not None and self.reference_batch_size is None:
            raise ValueError("DQNConfig.scale_learning_rate needs reference_batch_size (the batch size "
                             "at which learning_rate was tuned).")


def make_replay(config: Any, seed: int | None) -> Any:
    """The replay a config asks for (``prioritized``, ``replay_capacity``, ``priority_*``): what
    ``DQN`` and ``algos.ddpg.DDPG`` make when they are not handed one."""
    from workbench import replay

    if config.prioritized:
        return replay.PrioritizedReplay(config.replay_capacity, alpha=config.priority_alpha,
                                        beta=config.priority_beta_start, eps=config.priority_eps, seed=seed)
    return replay.UniformReplay(config.replay_capacity, seed=seed)


def replay_and_learn(agent: Any, rollout: Rollout) -> dict[str, float]:
    """A replay-based agent's ``update``: add the rollout's n-step transitions to ``agent.replay``,
    then take the gradient steps the replay ratio owes (none before ``learning_starts``), each on a
    sampled batch, giving the new priorities back to a prioritized replay. Returns the last step's
    metrics. The agent has ``config``, ``nstep``, ``replay``, ``env_steps``, ``_owed_updates``, ``learn``."""
    c = agent.config
    transitions = agent.nstep.add(rollout)
    if len(transitions["actions"]):
        agent.replay.add(transitions)
    agent.env_steps += rollout.num_steps
    metrics: dict[str, float] = {}
    if agent.env_steps >= c.learning_starts and len(agent.replay) >= c.batch_size:
        agent._owed_updates += rollout.num_steps * c.replay_ratio / c.batch_size
        while agent._owed_updates >= 1.0:
            agent._owed_updates -= 1.0
            batch, indices, weights = agent.replay.sample(c.batch_size)
            metrics, priorities = agent.learn(batch, weights)
            if c.prioritized:
                agent.replay.update_priorities(indices, priorities)
    return metrics


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
        self.kept = keep  # [L, B] over the pending rows and this rollout's: which windows were emitted
        steps["emitted"] = steps["emitted"] | complete

        next_index = (t + window - 1).clamp(min=0)  # obs_{t+m} = obs_after[t + m - 1]
        next_obs = obs_after[next_index, torch.arange(returns.shape[1]).unsqueeze(0)]
        keep_pending = min(n - 1, length)
        self._pending = {key: value[length - keep_pending:] for key, value in steps.items()} if keep_pending else None
        return {
            "obs": steps["obs"][keep],
            "actions": steps["actions"][keep],
            "returns": returns[keep],
            "discounts": discounts[keep],
            "next_obs": next_obs[keep],
        }


class DQN:
    """The DQN family on a ``QNetwork``: ``learn`` on a sampled batch, or ``update`` on a rollout.

    Args:
        q_network: a ``models.QNetwork`` (``dueling=True``, ``num_atoms=51`` for the variants).
        config: a ``DQNConfig``.
        device: where the networks learn.
        replay: the replay ``update`` adds to and samples from; default made from the config
            (``replay.PrioritizedReplay`` or ``replay.UniformReplay`` with ``replay_capacity``).
        seed: seeds the default replay's sampling.

    Attributes:
        model: the ``EpsilonGreedy`` policy samplers collect with (its ``q_network`` learns).
        target: the target network. num_updates: gradient steps taken. env_steps: steps added.
    """

    def __init__(self, q_network: QNetwork, config: DQNConfig | None = None, *,
                 device: "str | torch.device" = "cpu", replay: Any = None, seed: int | None = None) -> None:
        if not isinstance(q_network, QNetwork):
            raise TypeError(f"DQN needs a workbench.models.QNetwork, got {type(q_network).__name__}")
        self.config = config = config or DQNConfig()
        self.device = torch.device(device)
        self.model = EpsilonGreedy(q_network, config.epsilon_start).to(self.device)
        self.q_network = q_network
        self.target = copy.deepcopy(q_network).requires_grad_(False)
        self.optimizer = torch.optim.Adam(q_network.parameters(), lr=self.learning_rate_for(config.batch_size),
                                          eps=config.adam_eps)
        self.replay = replay if replay is not None else make_replay(config, seed)
        self.nstep = NStepTransitions(config.n_step, config.gamma)
        self.num_updates = 0
        self.env_steps = 0
        self.progress = 0.0
        self._owed_updates = 0.0

    def learning_rate_for(self, batch_size: int) -> float:
        from workbench.algos.pg import scaled_learning_rate

        c = self.config
        if c.scale_learning_rate is None:
            return c.learning_rate
        return scaled_learning_rate(c.learning_rate, batch_size, c.reference_batch_size, c.scale_learning_rate)

    # --- schedules --------------------------------------------------------------------------------

    def set_progress(self, progress: float) -> None:
        """Fraction of the run done: epsilon falls over ``exploration_fraction`` of it, and the
        prioritized replay's beta rises to 1 over all of it (Schaul et al. 2016, Sec. 3.4)."""
        c = self.config
        self.progress = min(max(float(progress), 0.0), 1.0)
        explore = self.progress / c.exploration_fraction if c.exploration_fraction > 0 else 1.0
        self.model.set_epsilon(linear_schedule(c.epsilon_start, c.epsilon_end, explore))
        if hasattr(self.replay, "beta"):
            self.replay.beta = linear_schedule(c.priority_beta_start, 1.0, self.progress)

    # --- one gradient step ------------------------------------------------------------------------

    def learn(self, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None
              ) -> tuple[dict[str, float], torch.Tensor]:
        """One gradient step on a batch of n-step transitions (keys: ``TRANSITION_KEYS``).

        ``weights`` are the importance-sampling weights of a prioritized sample (None: all 1).
        Returns the metrics and each sample's new priority (|TD error|, or the cross-entropy for
        C51), ``[N]`` on the CPU.
        """
        batch = self._on_device(batch)
        weights = (torch.ones(batch["actions"].shape[0], device=self.device) if weights is None
                   else torch.as_tensor(weights, dtype=torch.float32, device=self.device))
        loss_per_sample, q_taken, priorities = self._losses(batch)
        loss = (weights * loss_per_sample).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = self.config.max_grad_norm
        grad_norm = nn.utils.clip_grad_norm_(self.q_network.parameters(), math.inf if max_norm is None else max_norm)
        self.optimizer.step()
        self.num_updates += 1
        if self.num_updates % self.config.target_update_interval == 0:
            self.target.load_state_dict(self.q_network.state_dict())
        metrics = {
            "losses/q": loss.item(),
            "losses/grad_norm": float(grad_norm),
            "charts/q_values": q_taken.detach().mean().item(),
        }
        return metrics, priorities.cpu()

    def _on_device(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        missing = [key for key in TRANSITION_KEYS if key not in batch]
        if missing:
            raise ValueError(f"DQN: the batch lacks {missing}; it needs {list(TRANSITION_KEYS)} "
                             "(NStepTransitions.add makes them).")
        return {key: torch.as_tensor(batch[key]).to(self.device) for key in TRANSITION_KEYS}

    def _losses(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-sample loss, ``Q(s, a)`` and priority: Huber on the n-step TD error and |TD error|,
        or for C51 the cross-entropy of Alg. 1, which is also its priority (Hessel et al. 2018)."""
        actions = batch["actions"].long()
        if self.q_network.num_atoms > 1:
            loss_per_sample, q_taken = self._categorical_loss(batch, actions)
            return loss_per_sample, q_taken, loss_per_sample.detach()
        q_taken = self.q_network(batch["obs"]).gather(1, actions.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            target = batch["returns"] + batch["discounts"] * self._next_values(batch["next_obs"])
        loss_per_sample = F.smooth_l1_loss(q_taken, target, reduction="none")  # Huber, delta 1
        return loss_per_sample, q_taken, (target - q_taken).detach().abs()

    # --- what an Ape-X actor does with its copy of the networks ------------------------------------

    @torch.no_grad()
    def act(self, obs: torch.Tensor, exploration: "float | torch.Tensor") -> torch.Tensor:
        """Epsilon-greedy actions ``[B]`` with one epsilon per row (``exploration``, ``[B]`` or a float)."""
        return self.q_network.act(torch.as_tensor(obs).to(self.device), exploration)["action"]

    @torch.no_grad()
    def initial_priorities(self, transitions: dict[str, Any]) -> torch.Tensor:
        """|TD error| of each transition under this agent's current networks, ``[N]`` on the CPU:
        the priority an Ape-X actor computes before sending (Horgan et al. 2018, Sec. 3, Alg. 1
        line 7). Nothing is trained and no counter moves."""
        return self._losses(self._on_device(transitions))[2].cpu()

    def actor_state(self) -> dict[str, torch.Tensor]:
        """The parameters an actor needs: the online network (it acts and computes priorities
        with it; its own copy serves as its target network too)."""
        return {key: value.detach() for key, value in self.q_network.state_dict().items()}

    def load_actor_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load parameters an Ape-X learner published, into the online and the target network."""
        self.q_network.load_state_dict(state)
        self.target.load_state_dict(state)

    @torch.no_grad()
    def _next_action(self, next_obs: torch.Tensor) -> torch.Tensor:
        """``a*``: the online network's greedy action (double) or the target network's."""
        chooser = self.q_network if self.config.double else self.target
        return chooser(next_obs).argmax(-1)

    @torch.no_grad()
    def _next_values(self, next_obs: torch.Tensor) -> torch.Tensor:
        """``Q_target(s', a*)`` (van Hasselt et al. 2016, Eq. 4 when double)."""
        return self.target(next_obs).gather(1, self._next_action(next_obs).unsqueeze(1)).squeeze(1)

    def _categorical_loss(self, batch: dict[str, torch.Tensor], actions: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-entropy between the projected target distribution and the online one (Alg. 1)."""
        with torch.no_grad():
            next_action = self._next_action(batch["next_obs"])
            next_probs = self.target.distribution(batch["next_obs"])
            next_probs = next_probs[torch.arange(next_probs.shape[0], device=self.device), next_action]
            target = categorical_projection(next_probs, batch["returns"], batch["discounts"], self.q_network.support)
        log_probs = self.q_network.distribution(batch["obs"], log=True)
        log_probs = log_probs[torch.arange(log_probs.shape[0], device=self.device), actions]
        q_taken = (log_probs.exp() * self.q_network.support).sum(-1)
        return -(target * log_probs).sum(-1), q_taken

    # --- the agent in a sampler loop --------------------------------------------------------------

    def update(self, rollout: Rollout) -> dict[str, float]:
        """Add the rollout's n-step transitions to the replay, then take the gradient steps the
        replay ratio owes (none before ``learning_starts``)."""
        metrics = replay_and_learn(self, rollout)
        epsilon = self.model.epsilon
        return {
            **metrics,
            "charts/epsilon": float(epsilon.mean()),
            "charts/replay_size": float(len(self.replay)),
            "charts/gradient_steps": float(self.num_updates),
            "charts/learning_rate": self.optimizer.param_groups[0]["lr"],
        }

    # --- checkpoints ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizer, counters and schedules (not the replay: refilled on resume)."""
        return {
            "model": self.model.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "num_updates": self.num_updates,
            "env_steps": self.env_steps,
            "progress": self.progress,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_updates, self.env_steps = state["num_updates"], state["env_steps"]
        self.set_progress(state["progress"])
        self.nstep.reset()

    def __repr__(self) -> str:
        c = self.config
        parts = [f"n_step={c.n_step}", "double" if c.double else "single",
                 "dueling" if self.q_network.dueling else "", f"atoms={self.q_network.num_atoms}" if
                 self.q_network.num_atoms > 1 else "", "prioritized" if c.prioritized else "uniform"]
        return f"DQN({', '.join(p for p in parts if p)})"
