"""An Ape-X actor (Horgan et al. 2018, Alg. 1): its envs, its copy of the networks, its
exploration, its local buffer, and the initial priorities it computes before sending. It acts with
its algorithm's actor policy (``ApexAlgorithm.make_actor``: networks, no optimizer), not with a
learner."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from workbench.apex.config import ApexConfig
from workbench.envs import make_vector_env
from workbench.replay import NStepTransitions
from workbench.rollout import Rollout

__all__ = ["ApexActor"]


class ApexActor:
    """One actor: its envs, its copy of the networks, its exploration, its local buffer.

    ``collect()`` steps ``block_steps`` steps per env and returns a block for the replay: n-step
    transitions (``replay.NStepTransitions``; windows wait for the next block to complete, so
    none is cut short), their initial priorities, and the episodes that ended.
    """

    def __init__(self, config: ApexConfig, index: int, exploration: float) -> None:
        torch.set_num_threads(1)
        self.config, self.index = config, index
        self.policy = config.apex_algorithm.make_actor(config)
        self.exploration = float(exploration)
        seed = (
            config.seed * 10_007 + index * config.envs_per_actor
        )  # distinct across actors and restarts
        self.env = make_vector_env(
            config.env_id, config.envs_per_actor, seed=seed, **config.env_options
        )
        self.obs, _ = self.env.reset(seed=seed)
        self.nstep = NStepTransitions(config.learner.n_step, config.learner.gamma)
        self.env_steps = 0
        self.steps_since_sync = math.inf  # refresh at the first chance
        self.parameter_version = -1

    def wants_parameters(self) -> bool:
        return self.steps_since_sync >= self.config.parameter_sync_steps

    def load_parameters(self, state: dict[str, torch.Tensor], version: int) -> None:
        self.policy.load_actor_state(state)
        self.parameter_version = version
        self.steps_since_sync = 0

    def collect(self) -> dict[str, Any]:
        """One block: the transitions, their priorities, and what the actor saw."""
        steps, num_envs = self.config.block_steps, self.config.envs_per_actor
        if self.config.exploration_schedule == "annealed":  # every actor steps at about one pace
            self.exploration = self.config.annealed_epsilon(self.env_steps * self.config.num_actors)
        obs, actions, rewards, terminated, truncated, returns = [], [], [], [], [], []
        exploration = torch.full((num_envs,), self.exploration)
        for _ in range(steps):
            obs_tensor = torch.as_tensor(self.obs)
            action = self.policy.act(obs_tensor, exploration).cpu()
            next_obs, reward, term, trunc, info = self.env.step(action.numpy())
            obs.append(obs_tensor)
            actions.append(action)
            rewards.append(torch.as_tensor(reward, dtype=torch.float32))
            terminated.append(torch.as_tensor(term))
            truncated.append(torch.as_tensor(trunc))
            returns.extend(float(r) for r in info["episode_return"][info["episode_done"]])
            self.obs = next_obs
        rollout = Rollout(
            obs=torch.stack(obs),
            actions=torch.stack(actions),
            rewards=torch.stack(rewards),
            terminated=torch.stack(terminated),
            truncated=torch.stack(truncated),
            truncation_values=torch.zeros(steps, num_envs),
            policy_outputs={},
            next_obs=torch.as_tensor(self.obs),
        )
        self.env_steps += steps * num_envs
        self.steps_since_sync += steps
        block = {
            "actor": self.index,
            "env_steps": steps * num_envs,
            "episode_returns": returns,
            "exploration": self.exploration,
            "parameter_version": self.parameter_version,
        }
        if self.config.frame_storage:
            block.update(self.frame_block(rollout))
        else:
            transitions = self.nstep.add(rollout)
            count = len(transitions["actions"])
            if not self.config.initial_priorities:  # NaN: the replay's largest priority so far
                priorities = torch.full((count,), float("nan"))
            elif count:
                priorities = self.policy.initial_priorities(transitions)
            else:
                priorities = torch.zeros(0)
            # numpy, not tensors, cross to the replay: torch's shared-memory handover fetches a
            # file descriptor per tensor through a socket, which costs more than copying a block.
            block["transitions"] = {key: value.numpy() for key, value in transitions.items()}
            block["priorities"] = priorities.numpy()
        return block

    def frame_block(self, rollout: Rollout) -> dict[str, Any]:
        """Atari: the block's steps for ``FrameStorage`` (which builds the windows itself), with a
        priority per step from the windows that end inside this block; a window that runs past it
        gets NaN, which the replay turns into its largest priority (Schaul et al. 2016's rule for
        data not yet seen by a network)."""
        nstep = NStepTransitions(
            self.config.learner.n_step, self.config.learner.gamma
        )  # this block only
        transitions = nstep.add(rollout)
        priorities = np.full(tuple(rollout.rewards.shape), np.nan, dtype=np.float32)
        if len(transitions["actions"]) and self.config.initial_priorities:
            priorities[nstep.kept.numpy()] = self.policy.initial_priorities(transitions).numpy()
        num_envs = self.config.envs_per_actor
        steps = {
            "obs": rollout.obs.numpy(),
            "actions": rollout.actions.numpy(),
            "rewards": rollout.rewards.numpy(),
            "terminated": rollout.terminated.numpy(),
            "truncated": rollout.truncated.numpy(),
            "env_ids": np.arange(self.index * num_envs, (self.index + 1) * num_envs),
        }
        return {"steps": steps, "priorities": priorities.reshape(-1)}

    def close(self) -> None:
        self.env.close()
