"""Ape-X (Horgan et al. 2018): the roles one by one, then the whole run on local processes.

The Ray back end has its own file (test_apex_ray.py)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
from processes import live_children
import pytest
import torch

from workbench.algos.dqn import DQNConfig
from workbench.apex import (APEX_RECIPES, Apex, ApexActor, ApexConfig, ReplayServer, actor_epsilons,
                            actor_noise_scales, make_agent)
from workbench.apex_backends import SharedParameters

CARTPOLE_AGENT = dict(n_step=3, double=True, batch_size=64, learning_rate=1e-3, adam_eps=1e-8,
                      replay_capacity=100_000, target_update_interval=256, prioritized=True, priority_alpha=0.6,
                      max_grad_norm=10.0)


def cartpole_config(**changes) -> ApexConfig:
    values = dict(env_id="CartPole-v1", agent=DQNConfig(**CARTPOLE_AGENT),
                  model_options=dict(dueling=True, hidden=(64, 64)), num_actors=2, learning_starts=500, seed=0)
    values.update(changes)
    return ApexConfig(**values)


# --- per-actor exploration ------------------------------------------------------------------------


def test_actor_epsilons_follow_the_papers_formula():
    # Horgan et al. 2018, Sec. 4.1: eps_i = 0.4 ** (1 + 7 i / (N - 1)).
    eps = actor_epsilons(8)
    assert eps[0] == pytest.approx(0.4)
    assert eps[-1] == pytest.approx(0.4 ** 8)
    assert eps[3] == pytest.approx(0.4 ** (1 + 7 * 3 / 7))
    assert all(a > b for a, b in zip(eps, eps[1:]))


def test_one_actor_gets_the_base_epsilon():
    assert actor_epsilons(1) == [0.4]


def test_actor_noise_scales_spread_from_high_to_low():
    scales = actor_noise_scales(4, high=0.5, low=0.05)
    assert scales[0] == pytest.approx(0.5) and scales[-1] == pytest.approx(0.05)
    assert scales[1] / scales[0] == pytest.approx(scales[2] / scales[1])


# --- the actor ------------------------------------------------------------------------------------


def test_actor_block_holds_nstep_transitions_and_their_initial_priorities(one_thread):
    config = cartpole_config(block_steps=20, envs_per_actor=2)
    actor = ApexActor(config, index=1, exploration=0.3)
    block = actor.collect()
    n = config.agent.n_step
    transitions = block["transitions"]
    # The last n - 1 steps of each env wait for the next block to complete their windows.
    assert len(transitions["actions"]) <= 2 * (20 - (n - 1)) + 2 * n
    assert block["env_steps"] == 40 and block["actor"] == 1 and block["exploration"] == 0.3
    # Initial priority = |TD error| under the actor's own copy (Alg. 1): a literal recomputation.
    q = actor.agent.q_network
    obs = torch.as_tensor(transitions["obs"])
    next_obs = torch.as_tensor(transitions["next_obs"])
    with torch.no_grad():
        best = q(next_obs).argmax(1, keepdim=True)
        target = (torch.as_tensor(transitions["returns"])
                  + torch.as_tensor(transitions["discounts"]) * actor.agent.target(next_obs).gather(1, best).squeeze(1))
        taken = q(obs).gather(1, torch.as_tensor(transitions["actions"]).long().unsqueeze(1)).squeeze(1)
    np.testing.assert_allclose(block["priorities"], (target - taken).abs().numpy(), rtol=1e-5, atol=1e-6)
    actor.close()


def test_actor_refreshes_parameters_only_after_the_sync_interval(one_thread):
    config = cartpole_config(block_steps=50, parameter_sync_frames=100)
    actor = ApexActor(config, index=0, exploration=0.1)
    assert actor.wants_parameters()
    learner = make_agent(config)
    actor.load_parameters(learner.actor_state(), version=2)
    assert not actor.wants_parameters()
    actor.collect()
    assert not actor.wants_parameters()  # 50 of 100 frames
    actor.collect()
    assert actor.wants_parameters()
    for key, value in learner.actor_state().items():
        torch.testing.assert_close(actor.agent.q_network.state_dict()[key], value)
    actor.close()


def test_atari_actor_sends_steps_for_frame_storage_with_a_priority_per_step(one_thread):
    config = ApexConfig(env_id="ALE/Pong-v5", agent=DQNConfig(batch_size=32, replay_capacity=10_000),
                        num_actors=2, max_actors=2, block_steps=10, learning_starts=100, replay_capacity=10_000)
    actor = ApexActor(config, index=1, exploration=1.0)
    block = actor.collect()
    steps = block["steps"]
    assert steps["obs"].shape == (10, 1, 4, 84, 84) and steps["obs"].dtype == np.uint8
    assert steps["env_ids"].tolist() == [1]  # actor 1's env is stream 1 of the central storage
    # Windows that run past the block (no episode ends in 10 Pong steps) have no priority yet.
    n = config.agent.n_step
    assert np.isfinite(block["priorities"][: 10 - (n - 1)]).all()
    assert np.isnan(block["priorities"][10 - (n - 1):]).all()
    actor.close()
    server = ReplayServer(config)
    server.add_block(block)
    assert len(server.replay) == 10 and type(server.replay.storage).__name__ == "FrameStorage"


# --- the central replay ---------------------------------------------------------------------------


def _block(actor: int, count: int, priorities, start: float = 0.0) -> dict:
    obs = np.arange(start, start + count, dtype=np.float32)[:, None].repeat(4, 1)
    return {"actor": actor, "env_steps": count, "episode_returns": [10.0 * actor], "exploration": 0.1,
            "parameter_version": 0,
            "transitions": {"obs": obs, "actions": np.zeros(count, np.int64), "returns": np.ones(count, np.float32),
                            "discounts": np.full(count, 0.9, np.float32), "next_obs": obs + 1},
            "priorities": np.asarray(priorities, dtype=np.float32)}


def test_replay_server_stores_blocks_with_the_actors_priorities():
    server = ReplayServer(cartpole_config(replay_capacity=100, learning_starts=64))
    server.add_block(_block(0, 3, [1.0, 2.0, 4.0]))
    alpha = server.config.priority_alpha
    p = (np.array([1.0, 2.0, 4.0]) + server.replay.eps) ** alpha
    np.testing.assert_allclose(server.replay._priorities[:3], p, rtol=1e-6)


def test_replay_server_waits_for_learning_starts():
    server = ReplayServer(cartpole_config(replay_capacity=1000, learning_starts=100))
    server.add_block(_block(0, 99, np.ones(99)))
    assert server.sample(64) is None
    server.add_block(_block(0, 1, [1.0], start=99))
    batch, indices, weights = server.sample(64)
    assert batch["obs"].shape == (64, 4) and indices.shape == (64,) and weights.shape == (64,)


def test_replay_server_trims_the_oldest_at_capacity():
    server = ReplayServer(cartpole_config(replay_capacity=100, learning_starts=64))
    for k in range(3):
        server.add_block(_block(k, 50, np.ones(50), start=50.0 * k))
    assert len(server.replay) == 100
    batch, _, _ = server.sample(64)
    assert batch["obs"][:, 0].min() >= 50.0  # the first block is gone


def test_replay_ratio_cap_holds_back_samples():
    server = ReplayServer(cartpole_config(replay_capacity=1000, learning_starts=64, max_replay_ratio=1.5))
    server.add_block(_block(0, 100, np.ones(100)))
    assert server.sample(64) is not None and server.sample(64) is not None  # 128 <= 1.5 * 100
    assert server.sample(64) is None  # 192 > 150: the learner waits for data
    server.add_block(_block(0, 100, np.ones(100), start=100.0))
    assert server.sample(64) is not None  # 192 <= 300


def test_replay_server_counts_what_each_actor_contributed():
    server = ReplayServer(cartpole_config(replay_capacity=1000, learning_starts=64))
    server.add_block(_block(0, 10, np.ones(10)))
    server.add_block(_block(1, 30, np.ones(30)))
    stats = server.take_stats()
    assert stats["per_actor"][0]["transitions"] == 10 and stats["per_actor"][1]["transitions"] == 30
    assert sorted(stats["episodes"]) == [(0, 0.0), (1, 10.0)]
    assert server.take_stats()["episodes"] == []  # handed out once


def test_replay_server_applies_the_learners_priorities():
    server = ReplayServer(cartpole_config(replay_capacity=1000, learning_starts=64))
    server.add_block(_block(0, 100, np.ones(100)))
    server.update_priorities(np.array([5]), np.array([100.0]))
    assert server.replay._priorities[5] == pytest.approx((100.0 + server.replay.eps) ** 0.6, rel=1e-5)


# --- parameter publication ------------------------------------------------------------------------


def test_shared_parameters_publish_and_read_back():
    import torch.multiprocessing as mp

    state = {"w": torch.zeros(3)}
    shared = SharedParameters(mp.get_context("spawn"), state)
    shared.publish({"w": torch.ones(3)})
    read, version = shared.read()
    torch.testing.assert_close(read["w"], torch.ones(3))
    assert version == 2  # even: no write in progress


# --- bad input ------------------------------------------------------------------------------------


def test_unknown_backend_names_the_choices():
    with pytest.raises(ValueError, match="local"):
        Apex(cartpole_config(), backend="mpi")


def test_dpg_on_a_discrete_env_says_use_dqn():
    with pytest.raises(ValueError, match="algo='dqn'"):
        make_agent(ApexConfig(env_id="CartPole-v1", algo="ddpg"))


def test_more_actors_than_max_actors_is_refused():
    with pytest.raises(ValueError, match="max_actors"):
        cartpole_config(num_actors=5, max_actors=4)
    apex = Apex(cartpole_config(max_actors=4))
    with pytest.raises(ValueError, match="max_actors"):
        apex.set_num_actors(5)


def test_a_gpu_learner_without_a_gpu_names_the_fix(no_gpu):
    with pytest.raises(ValueError, match="device='cpu'"):
        Apex(cartpole_config(), device="cuda")


def test_train_needs_a_limit():
    with pytest.raises(ValueError, match="max_updates"):
        Apex(cartpole_config()).train()


# --- the whole run on local processes -------------------------------------------------------------




@pytest.mark.slow
def test_actors_are_added_removed_and_restarted_while_the_replay_keeps_its_data():
    before = live_children()
    apex = Apex(cartpole_config(num_actors=2, max_actors=4, learning_starts=200))
    seen: dict[str, object] = {}

    def steer(row: dict) -> None:
        if "killed" not in seen and row["replay_size"] > 0:
            pid = apex.actor_pids()[0]
            os.kill(pid, signal.SIGKILL)
            seen["killed"], seen["size_at_kill"] = pid, row["replay_size"]
        elif "grown" not in seen and apex.restarts:
            apex.set_num_actors(3)
            seen["grown"] = True
        elif "shrunk" not in seen and "grown" in seen and row["num_actors"] == 3 and 2 in row["per_actor"]:
            apex.set_num_actors(1)
            seen["shrunk"] = True
        elif "shrunk" in seen and row["num_actors"] == 1:
            seen["alive_at_one"] = len(apex.actor_pids())
            apex.stop()

    apex.train(max_seconds=150, log_interval=1.0, on_row=steer)
    kinds = [e["event"] for e in apex.events]
    assert kinds[:1] == ["restart"] and apex.events[0]["actor"] == 0
    assert {"old": 2, "new": 3}.items() <= next(e for e in apex.events if e["event"] == "actors").items()
    assert seen.get("alive_at_one") == 1
    # The replay outlived the killed actor: it kept growing from what it held.
    assert apex.metrics[-1]["replay_size"] > seen["size_at_kill"]
    assert apex.actor_pids() == {} and apex.status == "stopped"
    time.sleep(0.5)
    assert live_children() - before == set(), "an actor or the replay process outlived the run"


@pytest.mark.slow
def test_apex_dqn_with_four_actors_solves_cartpole():
    # The recipe: 4 actors, at most 32 samples trained per transition (so the updates per env step
    # do not depend on this machine's speed). Stated: 475, the actor exploring least over its last
    # 10 episodes, within 40,000 learner updates of batch 64. Seen: 26k updates (103k env steps).
    recipe = APEX_RECIPES["apex-dqn-cartpole"]
    result = recipe.run(seed=0)
    last = result["rows"][-1]
    assert result["stopped"] == "target", last
    assert last["learner_updates"] <= 40_000, last
    assert len(last["per_actor"]) == 4 and all(a["transitions"] > 0 for a in last["per_actor"].values())
    explorations = [last["per_actor"][i]["exploration"] for i in range(4)]
    assert explorations == pytest.approx(actor_epsilons(4))


@pytest.mark.slow
def test_apex_dpg_solves_pendulum_within_20k_env_steps():
    # Ape-X DPG (Horgan et al. 2018, Sec. 3.2): the same actors and replay with a 3-step DDPG
    # learner; actors explore with Gaussian noise from 0.5 to 0.05 half-ranges. The learner keeps
    # one update of 128 per env step (min and max replay ratio 128), so the steps do not depend on
    # this machine's speed. Target: the last 20 episodes of all actors, noisy ones included.
    recipe = APEX_RECIPES["apex-dpg-pendulum"]
    result = recipe.run(seed=0)
    last = result["rows"][-1]
    assert result["stopped"] == "target" and result["steps_to_target"] <= 20_500, last
    scales = [last["per_actor"][i]["exploration"] for i in range(4)]
    assert scales == pytest.approx(actor_noise_scales(4))


@pytest.mark.slow
def test_apex_on_pong_feeds_frames_to_the_learner():
    config = ApexConfig(env_id="ALE/Pong-v5", agent=DQNConfig(batch_size=32, replay_capacity=10_000),
                        model_options=dict(dueling=True), num_actors=2, max_actors=2, learning_starts=300,
                        replay_capacity=10_000, seed=0)
    apex = Apex(config)
    apex.train(max_updates=10, max_seconds=240, log_interval=1.0)
    last = apex.metrics[-1]
    assert last["learner_updates"] == 10 and set(last["per_actor"]) == {0, 1}
    assert np.isfinite(last["losses/q"])
