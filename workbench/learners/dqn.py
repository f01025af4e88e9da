"""DQN and its extensions, one learner with options: double, dueling, n-step, categorical (C51),
prioritized replay, and all of them together (Rainbow without noisy nets).

* DQN: Mnih et al. 2015, *Human-level control through deep RL*: Q-learning on replayed
  transitions against a periodically copied target network, Huber loss.
* Double DQN: van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461, Eq. 4: the online network
  picks the next action, the target network values it (``kernels.double_q_action``).
* Dueling: Wang et al. 2016 (``models.QNetwork(dueling=True)``; nothing here changes).
* n-step returns: Sutton 1988; Hessel et al. 2018 (Rainbow), Eq. 2; Horgan et al. 2018 (Ape-X),
  Sec. 3.1. ``replay.NStepTransitions`` turns ``[T, B]`` rollouts into n-step transitions.
* Categorical: Bellemare et al. 2017, https://arxiv.org/abs/1707.06887, Algorithm 1
  (``QNetwork(num_atoms=51)``; the target distribution is ``kernels.categorical_projection``).
* Prioritized replay: Schaul et al. 2016, https://arxiv.org/abs/1511.05952: the loss of each
  sample is weighted by its importance weight and its |TD error| (C51: its cross-entropy, as in
  Rainbow) becomes its new priority (``DQN.priorities`` after an update).

``DQN.update(batch)`` is one gradient step on a sampled batch of n-step transitions: ``obs [N,
...]``, ``actions [N]``, ``returns [N]`` (the discounted sum of the window's rewards), ``discounts
[N]`` (``gamma^m`` for a window of ``m`` steps, 0 when it ended in a terminal state), ``next_obs
[N, ...]`` (the observation after the window) and optionally ``weights [N]``. The target is
``returns + discounts * Q_target(next_obs, a*)``. The whole agent of a sampler loop (rollouts into
a replay, updates as the replay ratio allows, epsilon annealed) is
``learners.replay_agent.ReplayAgent(DQN(...), ReplayAgentConfig(...))``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from workbench.checks import positive_int
from workbench.kernels import (
    categorical_projection,
    double_q_action,
    scaled_learning_rate,
)
from workbench.learners.base import (
    GradientStep,
    Precision,
    Reduction,
    check_precision,
    compiled,
    move_optimizer_state,
)
from workbench.models import EpsilonGreedy, QNetwork
from workbench.replay import TRANSITION_KEYS

__all__ = [
    "DQN",
    "DQNConfig",
    "QActor",
    "categorical_q_loss",
    "dqn_update_factory",
    "next_q_values",
    "q_losses",
    "transition_batch",
]


@dataclass
class DQNConfig(Precision):
    """DQN hyperparameters. Defaults: Rainbow's where it states them (Hessel et al. 2018,
    Table 1), else CleanRL's ``dqn.py``; model options (dueling, atoms) are the ``QNetwork``'s.
    The precision fields (``Precision``: ``autocast``, ``channels_last``) are the policy
    gradients' levers; DQN takes ``autocast`` None or ``"bfloat16"`` (float16 would need the
    gradient scaling DQN does not do) and ``compile``: the update's loss (its three forward
    passes, the target and the Huber loss) through ``torch.compile``; acting and an Ape-X actor's
    initial priorities stay eager."""

    gamma: float = 0.99
    n_step: int = 3
    """Steps per return window (Ape-X and Rainbow use 3; 1 is the classic one-step target)."""
    double: bool = True
    """Double Q-learning: the online network picks ``a*``, the target network values it."""
    learning_rate: float = 6.25e-5
    adam_eps: float = 1.5e-4
    batch_size: int = 32
    """Transitions per gradient step."""
    target_update_interval: int = 2_000
    """Gradient steps between copies of the online network into the target network."""
    max_grad_norm: float | None = 10.0
    """Clip the global gradient norm (Wang et al. 2016 clip the dueling network's at 10)."""
    scale_learning_rate: str | None = None
    """None, ``"linear"`` or ``"sqrt"``: scale ``learning_rate`` with ``batch_size`` against
    ``reference_batch_size`` (Stooke & Abbeel 2018, Sec. 4; ``kernels.scaled_learning_rate``)."""
    reference_batch_size: int | None = None

    retired: ClassVar[frozenset[str]] = frozenset(
        {"replay_ratio", "replay_capacity", "learning_starts", "prioritized", "priority_alpha"}
        | {"priority_beta_start", "priority_eps", "epsilon_start", "epsilon_end"}
        | {"exploration_fraction"}
    )
    """Fields a saved DQNConfig may have from before they moved to ``ReplayAgentConfig`` (the
    loop's replay and exploration; Ape-X's are ``ApexConfig``'s): ``config_from_dict`` leaves
    them out."""

    def __post_init__(self) -> None:
        self.check_fields()
        self.refuse_float16()
        for name in ("n_step", "batch_size", "target_update_interval"):
            positive_int(getattr(self, name), f"DQNConfig.{name}")
        if not self.learning_rate > 0:
            raise ValueError(f"DQNConfig.learning_rate must be positive, got {self.learning_rate}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"DQNConfig.gamma must be in [0, 1], got {self.gamma}")
        if self.scale_learning_rate is not None and self.reference_batch_size is None:
            raise ValueError(
                "DQNConfig.scale_learning_rate needs reference_batch_size (the batch size "
                "at which learning_rate was tuned)."
            )


def transition_batch(
    batch: dict[str, Any], device: torch.device, who: str
) -> dict[str, torch.Tensor]:
    """A batch of n-step transitions (``replay.TRANSITION_KEYS``, optional ``weights``) as tensors
    on ``device``; ``weights`` default to 1. Raises ValueError naming the missing keys."""
    missing = [key for key in TRANSITION_KEYS if key not in batch]
    if missing:
        raise ValueError(
            f"{who}: the batch lacks {missing}; it needs {list(TRANSITION_KEYS)} "
            "(replay.NStepTransitions.add makes them) and optionally 'weights'."
        )
    out = {key: torch.as_tensor(batch[key]).to(device) for key in TRANSITION_KEYS}
    n = out["returns"].shape[0]
    weights = batch.get("weights")
    out["weights"] = (
        torch.ones(n, device=device)
        if weights is None
        else torch.as_tensor(weights, dtype=torch.float32).to(device)
    )
    return out


def q_losses(
    online: QNetwork,
    target: QNetwork,
    batch: dict[str, torch.Tensor],
    config: DQNConfig,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample loss, ``Q(s, a)`` and priority: Huber on the n-step TD error and |TD error|,
    or for C51 the cross-entropy of Alg. 1, which is also its priority (Hessel et al. 2018).
    ``target`` values the next states (an actor passes its one network as both)."""
    check_precision(config.autocast, device, "DQN")
    actions = batch["actions"].long()
    if online.num_atoms > 1:
        loss_per_sample, q_taken = categorical_q_loss(
            online, target, batch, actions, config, device
        )
        return loss_per_sample, q_taken, loss_per_sample.detach()
    with config.autocast_context(device):  # the forward pass; the loss in float32
        q_values = online(batch["obs"]).float()
    q_taken = q_values.gather(1, actions.unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        bootstrap = next_q_values(online, target, batch["next_obs"], config, device)
        td_target = batch["returns"] + batch["discounts"] * bootstrap
    loss_per_sample = F.smooth_l1_loss(q_taken, td_target, reduction="none")  # Huber, delta 1
    return loss_per_sample, q_taken, (td_target - q_taken).detach().abs()


@torch.no_grad()
def next_q_values(
    online: QNetwork,
    target: QNetwork,
    next_obs: torch.Tensor,
    config: DQNConfig,
    device: torch.device,
) -> torch.Tensor:
    """``Q_target(s', a*)`` ``[N]``, ``a*`` chosen by the online network when ``double``
    (van Hasselt et al. 2016, Eq. 4; ``kernels.double_q_action``)."""
    with config.autocast_context(device):
        target_q = target(next_obs).float()
        online_q = online(next_obs).float() if config.double else None
    action = double_q_action(target_q, online_q)
    return target_q.gather(1, action.unsqueeze(1)).squeeze(1)


def categorical_q_loss(
    online: QNetwork,
    target: QNetwork,
    batch: dict[str, torch.Tensor],
    actions: torch.Tensor,
    config: DQNConfig,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy between the projected target distribution and the online one (Alg. 1)."""
    support = online.support
    rows = torch.arange(actions.shape[0], device=device)
    with torch.no_grad(), config.autocast_context(device):
        next_probs = target.distribution(batch["next_obs"]).float()  # [N, A, atoms]
        online_q = online(batch["next_obs"]).float() if config.double else None
    with torch.no_grad():
        target_q = (next_probs * support).sum(-1)
        next_action = double_q_action(target_q, online_q)
        projected = categorical_projection(
            next_probs[rows, next_action], batch["returns"], batch["discounts"], support
        )
    with config.autocast_context(device):  # log-softmax runs in float32 there
        log_probs = online.distribution(batch["obs"], log=True).float()[rows, actions]
    q_taken = (log_probs.exp() * support).sum(-1)
    return -(projected * log_probs).sum(-1), q_taken


class QActor:
    """What an Ape-X actor acts and prioritizes with: a ``QNetwork`` acting epsilon-greedily, and
    the |TD error| of its new transitions under that same network, which serves as its own
    target (Horgan et al. 2018, Alg. 1). No optimizer and no target copy: acting apart from
    learning, as rlpyt keeps an agent apart from its algorithm. It loads what
    ``DQN.actor_state`` publishes.

    Args:
        q_network: the actor's copy of the learner's network.
        config: the learner's ``DQNConfig`` (its n-step, double, precision settings).
    """

    def __init__(
        self,
        q_network: QNetwork,
        config: DQNConfig | None = None,
        *,
        device: "str | torch.device" = "cpu",
    ) -> None:
        self.config = config = config or DQNConfig()
        self.device = torch.device(device)
        if config.channels_last:  # the learner's memory layout, as its copy had
            q_network.to(memory_format=torch.channels_last)
        self.q_network = q_network.to(self.device).requires_grad_(False)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, exploration: "float | torch.Tensor") -> torch.Tensor:
        """Epsilon-greedy actions ``[B]`` with one epsilon per row (``exploration``)."""
        return self.q_network.act(torch.as_tensor(obs).to(self.device), exploration)["action"]

    @torch.no_grad()
    def initial_priorities(self, transitions: dict[str, Any]) -> torch.Tensor:
        """|TD error| of each transition ``[N]`` on the CPU (C51: its cross-entropy)."""
        batch = transition_batch(transitions, self.device, "QActor.initial_priorities")
        q = self.q_network
        return q_losses(q, q, batch, self.config, self.device)[2].cpu()

    def load_actor_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load the parameters a learner published (``DQN.actor_state``)."""
        self.q_network.load_state_dict(state)


class DQN:
    """The DQN family on a ``QNetwork``: one gradient step per ``update(batch)``.

    Args:
        q_network: a ``models.QNetwork`` (``dueling=True``, ``num_atoms=51`` for the variants).
        config: a ``DQNConfig`` (one gradient step's settings; the replay around it is its
            ``ReplayAgent``'s or Ape-X's).
        device: where the networks learn.

    Attributes:
        model: the ``EpsilonGreedy`` policy samplers collect with (its ``q_network`` learns).
        target: the target network. num_updates: gradient steps taken.
        priorities: the new priority of each sample of the last update (|TD error|, or the
            cross-entropy for C51), float ``[N]`` on the CPU.
    """

    batch_axis = 0  # one row per transition

    def __init__(
        self,
        q_network: QNetwork,
        config: DQNConfig | None = None,
        *,
        device: "str | torch.device" = "cpu",
    ) -> None:
        if not isinstance(q_network, QNetwork):
            raise TypeError(
                f"DQN needs a workbench.models.QNetwork, got {type(q_network).__name__}"
            )
        self.config = config = config or DQNConfig()
        self.device = torch.device(device)
        if config.channels_last:  # before the copies and the optimizer: they keep its strides
            q_network.to(memory_format=torch.channels_last)
        # acts uniformly at random until told otherwise (``set_exploration``: its ReplayAgent's
        # schedule; an Ape-X learner never acts, its actors explore on their own ladder)
        self.model = EpsilonGreedy(q_network, 1.0).to(self.device)
        self.q_network = q_network
        self.target = copy.deepcopy(q_network).requires_grad_(False)
        self.optimizer = torch.optim.Adam(
            q_network.parameters(),
            lr=self.learning_rate_for(config.batch_size),
            eps=config.adam_eps,
        )
        self.gradient_step = GradientStep(self.optimizer, max_grad_norm=config.max_grad_norm)
        self.reduction = Reduction()
        self.num_updates = 0
        self.progress = 0.0
        self.priorities: torch.Tensor | None = None
        self._compiled_losses = None  # made at the first update when config.compile is on

    def learning_rate_for(self, batch_size: int) -> float:
        """``learning_rate``, scaled with ``batch_size`` when the config asks (Stooke & Abbeel
        2018)."""
        c = self.config
        if c.scale_learning_rate is None:
            return c.learning_rate
        return scaled_learning_rate(
            c.learning_rate, batch_size, c.reference_batch_size, c.scale_learning_rate
        )

    def set_progress(self, progress: float) -> None:
        """Fraction of the run done (DQN's update has no schedule of its own; kept for
        checkpoints)."""
        self.progress = min(max(float(progress), 0.0), 1.0)

    def set_exploration(self, epsilon: float) -> None:
        """The acting policy's epsilon (``model``; a ``ReplayAgent`` sets it over the run)."""
        self.model.set_epsilon(epsilon)

    def schedule_metrics(self) -> dict[str, float]:
        """What the schedules set now: the acting policy's epsilon and the learning rate."""
        return {
            "charts/epsilon": float(self.model.epsilon.mean()),
            "charts/learning_rate": self.optimizer.param_groups[0]["lr"],
        }

    # --- one gradient step ------------------------------------------------------------------------

    def update(self, batch: dict[str, Any]) -> dict[str, float]:
        """One gradient step on a batch of n-step transitions (``replay.TRANSITION_KEYS``, optional
        ``weights``: the importance-sampling weights of a prioritized sample, default 1).

        Keys: ``losses/q`` (the weighted loss), ``losses/grad_norm``, ``charts/q_values``. The new
        priorities are in ``self.priorities`` afterwards.
        """
        batch = transition_batch(batch, self.device, "DQN.update")
        if self.config.compile and self._compiled_losses is None:  # the first update compiles
            self._compiled_losses = compiled(self.losses)
        losses = self._compiled_losses if self.config.compile else self.losses
        loss_per_sample, q_taken, priorities = losses(batch)
        loss = self.reduction.mean(batch["weights"] * loss_per_sample)
        grad_norm = self.gradient_step.step(loss, self.reduction)
        self.num_updates += 1
        if self.num_updates % self.config.target_update_interval == 0:
            self.target.load_state_dict(self.q_network.state_dict())
        self.priorities = priorities.cpu()
        return {
            "losses/q": loss.item(),
            "losses/grad_norm": grad_norm,
            "charts/q_values": float(self.reduction.mean(q_taken.detach())),
        }

    def losses(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``q_losses`` of the online network against the target network."""
        return q_losses(self.q_network, self.target, batch, self.config, self.device)

    def next_values(self, next_obs: torch.Tensor) -> torch.Tensor:
        """``next_q_values`` of the online and the target network."""
        return next_q_values(self.q_network, self.target, next_obs, self.config, self.device)

    # --- what an Ape-X actor does with its copy of the networks -----------------------------------

    @torch.no_grad()
    def act(self, obs: torch.Tensor, exploration: "float | torch.Tensor") -> torch.Tensor:
        """Epsilon-greedy actions ``[B]`` with one epsilon per row (``exploration``, ``[B]`` or a
        float)."""
        return self.q_network.act(torch.as_tensor(obs).to(self.device), exploration)["action"]

    @torch.no_grad()
    def initial_priorities(self, transitions: dict[str, Any]) -> torch.Tensor:
        """|TD error| of each transition under this agent's current networks, ``[N]`` on the CPU:
        the priority an Ape-X actor computes before sending (Horgan et al. 2018, Sec. 3, Alg. 1
        line 7). Nothing is trained and no counter moves."""
        return self.losses(transition_batch(transitions, self.device, "DQN.initial_priorities"))[
            2
        ].cpu()

    def actor_state(self) -> dict[str, torch.Tensor]:
        """The parameters an actor needs, on the CPU (actors act there; a GPU learner's tensors
        would make every actor process start CUDA): the online network (it acts and computes
        priorities with it; its own copy serves as its target network too)."""
        return {key: value.detach().to("cpu") for key, value in self.q_network.state_dict().items()}

    def load_actor_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load parameters an Ape-X learner published, into the online and the target network."""
        self.q_network.load_state_dict(state)
        self.target.load_state_dict(state)

    # --- checkpoints and devices ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizer, counters and the exploration schedule."""
        return {
            "model": self.model.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "num_updates": self.num_updates,
            "progress": self.progress,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_updates = int(state["num_updates"])
        self.set_progress(state["progress"])

    def to(self, device: "str | torch.device") -> None:
        """Move the networks and the optimizer's state to ``device``."""
        self.device = torch.device(device)
        self.model.to(self.device)
        self.target.to(self.device)
        move_optimizer_state(self.optimizer, self.device)

    def __repr__(self) -> str:
        c = self.config
        parts = [
            f"n_step={c.n_step}",
            "double" if c.double else "single",
            "dueling" if self.q_network.dueling else "",
            f"atoms={self.q_network.num_atoms}" if self.q_network.num_atoms > 1 else "",
        ]
        return f"DQN({', '.join(p for p in parts if p)})"


def dqn_update_factory(
    network: QNetwork, config: DQNConfig, obs_shape: tuple[int, ...], num_actions: int
) -> Callable[..., Callable[[], None]]:
    """DQN's own update under given levers, on a fixed batch of random transitions, for
    ``learners.precision.choose_precision`` to time: three forward passes (online, target, the
    double-Q action), the loss, the priorities and Adam, where compiling gains more than on the
    network's one gradient step (``precision``'s module docstring has the figures)."""
    n = config.batch_size
    generator = torch.Generator().manual_seed(0)

    def frames() -> torch.Tensor:
        return torch.randint(0, 256, (n, *obs_shape), dtype=torch.uint8, generator=generator)

    batch = {
        "obs": frames(),
        "actions": torch.randint(0, num_actions, (n,), generator=generator),
        "returns": torch.randn(n, generator=generator),
        "discounts": torch.full((n,), config.gamma**config.n_step),
        "next_obs": frames(),
        "weights": torch.ones(n),
    }

    def make_update(*, autocast: str | None, channels_last: bool, compile: bool):
        levers = replace(config, autocast=autocast, channels_last=channels_last, compile=compile)
        learner = DQN(copy.deepcopy(network), levers)
        return lambda: learner.update(batch)

    return make_update
