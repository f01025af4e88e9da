"""Specifications for workbench.measure.throughput and workbench.measure.baselines: what is
counted, the limit's formula, and that every measurement closes what it opened.

Short runs only (CartPole, and one tiny Pong sampler): the whole file stays well under 30 s on the
2-core CI machine. The figures themselves are not checked, only that they are measured.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import psutil
import pytest
import torch

from workbench.measure import baselines
from workbench.measure.baselines import gym_vector_loop, naive_loop
from workbench.measure.throughput import (
    RandomPolicy,
    Throughput,
    limit_steps_per_second,
    measure_inference,
    measure_sampler,
    measure_vector_env,
    torch_threads,
)
from workbench.models import ActorCritic
from workbench.sampling import SerialSampler

CARTPOLE = "CartPole-v1"
PONG = "ALE/Pong-v5"


def child_processes() -> set[int]:
    """Live child pids (earlier tests may have left long-lived ones, e.g. Python's resource
    tracker)."""
    return {
        p.pid
        for p in psutil.Process().children(recursive=True)
        if p.status() != psutil.STATUS_ZOMBIE
    }


@pytest.fixture
def cartpole_model() -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic((4,), 2)


def test_random_policy_gives_one_int64_action_per_observation_within_range() -> None:
    policy = RandomPolicy(6)
    out = policy.act(torch.zeros(2000, 4, 84, 84, dtype=torch.uint8))
    assert set(out) == {"action"}
    action = out["action"]
    assert action.shape == (2000,) and action.dtype == torch.int64
    assert action.min() >= 0 and action.max() <= 5
    assert set(action.tolist()) == set(range(6))  # every action shows up in 2,000 draws


def test_random_policy_rejects_a_non_positive_action_count() -> None:
    with pytest.raises(ValueError, match="num_actions"):
        RandomPolicy(0)


def test_torch_threads_sets_the_count_inside_and_restores_it_after() -> None:
    before = torch.get_num_threads()
    with torch_threads(1) as inside:
        assert inside == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError):
        with torch_threads(1):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_limit_is_cores_over_the_cpu_seconds_each_step_costs() -> None:
    env = Throughput("env", 6000.0, 24000.0, 1.0, 6000, details={"cores_used": 2})
    inference = Throughput("inference", 8000.0, 8000.0, 1.0, 8000, details={"cores_used": 2})
    # 2 cores / (2 core-s per 6000 steps + 2 core-s per 8000 obs) = 3428.57 steps/s
    assert limit_steps_per_second(env, inference, 2) == pytest.approx(2 / (2 / 6000 + 2 / 8000))
    assert limit_steps_per_second(env, inference, 2) == pytest.approx(3428.571, abs=1e-3)
    # An env that only used one core for 6000 steps/s costs half as much per step.
    one_core_env = Throughput("env", 6000.0, 24000.0, 1.0, 6000, details={"cores_used": 1})
    assert limit_steps_per_second(one_core_env, inference, 2) == pytest.approx(
        2 / (1 / 6000 + 2 / 8000)
    )


def test_limit_asks_for_cores_used_when_a_measurement_lacks_it() -> None:
    env = Throughput("env", 6000.0, 24000.0, 1.0, 6000)
    inference = Throughput("inference", 8000.0, 8000.0, 1.0, 8000, details={"cores_used": 2})
    with pytest.raises(ValueError, match="cores_used"):
        limit_steps_per_second(env, inference, 2)


def test_measure_sampler_counts_every_collected_step_on_cartpole() -> None:
    with SerialSampler(CARTPOLE, num_envs=4, horizon=8) as sampler:
        measured = measure_sampler(sampler, RandomPolicy(2), 0.3, label="serial", num_threads=1)
    assert measured.label == "serial"
    assert measured.steps > 0 and measured.steps % (4 * 8) == 0  # whole collects of T * B steps
    assert measured.seconds >= 0.3
    assert measured.steps_per_second == pytest.approx(measured.steps / measured.seconds)
    assert measured.frames_per_second == pytest.approx(measured.steps_per_second)  # no frame skip
    assert set(measured.stages) == {"env", "inference", "wait", "total"}
    assert 0 < measured.stages["total"] <= measured.seconds
    assert measured.details["torch_threads"] == 1
    assert measured.details["collects"] == measured.steps // 32


def test_measure_sampler_counts_four_frames_per_atari_step() -> None:
    with SerialSampler(PONG, num_envs=2, horizon=4, env_threads=1) as sampler:
        measured = measure_sampler(sampler, RandomPolicy(6), 0.2)
    assert measured.steps_per_second > 0
    assert measured.frames_per_second == pytest.approx(4 * measured.steps_per_second)


def test_measure_vector_env_counts_steps_and_the_cores_it_used() -> None:
    measured = measure_vector_env(CARTPOLE, 4, 0.2)
    assert measured.steps > 0 and measured.steps % 4 == 0
    assert measured.details["cores_used"] == 1
    assert measured.frames_per_second == pytest.approx(measured.steps_per_second)


def test_measure_inference_counts_observations_at_the_threads_it_was_given(cartpole_model) -> None:
    measured = measure_inference(cartpole_model, (4,), 16, 0.2, num_threads=1)
    assert measured.steps > 0 and measured.steps % 16 == 0
    assert measured.details["threads"] == 1 and measured.details["cores_used"] == 1


def test_naive_loop_steps_one_env_and_closes_it(cartpole_model, monkeypatch) -> None:
    opened = []

    class Recorder(gym.Wrapper):
        closed = False

        def close(self):
            self.closed = True
            super().close()

    def make(env_id, seed=None):
        env = Recorder(gym.make(env_id))
        opened.append(env)
        return env

    monkeypatch.setattr(baselines, "make_preprocessed_env", make)
    measured = naive_loop(CARTPOLE, cartpole_model, 0.5)
    assert measured.steps > 0 and measured.steps_per_second > 0
    assert measured.stages["env"] > 0 and measured.stages["inference"] > 0
    assert len(opened) == 1 and opened[0].closed


def test_gym_vector_loop_steps_every_env_and_ends_its_processes(cartpole_model) -> None:
    before = child_processes()
    measured = gym_vector_loop(CARTPOLE, 2, cartpole_model, 0.5, mode="async")
    assert measured.steps > 0 and measured.steps % 2 == 0
    assert measured.details["mode"] == "async"
    assert child_processes() <= before


def test_gym_vector_loop_ends_its_processes_when_the_policy_fails() -> None:
    class Broken:
        def act(self, obs):
            raise RuntimeError("policy failed")

    before = child_processes()
    with pytest.raises(RuntimeError, match="policy failed"):
        gym_vector_loop(CARTPOLE, 2, Broken(), 0.5, mode="async")
    assert child_processes() <= before


def test_gym_vector_loop_sync_mode_and_bad_mode(cartpole_model) -> None:
    measured = gym_vector_loop(CARTPOLE, 2, cartpole_model, 0.2, mode="sync")
    assert measured.steps > 0
    with pytest.raises(ValueError, match="async"):
        gym_vector_loop(CARTPOLE, 2, cartpole_model, 0.2, mode="threads")


def test_preprocessed_pong_gives_four_stacked_84x84_uint8_frames() -> None:
    env = baselines.make_preprocessed_env(PONG, seed=0)
    try:
        obs, _ = env.reset(seed=0)
        obs = np.asarray(obs)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        assert env.unwrapped._frameskip == 1  # AtariPreprocessing does the skipping
    finally:
        env.close()
