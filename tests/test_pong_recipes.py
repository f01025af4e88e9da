"""Ape-X DQN, SEED V-trace and single-process DQN sized for Pong on two cores: the protocol and
network they share with ``ppo-pong-fast``, what each keeps of its paper, and the precision measured
at start."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import workbench.apex.recipes as apex_recipes
import workbench.seed.recipes as seed_recipes
from workbench.apex import ApexConfig
from workbench.apex.recipes import APEX_RECIPES, ApexRecipe
from workbench.learners import IMPALAConfig, PrecisionChoice, with_measured_precision
from workbench.models import ActorCritic, RecurrentQPolicy
from workbench.replay import FrameStorage
from workbench.runs.evaluation import evaluate, export_policy, load_policy
from workbench.runs.recipes import RECIPES
from workbench.seed import Seed
from workbench.seed.recipes import SEED_RECIPES

APEX = APEX_RECIPES["apex-dqn-pong-fast"]
SEED = SEED_RECIPES["seed-vtrace-pong-fast"]
PPO = RECIPES["ppo-pong-fast"]
DQN_PONG = RECIPES["dqn-pong-fast"]


def test_both_play_ppo_pong_fasts_protocol_with_its_network():
    assert APEX.config.env_options == dict(PPO.env_options) == SEED.config.env_options
    assert APEX.config.env_options == {"repeat_action_probability": 0.0, "screen_size": 42}
    trunk = dict(PPO.model_options)["trunk"]
    assert APEX.config.model_options["trunk"] == SEED.config.model_options["trunk"] == trunk
    assert APEX.target_return == SEED.target_return == PPO.target_return == 18.0


def test_apex_keeps_the_papers_per_actor_epsilons():
    epsilons = APEX.config.explorations(APEX.config.num_actors)
    assert APEX.config.exploration_schedule == "ladder"
    assert epsilons[0] == pytest.approx(0.4)  # Horgan et al. 2018, Sec. 4.1: 0.4 ** (1 + 7i/(N-1))
    assert epsilons[-1] == pytest.approx(0.4**8)
    assert APEX.config.initial_priorities


def test_apex_trains_each_env_step_four_times_whatever_the_machine():
    # DQN's 8 left the actors waiting on a core the learner did not use (data/probe_apex_*.json)
    assert APEX.config.min_replay_ratio == APEX.config.max_replay_ratio == 4.0


def test_apex_writes_every_stream_of_its_frame_replay():
    # The replay makes max_actors x envs_per_actor streams; apex-dqn-pong wrote half of them.
    assert APEX.config.max_actors == APEX.config.num_actors


def test_single_process_dqn_learns_as_apex_does_but_with_one_annealed_epsilon():
    learner = "n_step double batch_size learning_rate adam_eps target_update_interval max_grad_norm"
    for name in learner.split():  # the same learner ...
        assert getattr(DQN_PONG.config, name) == getattr(APEX.config.learner, name), name
    replay = DQN_PONG.replay  # ... and the same replay, held in one process
    assert replay.prioritized and replay.replay_capacity == APEX.config.replay_capacity
    assert replay.priority_alpha != APEX.config.priority_alpha  # Rainbow's 0.5, Ape-X's 0.6
    assert replay.replay_ratio == APEX.config.max_replay_ratio == 4.0
    assert replay.learning_starts == APEX.config.learning_starts
    assert dict(DQN_PONG.model_options) == APEX.config.model_options
    assert dict(DQN_PONG.env_options) == APEX.config.env_options
    assert DQN_PONG.num_envs == APEX.describe()["num_envs"] == 16
    # Mnih et al. 2015's schedule, 1 -> 0.01 over the first 10% of the budget
    schedule = (replay.exploration_start, replay.exploration_end, replay.exploration_fraction)
    assert schedule == (1, 0.01, 0.1)


def test_single_process_dqn_stores_each_frame_once_in_a_stream_per_env():
    agent = dataclasses.replace(DQN_PONG, measure_precision=False).make_learner(0)
    storage = agent.replay.storage
    assert isinstance(storage, FrameStorage) and storage.num_envs == DQN_PONG.num_envs
    assert agent.replay.capacity == DQN_PONG.replay.replay_capacity  # 400k: a multiple of 16


def test_seed_learns_each_unroll_four_times_in_steps_of_ppos_minibatch_size():
    learner = SEED.config.learner
    assert learner.batch_size * learner.unroll_length == 240
    assert SEED.config.replay_ratio == 4.0
    assert learner.anneal_updates is not None


def test_r2d2_plays_the_same_protocol_on_the_same_trunk_and_trains_dqns_rows_per_step():
    r2d2 = SEED_RECIPES["seed-r2d2-pong-fast"]
    assert r2d2.config.env_options == SEED.config.env_options
    assert r2d2.config.model_options["trunk"] == SEED.config.model_options["trunk"]
    learner = r2d2.config.learner
    stride = learner.sequence_length - learner.overlap  # a sequence starts every stride steps
    assert r2d2.config.replay_ratio * learner.sequence_length / stride == 4.0
    assert r2d2.config.max_actors == r2d2.config.num_actors == 4  # Ape-X's ladder, four rungs


def test_with_measured_precision_sets_what_it_measured_and_keeps_the_rest():
    config = IMPALAConfig(learning_rate=1e-3, batch_size=3, unroll_length=4)
    model = ActorCritic((4, 42, 42), 6, trunk="cnn-universe")
    measured, choice = with_measured_precision(config, model, (4, 42, 42), 8, seconds=0.02)
    assert (measured.autocast, measured.channels_last) == (choice.autocast, choice.channels_last)
    assert choice.rate == max(choice.rates.values())
    assert dataclasses.replace(measured, autocast=None, channels_last=False) == config


def test_with_measured_precision_measures_compiling_when_asked_and_sets_its_choice():
    config = IMPALAConfig(learning_rate=1e-3, batch_size=3, unroll_length=4)
    model = ActorCritic((4,), 2)
    measure = with_measured_precision
    measured, choice = measure(config, model, (4,), 8, seconds=0.02, try_compile=True)
    # The fastest combination is timed compiled (on a tiny MLP either precision may win a timing).
    layout = "channels_last" if choice.channels_last else "contiguous"
    assert f"{choice.autocast or 'float32'}/{layout}/compiled" in choice.rates, choice.rates
    assert measured.compile == choice.compile
    measured_fields = dict(autocast=None, channels_last=False, compile=False)
    assert dataclasses.replace(measured, **measured_fields) == config


def measured_as_bfloat16(calls: list):
    def measure(config, model, obs_shape, minibatch_size, *, try_compile=False, **_):
        calls.append((type(model).__name__, tuple(obs_shape), minibatch_size, try_compile))
        chosen = dataclasses.replace(config, autocast="bfloat16", channels_last=True)
        if try_compile:
            chosen = dataclasses.replace(chosen, compile=True)
        return chosen, PrecisionChoice("bfloat16", True, {"bfloat16/channels_last": 1.0})

    return measure


def test_apex_measures_its_learners_network_at_its_batch_and_runs_with_the_choice(
    monkeypatch, tmp_path
):
    calls: list = []
    monkeypatch.setattr(apex_recipes, "with_measured_precision", measured_as_bfloat16(calls))
    run = APEX.make_run(0, runs_dir=str(tmp_path))
    assert calls == [("QNetwork", (4, 42, 42), 64, True)]
    assert (run.config.learner.autocast, run.config.learner.channels_last) == ("bfloat16", True)
    assert APEX.config.learner.autocast is None  # the recipe itself is left alone


def test_seed_measures_its_learners_network_at_its_batch_and_runs_with_the_choice(
    monkeypatch, tmp_path
):
    calls: list = []
    monkeypatch.setattr(seed_recipes, "with_measured_precision", measured_as_bfloat16(calls))
    run = SEED.make_run(0, runs_dir=str(tmp_path))
    try:
        assert calls == [("ActorCritic", (4, 42, 42), 240, True)]  # V-trace's update compiles
        assert (run.config.learner.autocast, run.config.learner.channels_last) == (
            "bfloat16",
            True,
        )
        assert run.config.learner.compile
    finally:
        run.stop()


def test_seed_r2d2_measures_its_trunk_at_its_batch_of_rows_and_runs_with_the_choice(
    monkeypatch, tmp_path
):
    calls: list = []
    monkeypatch.setattr(seed_recipes, "with_measured_precision", measured_as_bfloat16(calls))
    r2d2 = SEED_RECIPES["seed-r2d2-pong-fast"]
    run = r2d2.make_run(0, runs_dir=str(tmp_path))
    try:
        learner = r2d2.config.learner
        rows = learner.batch_size * learner.stored_length
        assert calls == [("UniverseCNN", (4, 42, 42), rows, False)]
        assert (run.config.learner.autocast, run.config.learner.channels_last) == (
            "bfloat16",
            True,
        )
    finally:
        run.stop()


def test_a_recipe_that_cannot_measure_its_learner_says_so():
    with pytest.raises(ValueError, match="measure_precision=False"):
        ApexRecipe(
            "dpg",
            ApexConfig(env_id="Pendulum-v1", algorithm="ddpg"),
            -200.0,
            1000,
            measure_precision=True,
        )


def test_a_seed_vtrace_checkpoint_plays_as_a_policy(tmp_path):
    recipe = SEED_RECIPES["seed-vtrace-cartpole"]
    run = Seed(dataclasses.replace(recipe.config, transport="serial"), runs_dir=tmp_path)
    run.run(env_steps=1000)
    policy = load_policy(recipe, run.dir)
    trained = run.learning.model.state_dict()
    assert all(torch.equal(value, trained[key]) for key, value in policy.state_dict().items())
    assert len(evaluate(policy, recipe.env_id, games=2).returns) == 2  # whole games, played


def test_a_seed_r2d2_checkpoint_plays_as_a_recurrent_policy(tmp_path):
    # R2D2's network plays with a state: load_policy wraps it so an evaluation carries each env's.
    recipe = SEED_RECIPES["seed-r2d2-cartpole-novelocity"]
    run = Seed(dataclasses.replace(recipe.config, transport="serial"), runs_dir=tmp_path)
    run.run(env_steps=500)
    policy = load_policy(recipe, run.dir)
    assert isinstance(policy, RecurrentQPolicy)
    trained = run.learning.model.state_dict()
    weights = policy.q_network.state_dict()
    assert all(torch.equal(value, trained[key]) for key, value in weights.items())
    assert (
        len(evaluate(policy, recipe.env_id, games=2, env_options=dict(recipe.env_options)).returns)
        == 2
    )


def test_a_seed_recipes_run_resumes_from_its_checkpoint(tmp_path):
    # benchmarks/learning.py --resume-from: the recipe continues the run it made, counters and all,
    # as a run of its own (its name and metrics file; the seed it is given).
    recipe = SEED_RECIPES["seed-vtrace-cartpole"]
    run = Seed(dataclasses.replace(recipe.config, transport="serial"), runs_dir=tmp_path)
    run.run(env_steps=500)
    resumed = recipe.make_run(0, resume_from=run.dir)
    assert resumed.config.transport == "serial"  # the checkpoint's config, not the recipe's
    assert (resumed.env_steps, resumed.updates) == (run.env_steps, run.updates)
    assert resumed.updates > 0 and resumed.name != run.name


def test_a_seed_vtrace_policy_exports_its_weights_alone(tmp_path):
    recipe = SEED_RECIPES["seed-vtrace-cartpole"]
    run = Seed(dataclasses.replace(recipe.config, transport="serial"), runs_dir=tmp_path)
    run.run(env_steps=500)
    exported = export_policy(run.dir, tmp_path / "policy.pt")
    trained = run.learning.model.state_dict()
    policy = load_policy(recipe, exported)
    assert all(torch.equal(value, trained[key]) for key, value in policy.state_dict().items())
