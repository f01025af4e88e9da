"""Specifications for workbench.envs (make_vector_env, VectorEnv, render_frames) and
workbench.system.resolve_device.

Every env is small (1 to 8 copies) and runs a few hundred steps at most: Atari construction costs
~0.2 s per env on the 2-core CI machine, and the whole file must stay well under a minute.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.envs import make_vector_env, render_frames
from workbench.system import resolve_device

PONG = "ALE/Pong-v5"
BREAKOUT = "ALE/Breakout-v5"  # 5 lives, rewards 1/4/7 per brick
SPACE_INVADERS = "ALE/SpaceInvaders-v5"  # random play scores 5+ points within ~40 steps
CARTPOLE = "CartPole-v1"

CARTPOLE_ANGLE_LIMIT = 12 * 2 * np.pi / 360  # 0.2095 rad: gymnasium's termination threshold
CARTPOLE_X_LIMIT = 2.4
CARTPOLE_RESET_BOUND = 0.05  # reset draws each state component from U(-0.05, 0.05)


def random_actions(rng: np.random.Generator, env, size: int | None = None) -> np.ndarray:
    return rng.integers(env.num_actions, size=env.batch_size if size is None else size)


def play(env_id: str, *, num_envs: int, seed: int, steps: int, action_seed: int = 0, **options):
    """Observations [steps+1, B, ...] (reset first) and raw rewards [steps, B] for fixed actions."""
    rng = np.random.default_rng(action_seed)
    with make_vector_env(env_id, num_envs, **options) as env:
        obs, _ = env.reset(seed=seed)
        observations, rewards = [obs.copy()], []
        for _ in range(steps):
            obs, _, _, _, info = env.step(random_actions(rng, env))
            observations.append(obs.copy())
            rewards.append(info["raw_reward"].copy())
    return np.stack(observations), np.stack(rewards)


# --- shapes and spaces --------------------------------------------------------------------------


def test_pong_gives_uint8_observations_of_four_stacked_84x84_frames_and_six_actions() -> None:
    with make_vector_env(PONG, 2) as env:
        obs, info = env.reset(seed=0)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        assert env.observation_shape == (4, 84, 84)
        assert env.single_action_space.n == 6 and env.num_actions == 6
        np.testing.assert_array_equal(info["env_id"], [0, 1])
        obs, rewards, terminated, truncated, info = env.step(np.zeros(2, dtype=np.int64))
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
    assert rewards.shape == terminated.shape == truncated.shape == (2,)
    assert terminated.dtype == truncated.dtype == np.bool_


@pytest.mark.parametrize(
    ("options", "shape"),
    [
        ({"frame_stack": 2}, (2, 84, 84)),
        ({"screen_size": 64}, (4, 64, 64)),
        ({"frame_stack": 3, "screen_size": 42}, (3, 42, 42)),
        ({"grayscale": False}, (4, 84, 84, 3)),
    ],
)
def test_atari_options_set_the_observation_shape(options: dict, shape: tuple) -> None:
    with make_vector_env(PONG, 1, **options) as env:
        obs, _ = env.reset(seed=0)
        assert env.observation_shape == shape
        assert obs.shape == (1, *shape)


def test_cartpole_gives_float_observations_of_four_numbers() -> None:
    with make_vector_env(CARTPOLE, 3) as env:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (3, 4) and np.issubdtype(obs.dtype, np.floating)
        assert env.num_actions == 2
        obs, *_ = env.step(np.zeros(3, dtype=np.int64))
    assert obs.shape == (3, 4) and np.issubdtype(obs.dtype, np.floating)


# --- seeding ------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", [PONG, CARTPOLE])
def test_same_seed_and_actions_give_identical_observations_and_rewards(env_id: str) -> None:
    obs_a, rewards_a = play(env_id, num_envs=2, seed=3, steps=300)
    obs_b, rewards_b = play(env_id, num_envs=2, seed=3, steps=300)
    np.testing.assert_array_equal(obs_a, obs_b)
    np.testing.assert_array_equal(rewards_a, rewards_b)


def test_different_seeds_give_different_noop_starts() -> None:
    # Without sticky actions the seed only picks the number of no-ops at the start, so with the
    # same actions any difference in what the agent sees comes from the no-op start.
    obs_a, _ = play(PONG, num_envs=1, seed=0, steps=60, repeat_action_probability=0.0)
    obs_b, _ = play(PONG, num_envs=1, seed=1, steps=60, repeat_action_probability=0.0)
    assert any(not np.array_equal(a, b) for a, b in zip(obs_a, obs_b))


def test_without_noops_or_sticky_actions_the_seed_does_not_change_the_game() -> None:
    # The contrast to the test above: Pong is deterministic, so the no-op start is what differs.
    deterministic = {"repeat_action_probability": 0.0, "noop_max": 0}
    obs_a, _ = play(PONG, num_envs=1, seed=0, steps=60, **deterministic)
    obs_b, _ = play(PONG, num_envs=1, seed=1, steps=60, **deterministic)
    np.testing.assert_array_equal(obs_a, obs_b)


def test_reset_with_an_int_seed_gives_env_i_the_seed_plus_i() -> None:
    actions = np.random.default_rng(0).integers(6, size=80)
    with make_vector_env(PONG, 2) as pair, make_vector_env(PONG, 1) as single:
        pair.reset(seed=10)
        single.reset(seed=[11])  # a sequence: one seed per env
        for action in actions:
            pair_obs, *_ = pair.step(np.array([action, action]))
            single_obs, *_ = single.step(np.array([action]))
            np.testing.assert_array_equal(pair_obs[1], single_obs[0])


# --- episode statistics: raw and whole-game (Breakout, 5 lives) ---------------------------------


@pytest.fixture(scope="module")
def breakout_game() -> dict[str, np.ndarray]:
    """One whole game of Breakout under random play, default options (episodic_life, clipping).

    Seed 0 scores 4 points, all before the last life, so a per-life return would differ.
    """
    rng = np.random.default_rng(0)
    record: dict[str, list] = {k: [] for k in ("reward", "raw", "terminated", "truncated", "done")}
    with make_vector_env(BREAKOUT, 1, seed=0) as env:
        assert env.episodic_life and env.reward_clipping
        for _ in range(5_000):
            _, reward, terminated, truncated, info = env.step(random_actions(rng, env))
            record["reward"].append(reward[0])
            record["raw"].append(info["raw_reward"][0])
            record["terminated"].append(terminated[0])
            record["truncated"].append(truncated[0])
            record["done"].append(info["episode_done"][0])
            if info["episode_done"][0]:
                break
    game = {k: np.array(v) for k, v in record.items()}
    game["episode_return"] = info["episode_return"][0]
    game["episode_length"] = info["episode_length"][0]
    assert game["done"][-1], "no Breakout game ended within 5000 random steps"
    return game


def test_episodic_life_terminates_at_each_lost_life_but_the_episode_ends_at_game_over(
    breakout_game,
) -> None:
    terminated, done = breakout_game["terminated"], breakout_game["done"]
    assert done.sum() == 1 and done[-1]  # episode_done only at game over
    assert terminated[-1]  # game over is terminal too
    assert terminated[:-1].sum() == 4  # 5 lives: 4 losses before the last
    assert not breakout_game["truncated"].any()


def test_reported_episode_return_is_the_raw_sum_over_the_whole_game(breakout_game) -> None:
    raw, terminated = breakout_game["raw"], breakout_game["terminated"]
    assert breakout_game["episode_return"] == raw.sum()
    assert breakout_game["episode_length"] == len(raw)
    last_life_starts = np.flatnonzero(terminated[:-1])[-1] + 1
    # Points scored in earlier lives count: a per-life return would stop at the last life's.
    assert breakout_game["episode_return"] > raw[last_life_starts:].sum()


def test_without_episodic_life_terminated_fires_only_at_game_over() -> None:
    rng = np.random.default_rng(0)
    games = 0
    with make_vector_env(BREAKOUT, 2, seed=0, episodic_life=False) as env:
        for _ in range(400):
            _, _, terminated, truncated, info = env.step(random_actions(rng, env))
            np.testing.assert_array_equal(terminated, info["episode_done"] & ~truncated)
            games += info["episode_done"].sum()
    assert games >= 1


def test_clipped_training_rewards_are_the_sign_of_the_raw_rewards() -> None:
    rng = np.random.default_rng(0)
    with make_vector_env(SPACE_INVADERS, 2, seed=0) as env:
        rewards, raw = [], []
        for _ in range(150):
            _, reward, _, _, info = env.step(random_actions(rng, env))
            rewards.append(reward)
            raw.append(info["raw_reward"])
    rewards, raw = np.stack(rewards), np.stack(raw)
    assert raw.max() > 1  # Space Invaders pays 5 to 30 points per alien
    assert set(np.unique(rewards)) <= {-1.0, 0.0, 1.0}
    np.testing.assert_array_equal(rewards, np.sign(raw))


def test_without_reward_clipping_training_rewards_are_raw() -> None:
    rng = np.random.default_rng(0)
    with make_vector_env(SPACE_INVADERS, 2, seed=0, reward_clipping=False) as env:
        rewards, raw = [], []
        for _ in range(150):
            _, reward, _, _, info = env.step(random_actions(rng, env))
            rewards.append(reward)
            raw.append(info["raw_reward"])
    rewards, raw = np.stack(rewards), np.stack(raw)
    assert rewards.max() > 1
    np.testing.assert_array_equal(rewards, raw)


def test_short_max_episode_frames_truncates_without_terminating_and_autoresets() -> None:
    frames, frameskip = 400, 4
    with make_vector_env(PONG, 2, seed=0, max_episode_frames=frames) as env:
        for step in range(1, frames // frameskip + 1):
            obs, _, terminated, truncated, info = env.step(np.zeros(2, dtype=np.int64))
            if step < frames // frameskip:
                assert not truncated.any() and not info["episode_done"].any()
    assert truncated.all() and not terminated.any()
    assert info["episode_done"].all()
    np.testing.assert_array_equal(info["episode_length"], [frames // frameskip] * 2)
    # Same-step autoreset: obs is the next episode's first, final_obs the truncated one's last.
    for i in range(2):
        assert not np.array_equal(info["final_obs"][i], obs[i])


@pytest.mark.parametrize(
    "env_id",
    [
        CARTPOLE,
        BREAKOUT,  # ale_py leaves stale frames in the rows of envs still playing
    ],
)
def test_final_obs_equals_obs_for_envs_whose_episode_did_not_end(env_id: str) -> None:
    rng = np.random.default_rng(0)
    with make_vector_env(env_id, 2, seed=0) as env:
        for _ in range(2_000):
            obs, _, _, _, info = env.step(random_actions(rng, env))
            done = info["episode_done"]
            if done.any() and not done.all():
                break
        else:
            pytest.fail("no step where one env's episode ended and the other's went on")
    (going_on,) = np.flatnonzero(~done)
    np.testing.assert_array_equal(info["final_obs"][going_on], obs[going_on])


# --- CartPole: final observation and episode statistics -----------------------------------------


@pytest.fixture(scope="module")
def cartpole_endings() -> list[dict]:
    """Every episode end over 200 random steps of 2 CartPoles (seed 0)."""
    rng = np.random.default_rng(0)
    endings = []
    with make_vector_env(CARTPOLE, 2, seed=0) as env:
        for _ in range(200):
            obs, _, terminated, truncated, info = env.step(random_actions(rng, env))
            for i in np.flatnonzero(info["episode_done"]):
                endings.append(
                    {
                        "final_obs": np.asarray(info["final_obs"][i]),
                        "obs": obs[i].copy(),
                        "terminated": terminated[i],
                        "truncated": truncated[i],
                        "episode_return": info["episode_return"][i],
                        "episode_length": info["episode_length"][i],
                    }
                )
    assert len(endings) >= 5
    return endings


def test_cartpole_final_obs_is_the_terminal_state_and_obs_a_fresh_reset(cartpole_endings) -> None:
    for end in cartpole_endings:
        assert end["terminated"] and not end["truncated"]  # random play never reaches 500 steps
        x, _, angle, _ = end["final_obs"]
        assert abs(angle) > CARTPOLE_ANGLE_LIMIT or abs(x) > CARTPOLE_X_LIMIT
        assert np.all(np.abs(end["obs"]) <= CARTPOLE_RESET_BOUND)


def test_cartpole_episode_return_equals_episode_length(cartpole_endings) -> None:
    for end in cartpole_endings:
        assert end["episode_length"] > 0
        assert end["episode_return"] == end["episode_length"]


# --- asynchronous stepping (Atari, batch_size < num_envs) ---------------------------------------


def test_async_step_returns_batch_size_envs_named_by_env_id() -> None:
    with make_vector_env(PONG, 8, batch_size=4) as env:
        assert env.is_async
        obs, info = env.reset(seed=0)
        assert obs.shape == (4, 4, 84, 84)
        for _ in range(5):
            obs, rewards, terminated, truncated, info = env.step(np.zeros(4, dtype=np.int64))
            assert obs.shape == (4, 4, 84, 84)
            assert rewards.shape == terminated.shape == truncated.shape == (4,)
            env_ids = np.asarray(info["env_id"])
            assert env_ids.shape == (4,) and len(set(env_ids.tolist())) == 4
            assert set(env_ids.tolist()) <= set(range(8))


def test_async_every_env_id_comes_back_over_a_few_steps() -> None:
    seen: set[int] = set()
    with make_vector_env(PONG, 8, batch_size=4, seed=0) as env:
        # The first batches come from whichever envs finished resetting first; on a busy machine
        # that can be the same four for a while, so allow many steps, stopping once all are seen.
        for _ in range(500):
            *_, info = env.step(np.zeros(4, dtype=np.int64))
            seen.update(np.asarray(info["env_id"]).tolist())
            if len(seen) == 8:
                break
    assert seen == set(range(8))


def test_async_reset_twice_works_and_prints_no_illegal_instruction(capfd) -> None:
    # ale_py's AtariVectorEnv crashes when reset over batches still in flight; VectorEnv drains
    # them.
    with make_vector_env(PONG, 8, batch_size=4, seed=0) as env:
        env.reset(seed=1)  # right after the reset in make_vector_env
        for _ in range(3):
            env.step(np.zeros(4, dtype=np.int64))
        obs, info = env.reset(seed=2)  # after some steps
        assert obs.shape == (4, 4, 84, 84) and len(info["env_id"]) == 4
        obs, *_ = env.step(np.zeros(4, dtype=np.int64))
        assert obs.shape == (4, 4, 84, 84)
    out, err = capfd.readouterr()
    assert "illegal instruction" not in (out + err).lower()


# --- errors that name the fix -------------------------------------------------------------------


def test_unknown_env_id_suggests_the_closest_id() -> None:
    with pytest.raises(ValueError, match="ALE/Pong-v5") as error:
        make_vector_env("ALE/Pongg-v5", 1)
    assert "Did you mean 'ALE/Pong-v5'" in str(error.value)


@pytest.mark.parametrize("num_envs", [0, -1, 2.5, True])
def test_num_envs_must_be_a_positive_integer(num_envs) -> None:
    with pytest.raises(ValueError, match=r"num_envs must be a positive integer.*num_envs >= 1"):
        make_vector_env(PONG, num_envs)


def test_batch_size_that_does_not_divide_num_envs_lists_the_valid_divisors() -> None:
    with pytest.raises(ValueError, match=r"\[1, 2, 3, 6\]"):
        make_vector_env(PONG, 6, batch_size=4)


def test_batch_size_larger_than_num_envs_is_refused() -> None:
    with pytest.raises(ValueError, match=r"use one of \[1, 2\]"):
        make_vector_env(PONG, 2, batch_size=4)


def test_async_batch_size_needs_an_atari_id() -> None:
    with pytest.raises(ValueError, match="Leave batch_size unset"):
        make_vector_env(CARTPOLE, 2, batch_size=1)


def test_atari_options_are_refused_for_cartpole() -> None:
    with pytest.raises(ValueError, match=r"not an Atari id.*\['frame_stack'\].*Remove them"):
        make_vector_env(CARTPOLE, 1, frame_stack=2)


def test_unknown_atari_option_is_named_along_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"\['framestack'\]") as error:
        make_vector_env(PONG, 1, framestack=2)
    assert "'frame_stack'" in str(error.value)


def test_reset_with_the_wrong_number_of_seeds_says_how_many_it_needs() -> None:
    with make_vector_env(CARTPOLE, 2) as env:
        with pytest.raises(
            ValueError, match="reset got 3 seeds for 2 envs.*exactly one seed per env"
        ):
            env.reset(seed=[1, 2, 3])


@pytest.mark.parametrize("seed", [1.5, np.array(3.0)])
def test_reset_with_a_scalar_seed_that_is_not_an_int_raises_value_error(seed) -> None:
    with make_vector_env(CARTPOLE, 2) as env:
        with pytest.raises(ValueError, match="seed"):
            env.reset(seed=seed)


# --- devices ------------------------------------------------------------------------------------


def test_resolve_device_cuda_names_cpu_as_the_fix_without_a_gpu() -> None:
    if torch.cuda.is_available():  # the other branch: an index past the devices is refused
        with pytest.raises(ValueError, match="does not exist"):
            resolve_device("cuda:99")
    else:
        with pytest.raises(ValueError, match="cpu"):
            resolve_device("cuda")


def test_resolve_device_auto_picks_cpu_without_a_gpu() -> None:
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device(None).type == expected
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("name", ["banana", "mps"])
def test_resolve_device_rejects_names_it_cannot_use(name: str) -> None:
    with pytest.raises(ValueError, match="'cpu'"):
        resolve_device(name)


# --- rendering ----------------------------------------------------------------------------------


def test_render_frames_gives_an_rgb_frame_and_the_agents_stacked_observation() -> None:
    frame, obs = render_frames(PONG, steps=20)
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8


# --- a partially observed CartPole (R2D2) -------------------------------------------------------


def test_hide_velocity_keeps_cart_position_and_pole_angle() -> None:
    import gymnasium as gym

    from workbench.envs import CARTPOLE_NO_VELOCITY, HideVelocity

    full, hidden = gym.make(CARTPOLE), gym.make(CARTPOLE_NO_VELOCITY)
    assert hidden.spec.max_episode_steps == full.spec.max_episode_steps == 500
    space = full.observation_space
    assert hidden.observation_space == gym.spaces.Box(space.low[[0, 2]], space.high[[0, 2]])
    obs_full, _ = full.reset(seed=3)
    obs_hidden, _ = hidden.reset(seed=3)
    for action in [0, 1, 1, 0, 1]:
        np.testing.assert_array_equal(obs_hidden, obs_full[[0, 2]])
        obs_full, *_ = full.step(action)
        obs_hidden, *_ = hidden.step(action)
    np.testing.assert_array_equal(
        HideVelocity(gym.make(CARTPOLE)).observation(obs_full), obs_full[[0, 2]]
    )


def test_cartpole_no_velocity_runs_in_make_vector_env() -> None:
    from workbench.envs import CARTPOLE_NO_VELOCITY

    with make_vector_env(CARTPOLE_NO_VELOCITY, 2, seed=0) as env:
        assert env.observation_shape == (2,) and env.num_actions == 2
        done = False
        for _ in range(60):  # always pushing left ends an episode well within 60 steps
            obs, _, terminated, truncated, info = env.step(np.zeros(2, dtype=np.int64))
            assert obs.shape == (2, 2)
            done |= terminated.any()
        assert done and np.stack(info["final_obs"]).shape == (2, 2)


def test_a_misspelt_cartpole_no_velocity_id_is_suggested() -> None:
    with pytest.raises(ValueError, match="Did you mean 'workbench/CartPoleNoVelocity-v1'"):
        make_vector_env("workbench/CartPoleNoVelocty-v1", 1)
