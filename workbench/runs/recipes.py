"""The settings behind each learning claim of samplers and learners, named once.

A recipe is an algorithm, its config, a sampler (kind and size), a step budget and the return it
must reach within that budget ("it learns" means a recipe reaches its target, asserted, not
eyeballed). ``tests/`` runs the classic-control ones at one seed; ``benchmarks/learning.py`` runs
any of them at several seeds, with an optional wall-clock limit (Atari recipes take an hour).

Every recipe (these, ``apex.APEX_RECIPES``, ``seed.SEED_RECIPES``) makes a run on the shared life
cycle (``make_run(seed)``), and ``run_recipe`` runs it against the recipe's budget and target.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import torch

from workbench.envs import env_spaces, is_atari
from workbench.learners import (
    A2C,
    DQN,
    PPO,
    A2CConfig,
    DQNConfig,
    PPOConfig,
    ReplayAgent,
    ReplayAgentConfig,
)
from workbench.models import ActorCritic, QNetwork
from workbench.runs.checkpoints import load_checkpoint_file
from workbench.runs.levers import Levers, choose_levers, learner_work
from workbench.runs.recipe_run import run_recipe
from workbench.runs.run import Run, RunConfig
from workbench.runs.settings import RunSettings
from workbench.system import usable_cores

__all__ = ["CARTPOLE_DQN", "CARTPOLE_REPLAY", "RECIPES", "Recipe", "run_recipe"]


@dataclass(frozen=True)
class Recipe:
    """A sampler-and-learner run with its target (``run_recipe``)."""

    name: str
    env_id: str
    algorithm: type
    """PPO, A2C or DQN (in a ``ReplayAgent``)."""
    config: Any
    """The learner's config (``PPOConfig``, ``A2CConfig``, ``DQNConfig``)."""
    num_envs: int
    horizon: int
    total_steps: int
    """The budget: the target must be reached within this many env steps."""
    target_return: float
    """Mean raw return over the last 20 training episodes."""
    note: str = ""
    sampler: str = "serial"
    """The sampler kind (``workbench.sampling.make_sampler``): ``"serial"``, ``"parallel"``,
    ``"batched"`` or ``"alternating"``."""
    num_workers: int = 1
    """Worker processes of a non-serial sampler (unused by the serial one)."""
    torch_threads: int | None = 1
    """Torch threads of the learner's process that ``benchmarks/learning.py`` sets (None: one per
    core). One suits small MLPs, and any model on a busy machine (see the ppo-pong recipe)."""
    model_options: tuple[tuple[str, Any], ...] = ()
    """Keyword arguments of the model (``QNetwork`` for DQN: dueling, num_atoms, v_min, v_max;
    ``ActorCritic``: trunk, e.g. ``"cnn-small"``)."""
    env_options: tuple[tuple[str, Any], ...] = ()
    """``make_vector_env`` options (Atari preprocessing: screen_size, repeat_action_probability,
    ...); the model is sized for the observations they make."""
    mode: str = "sync"
    """``RunConfig.mode``: ``"async"`` collects the next batch while the learner optimises."""
    measure_precision: bool = False
    """Choose the learner's ``autocast`` and ``channels_last`` by timing the recipe's model on the
    machine the run starts on (``learners.choose_precision``, about 4 s) instead of the config's."""
    measure_compile: bool = False
    """With ``measure_precision``: also time the chosen combination under ``torch.compile`` and
    compile the learner's forward pass where that is ``COMPILE_GAIN`` faster (10-20 s more at
    start; ``runs.levers``)."""
    replay: ReplayAgentConfig | None = None
    """DQN: its ``ReplayAgent``'s replay, replay ratio, warm-up and epsilon schedule (None: the
    defaults)."""
    measure_threads: bool = False
    """With ``measure_precision``: choose the process's torch threads, 1 or 2, from the learner's
    measured rate against the collector's (``runs.levers.choose_threads``, about 3 s more), and set
    them when the learner is made. For async recipes, whose collector has a core of its own."""

    def describe(self) -> dict[str, Any]:
        """``RunnableRecipe.describe``: a ``Run`` of samplers and a learner."""
        shape = ("sampler", "mode", "num_workers", "num_envs", "horizon")
        mine = {name: getattr(self, name) for name in shape}
        return {"system": "run", "algorithm": self.algorithm.__name__, **mine}

    def make_model(self, obs_shape: tuple[int, ...], num_actions: int) -> torch.nn.Module:
        """The recipe's network: a ``QNetwork`` for DQN, an ``ActorCritic`` for A2C and PPO."""
        model_class = QNetwork if self.algorithm is DQN else ActorCritic
        return model_class(obs_shape, num_actions, **dict(self.model_options))

    def make_learner(self, seed: int) -> Any:
        """The learner with a fresh model (torch seeded with ``seed`` first): PPO, A2C, or DQN in
        its ``ReplayAgent`` (the replay's sampling seeded too)."""
        torch.manual_seed(seed)
        observation_space, action_space = env_spaces(self.env_id, **dict(self.env_options))
        model = self.make_model(observation_space.shape, action_space.n)
        config = replace(self.config)
        if self.measure_precision:
            config = self.measured_config(model, observation_space.shape)
        if self.algorithm is DQN:  # Atari: each frame stored once, a stream per env
            streams = self.num_envs if is_atari(self.env_id) else None
            replay = self.replay or ReplayAgentConfig()
            return ReplayAgent(DQN(model, config), replay, seed=seed, frame_streams=streams)
        if self.algorithm is PPO:
            return PPO(model, config, seed=seed)
        return self.algorithm(model, config)

    def measured_config(self, model: torch.nn.Module, obs_shape: tuple[int, ...]) -> Any:
        """The recipe's config with the precision, layout and compiling measured here for ``model``
        (``choose_levers``; with ``measure_threads`` this process's torch threads are set too)."""
        levers = self.choose_levers(model, obs_shape)
        print(f"{self.name}: {levers.describe()}", flush=True)
        return self.with_levers(levers).config

    def with_levers(self, levers: Levers) -> "Recipe":
        """This recipe with ``levers`` (``choose_levers`` on this machine) fixed and its measuring
        off; with ``measure_threads`` this process's torch threads are set to the levers' too."""
        if self.measure_threads:
            torch.set_num_threads(levers.torch_threads)
        chosen = dict(autocast=levers.autocast, channels_last=levers.channels_last)
        config = replace(self.config, compile=levers.compile, **chosen)
        off = dict(measure_precision=False, measure_compile=False, measure_threads=False)
        return replace(self, config=config, **off)

    def with_measured_levers(self) -> "Recipe":
        """This recipe with its levers measured once, now, and fixed: for a notebook or study that
        makes several runs of it on one machine, each of which would otherwise measure the same
        again (4-15 s each, the most on an AVX2-only CPU)."""
        if not self.measure_precision:
            return self
        observation_space, action_space = env_spaces(self.env_id, **dict(self.env_options))
        model = self.make_model(observation_space.shape, action_space.n)
        levers = self.choose_levers(model, observation_space.shape)
        print(f"{self.name}: {levers.describe()}", flush=True)
        return self.with_levers(levers)

    def choose_levers(self, model: torch.nn.Module, obs_shape: tuple[int, ...]) -> Levers:
        """Measure this machine for the recipe's model (``runs.levers.choose_levers``)."""
        ratio = (self.replay or ReplayAgentConfig()).replay_ratio if self.algorithm is DQN else None
        minibatch, samples_per_step = learner_work(
            self.config, self.num_envs, self.horizon, replay_ratio=ratio
        )
        threads_for = None
        if self.measure_threads:
            threads_for = (self.env_id, dict(self.env_options), self.num_envs, samples_per_step)
        return choose_levers(
            model,
            obs_shape,
            minibatch,
            try_compile=self.measure_compile,
            threads_for=threads_for,
            cores=usable_cores(),
        )

    def make_run(
        self,
        seed: int,
        *,
        runs_dir: str | None = None,
        name: str | None = None,
        learner: Any = None,
        env_seed: int | None = None,
        resume_from: "str | os.PathLike | None" = None,
    ) -> Run:
        """A ``Run`` of the recipe at ``seed`` (not started); ``learner`` (default: a fresh one,
        ``make_learner(seed)``) and ``env_seed`` (default: ``seed``) let replicas of a
        data-parallel group share a learner seed and step different envs
        (``runs.distributed``). ``resume_from``: a checkpoint of this recipe's run to continue
        (learner, counters, recent returns; the levers are this machine's, the envs and the
        sampling seeded by ``seed``), under a name and metrics file of its own."""
        learner = learner if learner is not None else self.make_learner(seed)
        # the minibatch count is the learner's config's: the run takes it from there
        settings = RunSettings(
            num_workers=self.num_workers, num_envs=self.num_envs, horizon=self.horizon
        )
        config = RunConfig(
            total_steps=self.total_steps,
            seed=seed if env_seed is None else env_seed,
            name=name,
            mode=self.mode,
            **({} if runs_dir is None else {"runs_dir": runs_dir}),
        )
        options = {"env_options": dict(self.env_options)} if self.env_options else {}
        run = Run(
            self.env_id,
            learner,
            sampler=self.sampler,
            settings=settings,
            config=config,
            sampler_options=options,
        )
        if resume_from is not None:
            run.load_checkpoint(load_checkpoint_file(resume_from), str(resume_from), seed=seed)
        return run

    def run(self, seed: int, **options: Any) -> dict[str, Any]:
        """``run_recipe(self, seed, ...)``."""
        return run_recipe(self, seed, **options)


# Shared by the DQN and C51 CartPole recipes and notebook 05's DQN family (each recipe copies
# its config when it makes the agent).
CARTPOLE_DQN = DQNConfig(
    learning_rate=1e-3,
    batch_size=64,
    target_update_interval=256,
    n_step=3,
    double=True,
)
CARTPOLE_REPLAY = ReplayAgentConfig(
    replay_ratio=32.0,
    replay_capacity=100_000,
    learning_starts=1_000,
    exploration_fraction=0.16,
    exploration_end=0.04,
)


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
            config=A2CConfig(
                entropy_coef=0.0, value_coef=0.05, max_grad_norm=None
            ),  # RMSProp 7e-4, n = 5
            num_envs=8,
            horizon=5,
            total_steps=200_000,
            target_return=400.0,
            note="seen: 79k-113k steps, seeds 0-3",
        ),
        Recipe(
            name="dqn-cartpole",
            env_id="CartPole-v1",
            algorithm=DQN,
            # SB3 zoo's CartPole DQN sizes (256x256, lr ~1e-3, batch 64, 0.5 updates per step,
            # target refreshed every ~128-256 updates), with double Q, dueling and 3-step returns.
            config=CARTPOLE_DQN,
            replay=CARTPOLE_REPLAY,
            model_options=(("dueling", True), ("hidden", (256, 256))),
            num_envs=4,
            horizon=8,
            total_steps=100_000,
            target_return=475.0,
            note="seen: 26k-60k steps, seeds 0-3 (uniform replay)",
        ),
        Recipe(
            name="c51-cartpole",
            env_id="CartPole-v1",
            algorithm=DQN,
            config=CARTPOLE_DQN,
            replay=CARTPOLE_REPLAY,
            model_options=(
                ("dueling", True),
                ("hidden", (256, 256)),
                ("num_atoms", 51),
                ("v_min", 0.0),
                ("v_max", 100.0),
            ),  # returns of CartPole at gamma 0.99 lie in [0, 100]
            num_envs=4,
            horizon=8,
            total_steps=120_000,
            target_return=475.0,
            note="categorical (C51) with double, dueling, 3-step returns",
        ),
        Recipe(
            name="ppo-pong",
            env_id="ALE/Pong-v5",
            algorithm=PPO,
            config=PPOConfig(  # CleanRL's ppo_atari.py, with the learner's precision measured
                learning_rate=2.5e-4,
                anneal_lr=True,
                gamma=0.99,
                gae_lambda=0.95,
                num_epochs=4,
                num_minibatches=4,
                clip_coef=0.1,
                clip_value_loss=True,
                entropy_coef=0.01,
                value_coef=0.5,
                max_grad_norm=0.5,
            ),
            num_envs=8,
            horizon=128,
            total_steps=2_500_000,
            target_return=18.0,
            note=(
                "2.5M agent steps = 10M frames, on ALE/Pong-v5 as the workbench's envs make it "
                "(sticky actions 0.25, episodic life, clipped training rewards; returns on whole "
                "games). Not yet run to its end here. On the 2-core CPU it trains at about "
                "400-470 steps/s (data/training_throughput.json, sync rows), so an hour covers "
                "about 1.5-1.7M steps: benchmarks/learning.py --recipes ppo-pong --seeds 0 "
                "--max-seconds 3600 records how far it got."
            ),
            # at 8 envs on 2 cores the fastest (benchmarks/training_throughput.py)
            sampler="serial",
            # One thread: with other processes on the cores a two-thread bfloat16 learner collapses
            # (35 s instead of 2.5 s per update, measured); on an idle machine two are ~15% faster.
            torch_threads=1,
            # bfloat16 halves an update on the AVX-512 bf16 EPYC but is emulated on an AVX2-only
            # one, 5-7x slower there (data/learner_updates_avx2.json; docs/recipes.md).
            measure_precision=True,
        ),
        Recipe(
            name="ppo-pong-fast",
            env_id="ALE/Pong-v5",
            algorithm=PPO,
            config=PPOConfig(
                # 5e-4, twice CleanRL's, annealed to 0 over the budget as CleanRL's is: CleanRL's
                # rate was too slow at this size, a constant one left seeds short of 18, the
                # annealed rate sharpens the policy late (docs/recipes.md).
                learning_rate=5e-4,
                anneal_lr=True,
                gamma=0.99,
                gae_lambda=0.95,
                num_epochs=4,
                num_minibatches=4,
                clip_coef=0.1,
                clip_value_loss=True,
                entropy_coef=0.01,
                value_coef=0.5,
                max_grad_norm=0.5,
            ),
            # The anchors' protocol: no sticky actions (NoFrameskip-v4's equivalent). 42x42 frames,
            # as the universe-starter-agent's: the emulator steps no faster than at 84x84, but
            # the network's cost falls with the pixels.
            env_options=(("repeat_action_probability", 0.0), ("screen_size", 42)),
            # The universe-starter-agent's four 3x3 stride-2 conv layers of 32 filters.
            model_options=(("trunk", "cnn-universe"),),
            num_envs=16,
            horizon=64,
            # About 40 minutes here (16M frames): the horizon of the learning rate's annealing.
            total_steps=4_000_000,
            target_return=18.0,
            note="PPO on Pong as the anchors play it (no sticky actions), sized for a 2-core CPU",
            sampler="serial",  # ale_py's C++ env threads are the parallel simulators
            # The next batch is collected on one core while the learner learns on the other, at a
            # policy lag of one update (notebook 04).
            mode="async",
            # bfloat16 autocast: 2.8x the float32 minibatch rate on the AMD EPYC, ~1x on an Intel
            # Xeon without AMX, 0.1x on an AVX2-only EPYC; compiling and a second learner thread
            # pay on some CPUs only: all measured at start (runs.levers, ~30 s).
            measure_precision=True,
            measure_compile=True,
            measure_threads=True,
            # One learner thread unless the learner is measured the slower half: then two.
            torch_threads=1,
        ),
    )
}

# The same recipe under ALE/Pong-v5's own protocol: sticky actions 0.25 (Machado et al. 2018), a
# harder game for an agent that times its paddle by the frame.
RECIPES["ppo-pong-fast-sticky"] = replace(
    RECIPES["ppo-pong-fast"],
    name="ppo-pong-fast-sticky",
    env_options=(("repeat_action_probability", 0.25), ("screen_size", 42)),
    note="ppo-pong-fast with sticky actions 0.25 (ALE/Pong-v5's default), recorded beside it",
)

# The DQN family of notebook 05 at Atari scale in one process, beside Ape-X: apex-dqn-pong-fast's
# learner (double, dueling, 3-step, prioritized, batch 64, 4 samples per env step, target every
# 1,000 updates) and 16 envs, one epsilon annealed 1 -> 0.01 over 300k env steps (not a ladder).
RECIPES["dqn-pong-fast"] = Recipe(
    name="dqn-pong-fast",
    env_id="ALE/Pong-v5",
    algorithm=DQN,
    config=DQNConfig(
        n_step=3,
        double=True,
        batch_size=64,
        learning_rate=5e-4,
        adam_eps=1.5e-4,
        target_update_interval=1_000,
        max_grad_norm=10.0,
    ),
    replay=ReplayAgentConfig(
        replay_ratio=4.0,
        replay_capacity=400_000,
        learning_starts=20_000,
        prioritized=True,
        exploration_start=1.0,
        exploration_end=0.01,
        exploration_fraction=0.1,
    ),
    env_options=(("repeat_action_probability", 0.0), ("screen_size", 42)),
    model_options=(("trunk", "cnn-universe"), ("dueling", True)),
    num_envs=16,
    horizon=4,  # 64 env steps a collect, 4 updates of 64 on them
    total_steps=3_000_000,
    target_return=18.0,
    note="single-process DQN (double, dueling, 3-step, prioritized) on Pong sized for 2 cores: "
    "the collector thread steps 16 envs with the last update's network while the learner trains, "
    "each frame stored once in the replay",
    sampler="serial",
    mode="async",
    measure_precision=True,  # bfloat16: 2x on an AVX-512 bf16 CPU; compiled: 1.45x on AVX2-only
    measure_compile=True,
    torch_threads=1,
)
