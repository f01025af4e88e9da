"""Ape-X runs with a stated target, for tests, notebooks and ``benchmarks/learning.py``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from workbench.apex.config import ApexConfig
from workbench.apex.run import Apex
from workbench.envs import env_spaces
from workbench.learners import DDPGConfig, DQNConfig, with_measured_precision
from workbench.models import QNetwork
from workbench.runs.recipe_run import actors_description, run_recipe
from workbench.system import resolve_device

__all__ = ["APEX_CARTPOLE_LEARNER", "APEX_RECIPES", "ApexRecipe"]


@dataclass
class ApexRecipe:
    """An Ape-X run with its target, in the shape of ``runs.recipes.Recipe``
    (``benchmarks/learning.py`` runs every kind). ``total_steps`` is the env-step budget; the target
    is met by ``target_metric``."""

    name: str
    config: ApexConfig
    target_return: float
    total_steps: int
    target_metric: str = "apex/return_least_exploring"
    note: str = ""
    torch_threads: int = 1
    device: str = "cpu"
    """The learner's device (``"auto"``: the GPU when there is one)."""
    measure_precision: bool = False
    """Choose the learner's autocast and memory layout by timing its network at its batch on
    this CPU at start (``learners.with_measured_precision``; about 4 s): bfloat16 halves an
    update's cost on an AVX-512 bf16 CPU and is ten times dearer on an AVX2-only one."""
    measure_compile: bool = False
    """With ``measure_precision``: also time the chosen precision under ``torch.compile`` in each
    memory layout and compile the learner's loss where that is ``COMPILE_GAIN`` faster (10-30 s
    more at start)."""
    algorithm: type = field(default=None, init=False)  # set below: Apex

    def __post_init__(self) -> None:
        self.algorithm = Apex
        if self.measure_compile and not self.measure_precision:
            raise ValueError(
                f"ApexRecipe {self.name!r}: measure_compile times the precision "
                "measure_precision chooses; set measure_precision=True too."
            )
        if self.measure_precision and not self.config.apex_algorithm.measures_precision:
            raise ValueError(
                f"ApexRecipe {self.name!r}: measure_precision times a DQN learner's network; "
                f"{self.config.apex_algorithm.title}'s MLPs gain nothing from it. "
                "Set measure_precision=False."
            )

    @property
    def env_id(self) -> str:
        return self.config.env_id

    @property
    def env_options(self) -> dict:
        return self.config.env_options

    def make_model(self, obs_shape: tuple[int, ...], num_actions: int) -> QNetwork:
        """The learner's ``QNetwork`` with the recipe's ``model_options`` (what ``load_policy``
        fills with a checkpoint's weights). Ape-X DPG recipes refuse: their actor is continuous."""
        return self.config.apex_algorithm.make_policy_network(self.config, obs_shape, num_actions)

    def describe(self) -> dict[str, Any]:
        """``RunnableRecipe.describe``: Ape-X's actors, each stepping its envs a block at a time."""
        config = self.config
        return actors_description(
            "apex", config.apex_algorithm.title, config, block_steps=config.block_steps
        )

    def make_run(
        self,
        seed: int,
        *,
        runs_dir: str | None = None,
        name: str | None = None,
        resume_from: Any = None,
    ) -> Apex:
        """An ``Apex`` run of the recipe at ``seed`` (not started), a row every 2 seconds; with
        ``measure_precision`` its learner's precision is this machine's fastest. ``resume_from``
        continues that checkpoint instead (``Apex.from_checkpoint``: its saved config and
        precision; the actors refill the replay) as a run of its own at ``seed`` (its actors and
        replay sampling), with the learner on this recipe's device."""
        if resume_from is not None:
            return Apex.from_checkpoint(
                resume_from,
                seed=seed,
                name=name,
                device=self.device,
                target_metric=self.target_metric,
                log_interval=2.0,
                runs_dir=runs_dir,
            )
        config = replace(self.config, seed=seed)
        if self.measure_precision and resolve_device(self.device).type == "cpu":
            config = replace(config, learner=self.measured_learner(config))
        return Apex(
            config,
            device=self.device,
            target_metric=self.target_metric,
            log_interval=2.0,
            runs_dir=runs_dir,
            name=name,
        )

    def measured_learner(self, config: ApexConfig) -> DQNConfig:
        """The learner's ``DQNConfig`` with the precision that times fastest here: its own update
        (not only its network's step), at the torch threads the learner will have."""
        observation_space, action_space = env_spaces(config.env_id, **config.env_options)
        shape, num_actions = observation_space.shape, int(action_space.n)
        network = config.apex_algorithm.make_policy_network(config, shape, num_actions)
        threads = torch.get_num_threads()
        torch.set_num_threads(config.learner_threads)
        try:
            learner, choice = with_measured_precision(
                config.learner,
                network,
                shape,
                config.learner.batch_size,
                try_compile=self.measure_compile,
                make_update=config.apex_algorithm.update_factory(
                    config, network, shape, num_actions
                ),
            )
        finally:
            torch.set_num_threads(threads)
        print(f"{self.name}: learner samples/s {choice.describe()}", flush=True)
        return learner

    def run(self, seed: int, **options: Any) -> dict[str, Any]:
        """``runs.recipes.run_recipe(self, seed, ...)``."""
        return run_recipe(self, seed, **options)


APEX_CARTPOLE_LEARNER = dict(
    n_step=3,
    double=True,
    batch_size=64,
    learning_rate=1e-3,
    adam_eps=1e-8,
    target_update_interval=256,
    max_grad_norm=10.0,
)
"""``DQNConfig`` fields of Ape-X on CartPole-v1: the paper's 3-step double Q on a dueling network
(Horgan et al. 2018, Appendix C), with CartPole's batch, learning rate and target interval (the
agent of ``tests/test_apex.py``'s CartPole runs and of notebook 06). With 4 actors it reached a
return of 475 here in 8k-28k learner updates (0.5-1.5 min on 2 cores), 200 in 4k-32k."""


def _cartpole_apex() -> ApexConfig:
    return ApexConfig(
        env_id="CartPole-v1",
        learner=DQNConfig(**APEX_CARTPOLE_LEARNER),
        model_options=dict(dueling=True, hidden=(256, 256)),
        num_actors=4,
        learning_starts=1_000,
        # A floor as well as a cap: actors wait for the learner, so the updates per env step
        # hold on a busy or a slow machine too (docs/recipes.md).
        min_replay_ratio=16.0,
        max_replay_ratio=32.0,
    )


def _pendulum_apex_dpg() -> ApexConfig:
    return ApexConfig(
        env_id="Pendulum-v1",
        algorithm="ddpg",
        learner=DDPGConfig(n_step=3, batch_size=128),
        model_options=dict(hidden=(128, 128)),
        num_actors=4,
        learning_starts=1_000,
        max_replay_ratio=128.0,
        min_replay_ratio=128.0,
    )


def _pong_apex() -> ApexConfig:
    # The paper's learner (Appendix C: 3-step double dueling DQN, Adam lr 0.00025 / 4, target copied
    # every 2,500 updates, alpha 0.6, beta 0.4) at one machine's scale: 8 actors x 4 envs, batch
    # 256, a 1M-step frame-once replay (7 GB), at most 8 samples trained per step (DQN's ratio).
    return ApexConfig(
        env_id="ALE/Pong-v5",
        learner=DQNConfig(
            n_step=3,
            double=True,
            batch_size=256,
            learning_rate=0.00025 / 4,
            adam_eps=1.5e-4,
            target_update_interval=2_500,
            max_grad_norm=40.0,
        ),
        model_options=dict(dueling=True),
        num_actors=8,
        envs_per_actor=4,
        block_steps=50,
        replay_capacity=1_000_000,
        learning_starts=50_000,
        max_replay_ratio=8.0,
        learner_threads=2,
    )


def _pong_apex_fast() -> ApexConfig:
    # Ape-X sized for two cores with ppo-pong-fast's protocol and network (no sticky actions,
    # 42x42 frames, the universe-starter-agent's CNN): the paper's actors, local buffers,
    # initial priorities, central prioritized replay and per-actor epsilons (4 actors x 4 envs:
    # 0.4, 0.051, 0.0066, 0.00066), and a learner that gets the updates DQN needs. Two cores
    # hold one learner, so updates per second are the budget: small batches (64), many of
    # them, the target copied every 1,000 updates; 4 samples trained per env step, held from
    # both sides (the actors step envs on the CPU the learner leaves), Adam at 5e-4. How each
    # was found, with the records: docs/recipes.md.
    return ApexConfig(
        env_id="ALE/Pong-v5",
        env_options={"repeat_action_probability": 0.0, "screen_size": 42},
        learner=DQNConfig(
            n_step=3,
            double=True,
            batch_size=64,
            learning_rate=5e-4,
            adam_eps=1.5e-4,
            target_update_interval=1_000,
            max_grad_norm=10.0,
        ),
        model_options={"trunk": "cnn-universe", "dueling": True},
        num_actors=4,
        max_actors=4,
        envs_per_actor=4,
        block_steps=50,
        replay_capacity=400_000,
        learning_starts=20_000,
        min_replay_ratio=4.0,
        max_replay_ratio=4.0,
        learner_threads=1,
    )


APEX_RECIPES: dict[str, ApexRecipe] = {
    recipe.name: recipe
    for recipe in (
        ApexRecipe(
            name="apex-dqn-cartpole",
            config=_cartpole_apex(),
            target_return=475.0,
            total_steps=200_000,
            note="4 actors (epsilons 0.4 ** (1 + 7 i / 3)), dueling double 3-step DQN, batch 64, "
            "16 to 32 samples trained per transition (actors wait while the learner lags); "
            "target met by the actor exploring least (last 10 episodes). Seen at seeds 0-2, three "
            "times each: 10k-26k learner updates, 40k-106k env steps, 32-63 s on 2 cores.",
        ),
        ApexRecipe(
            name="apex-dpg-pendulum",
            config=_pendulum_apex_dpg(),
            target_return=-200.0,
            total_steps=20_000,
            target_metric="charts/mean_return",
            note="Ape-X DPG (Sec. 3.2): 4 actors with Gaussian noise 0.5 -> 0.05 half-ranges, "
            "3-step DDPG learner, one update of 128 per env step (min = max replay ratio); target "
            "met by the last 20 episodes of all actors.",
        ),
        ApexRecipe(
            name="apex-dqn-pong",
            config=_pong_apex(),
            target_return=18.0,
            total_steps=2_500_000,
            device="auto",
            torch_threads=2,
            note="Ape-X DQN on Pong (sticky actions, -v5): 10M frames budget, learner on the GPU "
            "when there is one. Not yet run to its target here (no GPU was lent); an hour on a "
            "CPU: benchmarks/learning.py --recipes apex-dqn-pong --seeds 0 --max-seconds 3600.",
        ),
        ApexRecipe(
            name="apex-dqn-pong-fast",
            config=_pong_apex_fast(),
            target_return=18.0,
            total_steps=3_000_000,
            measure_precision=True,
            measure_compile=True,
            note="Ape-X DQN on Pong sized for 2 cores (ppo-pong-fast's protocol: 42x42, no sticky "
            "actions): 4 actors x 4 envs, a 400k frame-once replay, batch-64 learner at 4 "
            "samples per env step with its precision and compiling measured at start.",
        ),
    )
}
