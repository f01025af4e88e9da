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

# Learner (r2d2.py): R2D2 with its config and the sequence batch keys.
from workbench.algos.r2d2 import (  # noqa: E402
    R2D2,
    SEQUENCE_KEYS,
    STATE_KEYS,
    R2D2Config,
    sequence_priority,
)

__all__ += ["R2D2", "R2D2Config", "SEQUENCE_KEYS", "STATE_KEYS", "sequence_priority"]
