"""The replay ratio, held: samples trained per item inserted, between a lower and an upper bound.

Stooke & Abbeel 2018 (Sec. 4) hold the *replay ratio* fixed when the batch grows: how many times,
on average, each collected transition is trained on. Without a limiter the ratio is whatever the
machine's speeds make it: a fast learner beside slow actors over-trains on little data, slow
learning beside fast actors wastes the data. Reverb's ``SampleToInsertRatio`` (Cassirer et al.
2021, https://arxiv.org/abs/2102.04736, Sec. 3.3) holds it from both sides, and so does this one:

* the **upper bound** ``max_ratio``: a batch of ``n`` samples may be drawn only while
  ``sampled + n <= max_ratio * inserted`` (the learner waits for data);
* the **lower bound** ``min_ratio``: items may be inserted only while
  ``sampled + slack >= min_ratio * inserted`` (the actors wait for the learner; ``slack`` is how far
  behind the learner may fall first);
* a **warm-up**: nothing is sampled before ``min_inserts`` items were inserted, and ``inserted``
  counts from the insert that ends the warm-up, that insert included, so the learner does not owe a
  burst of updates for the warm-up data.

DQN in a sampler loop (``learners.replay_agent``) inserts env steps and holds ``replay_ratio``
from above; Ape-X's replay server inserts transitions with optional bounds on both sides; SEED's
R2D2 inserts sequences and holds its ratio from both sides. The counters are plain numbers: the
limiter never blocks, it answers, and its owner waits (or makes its actors wait).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["RateLimiter"]


class RateLimiter:
    """Samples per insert between ``min_ratio`` and ``max_ratio``, after a warm-up (module
    docstring).

    Args:
        max_ratio: the most samples trained per item inserted; None: no upper bound.
        min_ratio: the fewest; None: no lower bound (inserts never wait).
        min_inserts: items inserted before the first sample (the replay's warm-up).
        slack: samples the learner may owe below ``min_ratio`` before inserts wait.
    """

    def __init__(
        self,
        *,
        max_ratio: float | None = None,
        min_ratio: float | None = None,
        min_inserts: int = 0,
        slack: float = 0.0,
    ) -> None:
        for name, value in (("max_ratio", max_ratio), ("min_ratio", min_ratio)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(
                    f"RateLimiter: {name} must be a positive number or None, got {value!r}"
                )
        if max_ratio is not None and min_ratio is not None and min_ratio > max_ratio:
            raise ValueError(
                f"RateLimiter: min_ratio={min_ratio} > max_ratio={max_ratio}; the lower bound "
                "must not exceed the upper one."
            )
        if isinstance(min_inserts, bool) or not isinstance(min_inserts, int) or min_inserts < 0:
            raise ValueError(f"RateLimiter: min_inserts must be an int >= 0, got {min_inserts!r}")
        if not slack >= 0:
            raise ValueError(f"RateLimiter: slack must be >= 0, got {slack!r}")
        self.max_ratio, self.min_ratio = max_ratio, min_ratio
        self.min_inserts, self.slack = min_inserts, float(slack)
        self.inserted = 0
        """Items inserted, warm-up included."""
        self.counted = 0
        """Items inserted from the insert that ended the warm-up on: what the ratio is over."""
        self.sampled = 0
        """Samples drawn (a batch of n counts n)."""

    @property
    def warmed_up(self) -> bool:
        return self.inserted >= self.min_inserts

    def insert(self, count: int) -> None:
        """Record ``count`` items inserted."""
        self.inserted += int(count)
        if self.warmed_up:
            self.counted += int(count)

    def sample(self, count: int) -> None:
        """Record ``count`` samples drawn (one batch of ``count``)."""
        self.sampled += int(count)

    def can_sample(self, count: int) -> bool:
        """Whether a batch of ``count`` may be drawn now: warmed up and within ``max_ratio``."""
        if not self.warmed_up:
            return False
        return self.max_ratio is None or self.sampled + count <= self.max_ratio * self.counted

    def can_insert(self, pending: int = 0) -> bool:
        """Whether items may be inserted now: the learner is within ``slack`` of ``min_ratio``,
        counting ``pending`` items made but not yet inserted (a producer's queue) as inserted."""
        if self.min_ratio is None or self.inserted + pending < self.min_inserts:
            return True
        counted = self.counted + pending if self.warmed_up else pending  # pending ends the warm-up
        return self.sampled + self.slack >= self.min_ratio * counted

    def batches_allowed(self, batch_size: int) -> int:
        """Batches of ``batch_size`` that ``max_ratio`` allows now (0 during the warm-up)."""
        if not self.warmed_up:
            return 0
        if self.max_ratio is None:
            raise ValueError(
                "batches_allowed needs a max_ratio; without one sampling is not limited"
            )
        return max(0, int((self.max_ratio * self.counted - self.sampled) // batch_size))

    def state_dict(self) -> dict[str, Any]:
        return {"inserted": self.inserted, "counted": self.counted, "sampled": self.sampled}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inserted = int(state["inserted"])
        self.counted = int(state["counted"])
        self.sampled = int(state["sampled"])

    def __repr__(self) -> str:
        return (
            f"RateLimiter(min_ratio={self.min_ratio}, max_ratio={self.max_ratio}, "
            f"min_inserts={self.min_inserts}, inserted={self.inserted}, sampled={self.sampled})"
        )
