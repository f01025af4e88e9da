"""Ape-X's central replay (Horgan et al. 2018, Sec. 3): one prioritized replay that every actor
adds to, with the priorities the actors computed, and the learner samples from and updates."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from workbench.apex.config import ApexConfig
from workbench.replay import FrameStorage, PrioritizedReplay, RateLimiter

__all__ = ["ReplayServer"]


class ReplayServer:
    """The central replay (Horgan et al. 2018, Sec. 3): one ``PrioritizedReplay`` that every actor
    adds to, with the priorities the actors computed, and the learner samples from and updates.
    It also counts what each actor contributed."""

    def __init__(self, config: ApexConfig) -> None:
        self.config = config
        storage = None
        if config.frame_storage:  # one stream per env of every actor the run may grow to
            streams = config.max_actors * config.envs_per_actor
            storage = FrameStorage(
                config.replay_capacity // streams * streams,
                num_envs=streams,
                n_step=config.learner.n_step,
                gamma=config.learner.gamma,
            )
        self.replay = PrioritizedReplay(
            config.replay_capacity if storage is None else storage.capacity,
            alpha=config.priority_alpha,
            beta=config.priority_beta,
            storage=storage,
            seed=config.seed,
        )
        self.max_priority = 1.0  # the largest |TD| seen, for steps whose windows no actor could see
        # The replay ratio, held as the config says (neither bound is the paper's: its learner and
        # actors run freely); a learner more than one batch behind the lower bound makes actors
        # wait.
        self.limiter = RateLimiter(
            max_ratio=config.max_replay_ratio,
            min_ratio=config.min_replay_ratio,
            min_inserts=config.learning_starts,
            slack=config.learner.batch_size,
        )
        self.per_actor: dict[int, dict[str, Any]] = {}
        self._new_returns: list[tuple[int, float]] = []  # episodes since the last ``take_stats``

    def add_block(self, block: dict[str, Any]) -> int:
        """Add one actor block; returns the replay's size."""
        data = block["steps"] if "steps" in block else block["transitions"]
        priorities = np.asarray(block["priorities"], dtype=np.float64)
        count = len(priorities)
        if count:
            known = ~np.isnan(priorities)
            if known.any():
                self.max_priority = max(self.max_priority, float(priorities[known].max()))
            self.replay.add(data, np.where(known, priorities, self.max_priority))
        self.limiter.insert(count)
        stats = self.per_actor.setdefault(
            block["actor"],
            {"transitions": 0, "env_steps": 0, "episodes": 0, "returns": deque(maxlen=20)},
        )
        stats["transitions"] += count
        stats["env_steps"] += block["env_steps"]
        stats["episodes"] += len(block["episode_returns"])
        stats["returns"].extend(block["episode_returns"])
        stats["exploration"] = block["exploration"]
        stats["parameter_version"] = block["parameter_version"]
        self._new_returns.extend((block["actor"], r) for r in block["episode_returns"])
        return len(self.replay)

    @property
    def added(self) -> int:
        """Transitions added so far."""
        return self.limiter.inserted

    @property
    def sampled(self) -> int:
        """Samples drawn for the learner so far."""
        return self.limiter.sampled

    def accepting(self) -> bool:
        """Whether actors' blocks are taken now: False while the learner lags more than a batch
        behind ``min_replay_ratio`` samples per transition (``replay.RateLimiter``)."""
        return self.limiter.can_insert()

    def ready(self, batch_size: int) -> bool:
        """Whether a batch may be drawn: ``learning_starts`` transitions added, a batch held, and
        ``max_replay_ratio`` allows it."""
        return len(self.replay) >= batch_size and self.limiter.can_sample(batch_size)

    def sample(
        self, batch_size: int
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray] | None:
        """A prioritized batch (numpy arrays), or None while the replay is not ready (warming up, or
        the replay-ratio cap reached)."""
        if not self.ready(batch_size):
            return None
        batch, indices, weights = self.replay.sample(batch_size)
        self.limiter.sample(batch_size)
        return batch, indices, weights

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        priorities = np.asarray(priorities, dtype=np.float64)
        if len(priorities):
            self.max_priority = max(self.max_priority, float(priorities.max()))
        self.replay.update_priorities(np.asarray(indices), priorities)

    def take_stats(self) -> dict[str, Any]:
        """Counters, and the episodes (actor, return) that ended since the last call."""
        new, self._new_returns = self._new_returns, []
        return {
            "replay_size": len(self.replay),
            "added": self.added,
            "sampled": self.sampled,
            "episodes": new,
            "per_actor": {
                i: {k: (list(v) if k == "returns" else v) for k, v in s.items()}
                for i, s in self.per_actor.items()
            },
        }
