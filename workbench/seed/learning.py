"""The learner's side of SEED RL: the model, the inference server acting with it, and the learner.

SEED (Espeholt et al. 2020, Sec. 3, Fig. 2) keeps inference and learning on one host: the learner
trains the very model the server runs, so parameters never travel to actors. ``SeedLearning`` is
that host's state, in one process, and what every algorithm shares:

1. the model and its learner;
2. the ``server.InferenceServer`` answering actors' batches with that model, per-slot state;
3. its listeners: a ``TrajectoryAssembler`` cutting each env's stream into the learner's windows
   and an ``EpisodeLog`` of returns;
4. the rows, the actor count, the server's batch, the checkpoint.

What differs per algorithm is one subclass each (``vtrace_learning.VTraceLearning``,
``r2d2_learning.R2D2Learning``), chosen by name in ``algorithms``: its network, learner, policy
and windows, and ``learn``, the step that turns windows into updates (seed_rl's one learner module
per agent behind the same loop). ``Seed`` holds one in its own process for the serial and local
transports, and the Ray transport runs one inside the learner's Ray actor
(``transports.ray_learner``): either way the run calls ``learn`` and ``report``.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from workbench.envs import env_spaces
from workbench.seed.assembler import EpisodeLog, TrajectoryAssembler
from workbench.seed.server import InferenceServer
from workbench.seed.transports.batching import check_max_batch_size
from workbench.system import resolve_device

if TYPE_CHECKING:  # the config names its algorithm's class: a type-only import, no cycle at runtime
    from workbench.seed.config import SeedConfig

__all__ = ["SeedLearning"]


class SeedLearning(ABC):
    """Model, inference server, listeners and learner of one SEED run (module docstring).

    A subclass is one algorithm: its class attributes say what it trains and how it is judged
    (``algorithms.SEED_ALGORITHMS`` holds them by ``name``), and it builds its learner, the policy
    the server acts with and the windows the assembler cuts, and implements ``learn``.

    Args:
        config: the run.
        device: where the model lives: the server's forward passes and the learner's updates.
    """

    name: ClassVar[str]
    """``SeedConfig.algorithm``'s value for this algorithm."""
    title: ClassVar[str]
    """How charts and panels name it."""
    settings_class: ClassVar[type]
    """The learner's settings (``SeedConfig.learner``; None takes this class's defaults)."""
    model_class: ClassVar[type]
    learner_class: ClassVar[type]
    target_metric: ClassVar[str]
    """The row key a target return applies to."""
    least_replay_ratio: ClassVar[float] = 0.0
    """``SeedConfig.replay_ratio`` must be above 0 and at least this (with ``why_least``)."""
    why_least: ClassVar[str] = ""
    window_field: ClassVar[str]
    """The learner setting that is a window's length in env steps (a recipe's horizon)."""
    trained_field: ClassVar[str]
    """The learner setting that is the rows of a window the loss trains on."""
    compiles: ClassVar[bool] = False
    """Whether its learner's forward pass may be compiled when precision is measured."""

    def __init__(self, config: SeedConfig, device: Any = "cpu") -> None:
        self.config = config
        self.device = resolve_device(device)
        torch.manual_seed(config.seed)
        observation_space, action_space = env_spaces(config.env_id, **config.env_options)
        if not hasattr(action_space, "n"):
            raise ValueError(
                f"{config.env_id} has a continuous action space; SEED's V-trace and R2D2 learners "
                "here act in discrete ones. Pick a discrete-action env."
            )
        self.obs_shape, self.num_actions = tuple(observation_space.shape), int(action_space.n)
        self.learner_config = self.learner_settings(config)
        self.num_actors = config.num_actors
        self.episodes = EpisodeLog(envs_per_actor=config.envs_per_actor)
        self.replay: Any = None
        """R2D2: the prioritized sequence replay; None where windows are learned as they come."""
        self.sequences_added = 0
        self.windows_learned = np.zeros(config.slots, dtype=np.int64)
        """Windows (unrolls, sequences) each slot gave the learner (R2D2: into its replay)."""
        # Reentrant: a V-trace learner owing updates holds it through a whole update (learn), and
        # the gradient step takes it again around the optimizer's step.
        self.lock = threading.RLock()
        self.model = self.make_model(self.obs_shape, self.num_actions, config.model_options).to(
            self.device
        )
        self.learner = self.make_learner()
        self.policy = self.make_policy()
        self.assembler = self.make_assembler()
        self.server = InferenceServer(
            self.policy,
            config.max_batch_size or config.slots,
            config.timeout,
            device=self.device,
            listeners=[self.assembler, self.episodes],
            lock=self.lock,
        )

    # --- what the algorithm is ------------------------------------------------------------------

    @classmethod
    def learner_settings(cls, config: SeedConfig) -> Any:
        """The run's learner settings: its ``learner``, or this algorithm's defaults."""
        return config.learner or cls.settings_class()

    @classmethod
    def make_model(
        cls, obs_shape: tuple[int, ...], num_actions: int, options: dict
    ) -> torch.nn.Module:
        """The network the learner trains and the server acts with."""
        return cls.model_class(obs_shape, num_actions, **options)

    @classmethod
    def window_length(cls, settings: Any) -> int:
        """Env steps in one window the assembler cuts (a recipe's horizon)."""
        return int(getattr(settings, cls.window_field))

    @classmethod
    def precision_probe(cls, model: torch.nn.Module, settings: Any) -> tuple[torch.nn.Module, int]:
        """What to time when choosing the learner's precision: the module and its rows per
        update (``learners.with_measured_precision``)."""
        return model, settings.batch_size * cls.window_length(settings)

    # --- what each algorithm builds and does ----------------------------------------------------

    @abstractmethod
    def make_learner(self) -> Any:
        """The learner that trains ``self.model`` (``learner_class``)."""

    @abstractmethod
    def make_policy(self) -> Any:
        """The ``server`` policy that acts for every slot."""

    @abstractmethod
    def make_assembler(self) -> TrajectoryAssembler:
        """The listener that cuts each slot's stream into the learner's windows."""

    @abstractmethod
    def learn(self, wait_seconds: float) -> dict[str, float] | None:
        """One learner update if its data is there within ``wait_seconds``. Returns the update's
        metrics, or None when there was nothing to learn from (the caller lets the envs move on:
        ``SeedTransport.advance``)."""

    # --- actors ---------------------------------------------------------------------------------

    @property
    def least_exploring_actor(self) -> int:
        """The last actor (R2D2: its envs share the smallest epsilon, as Ape-X's last actor)."""
        return self.num_actors - 1

    def set_num_actors(self, num_actors: int) -> None:
        """The actor count changed."""
        self.num_actors = num_actors

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Requests per forward pass from the next batch on."""
        self.server.max_batch_size = check_max_batch_size(max_batch_size, self.config.slots)

    # --- rows -----------------------------------------------------------------------------------

    @property
    def updates(self) -> int:
        return int(self.learner.num_updates)

    def report(self) -> dict[str, Any]:
        """What a run's row needs, since the last report: ``returns`` of the episodes that ended,
        and ``row``: the server's batch and latency (then reset, so each row's percentiles are its
        own interval's), the windows made (and learned from, per actor), the replay's size, the
        least-exploring actor's return, the seconds the server waited for the learner (R2D2)."""
        stats = self.server.stats()
        per_actor = self.windows_learned.reshape(-1, self.config.envs_per_actor).sum(axis=1)
        row = {
            "charts/num_actors": self.num_actors,
            "seed/return_least_exploring": self.episodes.mean(
                10, actor=self.least_exploring_actor, minimum=5
            ),
            "seed/mean_batch_size": stats.get("mean_batch_size"),
            "seed/latency_p50_ms": stats.get("latency_p50_ms"),
            "seed/latency_p99_ms": stats.get("latency_p99_ms"),
            "seed/windows": self.assembler.windows_made,
            "seed/windows_per_actor": {str(i): n for i, n in enumerate(per_actor.tolist()) if n},
            "seed/replay_size": len(self.replay) if self.replay is not None else None,
            "seed/server_waited_seconds": None
            if self.server.backpressure is None
            else round(self.server.backpressure.waited_seconds, 3),
        }
        self.server.latency.reset()
        return {"returns": self.episodes.take_new(), "row": row, "updates": self.updates}

    # --- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The learner (model, optimizer, counters) and the run's sequence count; not a replay,
        which the actors refill."""
        return {
            "learner": self.learner.state_dict(),
            "num_actors": self.num_actors,
            "sequences_added": self.sequences_added,
            "replay": "not saved: the actors refill the replay on resume",
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["learner"])
        self.sequences_added = int(state["sequences_added"])
