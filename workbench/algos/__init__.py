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
