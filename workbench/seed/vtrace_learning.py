"""V-trace through SEED: IMPALA's learner (Espeholt et al. 2018) on the central server's unrolls.

The server samples each slot's action from the policy it trains (``server.SampledPolicy``) and
records its log-probability; the assembler cuts every slot's stream into unrolls of
``unroll_length`` steps (plus the bootstrap observation), and each update trains on a batch of them
in order of arrival, V-trace correcting the policy lag (Sec. 4.1, Eq. 1). With
``SeedConfig.replay_ratio > 1`` an update takes ``ceil(batch_size / replay_ratio)`` fresh unrolls
and fills its batch from the last ``replay_unrolls`` learned, drawn uniformly (IMPALA's replay
experiments, Sec. 5.2).
"""

from __future__ import annotations

import collections
import contextlib
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.learners import IMPALA, IMPALAConfig
from workbench.models import ActorCritic
from workbench.runs.faults import check_finite
from workbench.seed.assembler import TrajectoryAssembler, stack_windows
from workbench.seed.learning import SeedLearning
from workbench.seed.server import SampledPolicy

if TYPE_CHECKING:
    from workbench.seed.config import SeedConfig

__all__ = ["VTraceLearning"]


class VTraceLearning(SeedLearning):
    """SEED's host with IMPALA's V-trace learner (module docstring)."""

    name = "vtrace"
    title = "V-trace"
    settings_class = IMPALAConfig
    model_class = ActorCritic
    learner_class = IMPALA
    target_metric = "charts/mean_return"  # the last 20 episodes of every env
    least_replay_ratio = 1.0
    why_least = "each unroll learned once, then replayed"
    window_field = "unroll_length"
    trained_field = "unroll_length"
    compiles = True

    def __init__(self, config: SeedConfig, device: Any = "cpu") -> None:
        super().__init__(config, device)
        self.fresh_per_update = math.ceil(self.learner_config.batch_size / config.replay_ratio)
        """Fresh unrolls per update; the rest of its batch is replayed."""
        self.recent_unrolls: collections.deque = collections.deque(maxlen=config.replay_unrolls)
        self.replay_rng = np.random.default_rng(config.seed)

    def make_learner(self) -> IMPALA:
        return IMPALA(self.model, self.learner_config, device=self.device, lock=self.lock)

    def make_policy(self) -> SampledPolicy:
        return SampledPolicy(self.model)

    def make_assembler(self) -> TrajectoryAssembler:
        length = self.learner_config.unroll_length + 1  # the bootstrap observation closes it
        return TrajectoryAssembler(self.config.slots, length, length - 1)

    def learn(self, wait_seconds: float) -> dict[str, float] | None:
        """Trains on the next fresh unrolls in order of arrival, and replayed ones."""
        size = self.learner_config.batch_size
        replayed_count = size - self.fresh_per_update
        if len(self.recent_unrolls) < replayed_count:
            replayed_count = 0  # until the replay holds a batch's share: fresh unrolls only
        fresh = self.assembler.take(size - replayed_count, timeout=wait_seconds)
        if fresh is None:
            return None
        replayed: list[dict[str, Any]] = []
        if replayed_count:
            picks = self.replay_rng.integers(len(self.recent_unrolls), size=replayed_count)
            replayed = [self.recent_unrolls[i] for i in picks]
        np.add.at(self.windows_learned, [w["slot"] for w in fresh], 1)
        # Reusing unrolls makes each update take fewer fresh ones; a learner that owes more than
        # max_updates_behind updates' worth holds the server's lock through this one, so the
        # actors wait instead of queueing unrolls that age (R2D2's rule, from the other side).
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
