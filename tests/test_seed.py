"""SEED RL's learner side: trajectories assembled from the server's steps, the IMPALA (V-trace)
learner on them, and whole runs through the central server (stopped, resumed, steered). The
recipe's learning claim (475 within 300k env steps) is notebook 07's checked cell."""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
import torch
from devices import ON_CUDA
from processes import wait_gone

from workbench.learners import IMPALA, IMPALAConfig
from workbench.models import ActorCritic
from workbench.runs.records import load_metrics
from workbench.seed import (
    SEED_RECIPES,
    EpisodeLog,
    Seed,
    SeedConfig,
    SeedLearning,
    SerialActors,
    TrajectoryAssembler,
    make_learning,
    stack_windows,
)
from workbench.seed.env_actors import EPISODE_DONE, FIRST, TERMINATED, TRUNCATED
from workbench.seed.placement import PLACES, LearnerHost, make_host
from workbench.seed.server import Backpressure, StepBatch
from workbench.seed.transports import TRANSPORTS


def step(slots, obs, reward=0.0, flags=0, actions=None, final_obs=None, episode_return=0.0):
    slots = np.asarray(slots)
    n = len(slots)
    obs = np.asarray(obs, np.float32).reshape(n, 1)
    return StepBatch(
        slots=slots,
        obs=obs,
        reward=np.full(n, reward, np.float32),
        flags=np.full(n, flags, np.uint8),
        final_obs=obs if final_obs is None else np.asarray(final_obs, np.float32).reshape(n, 1),
        episode_return=np.full(n, episode_return),
        episode_length=np.zeros(n, np.int64),
        actions=np.asarray(actions if actions is not None else np.zeros(n), np.int64),
        extras={"logp": np.full(n, -0.5, np.float32)},
        state=None,
    )


def metric_rows(run) -> list[dict]:
    """The run's metric rows (its event rows left out)."""
    return [row for row in run.metrics if "event" not in row]


def test_a_window_pairs_each_step_with_the_reward_that_followed_it():
    assembler = TrajectoryAssembler(num_slots=1, length=4, period=3)
    assembler.on_step(step([0], [0.0], flags=FIRST, actions=[10]))
    for t in range(1, 4):  # the request of step t carries the reward of step t - 1's action
        assembler.on_step(step([0], [t], reward=t * 100.0, actions=[10 + t]))
    [window] = assembler.take(1, timeout=0)
    assert window["obs"][:, 0].tolist() == [0, 1, 2, 3]
    assert window["actions"].tolist() == [10, 11, 12, 13]
    assert window["rewards"][:3].tolist() == [100, 200, 300]
    assert window["first"].tolist() == [True, False, False, False]


def test_unrolls_overlap_by_their_bootstrap_row():
    assembler = TrajectoryAssembler(num_slots=2, length=3, period=2)
    for t in range(5):
        assembler.on_step(step([0, 1], [t, 10 + t], reward=1.0))
    first, second, third, fourth = assembler.take(4, timeout=0)
    assert first["obs"][:, 0].tolist() == [0, 1, 2] and third["obs"][:, 0].tolist() == [2, 3, 4]
    assert second["slot"] == 1 and fourth["obs"][:, 0].tolist() == [12, 13, 14]
    assert assembler.take(1, timeout=0) is None


def test_episode_ends_are_marked_on_the_row_they_end_and_truncations_keep_the_final_obs():
    assembler = TrajectoryAssembler(num_slots=1, length=4, period=3)
    assembler.on_step(step([0], [0.0], flags=FIRST))
    assembler.on_step(step([0], [1.0], reward=1.0, flags=FIRST | TERMINATED | EPISODE_DONE))
    assembler.on_step(
        step([0], [2.0], reward=1.0, flags=FIRST | TRUNCATED | EPISODE_DONE, final_obs=[99.0])
    )
    assembler.on_step(step([0], [3.0], reward=1.0))
    [window] = assembler.take(1, timeout=0)
    assert window["terminated"][:3].tolist() == [True, False, False]
    assert window["truncated"][:3].tolist() == [False, True, False]
    assert window["first"].tolist() == [True, True, True, False]
    assert window["final_obs"][1, 0] == 99.0


def test_windows_for_a_learner_that_masks_truncations_keep_no_final_observations():
    assembler = TrajectoryAssembler(num_slots=1, length=3, period=2, final_obs=False)
    assembler.on_step(step([0], [0.0], flags=FIRST))
    assembler.on_step(step([0], [1.0], flags=FIRST | TRUNCATED | EPISODE_DONE, final_obs=[9.0]))
    assembler.on_step(step([0], [2.0]))
    [window] = assembler.take(1, timeout=0)
    assert "final_obs" not in window and window["truncated"][:2].tolist() == [True, False]


def test_a_restarted_actor_drops_its_half_assembled_window():
    assembler = TrajectoryAssembler(num_slots=1, length=3, period=2)
    assembler.on_step(step([0], [0.0]))
    assembler.on_step(step([0], [1.0]))
    assembler.on_restart(np.array([0]))
    for t in (5.0, 6.0, 7.0):
        assembler.on_step(step([0], [t]))
    [window] = assembler.take(1, timeout=0)
    assert window["obs"][:, 0].tolist() == [5, 6, 7]


def test_windows_stack_time_major_with_the_state_per_window():
    windows = [{"obs": np.zeros((5, 3)), "state_h": np.ones(8), "slot": i} for i in range(2)]
    batch = stack_windows(windows)
    assert batch["obs"].shape == (5, 2, 3) and batch["state_h"].shape == (2, 8)
    assert stack_windows(windows, time_major=False)["obs"].shape == (2, 5, 3)


def test_the_episode_log_keeps_returns_per_slot():
    log = EpisodeLog()
    log.on_step(step([0, 1], [0, 0], flags=EPISODE_DONE, episode_return=7.0))
    log.on_step(step([1], [0], flags=0, episode_return=99.0))
    assert log.mean(slot=1) == 7.0 and log.episodes == 2 and log.mean(minimum=3) is None


def test_the_episode_log_pools_an_actors_envs_in_the_order_their_games_end():
    # R2D2's target: the actor exploring least, its envs' last games together (Ape-X's metric)
    log = EpisodeLog(envs_per_actor=2)
    log.on_step(step([2], [0], flags=EPISODE_DONE, episode_return=1.0))  # actor 1, env 0
    log.on_step(step([3, 0], [0, 0], flags=EPISODE_DONE, episode_return=3.0))  # actors 1 and 0
    log.on_step(step([2], [0], flags=EPISODE_DONE, episode_return=5.0))
    assert log.mean(actor=1) == 3.0 and log.mean(2, actor=1) == 4.0 and log.mean(actor=0) == 3.0
    assert log.mean(actor=2) is None
    with pytest.raises(ValueError, match="slot or actor"):
        log.mean(slot=2, actor=1)


def _unroll_batch(T=4, B=2, truncated_at=None):
    rng = np.random.default_rng(0)
    batch = {
        "obs": rng.normal(size=(T + 1, B, 4)).astype(np.float32),
        "final_obs": rng.normal(size=(T + 1, B, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, size=(T + 1, B)),
        "logp": np.full((T + 1, B), np.log(0.5), np.float32),
        "rewards": np.ones((T + 1, B), np.float32),
        "terminated": np.zeros((T + 1, B), bool),
        "truncated": np.zeros((T + 1, B), bool),
    }
    if truncated_at is not None:
        batch["truncated"][truncated_at, 0] = True
    return batch


def test_the_impala_learner_bootstraps_a_truncated_step_from_its_final_observation():
    torch.manual_seed(0)
    batch = _unroll_batch(truncated_at=1)
    model = ActorCritic((4,), 2)
    metrics = IMPALA(model, IMPALAConfig()).update(batch)
    assert np.isfinite(metrics["losses/total"])
    moved = dict(batch, final_obs=batch["final_obs"] + 5.0)  # only row 1 of env 0 is read
    torch.manual_seed(0)
    again = IMPALA(ActorCritic((4,), 2), IMPALAConfig()).update(moved)
    assert again["losses/value"] != metrics["losses/value"]
    untouched = dict(
        batch,
        final_obs=batch["final_obs"] + np.where(batch["truncated"][..., None], 0.0, 5.0),
    )
    torch.manual_seed(0)
    same = IMPALA(ActorCritic((4,), 2), IMPALAConfig()).update(untouched.copy())
    assert same["losses/value"] == pytest.approx(metrics["losses/value"])


@pytest.mark.parametrize("device", ["cpu", ON_CUDA])
def test_a_bfloat16_channels_last_impala_update_takes_the_float32_step_up_to_rounding(device):
    # The policy gradients' precision levers for SEED's V-trace learner on Atari frames (issue 25);
    # the cuda case runs where a GPU is lent (tests/scripts/gpu_checks.sh quick).
    T, B = 5, 4
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(T + 1, B, 4, 42, 42), dtype=np.uint8)
    batch = {
        "obs": frames,
        "final_obs": frames,
        "actions": rng.integers(0, 6, size=(T + 1, B)),
        "logp": np.full((T + 1, B), np.log(1 / 6), np.float32),
        "rewards": rng.choice([-1.0, 0.0, 1.0], size=(T + 1, B)).astype(np.float32),
        "terminated": np.zeros((T + 1, B), bool),
        "truncated": np.zeros((T + 1, B), bool),
    }
    torch.manual_seed(0)
    model = ActorCritic((4, 42, 42), 6, trunk="cnn-universe")
    fast_model = copy.deepcopy(model)
    plain = IMPALA(model, IMPALAConfig(), device=device).update(batch)
    fast_config = IMPALAConfig(autocast="bfloat16", channels_last=True)
    fast = IMPALA(fast_model, fast_config, device=device).update(batch)
    conv = next(m for m in fast_model.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    for key in ("losses/policy", "losses/value", "losses/entropy"):
        assert fast[key] == pytest.approx(plain[key], rel=0.05, abs=1e-3), key


def test_a_compiled_impala_update_takes_the_eager_step_up_to_rounding():
    batch = _unroll_batch(T=6, B=3)
    torch.manual_seed(0)
    model = ActorCritic((4,), 2)
    compiled_model = copy.deepcopy(model)
    eager = IMPALA(model, IMPALAConfig()).update(batch)
    fused = IMPALA(compiled_model, IMPALAConfig(compile=True)).update(batch)
    for key in ("losses/policy", "losses/value", "losses/entropy", "losses/grad_norm"):
        assert fused[key] == pytest.approx(eager[key], rel=1e-4, abs=1e-6), key
    for a, b in zip(model.parameters(), compiled_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_a_server_acting_while_the_compiled_learner_compiles_waits_instead_of_failing():
    # Compiling traces the model, which patches Module.__call__ for every thread: a forward pass
    # of the server's during it failed with "module is not installed as a submodule". So the
    # server waits for the lock through the compiling (most of the first update), and acts between
    # every later update.
    lock = threading.RLock()
    torch.manual_seed(0)
    model = ActorCritic((4,), 2)
    learner = IMPALA(model, IMPALAConfig(compile=True), lock=lock)
    obs, errors, acted, stop = torch.zeros(8, 4), [], [], threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                with lock:
                    model.act(obs)
                acted.append(time.perf_counter())
            except Exception as error:  # noqa: BLE001 (kept for the assert)
                errors.append(error)
                return
            time.sleep(0.0005)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    while not acted:
        time.sleep(0.001)
    try:
        started = time.perf_counter()
        learner.update(_unroll_batch(T=6, B=3))
        compiling = time.perf_counter() - started
        learner.update(_unroll_batch(T=6, B=3))
        # A model this process compiled before updates in milliseconds: give the server its turn
        # (a server stuck behind the lock, or failed, still misses it).
        deadline = time.perf_counter() + 5.0
        while acted[-1] <= started + compiling and time.perf_counter() < deadline and not errors:
            time.sleep(0.001)
    finally:
        stop.set()
        server.join(timeout=10)
    assert not errors, errors
    longest_wait = max(b - a for a, b in zip(acted, acted[1:]))
    assert longest_wait > 0.3 * compiling, (longest_wait, compiling)
    assert acted[-1] > started + compiling, "the server did not act again after the compiling"


def test_the_learning_rate_falls_linearly_to_zero_over_anneal_updates_and_resumes_there():
    # IMPALA anneals its rate to 0 over the run (Espeholt et al. 2018, App. G): 4 updates at
    # 1e-3 take 1e-3, 7.5e-4, 5e-4, 2.5e-4, and a learner restored after 2 goes on at 5e-4.
    config = IMPALAConfig(learning_rate=1e-3, anneal_updates=4)
    learner = IMPALA(ActorCritic((4,), 2), config)
    rates = [learner.update(_unroll_batch())["charts/learning_rate"] for _ in range(4)]
    assert rates == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])
    assert learner.learning_rate == 0.0
    resumed = IMPALA(ActorCritic((4,), 2), config)
    fresh = IMPALA(ActorCritic((4,), 2), config)
    fresh.update(_unroll_batch())
    fresh.update(_unroll_batch())
    resumed.load_state_dict(fresh.state_dict())
    assert resumed.update(_unroll_batch())["charts/learning_rate"] == pytest.approx(5e-4)


def test_a_constant_rate_is_the_default_and_a_bad_anneal_names_the_fix():
    learner = IMPALA(ActorCritic((4,), 2), IMPALAConfig(learning_rate=1e-3))
    assert [learner.update(_unroll_batch())["charts/learning_rate"] for _ in range(2)] == [1e-3] * 2
    with pytest.raises(ValueError, match="anneal_updates must be a positive int"):
        IMPALAConfig(anneal_updates=0)


def test_the_impala_learner_refuses_a_batch_without_behaviour_log_probabilities():
    batch = _unroll_batch()
    del batch["logp"]
    with pytest.raises(ValueError, match="logp"):
        IMPALA(ActorCritic((4,), 2)).update(batch)


def test_on_policy_unrolls_have_importance_weights_of_one():
    torch.manual_seed(0)
    model = ActorCritic((4,), 2)
    batch = _unroll_batch()
    with torch.no_grad():
        logits, _ = model(torch.as_tensor(batch["obs"]))
        actions = torch.as_tensor(batch["actions"])[..., None]
        batch["logp"] = torch.log_softmax(logits, -1).gather(-1, actions)[..., 0].numpy()
    metrics = IMPALA(model).update(batch)
    assert metrics["charts/mean_rho"] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(algorithm="a3c"), "algorithm"),
        (dict(transport="grpc"), "transport"),
        (dict(num_actors=0), "num_actors"),
        (dict(num_actors=4, max_actors=2), "max_actors"),
        (dict(replay_ratio=0.5), "at least 1 for V-trace"),
        (dict(replay_unrolls=0), "replay_unrolls"),
    ],
)
def test_bad_seed_configs_name_the_fix(bad, match):
    with pytest.raises(ValueError, match=match):
        SeedConfig(**bad)


def test_a_replay_ratio_of_two_learns_each_unroll_twice_in_half_the_env_steps(tmp_path):
    # seed-vtrace-cartpole: B = 8 unrolls of T = 5 steps. Each unroll learned once, an update takes
    # 40 env steps; at ratio 2 it takes 4 fresh unrolls (20 env steps) and replays 4 earlier ones.
    config = replace(SEED_RECIPES["seed-vtrace-cartpole"].config, transport="serial")
    once = Seed(config, runs_dir=tmp_path, log_interval=60.0)
    once.run(env_steps=4000)
    twice = Seed(replace(config, replay_ratio=2.0), runs_dir=tmp_path, log_interval=60.0)
    twice.run(env_steps=4000)
    assert once.updates == pytest.approx(4000 / 40, abs=2)
    assert twice.updates == pytest.approx(4000 / 20, abs=3)
    learned = twice.learning.windows_learned.sum()  # fresh unrolls: each counted once
    assert learned == pytest.approx(twice.learning.assembler.windows_made, abs=8)
    assert metric_rows(twice)[-1]["seed/replayed_fraction"] == 0.5


def watch_the_lock_in_updates(learning: SeedLearning) -> list[bool]:
    """Wraps the learner's update: for each update, whether another thread (the server's) could
    not take the server's lock while it ran, appended to the list returned."""
    seen: list[bool] = []
    update = learning.learner.update

    def watched(batch):
        free = []

        def probe():
            if learning.lock.acquire(blocking=False):
                learning.lock.release()
                free.append(True)

        thread = threading.Thread(target=probe)
        thread.start()
        thread.join()
        seen.append(not free)
        return update(batch)

    learning.learner.update = watched
    return seen


@pytest.mark.parametrize("ratio, held", [(2.0, [True, False, False]), (1.0, [False, False])])
def test_a_v_trace_learner_owing_updates_holds_the_server_through_its_update(ratio, held):
    # 4 CartPole envs queue 20 unrolls (T = 5). At ratio 2 an update takes 4 fresh ones once the
    # replay holds 4 (the first takes 8): after the first, 12 wait, 3 updates' worth (> 2), so
    # the server waits for it; after the next two, 8 and 4. At ratio 1 (two updates of 8) the
    # learner never holds it.
    config = replace(SEED_RECIPES["seed-vtrace-cartpole"].config, replay_ratio=ratio)
    learning = make_learning(config)
    with SerialActors(learning.server, config.env_id, num_envs=4, seed=0) as actors:
        while learning.assembler.queued < 20:
            actors.step()
    seen = watch_the_lock_in_updates(learning)
    for _ in range(3):
        learning.learn(0.0)
    assert seen == held


@pytest.mark.parametrize(
    "ratio, queued, calls, keeps_up", [(16.0, 100, 2, False), (1.0, 40, 1, True)]
)
def test_an_r2d2_learner_behind_stores_a_batch_a_call_and_the_server_waits_not_the_lock(
    ratio, queued, calls, keeps_up
):
    # seed-r2d2-cartpole-novelocity: batches of 32, 64 sequences before the first update, a slack
    # of 2 batches. At its ratio of 16, 100 queued sequences owe 1,600 samples: the learner stores
    # 32 at a time (the second call ends the warm-up and trains) and stays behind, so the server
    # would wait; at ratio 1 with 32 to warm up, 40 queued owe 40, within the slack of 64. Either
    # way the learner's update leaves the server's lock free for the forward pass.
    config = SEED_RECIPES["seed-r2d2-cartpole-novelocity"].config
    if ratio == 1.0:
        config = replace(config, replay_ratio=1.0, min_replay_sequences=32)
    learning = make_learning(config)
    learning.server.backpressure.notify()  # this thread is the learner's, as in a serial run
    with SerialActors(learning.server, config.env_id, num_envs=4, seed=0) as actors:
        while learning.assembler.queued < queued:
            actors.step()
    waiting = learning.assembler.queued
    assert learning.server.backpressure.waited_seconds == 0.0
    seen = watch_the_lock_in_updates(learning)
    for _ in range(calls):
        learning.learn(0.0)
    assert seen == [False] * learning.updates and learning.updates == 1
    assert learning.assembler.queued == waiting - 32 * calls  # a batch stored per call
    assert learning.keeps_up() is keeps_up


def wait_in_a_thread(backpressure: Backpressure) -> tuple[threading.Thread, list[float]]:
    """``backpressure.wait()`` in a new thread (a server's); the list gets its seconds waited."""
    waited: list[float] = []

    def server() -> None:
        started = time.monotonic()
        backpressure.wait()
        waited.append(time.monotonic() - started)

    thread = threading.Thread(target=server)
    thread.start()
    return thread, waited


def test_backpressure_holds_the_server_until_the_learner_catches_up_and_notifies():
    behind = [True]
    backpressure = Backpressure(lambda: not behind[0], max_wait=30.0)
    thread, waited = wait_in_a_thread(backpressure)
    thread.join(timeout=0.3)
    assert thread.is_alive()  # held while the learner is behind
    behind[0] = False
    backpressure.notify()
    thread.join(timeout=5.0)
    assert not thread.is_alive() and 0.3 <= waited[0] < 5.0
    assert backpressure.waited_seconds == pytest.approx(waited[0], abs=0.05)


def test_backpressure_never_holds_the_server_longer_than_max_wait():
    backpressure = Backpressure(lambda: False, max_wait=0.2)  # a learner that never catches up
    thread, waited = wait_in_a_thread(backpressure)
    thread.join(timeout=5.0)
    assert not thread.is_alive() and 0.2 <= waited[0] < 2.0


def test_backpressure_never_holds_the_learners_own_thread():
    # The serial transport steps the envs in the learner's thread: waiting there would wait on
    # itself.
    backpressure = Backpressure(lambda: False, max_wait=30.0)
    backpressure.notify()  # the learner's thread, from its first update on
    started = time.monotonic()
    backpressure.wait()
    assert time.monotonic() - started < 1.0 and backpressure.waited_seconds == 0.0


def test_a_serial_seed_run_is_deterministic(tmp_path):
    config = replace(SEED_RECIPES["seed-vtrace-cartpole"].config, transport="serial")
    first = metric_rows(Seed(config, runs_dir=tmp_path, log_interval=60.0).run(env_steps=2000))
    second = metric_rows(Seed(config, runs_dir=tmp_path, log_interval=60.0).run(env_steps=2000))
    first, second = first[-1], second[-1]
    assert first["losses/total"] == second["losses/total"]
    assert first["charts/updates"] == second["charts/updates"] > 0


def test_a_stopped_seed_run_resumed_from_its_checkpoint_carries_on(tmp_path):
    """V-trace on CartPole (serial): the checkpoint holds the counters and the weights, and the
    resumed run goes on from them, appending to the same metrics file."""
    config = replace(SEED_RECIPES["seed-vtrace-cartpole"].config, transport="serial")
    seed = Seed(config, runs_dir=tmp_path, log_interval=0.5)
    seed.run(env_steps=1000)
    assert seed.ended_by == "env_steps" and seed.updates > 0
    headers, rows = load_metrics(seed.metrics_path)
    assert len(headers) == 1 and rows

    resumed = Seed.from_checkpoint(seed.dir)
    assert resumed.name == seed.name and resumed.metrics_path == seed.metrics_path
    assert resumed.updates == seed.updates == resumed.learner.num_updates
    assert resumed.env_steps == seed.env_steps >= 1000
    weights, saved = resumed.model.state_dict(), seed.model.state_dict()
    assert weights.keys() == saved.keys()
    assert all(torch.equal(weights[k], saved[k]) for k in saved)
    assert resumed.metrics == rows  # the rows so far, read back

    resumed.run(env_steps=2000)
    assert resumed.env_steps >= 2000 and resumed.updates > seed.updates
    assert resumed.updates == resumed.learner.num_updates
    headers_after, rows_after = load_metrics(seed.metrics_path)
    assert len(headers_after) == 2 and headers_after[1]["resumed_from"] == str(seed.dir)
    assert headers_after[1]["env_steps"] == seed.env_steps
    assert rows_after[: len(rows)] == rows and len(rows_after) > len(rows)
    new = [row for row in rows_after[len(rows) :] if "event" not in row]
    assert new and all(row["charts/env_steps"] > seed.env_steps for row in new)
    assert new[-1]["charts/updates"] == resumed.updates
    assert new[0]["charts/iteration"] == rows[-1]["charts/iteration"] + 1


def test_a_recipe_continues_a_seed_checkpoint_at_the_seed_it_is_given(tmp_path):
    """``SeedRecipe.make_run(seed, resume_from=...)`` (``benchmarks/learning.py --resume-from``):
    the checkpoint's learner and counters, but that seed's envs, under a metrics file of its own.
    Continuations at two seeds differ; before, each kept the saved seed and repeated the other."""
    recipe = replace(
        SEED_RECIPES["seed-vtrace-cartpole"],
        config=replace(SEED_RECIPES["seed-vtrace-cartpole"].config, transport="serial"),
    )
    first = recipe.make_run(0, runs_dir=tmp_path)
    first.run(env_steps=1000)

    def continued(seed, name):
        run = recipe.make_run(seed, runs_dir=tmp_path, name=name, resume_from=first.dir)
        assert run.config.seed == seed and run.metrics_path != first.metrics_path
        assert (run.updates, run.env_steps) == (first.updates, first.env_steps)
        run.log_interval = 60.0
        return metric_rows(run.run(env_steps=2000))[-1]["losses/total"]

    at_one, again_at_one, at_two = continued(1, "a"), continued(1, "b"), continued(2, "c")
    assert at_one == again_at_one  # the seed, not chance, makes the difference
    assert at_one != at_two


def test_actors_are_added_while_a_seed_run_goes(tmp_path):
    config = replace(SEED_RECIPES["seed-vtrace-cartpole"].config, num_actors=1, max_actors=2)
    run = Seed(config, runs_dir=tmp_path, log_interval=0.2).start(seconds=120)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not metric_rows(run) or metric_rows(run)[-1]["charts/env_steps"] < 500:
            assert time.monotonic() < deadline and run.error is None
            time.sleep(0.1)
        run.set_num_actors(2)
        while len(run.actor_pids()) < 2:
            assert time.monotonic() < deadline and run.error is None
            time.sleep(0.1)
        pids = run.actor_pids()
    finally:
        run.stop()
    assert [e["new"] for e in run.events if e["event"] == "settings"] == [{"num_actors": 2}]
    assert run.status == "stopped" and run.actor_pids() == []
    assert wait_gone(pids) == [], "an env actor outlived the run"


def test_the_seed_panel_steers_actors_and_the_servers_batch_live(tmp_path):
    from processes import live_children

    from workbench.lab.system_panels import SeedPanel

    before = live_children()
    config = replace(SEED_RECIPES["seed-vtrace-cartpole"].config, num_actors=1, max_actors=2)
    run = Seed(config, runs_dir=tmp_path)
    panel = SeedPanel(run, limits={"seconds": 120})
    assert panel.actors.max == 2 and panel.batch.value == 2 and panel.batch.max == 2
    panel.start()
    try:
        deadline = time.monotonic() + 90
        while not metric_rows(run) or metric_rows(run)[-1]["charts/updates"] == 0:
            assert time.monotonic() < deadline and run.error is None
            time.sleep(0.1)
        panel.batch.value = (
            1  # what a drag of the slider does: the server reads it before each batch
        )
        assert run.server.max_batch_size == 1
        panel.actors.value = 2
        while len(run.actor_pids()) < 2:
            assert time.monotonic() < deadline and run.error is None
            time.sleep(0.1)
        panel.buttons["stop"].click()
        run.wait(timeout=60)
    finally:
        run.stop()
    panel._watcher.join(10)
    panel.refresh()
    assert run.status == "stopped" and "stopped" in panel.status.value
    changes = sorted((e["event"], e["old"], e["new"]) for e in panel.events)
    assert changes == [("batch", 2, 1), ("settings", {"num_actors": 1}, {"num_actors": 2})]
    assert len(panel.server_figure.layout.shapes) == 2  # both changes, as dashed lines
    assert wait_gone(list(live_children() - before)) == [], "an env actor outlived the run"


def test_the_seed_panels_actors_slider_reaches_the_runs_actor_limit(tmp_path):
    """By default a run may grow to ``config.actor_limit`` actors (16), more than it starts with;
    the slider reaches it, and moving it past the start count asks the run for more actors."""
    from workbench.lab.system_panels import SeedPanel

    config = replace(SEED_RECIPES["seed-vtrace-cartpole"].config, num_actors=2)
    run = Seed(config, runs_dir=tmp_path)
    assert config.max_actors is None and config.actor_limit == 16
    panel = SeedPanel(run, limits={"seconds": 120})
    assert panel.actors.max == config.actor_limit > panel.actors.value == 2
    assert not panel.actors.disabled
    panel.actors.value = 5
    assert run.settings.current.num_actors == 5  # applied by the loop at its next step
    assert "asked for 5 actors" in panel.message.value
    panel.actors.value = config.actor_limit
    assert run.settings.current.num_actors == config.actor_limit
    assert run.status == "created" and run.actor_pids() == []


@pytest.mark.parametrize("transport", ["serial", "local", "ray"])
def test_every_transport_places_its_learner_on_a_host_the_run_drives_by_one_interface(transport):
    # The run never asks which transport it has: the host (this process, or a Ray actor) and the
    # actors come from the transport's row of placement.PLACES, and each host keeps LearnerHost.
    config = replace(SEED_RECIPES["seed-vtrace-cartpole"].config, transport=transport)
    host = make_host(config)
    assert isinstance(host, LearnerHost)
    assert (host.learning is None) == (transport == "ray")
    assert set(PLACES) == set(TRANSPORTS)
