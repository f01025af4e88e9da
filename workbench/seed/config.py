"""A SEED run's settings: environments, actors and where they run, batching, the learner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workbench.checks import positive_int
from workbench.seed.algorithms import ALGORITHMS, seed_algorithm
from workbench.seed.learning import SeedLearning
from workbench.seed.transports import TRANSPORTS

__all__ = ["ALGORITHMS", "DEFAULT_MAX_ACTORS", "TRANSPORTS", "SeedConfig"]

DEFAULT_MAX_ACTORS = 16
"""The actors a run may grow to when ``SeedConfig.max_actors`` is not given."""


@dataclass
class SeedConfig:
    """One SEED run: environments, actors, the server's batching, the learner.

    ``algorithm`` names one of ``algorithms.SEED_ALGORITHMS`` (``"vtrace"``, ``"r2d2"``);
    ``learner`` is its settings (``IMPALAConfig``, ``R2D2Config``), None takes its defaults."""

    env_id: str = "CartPole-v1"
    algorithm: str = "vtrace"
    num_actors: int = 4
    envs_per_actor: int = 1
    actor_batch: int | None = None
    """Local transport, Atari: envs per request of an actor. Below ``envs_per_actor`` (a divisor)
    the actor's envs step asynchronously: ale_py's C++ thread steps one batch while another waits
    for its actions, overlapping env stepping with the round trip. None: all of them at once."""
    max_actors: int | None = None
    """The most actors ``set_num_actors`` (or a panel's slider) may reach; slots are allocated for
    them at the start. Default: ``max(num_actors, DEFAULT_MAX_ACTORS)``, so a run can grow."""
    transport: str = "local"
    """``"local"``: env-only actor processes on this machine; ``"serial"``: the envs stepped in
    this thread (deterministic; the same server, listeners and learner); ``"ray"``: env-only Ray
    actors over the cluster's nodes, and the server and the learner together in one Ray actor
    (``workbench.cluster`` says which Ray instance: a private local one unless asked)."""
    learner_node: str | None = None
    """``"ray"``: the node id of the learner's Ray actor (which also serves inference). None: this
    process's node, as SEED keeps learning and inference on the accelerator's host."""
    max_batch_size: int | None = None
    """Env steps (requests) per forward pass (default: every env)."""
    timeout: float = 0.002
    """Seconds the oldest request waits for its batch to fill."""
    learner: Any = None
    model_options: dict = field(default_factory=dict)
    """Keyword arguments of the model (``ActorCritic`` or ``RecurrentQNetwork``)."""
    replay_ratio: float = 1.0
    """Windows trained per window assembled. R2D2: sequences, held from both sides by a
    ``replay.RateLimiter``: never more, and when the learner falls more than ``max_updates_behind``
    updates behind, the actors wait for it (so env steps per update do not depend on the machine;
    SEED's learner runs free on its accelerator). V-trace: each update takes
    ``ceil(batch_size / replay_ratio)`` fresh unrolls in order of arrival and fills its batch
    from the last ``replay_unrolls`` learned, drawn uniformly, so every unroll is learned about
    ``replay_ratio`` times while V-trace corrects the older ones' policy lag (IMPALA's replay
    experiments, Espeholt et al. 2018, Sec. 5.2). 1: each unroll once, no replay."""
    replay_unrolls: int = 256
    """V-trace with ``replay_ratio > 1``: the unrolls kept for replay, newest first out last."""
    max_updates_behind: int = 2
    """Updates the learner may owe before the actors wait for it (R2D2; V-trace with
    ``replay_ratio > 1``, whose fresh unrolls would otherwise queue without bound and age)."""
    min_replay_sequences: int = 64
    """R2D2: sequences in replay before the first update."""
    seed: int = 0
    learner_threads: int = 1
    actor_nice: int = 5
    """Niceness of actor processes, so that they cannot starve the server and the learner."""
    env_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        algorithm = seed_algorithm(self.algorithm)
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {self.transport!r}")
        for name in ("num_actors", "envs_per_actor"):
            positive_int(getattr(self, name), name)
        if self.max_actors is not None and self.max_actors < self.num_actors:
            raise ValueError(
                f"max_actors ({self.max_actors}) must be at least num_actors ({self.num_actors})"
            )
        least = algorithm.least_replay_ratio
        if not (self.replay_ratio > 0 and self.replay_ratio >= least):
            floor = f", and at least {least:g} for {algorithm.title} ({algorithm.why_least})"
            raise ValueError(
                "replay_ratio is windows trained per window assembled: positive"
                f"{floor if least else ''}; got {self.replay_ratio!r}"
            )
        positive_int(self.replay_unrolls, "replay_unrolls")
        if self.learner_node is not None and self.transport != "ray":
            raise ValueError(
                f"learner_node places the learner's Ray actor; it needs transport='ray', not "
                f"{self.transport!r}"
            )

    @property
    def actor_limit(self) -> int:
        """The most actors the run may have: ``max_actors``, or its default."""
        return (
            self.max_actors
            if self.max_actors is not None
            else max(self.num_actors, DEFAULT_MAX_ACTORS)
        )

    @property
    def slots(self) -> int:
        """Env slots on the server: one per env of every actor the run may grow to."""
        return self.actor_limit * self.envs_per_actor

    @property
    def algorithm_class(self) -> type[SeedLearning]:
        """The learner's host of ``algorithm`` (``algorithms.SEED_ALGORITHMS``)."""
        return seed_algorithm(self.algorithm)

    @property
    def learner_settings(self) -> Any:
        """The learner's settings: ``learner``, or the algorithm's defaults."""
        return self.algorithm_class.learner_settings(self)
