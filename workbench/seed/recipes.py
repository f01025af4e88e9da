"""SEED runs with a stated target, for tests, notebooks and ``benchmarks/learning.py``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from workbench.envs import env_spaces
from workbench.learners import IMPALAConfig, R2D2Config, with_measured_precision
from workbench.runs.recipe_run import actors_description, run_recipe
from workbench.seed.config import SeedConfig
from workbench.seed.run import Seed
from workbench.system import resolve_device

__all__ = ["SEED_RECIPES", "SeedRecipe"]


@dataclass
class SeedRecipe:
    """A SEED run with its target, in the shape of ``runs.recipes.Recipe``
    (``benchmarks/learning.py`` runs every kind). ``total_steps`` is the env-step budget; the target
    is met by the rows' ``target_metric`` (V-trace: the last 20 episodes of every env; R2D2: the
    last 10 games of the actor exploring least)."""

    name: str
    config: SeedConfig
    target_return: float
    total_steps: int
    note: str = ""
    torch_threads: int = 1
    device: str = "cpu"
    measure_precision: bool = False
    """Choose the learner's autocast and memory layout by timing its network at its batch on this
    CPU at start (``learners.with_measured_precision``, about 4 s): V-trace's ``ActorCritic`` at
    ``batch_size x unroll_length`` samples, R2D2's convolutional trunk at its ``batch_size x
    stored_length`` rows (the LSTM and the heads take under a tenth of an update). Channels-last
    then holds for the server's forward passes too, which share the model."""

    @property
    def env_id(self) -> str:
        return self.config.env_id

    @property
    def env_options(self) -> dict:
        return self.config.env_options

    def make_model(self, obs_shape: tuple[int, ...], num_actions: int) -> torch.nn.Module:
        """The network the recipe's learner trains, with its ``model_options`` (what
        ``load_policy`` fills with a checkpoint's weights): V-trace's ``ActorCritic``, R2D2's
        ``RecurrentQNetwork``."""
        return self.config.algorithm_class.make_model(
            obs_shape, num_actions, self.config.model_options
        )

    def describe(self) -> dict[str, Any]:
        """``RunnableRecipe.describe``: SEED's env-only actors around one inference server; the
        learner's window (an unroll, or a sequence with its burn-in)."""
        config, algorithm = self.config, self.config.algorithm_class
        window = algorithm.window_length(config.learner_settings)
        return actors_description("seed", algorithm.title, config, window=window)

    def make_run(
        self,
        seed: int,
        *,
        runs_dir: str | None = None,
        name: str | None = None,
        resume_from: Any = None,
    ) -> Seed:
        """A ``Seed`` run of the recipe at ``seed`` (not started); with ``measure_precision`` its
        learner's precision is this machine's fastest. ``resume_from`` continues that checkpoint
        instead (``Seed.from_checkpoint``: its saved config, precision included; R2D2's actors
        refill the replay) as a run of its own at ``seed`` (its envs and sampling), with model
        and learner on this recipe's device."""
        if resume_from is not None:
            return Seed.from_checkpoint(
                resume_from, seed=seed, name=name, device=self.device, runs_dir=runs_dir
            )
        config = replace(self.config, seed=seed)
        if self.measure_precision and resolve_device(self.device).type == "cpu":
            config = replace(config, learner=self.measured_learner(config))
        return Seed(config, device=self.device, runs_dir=runs_dir, name=name)

    def measured_learner(self, config: SeedConfig) -> IMPALAConfig | R2D2Config:
        """The learner's config with the precision that times fastest here (compiled or not too,
        where the algorithm's learner compiles: V-trace's)."""
        algorithm, learner = config.algorithm_class, config.learner_settings
        observation_space, action_space = env_spaces(config.env_id, **config.env_options)
        shape = observation_space.shape
        model, batch = algorithm.precision_probe(
            self.make_model(shape, int(action_space.n)), learner
        )
        measured, choice = with_measured_precision(
            learner, model, shape, batch, try_compile=algorithm.compiles
        )
        print(f"{self.name}: learner samples/s {choice.describe()}", flush=True)
        return measured

    def run(self, seed: int, **options: Any) -> dict[str, Any]:
        """``runs.recipes.run_recipe(self, seed, ...)``."""
        return run_recipe(self, seed, **options)


def _vtrace_cartpole() -> SeedConfig:
    return SeedConfig(
        env_id="CartPole-v1",
        algorithm="vtrace",
        num_actors=4,
        # Short unrolls and small batches: many updates per env step, which CartPole needs.
        learner=IMPALAConfig(
            learning_rate=1e-3, batch_size=8, unroll_length=5, baseline_cost=0.25, entropy_cost=0.0
        ),
    )


def _r2d2_cartpole_no_velocity() -> SeedConfig:
    return SeedConfig(
        env_id="workbench/CartPoleNoVelocity-v1",
        algorithm="r2d2",
        num_actors=4,
        # Short sequences: the hidden velocities are differences of consecutive observations, so a
        # 5-step burn-in rebuilds a useful state and 20 trained rows (a new sequence every 10 steps)
        # hold far more memory than the task needs; R2D2's 40/80/40 suit Atari, and would cost 4x
        # per update here. Adam's eps at 1e-6, not R2D2's 1e-3: with the rescaled values' small
        # gradients, 1e-3 damps lr 1e-3 and learning takes about twice the updates.
        learner=R2D2Config(
            burn_in=5,
            sequence_length=20,
            overlap=10,
            n_step=5,
            gamma=0.99,
            batch_size=32,
            learning_rate=1e-3,
            adam_eps=1e-6,
            target_update_interval=100,
            replay_capacity=5000,
        ),
        # 16 sequences trained per sequence assembled: 32 trained rows per env step (DQN's CartPole
        # recipe: 32 transitions per step); fewer reach 300 in as many updates but twice the steps.
        min_replay_sequences=64,
        replay_ratio=16.0,
    )


def _vtrace_pong() -> SeedConfig:
    # ppo-pong-fast's protocol and network (no sticky actions, 42x42 frames, the
    # universe-starter-agent's CNN), so the two hours on 2 cores compare; IMPALA's learner settings
    # (unrolls of 20, batches of 32, Table G.1's costs) with SEED's Adam. Two actors of 16 envs:
    # the local transport's fastest layout here (benchmarks/central_inference.py).
    return SeedConfig(
        env_id="ALE/Pong-v5",
        algorithm="vtrace",
        num_actors=2,
        envs_per_actor=16,
        max_actors=4,
        timeout=0.002,
        model_options={"trunk": "cnn-universe"},
        env_options={"repeat_action_probability": 0.0, "screen_size": 42},
        learner=IMPALAConfig(
            learning_rate=6e-4, batch_size=32, unroll_length=20, entropy_cost=0.01
        ),
    )


def _vtrace_pong_fast() -> SeedConfig:
    # On two cores progress follows the learner's steps, not env steps, so PPO's budget:
    # 240-sample steps (12 unrolls of 20), each unroll learned 4 times (3 fresh and 9 replayed per
    # step, V-trace correcting their lag; the actors wait when the learner falls 2 updates
    # behind), Adam at 5e-4 annealed to 0 over 120k updates (about two hours here), precision
    # measured at start. An entropy cost of 0.0075: V-trace's advantages are not normalized, so
    # 0.01 outweighs the policy gradient on Pong's clipped returns, and at 0.005 a seed's entropy
    # collapsed. Two actors of 16 envs answering in halves of 8. How each was found, with the
    # records: docs/recipes.md.
    return SeedConfig(
        env_id="ALE/Pong-v5",
        algorithm="vtrace",
        num_actors=2,
        envs_per_actor=16,
        actor_batch=8,
        max_actors=2,
        timeout=0.002,
        model_options={"trunk": "cnn-universe"},
        env_options={"repeat_action_probability": 0.0, "screen_size": 42},
        learner=IMPALAConfig(
            learning_rate=5e-4,
            adam_eps=1e-5,
            batch_size=12,
            unroll_length=20,
            entropy_cost=0.0075,
            anneal_updates=120_000,
        ),
        replay_ratio=4.0,
        replay_unrolls=256,
    )


def _r2d2_pong_fast() -> SeedConfig:
    # R2D2 through SEED's server with ppo-pong-fast's protocol and network, sized for two cores,
    # where the learner's updates are the budget. The first record (16 sequences of 10 + 40 rows
    # overlapping by 20, 2.2 updates/s) ended at -18.2 after 11,849 updates: about where DQN's
    # learner is after as many updates, so the count of updates, not the rows, sets the pace.
    # Hence 8 sequences of 10 burn-in and 20 trained rows (85 ms an update alone on one Xeon
    # thread against 319 ms; the same trained rows a second), no overlap, each sequence trained 4
    # times (4 trained rows per env step, DQN's ratio), and DQN's pace of the target and the step:
    # a copy every 500 updates, learning rate 4e-4. Gamma 0.99: Pong's points come within a few
    # hundred steps. Four actors of 8 envs, so Ape-X's ladder has four rungs (0.4 to 0.00066).
    return SeedConfig(
        env_id="ALE/Pong-v5",
        algorithm="r2d2",
        num_actors=4,
        envs_per_actor=8,
        max_actors=4,
        timeout=0.002,
        model_options={"trunk": "cnn-universe", "lstm_size": 256},
        env_options={"repeat_action_probability": 0.0, "screen_size": 42},
        learner=R2D2Config(
            gamma=0.99,
            n_step=5,
            burn_in=10,
            sequence_length=20,
            overlap=0,
            batch_size=8,
            learning_rate=4e-4,
            adam_eps=1e-4,
            target_update_interval=500,
            replay_capacity=10_000,  # 31-row sequences of 4 x 42 x 42 frames: about 2.2 GB
        ),
        replay_ratio=4.0,
        min_replay_sequences=1_000,  # 20,000 env steps, DQN's learning_starts
    )


SEED_RECIPES: dict[str, SeedRecipe] = {
    recipe.name: recipe
    for recipe in (
        SeedRecipe(
            "seed-vtrace-cartpole",
            _vtrace_cartpole(),
            target_return=475.0,
            total_steps=300_000,
            note="4 env-only actors through the central server; IMPALA learner (V-trace)",
        ),
        SeedRecipe(
            "seed-r2d2-cartpole-novelocity",
            _r2d2_cartpole_no_velocity(),
            target_return=300.0,
            total_steps=80_000,
            note="velocities hidden: a feed-forward DQN cannot tell where the pole goes; "
            "seen: 30k-40k steps, serial seeds 0-4 (1500-2000 updates)",
        ),
        SeedRecipe(
            "seed-vtrace-pong",
            _vtrace_pong(),
            target_return=18.0,
            total_steps=50_000_000,
            note="2 env-only actors x 16 envs through the central server, learner on the GPU "
            "when there is one; on 2 CPU cores an hour shows how far V-trace gets beside PPO",
            device="auto",
        ),
        SeedRecipe(
            "seed-r2d2-pong-fast",
            _r2d2_pong_fast(),
            target_return=18.0,
            total_steps=5_000_000,
            note="R2D2 through the central server on Pong sized for 2 cores: 8 sequences of "
            "10 + 20 rows an update, each trained 4 times, 4 actors on Ape-X's epsilon ladder, "
            "precision measured at start; target met by the actor exploring least (the last 10 "
            "games of its 8 envs)",
            measure_precision=True,
        ),
        SeedRecipe(
            "seed-vtrace-pong-fast",
            _vtrace_pong_fast(),
            target_return=18.0,
            total_steps=10_000_000,
            note="seed-vtrace-pong sized for 2 cores: 240-sample learner steps, each unroll "
            "learned 4 times, learning rate annealed, precision measured at start",
            measure_precision=True,
        ),
    )
}
