"""Ape-X's algorithms, one object each, chosen once by name (``ApexConfig.algorithm``): Ape-X DQN
(Horgan et al. 2018, Sec. 3.1) and Ape-X DPG (Sec. 3.2).

Each says what its learner is (``make_learner``), its defaults (Appendix C), how its actors explore
(epsilons or noise scales, ``exploration``), how a run is judged (``target_metric``), and which of
the run's levers apply to it. Nothing outside this registry asks which algorithm a run has.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workbench.apex.exploration import actor_epsilons, actor_noise_scales
from workbench.envs import env_spaces
from workbench.learners import DDPG, DQN, DDPGConfig, DPGActor, DQNConfig, QActor
from workbench.learners.dqn import dqn_update_factory
from workbench.models import ContinuousQ, DeterministicPolicy, QNetwork

if TYPE_CHECKING:  # the config names its algorithm: a type-only import, no cycle at runtime
    from workbench.apex.config import ApexConfig

__all__ = [
    "APEX_ALGORITHMS",
    "ApexAlgorithm",
    "ApexDPG",
    "ApexDQN",
    "apex_algorithm",
    "make_learner",
]


class ApexAlgorithm(ABC):
    """One Ape-X algorithm: its learner, its defaults, its actors' exploration."""

    name: str
    """``ApexConfig.algorithm``'s value for it."""
    title: str
    settings_class: type
    """The learner's settings (``ApexConfig.learner``)."""
    target_metric: str
    """The row key a target return applies to by default."""
    anneals: bool = False
    """Whether its exploration is an epsilon that ``exploration_schedule="annealed"`` can anneal."""
    measures_precision: bool = False
    """Whether timing its network's precision at start pays (``ApexRecipe.measure_precision``)."""

    @abstractmethod
    def default_settings(self) -> Any:
        """The learner's settings when ``ApexConfig.learner`` is None."""

    @abstractmethod
    def explorations(self, num_actors: int, base: float, alpha: float) -> list[float]:
        """Each actor's fixed exploration on Ape-X's ladder (actor 0 explores most)."""

    @abstractmethod
    def make_learner(self, config: ApexConfig, device: "str | torch.device" = "cpu") -> Any:
        """The learner, sized from the env's spaces."""

    @abstractmethod
    def make_actor(self, config: ApexConfig) -> Any:
        """What an actor acts and computes initial priorities with, on the CPU: the learner's
        networks without its optimizers (``act``, ``initial_priorities``, ``load_actor_state``)."""

    def update_factory(
        self, config: ApexConfig, network: Any, obs_shape: tuple, num_actions: int
    ) -> Any:
        """The learner's own update under given levers, for timing its precision at start
        (``learners.precision.UpdateFactory``); None: time the network's gradient step."""
        return None

    def make_policy_network(self, config: ApexConfig, obs_shape: tuple, num_actions: int) -> Any:
        """The network a checkpoint's weights fill to play the learned policy."""
        raise ValueError(
            f"{self.title} has no policy network evaluated here; only Ape-X DQN's Q-network is "
            "played as a policy."
        )


class ApexDQN(ApexAlgorithm):
    """Ape-X DQN: double, n-step, prioritized, dueling Q-learning; actors on an epsilon ladder."""

    name, title, settings_class = "dqn", "Ape-X DQN", DQNConfig
    target_metric = "apex/return_least_exploring"  # the actor exploring least, its last 10 games
    anneals = True
    measures_precision = True

    def default_settings(self) -> DQNConfig:
        # Appendix C: 3-step double Q, batch 512, Adam at lr 0.00025 / 4, target every 2,500.
        return DQNConfig(
            n_step=3,
            double=True,
            batch_size=512,
            learning_rate=0.00025 / 4,
            target_update_interval=2_500,
            max_grad_norm=40.0,
        )

    def explorations(self, num_actors: int, base: float, alpha: float) -> list[float]:
        return actor_epsilons(num_actors, base, alpha)

    def make_learner(self, config: ApexConfig, device: "str | torch.device" = "cpu") -> DQN:
        return DQN(self.q_network(config), config.learner, device=device)

    def make_actor(self, config: ApexConfig) -> QActor:
        return QActor(self.q_network(config), config.learner)

    def q_network(self, config: ApexConfig) -> QNetwork:
        observation_space, action_space = env_spaces(config.env_id, **config.env_options)
        if not hasattr(action_space, "n"):
            raise ValueError(
                f"{config.env_id} has continuous actions; Ape-X DQN needs discrete ones. "
                "Use algorithm='ddpg' (Ape-X DPG)."
            )
        return self.make_policy_network(config, observation_space.shape, int(action_space.n))

    def make_policy_network(self, config: ApexConfig, obs_shape: tuple, num_actions: int) -> Any:
        return QNetwork(obs_shape, num_actions, **config.model_options)

    def update_factory(
        self, config: ApexConfig, network: Any, obs_shape: tuple, num_actions: int
    ) -> Any:
        return dqn_update_factory(network, config.learner, obs_shape, num_actions)


class ApexDPG(ApexAlgorithm):
    """Ape-X DPG: DDPG's actor-critic from the central replay; actors on a noise-scale ladder."""

    name, title, settings_class = "ddpg", "Ape-X DPG", DDPGConfig
    target_metric = "charts/mean_return"  # the last 20 episodes of all actors

    def default_settings(self) -> DDPGConfig:
        return DDPGConfig(n_step=3)

    def explorations(self, num_actors: int, base: float, alpha: float) -> list[float]:
        return actor_noise_scales(num_actors)

    def make_learner(self, config: ApexConfig, device: "str | torch.device" = "cpu") -> DDPG:
        return DDPG(*self.networks(config), config.learner, device=device)

    def make_actor(self, config: ApexConfig) -> DPGActor:
        return DPGActor(*self.networks(config))

    def networks(self, config: ApexConfig) -> tuple[DeterministicPolicy, ContinuousQ]:
        """The policy and the critic, sized from the env's spaces."""
        observation_space, action_space = env_spaces(config.env_id, **config.env_options)
        if hasattr(action_space, "n"):
            raise ValueError(
                f"{config.env_id} has discrete actions; Ape-X DPG needs continuous ones. "
                "Use algorithm='dqn'."
            )
        obs_dim = int(np.prod(observation_space.shape))
        policy = DeterministicPolicy(
            obs_dim, action_space.low, action_space.high, **config.model_options
        )
        critic = ContinuousQ(obs_dim, int(np.prod(action_space.shape)), **config.model_options)
        return policy, critic


APEX_ALGORITHMS: dict[str, ApexAlgorithm] = {a.name: a for a in (ApexDQN(), ApexDPG())}


def apex_algorithm(name: str) -> ApexAlgorithm:
    """The algorithm called ``name`` (``"dqn"``, ``"ddpg"``), else a ValueError naming them."""
    if name not in APEX_ALGORITHMS:
        names = " or ".join(repr(known) for known in APEX_ALGORITHMS)
        raise ValueError(f"ApexConfig.algorithm must be {names}, got {name!r}")
    return APEX_ALGORITHMS[name]


def make_learner(config: ApexConfig, device: "str | torch.device" = "cpu") -> Any:
    """The learner of ``config``'s algorithm: ``DQN`` on a ``QNetwork`` or ``DDPG`` on a policy
    and a critic, sized from the env's spaces (an actor builds ``make_actor``'s instead)."""
    return apex_algorithm(config.algorithm).make_learner(config, device)
