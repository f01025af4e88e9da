"""SEED's algorithms, one object each, chosen once by name (``SeedConfig.algorithm``).

Each is a ``learning.SeedLearning`` subclass: the host of the model, the inference server and the
learner for one algorithm, whose class attributes say what it trains (``settings_class``,
``model_class``, ``learner_class``) and how a run is judged (``target_metric``). Nothing outside
this registry asks which algorithm a run has; a third one is a module and a line here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench.seed.learning import SeedLearning
from workbench.seed.r2d2_learning import R2D2Learning
from workbench.seed.vtrace_learning import VTraceLearning

if TYPE_CHECKING:
    from workbench.seed.config import SeedConfig

__all__ = ["ALGORITHMS", "SEED_ALGORITHMS", "make_learning", "seed_algorithm"]

SEED_ALGORITHMS: dict[str, type[SeedLearning]] = {
    algorithm.name: algorithm for algorithm in (VTraceLearning, R2D2Learning)
}
ALGORITHMS = tuple(SEED_ALGORITHMS)


def seed_algorithm(name: str) -> type[SeedLearning]:
    """The algorithm called ``name`` (``"vtrace"``, ``"r2d2"``), else a ValueError naming them."""
    if name not in SEED_ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {name!r}")
    return SEED_ALGORITHMS[name]


def make_learning(config: SeedConfig, device: Any = "cpu") -> SeedLearning:
    """The learner's host of ``config``'s algorithm (model, server, listeners, learner)."""
    return seed_algorithm(config.algorithm)(config, device)
