"""The learner's side of SEED RL: the model, the inference server acting with it, and the learner.

SEED (Espeholt et al. 2020, Sec. 3, Fig. 2) keeps inference and learning on one host: the learner
trains the very model the server runs, so parameters never travel to actors. ``SeedLearning`` is
that host's state, in one process:

1. the model (``ActorCritic`` for V-trace, ``RecurrentQNetwork`` for R2D2) and its learner;
2. the ``server.InferenceServer`` answering actors' batches with that model, per-slot state;
3. its listeners: a ``TrajectoryAssembler`` cutting each env's stream into the learner's windows
   and an ``EpisodeLog`` of returns;
4. for R2D2, a prioritized ``replay.SequenceReplay`` (initial priorities from the actor-side
   network, Sec. 2.3 of Kapturowski et al. 2019) and a ``replay.RateLimiter`` holding sequences
   trained per sequence assembled; for V-trace with ``replay_ratio > 1``, the last unrolls learned,
   from which each update fills the part of its batch that fresh unrolls do not.

``Seed`` holds one in its own process for the serial and local transports, and the Ray transport
runs one inside the learner's Ray actor (``transports.ray_learner``): either way the run calls
``learn`` and ``report``. Each env slot of R2D2 gets its own epsilon, as Ape-X's actors do.
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
from typing import Any

import numpy as np
import torch

from workbench.apex.config import actor_epsilons
from workbench.envs import env_spaces
from workbench.learners import IMPALA, R2D2, SEQUENCE_KEYS, STATE_KEYS
from workbench.models import ActorCritic, RecurrentQNetwork
from workbench.replay import RateLimiter
from workbench.runs.faults import check_finite
from workbench.seed.assembler import EpisodeLog, TrajectoryAssembler, stack_windows
from workbench.seed.config import SeedConfig, learner_config
from workbench.seed.server import InferenceServer, RecurrentEpsilonGreedy, SampledPolicy
from workbench.system import resolve_device

__all__ = ["SeedLearning", "check_max_batch_size"]


def check_max_batch_size(max_batch_size: Any, slots: int) -> int:
    """``max_batch_size`` if it is an int in ``1..slots`` (the server's slots), else ValueError."""
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int):
        raise ValueError(f"max_batch_size must be a positive int, got {max_batch_size!r}")
    if not 1 <= max_batch_size <= slots:
        raise ValueError(
            f"max_batch_size must be in 1..{slots} (the server's slots), got {max_batch_size}"
        )
    return max_batch_size


class SeedLearning:
    """Model, inference server, listeners and learner of one SEED run (module docstring).

    Args:
        config: the run.
        device: where the model lives: the server's forward passes and the learner's updates.
    """

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
        self.learner_config = c = learner_config(config)
        self.num_actors = config.num_actors
        self.episodes = EpisodeLog()
        self.replay = None
        self.sequences_added = 0
        self.windows_learned = np.zeros(config.slots, dtype=np.int64)
        """Windows (unrolls, sequences) each slot gave the learner (R2D2: into its replay)."""
        if config.algorithm == "vtrace":
            # Reentrant, as R2D2's: a learner behind its replay ratio holds it through an update.
            self.lock = threading.RLock()
            self.model = ActorCritic(self.obs_shape, self.num_actions, **config.model_options).to(
                self.device
            )
            self.learner = IMPALA(self.model, c, device=self.device, lock=self.lock)
            self.policy: Any = SampledPolicy(self.model)
            length = c.unroll_length + 1
            self.assembler = TrajectoryAssembler(config.slots, length, length - 1)
            self.target_metric = "charts/mean_return"
            self.fresh_per_update = math.ceil(c.batch_size / config.replay_ratio)
            self.recent_unrolls: collections.deque = collections.deque(maxlen=config.replay_unrolls)
            self.replay_rng = np.random.default_rng(config.seed)
        else:
            # Reentrant: a learner that fell behind the replay ratio holds it through a whole
            # update (learn), and R2D2's gradient step takes it again around the optimizer's step.
            self.lock = threading.RLock()
            self.model = RecurrentQNetwork(
                self.obs_shape, self.num_actions, **config.model_options
            ).to(self.device)
            self.learner = R2D2(self.model, c, device=self.device, seed=config.seed, lock=self.lock)
            self.policy = RecurrentEpsilonGreedy(self.model, self.epsilons(config.num_actors))
            self.assembler = TrajectoryAssembler(
                config.slots, c.stored_length, c.stride, final_obs=False
            )
            self.replay = self.learner.make_replay()
            self.limiter = self.make_limiter()
            self.target_metric = "seed/return_least_exploring"
        self.server = InferenceServer(
            self.policy,
            config.max_batch_size or config.slots,
            config.timeout,
            device=self.device,
            listeners=[self.assembler, self.episodes],
            lock=self.lock,
        )

    def make_limiter(self) -> RateLimiter:
        """R2D2's ratio of sequences trained per sequence assembled, held from both sides."""
        c, config = self.learner_config, self.config
        return RateLimiter(
            max_ratio=config.replay_ratio,
            min_ratio=config.replay_ratio,
            min_inserts=max(config.min_replay_sequences, c.batch_size),
            slack=config.max_updates_behind * c.batch_size,
        )

    # --- actors ---------------------------------------------------------------------------------

    def epsilons(self, num_actors: int) -> np.ndarray:
        """Per slot: actor i's envs share epsilon_i of ``apex.actor_epsilons(num_actors)``."""
        c = self.config
        per_actor = np.asarray(actor_epsilons(num_actors) + [1.0] * (c.actor_limit - num_actors))
        return np.repeat(per_actor, c.envs_per_actor).astype(np.float32)

    @property
    def least_exploring_slot(self) -> int:
        """R2D2: the first env of the actor with the smallest epsilon."""
        return (self.num_actors - 1) * self.config.envs_per_actor

    def set_num_actors(self, num_actors: int) -> None:
        """The actor count changed: R2D2's slots get the epsilons of the new count."""
        self.num_actors = num_actors
        if isinstance(self.policy, RecurrentEpsilonGreedy):
            self.policy.epsilons = torch.as_tensor(self.epsilons(num_actors))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Requests per forward pass from the next batch on."""
        self.server.max_batch_size = check_max_batch_size(max_batch_size, self.config.slots)

    # --- learning -------------------------------------------------------------------------------

    @property
    def updates(self) -> int:
        return int(self.learner.num_updates)

    def learn(self, wait_seconds: float) -> dict[str, float] | None:
        """One learner update if its data is there within ``wait_seconds``: V-trace trains on the
        next ``batch_size`` unrolls in order of arrival; R2D2 stores new sequences and trains as
        the rate limiter allows. Returns the update's metrics, or None when there was nothing to
        learn from (the caller lets the envs move on: ``SeedTransport.advance``)."""
        if self.config.algorithm == "vtrace":
            return self._learn_vtrace(wait_seconds)
        return self._learn_r2d2(wait_seconds)

    def _learn_vtrace(self, wait_seconds: float) -> dict[str, float] | None:
        size = self.learner_config.batch_size
        replayed_count = size - self.fresh_per_update
        if len(self.recent_unrolls) < replayed_count:
            replayed_count = 0  # until the replay holds a batch's share: fresh unrolls only
        fresh = self.assembler.take(size - replayed_count, timeout=wait_seconds)
        if fresh is None:
            return None
        replayed = []
        if replayed_count:
            picks = self.replay_rng.integers(len(self.recent_unrolls), size=replayed_count)
            replayed = [self.recent_unrolls[i] for i in picks]
        np.add.at(self.windows_learned, [w["slot"] for w in fresh], 1)
        # Reusing unrolls makes each update take fewer fresh ones; a learner that owes more than
        # max_updates_behind updates' worth holds the server's lock through this one, so the
        # actors wait instead of queueing unrolls that age (R2D2's rule below, from the other side).
        owed = self.assembler.queued / self.fresh_per_update
        behind = self.config.replay_ratio > 1 and owed > self.config.max_updates_behind
        batch = stack_windows(fresh + replayed)
        with self.lock if behind else contextlib.nullcontext():
            metrics = self.learner.update(batch)
        check_finite(metrics, batch, f"update {self.updates}")
        if self.config.replay_ratio > 1:
            self.recent_unrolls.extend(fresh)
        metrics["seed/replayed_fraction"] = replayed_count / size
        return metrics

    def _learn_r2d2(self, wait_seconds: float) -> dict[str, float] | None:
        # The ratio from below too (as Reverb's SampleToInsertRatio): a learner behind it, counting
        # the sequences assembled but not yet stored, holds the server's lock through this whole
        # call (storing, prioritizing, training), so the actors wait. Holding it through the update
        # alone let the server run while the learner prioritized, and on two cores the queue of
        # sequences (and one priority pass over all of it) grew past 20 GB in three minutes.
        behind = not self.limiter.can_insert(pending=self.assembler.queued)
        with self.lock if behind else contextlib.nullcontext():
            # Holding the lock, it never waits for a sequence: none could come.
            return self._store_and_train_r2d2(0.0 if behind else wait_seconds)

    def _store_and_train_r2d2(self, wait_seconds: float) -> dict[str, float] | None:
        c = self.learner_config
        owed = self.limiter.batches_allowed(c.batch_size)
        queued = self.assembler.queued
        if queued:  # at most a batch at a time: the priority pass's memory stays one batch's
            fresh = self.assembler.take(min(queued, c.batch_size))
        else:
            fresh = None if owed else self.assembler.take(1, timeout=wait_seconds)
        if fresh:
            priorities = self.learner.sequence_priorities(stack_windows(fresh))
            stored = stack_windows(fresh, time_major=False)
            np.add.at(self.windows_learned, stored["slot"], 1)
            self.replay.add(
                {k: v for k, v in stored.items() if k in SEQUENCE_KEYS + STATE_KEYS}, priorities
            )
            self.limiter.insert(len(fresh))
            self.sequences_added += len(fresh)
        if not self.limiter.batches_allowed(c.batch_size):
            return None
        sample, indices, weights = self.replay.sample(c.batch_size)
        self.limiter.sample(c.batch_size)
        batch = {**sample, "weights": weights}
        metrics = self.learner.update(batch)
        check_finite(metrics, batch, f"update {self.updates}")
        self.replay.update_priorities(indices, self.learner.priorities)
        return metrics

    def report(self) -> dict[str, Any]:
        """What a run's row needs, since the last report: ``returns`` of the episodes that ended,
        and ``row``: the server's batch and latency (then reset, so each row's percentiles are its
        own interval's), the windows made (and learned from, per actor), the replay's size, R2D2's
        least-exploring return."""
        stats = self.server.stats()
        per_actor = self.windows_learned.reshape(-1, self.config.envs_per_actor).sum(axis=1)
        row = {
            "charts/num_actors": self.num_actors,
            "seed/return_least_exploring": self.episodes.mean(
                10, slot=self.least_exploring_slot, minimum=5
            ),
            "seed/mean_batch_size": stats.get("mean_batch_size"),
            "seed/latency_p50_ms": stats.get("latency_p50_ms"),
            "seed/latency_p99_ms": stats.get("latency_p99_ms"),
            "seed/windows": self.assembler.windows_made,
            "seed/windows_per_actor": {str(i): n for i, n in enumerate(per_actor.tolist()) if n},
            "seed/replay_size": len(self.replay) if self.replay is not None else None,
        }
        self.server.latency.reset()
        return {"returns": self.episodes.take_new(), "row": row, "updates": self.updates}

    # --- checkpoints ----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The learner (model, optimizer, counters) and the run's sequence count; not the replay,
        which the actors refill."""
        state = {
            "learner": self.learner.state_dict(),
            "num_actors": self.num_actors,
            "sequences_added": self.sequences_added,
            "replay": "not saved: the actors refill the replay on resume",
        }
        if self.replay is not None:
            state["limiter"] = self.limiter.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["learner"])
        self.sequences_added = int(state["sequences_added"])
        if self.replay is not None:
            self.limiter = self.make_limiter()  # the replay starts empty: a fresh warm-up
