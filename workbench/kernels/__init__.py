"""Pure tensor functions, one equation family per module, shapes checked at entry.

``returns`` (GAE, n-step targets), ``vtrace`` (IMPALA), ``distributional`` (the C51 projection),
``rescale`` (R2D2's ``h`` and ``h^-1``), ``losses`` (PPO's clipped loss, value loss, double-Q
action, sequence priority), ``schedules`` (learning rate against batch size). Kernels know no
learner, sampler or environment: ``from workbench.kernels import gae, vtrace``.
"""

from workbench.kernels.distributional import categorical_projection
from workbench.kernels.losses import (
    clipped_policy_loss,
    double_q_action,
    explained_variance,
    normalize_advantages,
    sequence_priority,
    value_loss,
)
from workbench.kernels.rescale import inverse_value_rescale, value_rescale
from workbench.kernels.returns import GAEReturns, gae, gae_from_rollout, nstep_targets
from workbench.kernels.schedules import linear_schedule, scaled_learning_rate
from workbench.kernels.vtrace import VTraceReturns, vtrace

__all__ = [
    "GAEReturns",
    "VTraceReturns",
    "categorical_projection",
    "clipped_policy_loss",
    "double_q_action",
    "explained_variance",
    "gae",
    "gae_from_rollout",
    "inverse_value_rescale",
    "linear_schedule",
    "normalize_advantages",
    "nstep_targets",
    "scaled_learning_rate",
    "sequence_priority",
    "value_loss",
    "value_rescale",
    "vtrace",
]
