"""Algorithms: the pure-tensor returns and targets (``returns``), and the learners built on them.

Everything in ``returns`` is re-exported here: ``from workbench.algos import gae, vtrace``.
"""

from workbench.algos.returns import (
    GAEReturns,
    VTraceReturns,
    categorical_projection,
    gae,
    gae_from_rollout,
    inverse_value_rescale,
    nstep_targets,
    value_rescale,
    vtrace,
)

__all__ = [
    "GAEReturns",
    "VTraceReturns",
    "categorical_projection",
    "gae",
    "gae_from_rollout",
    "inverse_value_rescale",
    "nstep_targets",
    "value_rescale",
    "vtrace",
]

# Learners (pg.py): A2C and PPO with their configs.
from workbench.algos.pg import (  # noqa: E402
    A2C,
    PPO,
    A2CConfig,
    PPOConfig,
    scaled_learning_rate,
    train,
)

__all__ += ["A2C", "A2CConfig", "PPO", "PPOConfig", "scaled_learning_rate", "train"]
