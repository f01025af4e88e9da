"""The settings behind each learning claim, named once: tests, benchmarks and notebooks share them.

A recipe is an algorithm, its config, a sampler size, a step budget and the return it must reach
within that budget ("it learns" means a recipe reaches its target, asserted, not eyeballed).
``tests/`` runs each at one seed; ``benchmarks/learning.py`` at several.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from workbench.algos.pg import A2C, PPO, A2CConfig, PPOConfig, train
from workbench.models import ActorCritic
from workbench.samplers import SerialSampler


@dataclass(frozen=True)
class Recipe:
    name: str
    env_id: str
    algorithm: type
    """PPO or A2C (later issues add the DQN family, Ape-X and SEED learners)."""
    config: Any
    num_envs: int
    horizon: int
    total_steps: int
    """The budget: the target must be reached within this many env steps."""
    target_return: float
    """Mean raw return over the last 20 training episodes."""
    note: str = ""

    def make(self, seed: int) -> tuple[Any, SerialSampler]:
        """The algorithm (fresh model, seeded) and its sampler; close the sampler when done."""
        torch.manual_seed(seed)
        sampler = SerialSampler(self.env_id, num_envs=self.num_envs, horizon=self.horizon, seed=seed)
        model = ActorCritic(sampler.observation_space.shape, sampler.action_space.n)
        kwargs = {"seed": seed} if self.algorithm is PPO else {}
        return self.algorithm(model, replace(self.config), **kwargs), sampler

    def run(self, seed: int) -> dict[str, Any]:
        """Train until the target or the budget: ``pg.train``'s result (``steps_to_target`` is
        None when the budget ran out first)."""
        algo, sampler = self.make(seed)
        with sampler:
            return train(algo, sampler, self.total_steps, target_return=self.target_return)


# ActorCritic shares one trunk between policy and value. CartPole's returns (tens to hundreds) make
# the value loss's gradient dominate that trunk, and a global-norm clip then shrinks the policy's
# gradient with it: so a small value_coef and no global clipping (Adam and RMSProp normalise each
# parameter's step, so the value head still learns at the full rate).
RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe(
            name="ppo-cartpole",
            env_id="CartPole-v1",
            algorithm=PPO,
            config=PPOConfig(  # rl-baselines3-zoo's CartPole settings, on a shared trunk
                learning_rate=1e-3,
                gamma=0.98,
                gae_lambda=0.8,
                num_epochs=20,
                num_minibatches=1,
                entropy_coef=0.0,
                value_coef=0.05,
                clip_value_loss=False,
                max_grad_norm=None,
            ),
            num_envs=8,
            horizon=32,
            total_steps=100_000,
            target_return=475.0,
            note="seen: 21k-36k steps, seeds 0-3",
        ),
        Recipe(
            name="a2c-cartpole",
            env_id="CartPole-v1",
            algorithm=A2C,
            config=A2CConfig(entropy_coef=0.0, value_coef=0.05, max_grad_norm=None),  # RMSProp 7e-4, n = 5
            num_envs=8,
            horizon=5,
            total_steps=200_000,
            target_return=400.0,
            note="seen: 79k-113k steps, seeds 0-3",
        ),
    )
}
