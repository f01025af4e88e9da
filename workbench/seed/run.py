"""A SEED RL run (Espeholt et al. 2020, https://arxiv.org/abs/1910.06591): env-only actors, one
central inference server, and a learner that trains the very model the server acts with.

The pieces, in the order data flows:

1. actors step environments and send observations (``transports``: serial, local processes);
2. the ``server.InferenceServer`` answers batches of them with one forward pass and keeps
   recurrent state;
3. its listeners: an ``assembler.TrajectoryAssembler`` cuts each env's stream into the learner's
   windows, an ``assembler.EpisodeLog`` keeps returns;
4. the learner: ``learners.IMPALA`` (V-trace) uses each unroll once, in order of arrival;
   ``learners.R2D2`` puts sequences into a prioritized ``replay.SequenceReplay`` with initial
   priorities, samples it as a ``replay.RateLimiter`` allows, and writes back new priorities.

``Seed`` runs the whole system from a ``SeedConfig`` on the shared life cycle (``runs.lifecycle``):
``start`` / ``run`` with the four limits, ``stop``, a row every ``log_interval`` seconds
(``charts/...``, ``losses/...``, ``seed/...``: the server's batch and latency), events when actors
are added, retired or restarted, a checkpoint (model, optimizer, counters; not the replay, which
refills) that ``Seed.from_checkpoint`` continues. Each env slot of R2D2 gets its own epsilon, as
Ape-X's actors do (``apex.actor_epsilons``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from workbench.apex.config import actor_epsilons
from workbench.envs import env_spaces
from workbench.learners import IMPALA, R2D2, SEQUENCE_KEYS, STATE_KEYS, IMPALAConfig, R2D2Config
from workbench.models import ActorCritic, RecurrentQNetwork
from workbench.replay import RateLimiter
from workbench.runs.lifecycle import Limits, RunLifecycle
from workbench.runs.records import config_to_dict, resume_point
from workbench.runs.settings import Settings, actor_settings, check_num_actors
from workbench.seed.assembler import EpisodeLog, TrajectoryAssembler, stack_windows
from workbench.seed.server import InferenceServer, RecurrentEpsilonGreedy, SampledPolicy
from workbench.seed.transports import SeedTransport
from workbench.seed.transports.local import LocalActors
from workbench.seed.transports.serial import SerialActors
from workbench.system import resolve_device

__all__ = ["ALGORITHMS", "DEFAULT_MAX_ACTORS", "TRANSPORTS", "Seed", "SeedConfig", "learner_config"]

ALGORITHMS = ("vtrace", "r2d2")
TRANSPORTS = ("local", "serial")
DEFAULT_MAX_ACTORS = 16
"""The actors a run may grow to when ``SeedConfig.max_actors`` is not given."""


@dataclass
class SeedConfig:
    """One SEED run: environments, actors, the server's batching, the learner.

    ``learner`` is an ``IMPALAConfig`` (``algorithm="vtrace"``) or an ``R2D2Config``
    (``"r2d2"``); None takes its defaults."""

    env_id: str = "CartPole-v1"
    algorithm: str = "vtrace"
    num_actors: int = 4
    envs_per_actor: int = 1
    max_actors: int | None = None
    """The most actors ``set_num_actors`` (or a panel's slider) may reach; slots are allocated for
    them at the start. Default: ``max(num_actors, DEFAULT_MAX_ACTORS)``, so a run can grow."""
    transport: str = "local"
    """``"local"``: env-only actor processes; ``"serial"``: the envs stepped in this thread
    (deterministic; the same server, listeners and learner)."""
    max_batch_size: int | None = None
    """Requests per forward pass (default: every env)."""
    timeout: float = 0.002
    """Seconds the oldest request waits for its batch to fill."""
    learner: Any = None
    model_options: dict = field(default_factory=dict)
    """Keyword arguments of the model (``ActorCritic`` or ``RecurrentQNetwork``)."""
    replay_ratio: float = 1.0
    """R2D2: sequences trained per sequence assembled, held from both sides by a
    ``replay.RateLimiter``: never more, and when the learner falls more than ``max_updates_behind``
    updates behind, the actors wait for it (so env steps per update do not depend on the machine;
    SEED's learner runs free on its accelerator)."""
    max_updates_behind: int = 2
    """R2D2: updates the learner may owe before the actors wait for it."""
    min_replay_sequences: int = 64
    """R2D2: sequences in replay before the first update."""
    seed: int = 0
    learner_threads: int = 1
    actor_nice: int = 5
    """Niceness of actor processes, so that they cannot starve the server and the learner."""
    env_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.transport not in TRANSPORTS:
            raise ValueError(
                f"transport must be one of {TRANSPORTS} (a Seed on Ray comes with the scale-out "
                f"work), got {self.transport!r}"
            )
        for name in ("num_actors", "envs_per_actor"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.max_actors is not None and self.max_actors < self.num_actors:
            raise ValueError(
                f"max_actors ({self.max_actors}) must be at least num_actors ({self.num_actors})"
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


def learner_config(config: SeedConfig) -> Any:
    if config.algorithm == "vtrace":
        return config.learner or IMPALAConfig()
    return config.learner or R2D2Config()


class Seed(RunLifecycle):
    """A SEED RL run: server + actors + learner, from a ``SeedConfig`` (module docstring).

    Args:
        config: the run.
        device: where the model lives: the server's forward passes and the learner's updates
            (``"auto"``: the GPU when there is one).
        name, runs_dir: the run's folder. limits: the default limits of ``start()`` / ``run()``.
        log_interval: seconds between rows. checkpoint_every: rows between checkpoints.

    The ``target_metric`` of a target return: V-trace, the last 20 episodes of every env
    (``charts/mean_return``); R2D2, the last 10 of the env exploring least
    (``seed/return_least_exploring``).
    """

    kind = "seed"

    def __init__(
        self,
        config: SeedConfig,
        *,
        device: str = "cpu",
        name: str | None = None,
        runs_dir: str | None = None,
        limits: Limits | None = None,
        log_interval: float = 1.0,
        checkpoint_every: int = 0,
    ) -> None:
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
        self.learner_config = learner_config(config)
        self.episodes = EpisodeLog()
        self.log_interval = float(log_interval)
        self.replay = None
        if config.algorithm == "vtrace":
            self.lock = threading.Lock()
            self.model = ActorCritic(self.obs_shape, self.num_actions, **config.model_options).to(
                self.device
            )
            self.learner = IMPALA(
                self.model, self.learner_config, device=self.device, lock=self.lock
            )
            policy = SampledPolicy(self.model)
            length = self.learner_config.unroll_length + 1
            self.assembler = TrajectoryAssembler(config.slots, length, length - 1)
            self.target_metric = "charts/mean_return"
        else:
            # Reentrant: a learner that fell behind the replay ratio holds it through a whole
            # update (step), and R2D2's gradient step takes it again around the optimizer's step.
            self.lock = threading.RLock()
            self.model = RecurrentQNetwork(
                self.obs_shape, self.num_actions, **config.model_options
            ).to(self.device)
            self.learner = R2D2(
                self.model,
                self.learner_config,
                device=self.device,
                seed=config.seed,
                lock=self.lock,
            )
            c = self.learner_config
            policy = RecurrentEpsilonGreedy(self.model, self.epsilons(config.num_actors))
            self.assembler = TrajectoryAssembler(config.slots, c.stored_length, c.stride)
            self.replay = self.learner.make_replay()
            self.limiter = RateLimiter(
                max_ratio=config.replay_ratio,
                min_ratio=config.replay_ratio,
                min_inserts=max(config.min_replay_sequences, c.batch_size),
                slack=config.max_updates_behind * c.batch_size,
            )
            self.target_metric = "seed/return_least_exploring"
        self.policy = policy
        self.server = InferenceServer(
            policy,
            config.max_batch_size or config.slots,
            config.timeout,
            device=self.device,
            listeners=[self.assembler, self.episodes],
            lock=self.lock,
        )
        super().__init__(
            name=name,
            runs_dir=runs_dir,
            label=f"seed_{config.env_id}",
            settings=actor_settings(config.num_actors, config.actor_limit),
            limits=limits or Limits(),
            checkpoint_every=checkpoint_every,
        )
        self.num_actors = config.num_actors
        self.sequences_added = 0
        self.transport: SeedTransport | None = None
        self._steps_before = 0
        self._events_seen = 0

    def epsilons(self, num_actors: int) -> np.ndarray:
        """Per slot: actor i's envs share epsilon_i of ``apex.actor_epsilons(num_actors)``."""
        c = self.config
        per_actor = np.asarray(actor_epsilons(num_actors) + [1.0] * (c.actor_limit - num_actors))
        return np.repeat(per_actor, c.envs_per_actor).astype(np.float32)

    @property
    def least_exploring_slot(self) -> int:
        """R2D2: the first env of the actor with the smallest epsilon."""
        return (self.num_actors - 1) * self.config.envs_per_actor

    # --- control ----------------------------------------------------------------------------------

    def set_num_actors(self, num_actors: int) -> None:
        """Ask for ``num_actors`` actors; the learner loop applies it at its next step."""
        check_num_actors(num_actors, self.config.actor_limit, "raise SeedConfig.max_actors.")
        if self.config.transport == "serial":
            raise ValueError(
                "the serial transport steps a fixed set of envs; use transport='local' "
                "to add or remove actors while the run goes."
            )
        self.settings.update(num_actors=num_actors)

    def actor_pids(self) -> list[int]:
        return [] if self.transport is None else list(self.transport.pids)

    # --- the loop's steps -------------------------------------------------------------------------

    def open_loop(self) -> None:
        c = self.config
        self._threads = torch.get_num_threads()
        torch.set_num_threads(c.learner_threads)
        self._steps_before = self.env_steps
        self._metrics: dict[str, float] = {}
        self._next_row = time.monotonic() + self.log_interval
        if c.transport == "serial":
            self.transport = SerialActors(
                self.server,
                c.env_id,
                c.num_actors * c.envs_per_actor,
                seed=c.seed,
                env_options=c.env_options,
            )
        else:
            self.transport = LocalActors(
                self.server,
                c.env_id,
                self.num_actors,
                envs_per_actor=c.envs_per_actor,
                max_actors=c.actor_limit,
                seed=c.seed,
                env_options=c.env_options,
                nice=c.actor_nice,
            )
        self._events_seen = 0
        self.transport.start()

    def close_loop(self) -> None:
        try:
            if self.transport is not None:
                self.env_steps = self._steps_before + self.transport.steps
                self.transport.stop()
        finally:
            self.transport = None
            torch.set_num_threads(self._threads)

    def apply_settings(self, new: Settings, old: Settings) -> None:
        if new.num_actors == self.num_actors:
            return
        self.transport.set_num_actors(new.num_actors)
        self.num_actors = new.num_actors
        if isinstance(self.policy, RecurrentEpsilonGreedy):
            self.policy.epsilons = torch.as_tensor(self.epsilons(self.num_actors))

    def step(self) -> dict[str, Any] | None:
        transport = self.transport
        transport.check()
        self._report_actor_events()
        metrics = self._learn_vtrace() if self.config.algorithm == "vtrace" else self._learn_r2d2()
        self._metrics = metrics or self._metrics
        self.env_steps = self._steps_before + transport.steps
        if time.monotonic() < self._next_row:
            return None
        self._next_row = time.monotonic() + self.log_interval
        return self._row()

    def final_row(self) -> dict[str, Any] | None:
        return self._row() if self.transport is not None else None

    def _report_actor_events(self) -> None:
        """Actor deaths, restarts and errors since the last step, as event rows."""
        events = self.transport.events
        for event in events[self._events_seen :]:
            if event.kind in ("died", "restarted", "error"):
                self.event(f"actor_{event.kind}", actor=event.actor, detail=event.detail)
        self._events_seen = len(events)

    def _learn_vtrace(self) -> dict[str, float] | None:
        windows = self.assembler.take(
            self.learner_config.batch_size, timeout=self.transport.wait_seconds
        )
        if windows is None:
            self.transport.advance()
            return None
        metrics = self.learner.update(stack_windows(windows))
        self.updates = self.learner.num_updates
        return metrics

    def _learn_r2d2(self) -> dict[str, float] | None:
        """New sequences go to replay with initial priorities; learn as the rate limiter allows."""
        c = self.learner_config
        owed = self.limiter.batches_allowed(c.batch_size)
        queued = self.assembler.queued
        if queued:
            fresh = self.assembler.take(queued)
        else:
            fresh = None if owed else self.assembler.take(1, timeout=self.transport.wait_seconds)
        if fresh:
            priorities = self.learner.sequence_priorities(stack_windows(fresh))
            stored = stack_windows(fresh, time_major=False)
            self.replay.add(
                {k: v for k, v in stored.items() if k in SEQUENCE_KEYS + STATE_KEYS}, priorities
            )
            self.limiter.insert(len(fresh))
            self.sequences_added += len(fresh)
        if not self.limiter.batches_allowed(c.batch_size):
            self.transport.advance()
            return None
        sample, indices, weights = self.replay.sample(c.batch_size)
        self.limiter.sample(c.batch_size)
        # The ratio from below too (as Reverb's SampleToInsertRatio): a learner too far behind holds
        # the server's lock through its update, so the actors wait for it. Env steps per update then
        # stay near 1 / replay_ratio on any machine, instead of growing as the learner's share of
        # the CPU shrinks.
        behind = not self.limiter.can_insert()
        with self.lock if behind else contextlib.nullcontext():
            metrics = self.learner.update({**sample, "weights": weights})
        self.replay.update_priorities(indices, self.learner.priorities)
        self.updates += 1
        return metrics

    def _row(self) -> dict[str, Any]:
        self.record_episodes(self.episodes.take_new())
        stats = self.server.stats()
        row = {
            **self._metrics,
            "charts/num_actors": self.num_actors,
            "seed/return_least_exploring": self.episodes.mean(
                10, slot=self.least_exploring_slot, minimum=5
            ),
            "seed/mean_batch_size": stats.get("mean_batch_size"),
            "seed/latency_p50_ms": stats.get("latency_p50_ms"),
            "seed/latency_p99_ms": stats.get("latency_p99_ms"),
            "seed/windows": self.assembler.windows_made,
            "seed/replay_size": len(self.replay) if self.replay is not None else None,
        }
        self.server.latency.reset()  # each row's percentiles are its own interval's
        return row

    # --- checkpoints ------------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        return {
            "env_id": self.config.env_id,
            "config": config_to_dict(self.config),
            "device": str(self.device),
            "algo": f"{type(self.learner).__module__}.{type(self.learner).__qualname__}",
        }

    def run_state(self) -> dict[str, Any]:
        state = {
            "config": config_to_dict(self.config),
            "learner": self.learner.state_dict(),
            "num_actors": self.num_actors,
            "sequences_added": self.sequences_added,
            "replay": "not saved: the actors refill the replay on resume",
        }
        if self.replay is not None:
            state["limiter"] = self.limiter.state_dict()
        return state

    def load_run_state(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["learner"])
        self.sequences_added = int(state["sequences_added"])
        if self.replay is not None:
            # The replay starts empty: the ratio is held afresh from the next warm-up on.
            self.limiter = RateLimiter(
                max_ratio=self.limiter.max_ratio,
                min_ratio=self.limiter.min_ratio,
                min_inserts=self.limiter.min_inserts,
                slack=self.limiter.slack,
            )

    @classmethod
    def from_checkpoint(
        cls,
        path: Any,
        *,
        config: SeedConfig | None = None,
        device: str = "cpu",
        runs_dir: str | None = None,
        **options: Any,
    ) -> "Seed":
        """A SEED run that continues a checkpoint (a file, or a run's folder): the learner's
        weights, optimizer and counters, the env steps, the wall clock, the RNG states. The config
        defaults to the saved one; the run keeps its name, so its metrics file grows. Not
        started."""
        saved, config, runs_dir = resume_point(path, config, runs_dir)
        run = cls(config, device=device, name=saved["name"], runs_dir=runs_dir, **options)
        return run.load_checkpoint(saved, str(path))
