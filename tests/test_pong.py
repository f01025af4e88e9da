"""Specifications for learning Atari on a 2-core machine (the ``ppo-pong-fast`` recipe).

The recipe's levers (Mnih et al. 2013's small CNN, a screen size and sticky actions passed to the
envs, precision chosen by a measurement), the evaluation that does not trust the training curve
(whole games on envs seeded apart from training's), the agent on screen (a game frame by frame,
a GIF, a live viewer) and random play, the score to beat. The CI-sized learning claim (a few
minutes of the recipe beat random play by a margin measured over the recorded seeds) is notebook
09's live run, under nbval; the hour to 18 lives in ``benchmarks/learning.py`` and ``data/``.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
import torch
from kernel_messages import run_in_kernel

from workbench.envs import env_spaces
from workbench.learners import choose_precision
from workbench.learners import precision as precision_module
from workbench.learners.precision import update_rate
from workbench.models import (
    EVALUATION_EPSILON,
    ActorCritic,
    NatureCNN,
    QNetwork,
    QPolicy,
    RecurrentQNetwork,
    RecurrentQPolicy,
    UniverseCNN,
)
from workbench.runs.evaluation import (
    EVALUATION_SEED,
    RandomPolicy,
    evaluate,
    export_policy,
    load_policy,
    play,
    save_animation,
)
from workbench.runs.recipes import RECIPES

PONG = "ALE/Pong-v5"
FAST = RECIPES["ppo-pong-fast"]
NO_STICKY = {"repeat_action_probability": 0.0}

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def untrained(seed: int = 0, **env_options) -> ActorCritic:
    torch.manual_seed(seed)
    observation_space, action_space = env_spaces(PONG, **env_options)
    return ActorCritic(observation_space.shape, action_space.n, trunk="cnn-small")


# --- the levers -------------------------------------------------------------------------------


def test_small_cnn_is_mnih_2013s_network():
    """Mnih et al. 2013, Sec. 5: 16 8x8 filters stride 4, 32 4x4 filters stride 2, 256 units."""
    trunk = NatureCNN(4, (84, 84), small=True)
    convs = [m for m in trunk.conv if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (16, (8, 8), (4, 4)),
        (32, (4, 4), (2, 2)),
    ]
    assert trunk.output_size == 256 and trunk.fc[0].in_features == 32 * 9 * 9
    out = trunk(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert out.shape == (3, 256)


def test_universe_cnn_is_the_starter_agents_network():
    """OpenAI's universe-starter-agent: four 3x3 conv layers of 32 filters, stride 2, padding 1,
    ELU after each; 42x42 frames end as 3x3x32 = 288 features, then fully connected 256."""
    trunk = UniverseCNN(4, (42, 42))
    convs = [m for m in trunk.conv if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride, c.padding) for c in convs] == [
        (32, (3, 3), (2, 2), (1, 1))
    ] * 4
    assert sum(isinstance(m, torch.nn.ELU) for m in trunk.conv) == 4
    assert trunk.fc[0].in_features == 288 and trunk.output_size == 256
    assert trunk(torch.zeros(2, 4, 42, 42, dtype=torch.uint8)).shape == (2, 256)


def test_the_recipe_runs_the_universe_cnn_on_42x42_frames():
    learner = dataclasses.replace(FAST, measure_precision=False).make_learner(0)
    assert learner.model.obs_shape == (4, 42, 42)
    assert isinstance(learner.model.trunk, UniverseCNN)


def test_the_sticky_variant_changes_only_the_protocol():
    sticky = RECIPES["ppo-pong-fast-sticky"]
    assert dict(sticky.env_options) == {**dict(FAST.env_options), "repeat_action_probability": 0.25}
    assert (
        dataclasses.replace(sticky, name=FAST.name, env_options=FAST.env_options, note=FAST.note)
        == FAST
    )


def test_small_cnn_has_a_third_of_the_nature_cnns_multiply_adds():
    def macs(trunk: NatureCNN) -> int:
        total, x = 0, torch.zeros(1, 4, 84, 84)
        for layer in [*trunk.conv, *trunk.fc]:
            y = layer(x)
            if isinstance(layer, torch.nn.Conv2d):
                total += y.numel() * layer.in_channels * math.prod(layer.kernel_size)
            elif isinstance(layer, torch.nn.Linear):
                total += layer.in_features * layer.out_features
            x = y
        return total

    nature, small = macs(NatureCNN(4, (84, 84))), macs(NatureCNN(4, (84, 84), small=True))
    assert 2.5 < nature / small < 4.0, (nature, small)


def test_screen_size_sets_the_observation_and_the_model():
    recipe = dataclasses.replace(FAST, env_options=(("screen_size", 64), *NO_STICKY.items()))
    recipe = dataclasses.replace(recipe, measure_precision=False)
    learner = recipe.make_learner(0)
    assert learner.model.obs_shape == (4, 64, 64)
    observation_space, _ = env_spaces(PONG, screen_size=(210, 160), grayscale=False, frame_stack=1)
    assert observation_space.shape == (1, 210, 160, 3)


def test_the_recipe_plays_pong_without_sticky_actions_and_makes_its_run_so():
    assert dict(FAST.env_options)["repeat_action_probability"] == 0.0
    recipe = dataclasses.replace(FAST, measure_precision=False)
    run = recipe.make_run(0, runs_dir=None)
    try:
        assert run.sampler_options["env_options"] == dict(FAST.env_options)
        assert run.config.mode == "async"
    finally:
        run.stop()


def test_choose_precision_returns_the_fastest_combination_it_measured():
    model = ActorCritic((4, 84, 84), 6, trunk="cnn-small")
    choice = choose_precision(model, (4, 84, 84), 32, seconds=0.05)
    assert set(choice.rates) == {
        "float32/contiguous",
        "float32/channels_last",
        "bfloat16/contiguous",
        "bfloat16/channels_last",
    }
    best = max(choice.rates, key=choice.rates.get)
    assert best == f"{choice.autocast or 'float32'}/" + (
        "channels_last" if choice.channels_last else "contiguous"
    )
    assert choice.gain >= 1.0


def test_choose_precision_tries_no_channels_last_for_vector_observations():
    choice = choose_precision(ActorCritic((4,), 2), (4,), 16, seconds=0.02)
    assert set(choice.rates) == {"float32/contiguous", "bfloat16/contiguous"}


def test_choose_precision_leaves_the_model_and_the_global_generator_alone():
    model = ActorCritic((4, 36, 36), 3, trunk="cnn-small")
    before = [p.detach().clone() for p in model.parameters()]
    state = torch.random.get_rng_state()
    choose_precision(model, (4, 36, 36), 8, seconds=0.02)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert next(model.parameters()).is_contiguous()


class CountedForward(torch.nn.Module):
    """A linear model that counts its forward calls, in every copy (``update_rate`` copies it)."""

    calls = 0

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        type(self).calls += 1
        return self.layer(x)


@pytest.mark.parametrize(("give_up_below", "most_steps"), [(float("inf"), 1), (None, None)])
def test_update_rate_stops_at_the_first_step_of_a_hopeless_combination(give_up_below, most_steps):
    CountedForward.calls = 0
    rate = update_rate(
        CountedForward(),
        (4,),
        8,
        autocast=None,
        channels_last=False,
        seconds=0.05,
        give_up_below=give_up_below,
    )
    assert rate > 0
    if most_steps is None:  # no rival to beat: two warm-up steps, then a timed window
        assert CountedForward.calls >= 3
    else:
        assert CountedForward.calls == most_steps


def test_choose_precision_gives_up_below_half_the_best_rate_so_far(monkeypatch):
    asked = []
    rates = {"float32/contiguous": 1_000.0, "bfloat16/contiguous": 100.0}

    def update_rate(
        model, obs_shape, minibatch, *, autocast, channels_last, give_up_below=None, **_
    ):
        asked.append(give_up_below)
        return rates[precision_module.label(autocast, channels_last)]

    monkeypatch.setattr(precision_module, "update_rate", update_rate)
    choice = choose_precision(ActorCritic((4,), 2), (4,), 16)
    assert asked == [None, 500.0]
    assert choice.autocast is None and choice.rates == rates


def test_update_rate_names_the_fix_for_a_bad_precision():
    with pytest.raises(ValueError, match="autocast must be None or one of"):
        update_rate(ActorCritic((4,), 2), (4,), 8, autocast="int8", channels_last=False)


# --- the evaluation ---------------------------------------------------------------------------


def test_evaluate_plays_whole_games_on_envs_apart_from_trainings():
    result = evaluate(untrained(**NO_STICKY), PONG, games=2, env_options=NO_STICKY)
    assert len(result.returns) == 2 and result.seed == EVALUATION_SEED
    # A whole game of Pong ends at 21 points for one side: an untrained policy loses by 21 to
    # about 17 (life loss is not an end here, and no reward is clipped: a raw score).
    for score, length in zip(result.returns, result.lengths):
        assert -21 <= score <= -15 and float(score).is_integer(), result.returns
        assert length > 700, result.lengths  # 21 rallies, each more than 35 agent steps
    assert result.mean == pytest.approx(np.mean(result.returns))


def test_evaluate_is_repeatable_and_leaves_the_global_generator_alone():
    model = untrained(**NO_STICKY)
    state = torch.random.get_rng_state()
    first = evaluate(model, PONG, games=1, env_options=NO_STICKY, seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    again = evaluate(model, PONG, games=1, env_options=NO_STICKY, seed=5)
    assert first.returns == again.returns and first.lengths == again.lengths


def test_evaluate_rejects_a_bad_game_count():
    with pytest.raises(ValueError, match="games must be a positive int"):
        evaluate(untrained(), PONG, games=0)


def test_play_shows_the_game_that_evaluate_scores():
    """The screen env and the agent's env play one game in lockstep: its final score is the raw
    return evaluate reports for the same seed (argmax actions, so no sampling differs)."""
    model = untrained(**NO_STICKY)
    frames = list(play(model, PONG, env_options=NO_STICKY, seed=11, deterministic=True))
    scored = evaluate(model, PONG, games=1, env_options=NO_STICKY, seed=11, deterministic=True)
    opponent, agent = frames[-1].score
    assert agent - opponent == scored.returns[0]
    assert max(opponent, agent) == 21
    assert frames[-1].step == scored.lengths[0]
    assert frames[0].screen.shape == (210, 160, 3) and frames[0].screen.dtype == np.uint8
    assert frames[0].view.shape == (84, 84)
    assert len({f.screen.tobytes() for f in frames[:200]}) > 50  # the screen moves


def test_play_refuses_sticky_actions():
    with pytest.raises(ValueError, match="repeat_action_probability=0"):
        next(play(untrained(), PONG, env_options={"repeat_action_probability": 0.25}))


def test_save_animation_writes_a_small_gif(tmp_path):
    import cv2

    model = untrained(**NO_STICKY)
    frames = [f for _, f in zip(range(120), play(model, PONG, env_options=NO_STICKY))]
    path = save_animation(frames, tmp_path / "game.gif", every=2)
    ok, animation = cv2.imreadanimation(str(path))
    assert ok and len(animation.frames) == 60
    assert animation.frames[0].shape[:2] == (210, 160)  # OpenCV reads a GIF back as BGRA
    assert path.stat().st_size < 200_000  # no dithering: flat colours stay flat
    with pytest.raises(ValueError, match="keep fewer frames"):
        save_animation(frames, tmp_path / "big.gif", every=1, max_bytes=1_000)


def test_export_policy_keeps_the_weights_alone_and_load_policy_reads_both(tmp_path):
    recipe = RECIPES["ppo-cartpole"]
    run = recipe.make_run(0, runs_dir=str(tmp_path), name="cartpole")
    run.run(env_steps=recipe.num_envs * recipe.horizon * 2)
    exported = export_policy(run.dir, tmp_path / "policy.pt")
    assert exported.stat().st_size < (run.dir / "checkpoint.pt").stat().st_size
    from_run, from_file = load_policy(recipe, run.dir), load_policy(recipe, exported)
    for a, b, c in zip(
        run.learner.model.state_dict().values(),
        from_run.state_dict().values(),
        from_file.state_dict().values(),
    ):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert not from_file.training


def test_a_dqn_checkpoint_plays_as_a_q_policy_greedy_or_nearly(tmp_path):
    recipe = RECIPES["dqn-cartpole"]
    run = recipe.make_run(0, runs_dir=str(tmp_path), name="dqn")
    run.run(env_steps=recipe.replay.learning_starts + 2 * recipe.num_envs * recipe.horizon)
    assert run.learner.num_updates > 0
    policy = load_policy(recipe, export_policy(run.dir, tmp_path / "policy.pt"))
    assert isinstance(policy, QPolicy) and policy.epsilon == EVALUATION_EPSILON == 0.001
    trained = run.learner.model.q_network.state_dict()  # the sampler's EpsilonGreedy, unwrapped
    assert all(torch.equal(v, trained[k]) for k, v in policy.q_network.state_dict().items())
    obs = torch.randn(64, 4)
    greedy = policy.act(obs, deterministic=True)["action"]
    assert torch.equal(greedy, policy.q_network(obs).argmax(-1))
    assert len(evaluate(policy, recipe.env_id, games=2, deterministic=True).returns) == 2


def test_a_q_policy_explores_at_its_epsilon_with_the_generator_given():
    policy = QPolicy(QNetwork((4,), 3), epsilon=0.5)
    obs = torch.randn(4000, 4)
    greedy = policy.act(obs, deterministic=True)["action"]
    first = policy.act(obs, generator=torch.Generator().manual_seed(1))["action"]
    again = policy.act(obs, generator=torch.Generator().manual_seed(1))["action"]
    assert torch.equal(first, again)
    # half explore, a third of those land on the greedy action anyway: 1/3 differ
    assert (first != greedy).float().mean().item() == pytest.approx(1 / 3, abs=0.03)


def test_play_shows_a_q_policys_game():
    observation_space, action_space = env_spaces(PONG, **NO_STICKY)
    policy = QPolicy(QNetwork(observation_space.shape, action_space.n))
    frames = [f for _, f in zip(range(30), play(policy, PONG, env_options=NO_STICKY))]
    assert len(frames) == 30 and frames[-1].screen.shape == (210, 160, 3)


def test_play_shows_a_recurrent_q_policys_game():
    # benchmarks/evaluate.py --animation for R2D2: a state left by another batch does not leak in.
    observation_space, action_space = env_spaces(PONG, **NO_STICKY)
    network = RecurrentQNetwork(observation_space.shape, action_space.n, lstm_size=16)
    policy = RecurrentQPolicy(network)
    policy.act(torch.zeros(3, *observation_space.shape, dtype=torch.uint8))  # another batch's
    frames = [f for _, f in zip(range(30), play(policy, PONG, env_options=NO_STICKY))]
    assert len(frames) == 30 and frames[-1].screen.shape == (210, 160, 3)
    assert policy.state is not None and policy.state[0].shape == (1, 16)  # carried, one env


def test_load_policy_names_the_recipe_a_checkpoint_needs(tmp_path):
    recipe = RECIPES["ppo-cartpole"]
    run = recipe.make_run(0, runs_dir=str(tmp_path), name="cartpole")
    run.run(env_steps=recipe.num_envs * recipe.horizon)
    with pytest.raises(ValueError, match="pass the recipe the run was made from"):
        load_policy(FAST, run.dir)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_policy(recipe, tmp_path / "nowhere")


def test_watch_plays_a_game_into_an_image_widget():
    from workbench.lab.watch import GameViewer

    viewer = GameViewer(untrained(**NO_STICKY), PONG, env_options=NO_STICKY, fps=10_000).start()
    assert viewer.wait(timeout=120), "the game did not end"
    assert viewer.error is None, viewer.error
    assert max(viewer.score) == 21 and viewer.image.value[:4] == b"\x89PNG"
    assert "game over" in viewer.label.value


def test_watch_stops_when_asked():
    from workbench.lab.watch import GameViewer

    viewer = GameViewer(untrained(**NO_STICKY), PONG, env_options=NO_STICKY, fps=20).start()
    viewer.stop()
    assert viewer.wait(timeout=10) and "stopped" in viewer.label.value
    assert viewer.steps < 50


def test_in_a_real_kernel_a_fast_game_is_drawn_at_most_max_draws_per_second(tmp_path):
    """A game played faster than the screen is redrawn must not flood the kernel's output channel:
    nbval reads a cell's messages only when it ends, and an overflowing queue drops its last one."""
    from workbench.lab.watch import MAX_DRAWS_PER_SECOND

    code = """
import time, torch
from workbench.envs import env_spaces
from workbench.lab.watch import GameViewer
from workbench.models import ActorCritic
torch.manual_seed(0)
options = {"repeat_action_probability": 0.0}
observation_space, action_space = env_spaces("ALE/Pong-v5", **options)
model = ActorCritic(observation_space.shape, action_space.n, trunk="cnn-small")
started = time.monotonic()
viewer = GameViewer(model, "ALE/Pong-v5", env_options=options, fps=10_000).start()
display(viewer)
ended = viewer.wait(timeout=120)
seconds = time.monotonic() - started
print("played", viewer.steps, "steps in", seconds, "s; ended", ended, viewer.error)
"""
    messages, printed = run_in_kernel(code, str(tmp_path), timeout=180)
    found = re.search(r"played (\d+) steps in ([\d.]+) s; ended True None", printed)
    assert found, printed
    steps, seconds = int(found.group(1)), float(found.group(2))
    updates = [m for m in messages if m["msg_type"] == "comm_msg"]
    # Frames at the draw rate, a score line per point (at most 21 + 20), the last frame and line.
    bound = MAX_DRAWS_PER_SECOND * (seconds + 1) + 41 + 2
    assert steps > 2 * bound, f"{steps} steps: too few for the bound ({bound:.0f}) to mean anything"
    assert len(updates) <= bound, (len(updates), bound, steps, seconds)


# --- the score to beat -----------------------------------------------------------------------


def test_random_play_loses_nearly_every_point_of_pong():
    # Mnih et al. (2015), random play on Pong: -20.7.
    random_play = evaluate(RandomPolicy(6), PONG, games=4, env_options=NO_STICKY)
    assert -21.0 <= random_play.mean <= -19.5 and len(random_play.returns) == 4


def test_random_play_is_repeatable():
    first = evaluate(RandomPolicy(6), PONG, games=2, env_options=NO_STICKY)
    assert evaluate(RandomPolicy(6), PONG, games=2, env_options=NO_STICKY).returns == first.returns


def test_random_policy_needs_an_action():
    with pytest.raises(ValueError, match="num_actions"):
        RandomPolicy(0)
