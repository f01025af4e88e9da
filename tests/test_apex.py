"""Ape-X (Horgan et al. 2018): the roles one by one, then the whole run on local processes.

Both transports keep one contract, and a whole run on the Ray transport is checked there too
(test_apex_transports.py)."""

from __future__ import annotations

import os
import signal
from dataclasses import replace

import numpy as np
import pytest
import torch
from processes import live_children, wait_gone

from workbench.apex import (
    APEX_RECIPES,
    Apex,
    ApexActor,
    ApexConfig,
    ApexRecipe,
    ReplayServer,
    actor_epsilons,
    actor_noise_scales,
    make_learner,
)
from workbench.apex.exploration import returns_by_exploration
from workbench.apex.transports.local import SharedParameters
from workbench.learners import DQNConfig
from workbench.runs.checkpoints import load_checkpoint_file
from workbench.runs.evaluation import load_policy
from workbench.runs.records import load_metrics

CARTPOLE_LEARNER = dict(
    n_step=3,
    double=True,
    batch_size=64,
    learning_rate=1e-3,
    adam_eps=1e-8,
    target_update_interval=256,
    max_grad_norm=10.0,
)


def cartpole_config(**changes) -> ApexConfig:
    values = dict(
        env_id="CartPole-v1",
        learner=DQNConfig(**CARTPOLE_LEARNER),
        model_options=dict(dueling=True, hidden=(64, 64)),
        num_actors=2,
        learning_starts=500,
        seed=0,
    )
    values.update(changes)
    return ApexConfig(**values)


def pong_config(**changes) -> ApexConfig:
    """A small Ape-X on Pong: a replay of 10k frames, learning after 100."""
    values = dict(
        env_id="ALE/Pong-v5",
        learner=DQNConfig(batch_size=32),
        learning_starts=100,
        replay_capacity=10_000,
    )
    values.update(changes)
    return ApexConfig(**values)


def metric_rows(run) -> list[dict]:
    """The run's metric rows (its event rows left out)."""
    return [row for row in run.metrics if "event" not in row]


# --- per-actor exploration ------------------------------------------------------------------------


def test_actor_epsilons_follow_the_papers_formula():
    # Horgan et al. 2018, Sec. 4.1: eps_i = 0.4 ** (1 + 7 i / (N - 1)).
    eps = actor_epsilons(8)
    assert eps[0] == pytest.approx(0.4)
    assert eps[-1] == pytest.approx(0.4**8)
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
    n = config.learner.n_step
    transitions = block["transitions"]
    # The last n - 1 steps of each env wait for the next block to complete their windows.
    assert len(transitions["actions"]) <= 2 * (20 - (n - 1)) + 2 * n
    assert block["env_steps"] == 40 and block["actor"] == 1 and block["exploration"] == 0.3
    # Initial priority = |TD error| under the actor's own copy (Alg. 1): a literal recomputation.
    q = actor.policy.q_network  # it serves as its own target network (Alg. 1)
    obs = torch.as_tensor(transitions["obs"])
    next_obs = torch.as_tensor(transitions["next_obs"])
    with torch.no_grad():
        best = q(next_obs).argmax(1, keepdim=True)
        bootstrap = q(next_obs).gather(1, best).squeeze(1)
        target = (
            torch.as_tensor(transitions["returns"])
            + torch.as_tensor(transitions["discounts"]) * bootstrap
        )
        actions = torch.as_tensor(transitions["actions"]).long().unsqueeze(1)
        taken = q(obs).gather(1, actions).squeeze(1)
    np.testing.assert_allclose(
        block["priorities"], (target - taken).abs().numpy(), rtol=1e-5, atol=1e-6
    )
    actor.close()


def random_transitions(obs_shape: tuple, actions: torch.Tensor, n: int = 32) -> dict:
    generator = torch.Generator().manual_seed(0)
    return {
        "obs": torch.randn(n, *obs_shape, generator=generator),
        "actions": actions,
        "returns": torch.randn(n, generator=generator),
        "discounts": torch.full((n,), 0.97),
        "next_obs": torch.randn(n, *obs_shape, generator=generator),
    }


@pytest.mark.parametrize("algo, env_id", [("dqn", "CartPole-v1"), ("ddpg", "Pendulum-v1")])
def test_an_actor_builds_a_policy_not_a_learner_and_prioritizes_as_its_learner_would(
    one_thread, algo, env_id
):
    # Acting apart from learning: no optimizer on the actor's side, and the same |TD error| as
    # the learner computes from the parameters it publishes (Horgan et al. 2018, Alg. 1).
    config = ApexConfig(env_id=env_id, algorithm=algo, model_options=dict(hidden=(32, 32)))
    learner, actor = make_learner(config), config.apex_algorithm.make_actor(config)
    assert not any("optimizer" in name for name in vars(actor))
    actor.load_actor_state(learner.actor_state())
    n = 32
    if algo == "dqn":
        transitions = random_transitions((4,), torch.randint(0, 2, (n,)), n)
    else:
        transitions = random_transitions((3,), torch.rand(n, 1) * 4 - 2, n)
    torch.testing.assert_close(
        actor.initial_priorities(transitions), learner.initial_priorities(transitions)
    )


def test_actor_refreshes_parameters_only_after_the_sync_interval(one_thread):
    config = cartpole_config(block_steps=50, parameter_sync_frames=100)
    actor = ApexActor(config, index=0, exploration=0.1)
    assert actor.wants_parameters()
    learner = make_learner(config)
    actor.load_parameters(learner.actor_state(), version=2)
    assert not actor.wants_parameters()
    actor.collect()
    assert not actor.wants_parameters()  # 50 of 100 frames
    actor.collect()
    assert actor.wants_parameters()
    for key, value in learner.actor_state().items():
        torch.testing.assert_close(actor.policy.q_network.state_dict()[key], value)
    actor.close()


def test_atari_actor_sends_steps_for_frame_storage_with_a_priority_per_step(one_thread):
    config = pong_config(num_actors=2, max_actors=2, block_steps=10)
    actor = ApexActor(config, index=1, exploration=1.0)
    block = actor.collect()
    steps = block["steps"]
    assert steps["obs"].shape == (10, 1, 4, 84, 84) and steps["obs"].dtype == np.uint8
    assert steps["env_ids"].tolist() == [1]  # actor 1's env is stream 1 of the central storage
    # Windows that run past the block (no episode ends in 10 Pong steps) have no priority yet.
    n = config.learner.n_step
    assert np.isfinite(block["priorities"][: 10 - (n - 1)]).all()
    assert np.isnan(block["priorities"][10 - (n - 1) :]).all()
    actor.close()
    server = ReplayServer(config)
    server.add_block(block)
    assert len(server.replay) == 10 and type(server.replay.storage).__name__ == "FrameStorage"


def test_an_atari_actor_and_its_network_follow_the_configs_env_options(one_thread):
    # 42x42 frames without sticky actions: the settings PPO's Pong recipe learned with.
    options = dict(screen_size=42, repeat_action_probability=0.0)
    config = pong_config(
        model_options=dict(trunk="cnn-universe"),
        env_options=options,
        num_actors=1,
        max_actors=1,
        block_steps=5,
    )
    actor = ApexActor(config, index=0, exploration=1.0)
    block = actor.collect()
    actor.close()
    assert block["steps"]["obs"].shape == (5, 1, 4, 42, 42)
    q = make_learner(config).q_network
    assert q(torch.zeros(2, 4, 42, 42, dtype=torch.uint8)).shape == (2, 6)


# --- the central replay ---------------------------------------------------------------------------


def _block(actor: int, count: int, priorities, start: float = 0.0) -> dict:
    obs = np.arange(start, start + count, dtype=np.float32)[:, None].repeat(4, 1)
    return {
        "actor": actor,
        "env_steps": count,
        "episode_returns": [10.0 * actor],
        "exploration": 0.1,
        "parameter_version": 0,
        "transitions": {
            "obs": obs,
            "actions": np.zeros(count, np.int64),
            "returns": np.ones(count, np.float32),
            "discounts": np.full(count, 0.9, np.float32),
            "next_obs": obs + 1,
        },
        "priorities": np.asarray(priorities, dtype=np.float32),
    }


def test_replay_server_stores_blocks_with_the_actors_priorities():
    server = ReplayServer(cartpole_config(replay_capacity=100, learning_starts=64))
    server.add_block(_block(0, 3, [1.0, 2.0, 4.0]))
    alpha = server.config.priority_alpha
    p = (np.array([1.0, 2.0, 4.0]) + server.replay.eps) ** alpha
    np.testing.assert_allclose(server.replay._priorities[:3], p, rtol=1e-6)


def test_without_initial_priorities_new_transitions_enter_at_the_largest_priority_seen(
    one_thread,
):
    # The ablation of Horgan et al.'s actor-side priorities: Schaul et al. 2016's default instead.
    actor = ApexActor(cartpole_config(initial_priorities=False), index=0, exploration=0.3)
    block = actor.collect()
    actor.close()
    assert len(block["priorities"]) > 0 and np.isnan(block["priorities"]).all()
    server = ReplayServer(cartpole_config(replay_capacity=100, learning_starts=64))
    server.add_block(_block(0, 3, [1.0, 2.0, 4.0]))
    server.add_block(_block(1, 2, [np.nan, np.nan], start=3.0))
    p = (np.array([1.0, 2.0, 4.0, 4.0, 4.0]) + server.replay.eps) ** server.config.priority_alpha
    np.testing.assert_allclose(server.replay._priorities[:5], p, rtol=1e-6)


def test_an_annealed_schedule_gives_every_actor_one_epsilon_falling_with_all_their_steps():
    config = cartpole_config(
        num_actors=4, exploration_schedule="annealed", anneal_env_steps=10_000, block_steps=25
    )
    assert config.explorations(4) == [1.0] * 4  # not the ladder
    assert [config.annealed_epsilon(s) for s in (0, 5_000, 10_000, 50_000)] == pytest.approx(
        [1.0, 0.505, 0.01, 0.01]
    )
    actor = ApexActor(config, index=2, exploration=1.0)
    actor.collect()
    block = actor.collect()  # its 25 steps so far stand for 100 of the four actors'
    actor.close()
    assert block["exploration"] == pytest.approx(config.annealed_epsilon(100))


@pytest.mark.parametrize(
    "changes, fix",
    [
        (dict(exploration_schedule="cosine"), "'ladder' or 'annealed'"),
        (
            dict(exploration_schedule="annealed", algorithm="ddpg", env_id="Pendulum-v1"),
            "use 'ladder'",
        ),
    ],
)
def test_an_unknown_or_misplaced_exploration_schedule_names_the_fix(changes, fix):
    with pytest.raises(ValueError, match=fix):
        ApexConfig(**{**dict(env_id="CartPole-v1"), **changes})


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
    server = ReplayServer(
        cartpole_config(replay_capacity=1000, learning_starts=64, max_replay_ratio=1.5)
    )
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
    expected = (100.0 + server.replay.eps) ** 0.6
    assert server.replay._priorities[5] == pytest.approx(expected, rel=1e-5)


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


def test_unknown_transport_names_the_choices():
    with pytest.raises(ValueError, match="local"):
        replace(cartpole_config(), transport="mpi")


def test_dpg_on_a_discrete_env_says_use_dqn():
    with pytest.raises(ValueError, match="algorithm='dqn'"):
        make_learner(ApexConfig(env_id="CartPole-v1", algorithm="ddpg"))


def test_more_actors_than_max_actors_is_refused():
    with pytest.raises(ValueError, match="max_actors"):
        cartpole_config(num_actors=5, max_actors=4)
    apex = Apex(cartpole_config(max_actors=4))
    with pytest.raises(ValueError, match="max_actors"):
        apex.set_num_actors(5)


def test_a_gpu_learner_without_a_gpu_names_the_fix(no_gpu):
    with pytest.raises(ValueError, match="device='cpu'"):
        Apex(cartpole_config(), device="cuda")


def test_run_needs_a_limit():
    with pytest.raises(ValueError, match="updates"):
        Apex(cartpole_config()).run()


def test_the_exploiting_return_pools_every_actor_but_the_one_exploring_most():
    recent = {0: [-21.0] * 10, 1: [-10.0] * 4, 2: [-12.0] * 3, 3: [-14.0] * 2}
    assert returns_by_exploration(recent, [0, 1, 2, 3]) == (None, None)  # 9 games of 1-3, 2 of 3
    recent[3] = [-14.0] * 5
    least, pooled = returns_by_exploration(recent, [3, 1, 0, 2])
    assert least == -14.0 and pooled == pytest.approx((4 * -10 + 3 * -12 + 5 * -14) / 12)
    assert returns_by_exploration(recent, []) == (None, None)


def test_an_unknown_target_metric_names_the_choices():
    with pytest.raises(ValueError, match="apex/return_exploiting"):
        Apex(cartpole_config(), target_metric="apex/return")


# --- the whole run on local processes -------------------------------------------------------------


@pytest.mark.slow
def test_actors_are_added_removed_and_restarted_while_the_replay_keeps_its_data(tmp_path):
    before = live_children()
    apex = Apex(
        cartpole_config(num_actors=2, max_actors=4, learning_starts=200),
        runs_dir=tmp_path,
        log_interval=1.0,
    )
    seen: dict[str, object] = {}

    @apex.on_row
    def steer(row: dict) -> None:
        if "event" in row:
            return
        if "killed" not in seen and row["apex/replay_size"] > 0:
            pid = apex.actor_pids()[0]
            os.kill(pid, signal.SIGKILL)
            seen["killed"], seen["size_at_kill"] = pid, row["apex/replay_size"]
        elif "grown" not in seen and apex.actor_restarts.count:
            apex.set_num_actors(3)
            seen["grown"] = True
        elif (
            "shrunk" not in seen
            and "grown" in seen
            and row["charts/num_actors"] == 3
            and 2 in row["apex/per_actor"]
        ):
            apex.set_num_actors(1)
            seen["shrunk"] = True
        elif "shrunk" in seen and row["charts/num_actors"] == 1:
            seen["alive_at_one"] = len(apex.actor_pids())
            apex.stop()

    apex.run(seconds=150)
    kinds = [e["event"] for e in apex.events]
    assert kinds[:1] == ["actor_restart"] and apex.events[0]["actor"] == 0
    grown = next(e for e in apex.events if e["event"] == "settings")
    assert (grown["old"], grown["new"]) == ({"num_actors": 2}, {"num_actors": 3})
    assert seen.get("alive_at_one") == 1
    # The replay outlived the killed actor: it kept growing from what it held.
    assert metric_rows(apex)[-1]["apex/replay_size"] > seen["size_at_kill"]
    assert apex.actor_pids() == {} and apex.status == "stopped"
    left = wait_gone(list(live_children() - before))
    assert left == [], "an actor or the replay process outlived the run"


@pytest.mark.slow
def test_a_stopped_run_resumed_from_its_checkpoint_carries_on(tmp_path, one_thread):
    """The checkpoint holds the learner and the counters (not the replay: the actors refill it);
    ``Apex.from_checkpoint`` continues from them and appends to the same metrics file."""
    config = cartpole_config(num_actors=1, learning_starts=200)
    apex = Apex(config, runs_dir=tmp_path, log_interval=0.5)
    apex.run(updates=40, seconds=120)
    assert apex.ended_by == "updates" and apex.updates == 40 and apex.env_steps > 0
    saved = load_checkpoint_file(apex.dir)
    assert "not saved" in saved["state"]["replay"]
    assert (saved["updates"], saved["env_steps"]) == (apex.updates, apex.env_steps)

    recipe = ApexRecipe("cartpole", config, target_return=475.0, total_steps=10_000)
    through_recipe = recipe.make_run(1, resume_from=apex.dir)  # benchmarks/learning.py's way
    assert (through_recipe.config.seed, through_recipe.updates) == (1, apex.updates)
    assert through_recipe.metrics_path != apex.metrics_path  # a continuation of its own
    policy = load_policy(recipe, apex.dir)  # benchmarks/evaluate.py's: the learner's Q-network
    trained = apex.learner.model.q_network.state_dict()
    assert all(torch.equal(v, trained[k]) for k, v in policy.q_network.state_dict().items())
    resumed = Apex.from_checkpoint(apex.dir, log_interval=0.5)
    assert resumed.name == apex.name and resumed.metrics_path == apex.metrics_path
    assert (resumed.updates, resumed.env_steps) == (apex.updates, apex.env_steps)
    before, after = apex.learner.state_dict(), resumed.learner.state_dict()
    for part in ("model", "target"):
        assert before[part].keys() == after[part].keys()
        for key, value in before[part].items():
            torch.testing.assert_close(after[part][key], value)
    assert resumed.learner.num_updates == apex.learner.num_updates
    rows_before = len(metric_rows(apex))
    assert len(metric_rows(resumed)) == rows_before  # the saved rows, read back

    resumed.run(updates=apex.updates + 40, seconds=240)
    assert resumed.ended_by == "updates" and resumed.status == "finished"
    assert resumed.updates == apex.updates + 40 and resumed.env_steps > apex.env_steps
    headers, rows = load_metrics(apex.dir)
    assert len(headers) == 2 and headers[1]["resumed_from"] == str(apex.dir)
    assert (headers[1]["updates"], headers[1]["env_steps"]) == (apex.updates, apex.env_steps)
    rows = [row for row in rows if "event" not in row]
    assert len(rows) > rows_before
    new_rows = rows[rows_before:]
    # The learner waits while the actors refill the replay, then counts on from the saved updates.
    assert all(row["charts/updates"] >= apex.updates for row in new_rows)
    assert new_rows[-1]["charts/updates"] == resumed.updates
    assert new_rows[-1]["charts/env_steps"] == resumed.env_steps > apex.env_steps
    steps = [row["charts/env_steps"] for row in rows]
    assert steps == sorted(steps)  # one run, counting on
    assert load_checkpoint_file(resumed.dir)["updates"] == resumed.updates


@pytest.mark.slow
@pytest.mark.learns
def test_apex_dpg_solves_pendulum_within_20k_env_steps():
    # Ape-X DPG (Horgan et al. 2018, Sec. 3.2): the same actors and replay with a 3-step DDPG
    # learner; actors explore with Gaussian noise from 0.5 to 0.05 half-ranges. The learner keeps
    # one update of 128 per env step (min and max replay ratio 128), so the steps do not depend on
    # this machine's speed. Target: the last 20 episodes of all actors, noisy ones included.
    recipe = APEX_RECIPES["apex-dpg-pendulum"]
    result = recipe.run(seed=0)
    last = metric_rows(result["run"])[-1]
    assert result["stopped"] == "target" and result["steps_to_target"] <= 20_500, last
    scales = [last["apex/per_actor"][i]["exploration"] for i in range(4)]
    assert scales == pytest.approx(actor_noise_scales(4))


@pytest.mark.slow
def test_apex_on_pong_feeds_frames_to_the_learner(tmp_path):
    config = ApexConfig(
        env_id="ALE/Pong-v5",
        learner=DQNConfig(batch_size=32),
        model_options=dict(dueling=True),
        num_actors=2,
        max_actors=2,
        learning_starts=300,
        replay_capacity=10_000,
        seed=0,
    )
    apex = Apex(config, runs_dir=tmp_path, log_interval=1.0)

    @apex.on_row
    def both_fed(row: dict) -> None:
        # Wait for what is asserted: under load one actor may fill learning_starts alone before
        # the other's first block (a pass of benchmarks/repeat_tests.py saw only actor 1 by then).
        if "event" not in row and row["charts/updates"] >= 10 and len(row["apex/per_actor"]) == 2:
            apex.stop()

    apex.run(seconds=240)
    last = metric_rows(apex)[-1]
    assert apex.status == "stopped", f"no 10 updates from both actors within 240 s: {last}"
    assert last["charts/updates"] >= 10 and set(last["apex/per_actor"]) == {0, 1}
    assert np.isfinite(last["losses/q"])
