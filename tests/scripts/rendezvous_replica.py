"""One replica of a two-machine learner group, for tests/test_rendezvous.py: join through the
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), update a PPO learner twice on this
rank's half of the environments of a fixed rollout, save the parameters to argv[1].

Rank 1 builds its model from another seed: joining must give it rank 0's parameters."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/

from test_data_parallel import PPO_CONFIG, B, cartpole_like_rollout, make_model  # noqa: E402

from workbench.learners import PPO, join_learner_group, leave_learner_group  # noqa: E402

torch.set_num_threads(1)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
learner = PPO(make_model(seed=rank), PPO_CONFIG, seed=0)
join_learner_group(learner, timeout=60)
share = B // world
for seed in (1, 2):
    rollout = cartpole_like_rollout(make_model(0), seed)
    mine = slice(rank * share, (rank + 1) * share)
    shard = type(rollout)(
        obs=rollout.obs[:, mine],
        actions=rollout.actions[:, mine],
        rewards=rollout.rewards[:, mine],
        terminated=rollout.terminated[:, mine],
        truncated=rollout.truncated[:, mine],
        truncation_values=rollout.truncation_values[:, mine],
        policy_outputs={k: v[:, mine] for k, v in rollout.policy_outputs.items()},
        next_obs=rollout.next_obs[mine],
    )
    learner.update(shard)
torch.save(learner.model.state_dict(), sys.argv[1])
leave_learner_group()
