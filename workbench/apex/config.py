"""Ape-X's settings (Horgan et al. 2018, Appendix C), each declared once; the algorithm's own
live in ``algorithms``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from workbench.apex.algorithms import ApexAlgorithm, apex_algorithm
from workbench.apex.exploration import check_count
from workbench.envs import is_atari

__all__ = ["TRANSPORTS", "ApexConfig"]

TRANSPORTS = ("local", "ray")
"""Where Ape-X's actors and replay can run (``transports.PLACES`` builds each)."""


@dataclass
class ApexConfig:
    """An Ape-X run. Defaults are the paper's (Horgan et al. 2018, Appendix C) where they apply to a
    single machine; the learner's own hyperparameters live in ``learner`` (``DQNConfig`` or
    ``DDPGConfig``: n_step, gamma, double, learning rate, batch_size, target updates), as in
    ``SeedConfig``."""

    env_id: str = "CartPole-v1"
    algorithm: str = "dqn"
    """``"dqn"`` (Ape-X DQN) or ``"ddpg"`` (Ape-X DPG, Sec. 3.2)."""
    learner: Any = None
    """``learners.DQNConfig`` or ``learners.DDPGConfig`` (None: the algorithm's defaults)."""
    renamed: ClassVar[dict[str, str]] = {"algo": "algorithm", "agent": "learner"}
    """Fields named otherwise in earlier checkpoints, and their names now (``config_from_dict``)."""
    model_options: dict = field(default_factory=dict)
    """Keyword arguments of the networks (``QNetwork``: dueling, hidden, num_atoms ...)."""
    env_options: dict = field(default_factory=dict)
    """Keyword arguments of every actor's ``make_vector_env`` (Atari: ``screen_size``,
    ``repeat_action_probability`` for sticky actions, ...); the networks are built for the same
    observations."""
    num_actors: int = 4
    max_actors: int = 16
    """Most actors the run may grow to while it goes."""
    envs_per_actor: int = 1
    block_steps: int = 50
    """Steps per env in an actor's local buffer before it sends them (the paper's B = 50)."""
    parameter_sync_frames: int = 400
    """Frames between an actor's parameter refreshes (the paper's 400; 100 agent steps on Atari)."""
    publish_interval: int = 10
    """Learner updates between parameter publications."""
    replay_capacity: int = 100_000
    """Transitions the central replay holds (the paper's 2M on a large machine)."""
    priority_alpha: float = 0.6
    priority_beta: float = 0.4
    """The paper's alpha and beta (fixed in Ape-X; no annealing)."""
    learning_starts: int = 1_000
    """Transitions in the replay before the learner starts (the paper's 50k)."""
    max_replay_ratio: float | None = None
    """Cap on samples trained per transition added (None: the learner runs freely, as in the
    paper). A cap makes a run's learner updates per env step the same on a fast and a slow
    machine."""
    min_replay_ratio: float | None = None
    """Floor on the same ratio: the replay stops taking actors' blocks (they wait) while the
    learner lags behind it (None: actors run freely, as in the paper). Not the paper's; on a
    machine with fewer cores than actors it keeps the learner from falling behind (rlpyt's
    asynchronous runner throttles its sampler the same way)."""
    exploration_base: float = 0.4
    exploration_alpha: float = 7.0
    exploration_schedule: str = "ladder"
    """``"ladder"``: each actor its own fixed epsilon, ``actor_epsilons`` (the paper's).
    ``"annealed"``: every actor the same epsilon, annealed linearly from ``annealed_start`` to
    ``annealed_end`` over ``anneal_env_steps`` env steps of all actors together, as single-process
    DQN explores (the comparison of notebook 06; DQN only)."""
    annealed_start: float = 1.0
    annealed_end: float = 0.01
    anneal_env_steps: int = 20_000
    initial_priorities: bool = True
    """Each actor computes its new transitions' priorities with its copy of the network (Horgan et
    al. 2018, Sec. 3). False: new transitions enter at the largest priority seen so far, the
    default of prioritized replay (Schaul et al. 2016), which Ape-X's actors replace."""
    seed: int = 0
    learner_threads: int = 1
    """torch threads of the learner (each actor uses one)."""
    transport: str = "local"
    """Where the actors and the replay run (``transports.TRANSPORTS``): ``"local"``, processes on
    this machine; ``"ray"``, Ray actors over the cluster's nodes (``workbench.cluster`` says
    which Ray instance: a private local one unless asked). The learner stays in this process."""
    replay_node: str | None = None
    """Ray transport: the node id that holds the central replay. None: the learner's node (this
    process's), as in the paper, where the replay sits beside the learner and actors on other
    machines send it their blocks; a node of its own spreads the replay's memory and sampling."""

    def __post_init__(self) -> None:
        algorithm = apex_algorithm(self.algorithm)
        if self.transport not in TRANSPORTS:
            raise ValueError(
                f"ApexConfig.transport must be one of {TRANSPORTS}, got {self.transport!r}"
            )
        if self.replay_node is not None and self.transport != "ray":
            raise ValueError(
                "ApexConfig.replay_node places the replay's Ray actor; it needs transport='ray', "
                f"not {self.transport!r}"
            )
        if self.learner is None:
            self.learner = algorithm.default_settings()
        for name in (
            "num_actors",
            "max_actors",
            "envs_per_actor",
            "block_steps",
            "parameter_sync_frames",
            "publish_interval",
            "replay_capacity",
            "learning_starts",
            "learner_threads",
            "anneal_env_steps",
        ):
            check_count(getattr(self, name), f"ApexConfig.{name}")
        if self.exploration_schedule not in ("ladder", "annealed"):
            raise ValueError(
                f"ApexConfig.exploration_schedule must be 'ladder' or 'annealed', got "
                f"{self.exploration_schedule!r}"
            )
        if self.exploration_schedule == "annealed" and not algorithm.anneals:
            raise ValueError(
                "ApexConfig.exploration_schedule='annealed' anneals an epsilon, which only Ape-X "
                f"DQN has; {algorithm.title}'s actors use 'ladder' noise scales."
            )
        if self.num_actors > self.max_actors:
            raise ValueError(
                f"ApexConfig.num_actors={self.num_actors} > max_actors={self.max_actors}; "
                "raise max_actors."
            )
        if self.replay_capacity < self.learner.batch_size:
            raise ValueError(
                f"ApexConfig.replay_capacity {self.replay_capacity} < the learner's batch_size "
                f"{self.learner.batch_size}: the replay must hold at least one batch."
            )
        low, high = self.min_replay_ratio, self.max_replay_ratio
        if low is not None and not low > 0:
            raise ValueError(
                f"ApexConfig.min_replay_ratio={low} must be > 0 (or None: actors never wait)."
            )
        if low is not None and high is not None and low > high:
            raise ValueError(f"ApexConfig.min_replay_ratio={low} > max_replay_ratio={high}.")
        if self.learning_starts < self.learner.batch_size:
            raise ValueError(
                f"ApexConfig.learning_starts {self.learning_starts} < batch_size "
                f"{self.learner.batch_size}: the first batch needs that many transitions."
            )

    @property
    def frame_skip(self) -> int:
        return 4 if is_atari(self.env_id) else 1

    @property
    def frame_storage(self) -> bool:
        """Atari: actors send steps and the replay keeps each frame once (``replay.FrameStorage``),
        rebuilding stacks and n-step windows by index (7 KB per step against 56 KB)."""
        return is_atari(self.env_id)

    def annealed_epsilon(self, env_steps: int) -> float:
        """The ``"annealed"`` schedule's epsilon after ``env_steps`` env steps of all actors."""
        done = min(1.0, env_steps / self.anneal_env_steps)
        return self.annealed_start + (self.annealed_end - self.annealed_start) * done

    @property
    def parameter_sync_steps(self) -> int:
        """Agent steps per env between parameter refreshes."""
        return max(1, self.parameter_sync_frames // self.frame_skip)

    def explorations(self, num_actors: int) -> list[float]:
        """Each actor's exploration at the start: epsilons (DQN) or noise scales (DPG)."""
        if self.exploration_schedule == "annealed":
            return [self.annealed_start] * num_actors
        return self.apex_algorithm.explorations(
            num_actors, self.exploration_base, self.exploration_alpha
        )

    @property
    def apex_algorithm(self) -> ApexAlgorithm:
        """The object of ``algorithm`` (``algorithms.APEX_ALGORITHMS``)."""
        return apex_algorithm(self.algorithm)
