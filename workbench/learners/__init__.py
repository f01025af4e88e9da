"""Learners: one interface (``base.Learner``), one gradient step, a reduction seam; the algorithms.

``update(batch) -> metrics`` is every learner's one verb (``base``): ``PPO`` and ``A2C`` on
time-major rollouts (Stooke & Abbeel's large-batch policy gradients), ``DQN`` (double, dueling,
n-step, C51, prioritized) and ``DDPG`` (Ape-X DPG's learner) on n-step transitions, ``IMPALA``
(V-trace) on unrolls and ``R2D2`` on sequences (SEED RL's learners). ``ReplayAgent`` puts a DQN or
DDPG learner in a sampler loop (rollouts into a replay, updates as the replay ratio allows);
``DataParallelLearner`` runs any of them on several devices (processes and an all-reduce), and
``join_learner_group`` joins one to replicas on other machines (torch.distributed's rendezvous);
``choose_precision`` times bfloat16 and channels-last on the machine a run starts on.
"""

from workbench.learners.a2c import A2C, A2CConfig
from workbench.learners.base import (
    GradientStep,
    Learner,
    Precision,
    Reduction,
    move_optimizer_state,
)
from workbench.learners.data_parallel import DataParallelLearner, RunLearner, replica_factory
from workbench.learners.ddpg import DDPG, DDPGConfig, DPGActor, GaussianExploration
from workbench.learners.dqn import DQN, DQNConfig, QActor
from workbench.learners.impala import IMPALA, IMPALAConfig
from workbench.learners.ppo import PPO, PPOConfig
from workbench.learners.precision import (
    PrecisionChoice,
    choose_precision,
    with_measured_precision,
)
from workbench.learners.r2d2 import R2D2, SEQUENCE_KEYS, STATE_KEYS, R2D2Config
from workbench.learners.rendezvous import Rendezvous, join_learner_group, leave_learner_group
from workbench.learners.replay_agent import (
    DDPG_REPLAY,
    ReplayAgent,
    ReplayAgentConfig,
    make_replay,
)

__all__ = [
    "A2C",
    "A2CConfig",
    "DDPG",
    "DDPGConfig",
    "DDPG_REPLAY",
    "DPGActor",
    "DQN",
    "DQNConfig",
    "QActor",
    "DataParallelLearner",
    "GaussianExploration",
    "GradientStep",
    "IMPALA",
    "IMPALAConfig",
    "Learner",
    "PPO",
    "PrecisionChoice",
    "PPOConfig",
    "Precision",
    "R2D2",
    "R2D2Config",
    "Reduction",
    "Rendezvous",
    "ReplayAgent",
    "ReplayAgentConfig",
    "RunLearner",
    "SEQUENCE_KEYS",
    "STATE_KEYS",
    "choose_precision",
    "join_learner_group",
    "leave_learner_group",
    "make_replay",
    "move_optimizer_state",
    "replica_factory",
    "with_measured_precision",
]
