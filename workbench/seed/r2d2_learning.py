"""R2D2 through SEED (Kapturowski et al. 2019): recurrent Q-learning from a prioritized replay of
sequences, with the central server acting for every slot.

The server acts epsilon-greedily with the recurrent network, each actor's envs on Ape-X's epsilon
of its index (``apex.actor_epsilons``) and keeps each slot's LSTM state; the assembler cuts
overlapping sequences of ``stored_length`` steps with the state at their start. Each new sequence
enters a prioritized ``replay.SequenceReplay`` with its initial priority from the acting network
(Sec. 2.3), and a ``replay.RateLimiter`` holds the sequences trained per sequence assembled at
``SeedConfig.replay_ratio`` from both sides: the learner waits for sequences, and the server (so
every actor) waits for a learner that owes more than ``max_updates_behind`` updates
(``server.Backpressure``), while the learner trains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from workbench.apex.exploration import actor_epsilons
from workbench.learners import R2D2, SEQUENCE_KEYS, STATE_KEYS, R2D2Config
from workbench.models import RecurrentQNetwork
from workbench.replay import RateLimiter
from workbench.runs.faults import check_finite
from workbench.seed.assembler import TrajectoryAssembler, stack_windows
from workbench.seed.learning import SeedLearning
from workbench.seed.server import Backpressure, RecurrentEpsilonGreedy

if TYPE_CHECKING:
    from workbench.seed.config import SeedConfig

__all__ = ["R2D2Learning"]


class R2D2Learning(SeedLearning):
    """SEED's host with R2D2's learner, replay and rate limiter (module docstring)."""

    name = "r2d2"
    title = "R2D2"
    settings_class = R2D2Config
    model_class = RecurrentQNetwork
    learner_class = R2D2
    # the last 10 games of the actor exploring least, all its envs (Ape-X's metric)
    target_metric = "seed/return_least_exploring"
    window_field = "stored_length"
    trained_field = "sequence_length"

    @classmethod
    def precision_probe(cls, model: torch.nn.Module, settings: Any) -> tuple[torch.nn.Module, int]:
        # The convolutional trunk over every stored row of a batch: the LSTM and the heads take
        # under a tenth of an update.
        return model.trunk, settings.batch_size * settings.stored_length

    def __init__(self, config: SeedConfig, device: Any = "cpu") -> None:
        super().__init__(config, device)
        self.replay = self.learner.make_replay()
        self.limiter = self.make_limiter()
        self.in_hand = 0
        """Sequences taken from the assembler and not yet in the replay (being prioritized)."""
        self.server.backpressure = Backpressure(self.keeps_up)

    def make_learner(self) -> R2D2:
        c = self.learner_config
        return R2D2(self.model, c, device=self.device, seed=self.config.seed, lock=self.lock)

    def make_policy(self) -> RecurrentEpsilonGreedy:
        return RecurrentEpsilonGreedy(self.model, self.epsilons(self.config.num_actors))

    def make_assembler(self) -> TrajectoryAssembler:
        c = self.learner_config
        return TrajectoryAssembler(self.config.slots, c.stored_length, c.stride, final_obs=False)

    def make_limiter(self) -> RateLimiter:
        """Sequences trained per sequence assembled, held from both sides."""
        c, config = self.learner_config, self.config
        return RateLimiter(
            max_ratio=config.replay_ratio,
            min_ratio=config.replay_ratio,
            min_inserts=max(config.min_replay_sequences, c.batch_size),
            slack=config.max_updates_behind * c.batch_size,
        )

    def epsilons(self, num_actors: int) -> np.ndarray:
        """Per slot: actor i's envs share epsilon_i of ``apex.actor_epsilons(num_actors)``."""
        c = self.config
        per_actor = np.asarray(actor_epsilons(num_actors) + [1.0] * (c.actor_limit - num_actors))
        return np.repeat(per_actor, c.envs_per_actor).astype(np.float32)

    def set_num_actors(self, num_actors: int) -> None:
        """The slots get the epsilons of the new count."""
        super().set_num_actors(num_actors)
        self.policy.epsilons = torch.as_tensor(self.epsilons(num_actors))

    def keeps_up(self) -> bool:
        """Whether the learner is within the slack of the ratio from below, counting the sequences
        assembled but not yet stored (as Reverb's SampleToInsertRatio): if not, the server waits.
        The learner stores a batch of them at a time, so the priority pass's memory stays one
        batch's; an earlier design let the server run on while the learner prioritized, and on
        two cores the queue grew past 20 GB in three minutes."""
        return self.limiter.can_insert(pending=self.assembler.queued + self.in_hand)

    def learn(self, wait_seconds: float) -> dict[str, float] | None:
        """Stores new sequences and trains as the rate limiter allows."""
        metrics = self.store_and_train(wait_seconds)
        self.server.backpressure.notify()
        return metrics

    def store_and_train(self, wait_seconds: float) -> dict[str, float] | None:
        c = self.learner_config
        owed = self.limiter.batches_allowed(c.batch_size)
        queued = self.assembler.queued
        if queued:  # at most a batch at a time: the priority pass's memory stays one batch's
            fresh = self.assembler.take(min(queued, c.batch_size))
        else:
            fresh = None if owed else self.assembler.take(1, timeout=wait_seconds)
        if fresh:
            self.in_hand = len(fresh)
            priorities = self.learner.sequence_priorities(stack_windows(fresh))
            stored = stack_windows(fresh, time_major=False)
            np.add.at(self.windows_learned, stored["slot"], 1)
            self.replay.add(
                {k: v for k, v in stored.items() if k in SEQUENCE_KEYS + STATE_KEYS}, priorities
            )
            self.limiter.insert(len(fresh))
            self.in_hand = 0
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

    def state_dict(self) -> dict[str, Any]:
        """The learner and counters, and the rate limiter's; not the replay (the actors refill
        it on resume)."""
        return {**super().state_dict(), "limiter": self.limiter.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.limiter = self.make_limiter()  # the replay starts empty: a fresh warm-up
