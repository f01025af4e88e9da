"""The central inference server (SEED RL, Espeholt et al. 2020, Sec. 3): batching, per-slot
recurrent state, latency records, the local transport and how it fails."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from processes import live_children, wait_gone

from workbench.models import ActorCritic
from workbench.seed.env_actors import (
    EPISODE_DONE,
    FIRST,
    REJECTED,
    REPLY,
    REQUEST,
    TERMINATED,
    TRUNCATED,
    InferenceClient,
    ServerStopped,
    SharedSlots,
    request_flags,
)
from workbench.seed.server import InferenceServer, SampledPolicy
from workbench.seed.transports.local import LocalActors
from workbench.seed.transports.serial import SerialActors

HOLDER = Path(__file__).parent / "scripts" / "hold_seed.py"


class CountingPolicy:
    """A recurrent policy whose state counts each slot's steps since its episode began; the action
    is that count, so a test reads the server's state from the actions."""

    def initial_state(self, batch_size, device):
        return (torch.zeros(batch_size, 1, device=device),)

    def step(self, obs, state, first, slots):
        count = state[0] + 1
        return count[:, 0].long(), (count,), {"echo": obs[:, 0].clone()}


def test_one_forward_pass_answers_every_request_in_a_batch():
    calls = []

    class Recording(CountingPolicy):
        def step(self, obs, state, first, slots):
            calls.append(len(obs))
            return super().step(obs, state, first, slots)

    server = InferenceServer(Recording(), max_batch_size=8)
    server.reset_slots(8)
    actions = server.infer(
        np.arange(5),
        np.zeros((5, 3), np.float32),
        np.zeros(5, np.float32),
        np.full(5, FIRST, np.uint8),
    )
    assert calls == [5] and actions.tolist() == [1] * 5


def test_recurrent_state_is_kept_per_slot_and_reset_when_an_episode_starts():
    server = InferenceServer(CountingPolicy(), max_batch_size=4)
    server.reset_slots(3)
    obs, reward = np.zeros((2, 1), np.float32), np.zeros(2, np.float32)
    none = np.zeros(2, np.uint8)
    assert server.infer(np.array([0, 1]), obs, reward, none).tolist() == [1, 1]
    assert server.infer(np.array([0, 2]), obs, reward, none).tolist() == [2, 1]
    starts = np.array([0, FIRST], np.uint8)  # slot 0 starts an episode: its state resets
    assert server.infer(np.array([1, 0]), obs, reward, starts).tolist() == [2, 1]
    server.restart(np.array([1]))
    assert server.infer(np.array([1]), obs[:1], reward[:1], none[:1]).tolist() == [1]


def test_a_non_finite_observation_is_rejected_alone():
    seen = []

    class Recording(CountingPolicy):
        def step(self, obs, state, first, slots):
            seen.append(slots.tolist())
            return super().step(obs, state, first, slots)

    server = InferenceServer(Recording(), max_batch_size=4)
    server.reset_slots(3)
    obs = np.array([[0.0], [np.nan], [1.0]], np.float32)
    actions = server.infer(np.arange(3), obs, np.zeros(3, np.float32), np.zeros(3, np.uint8))
    assert actions.tolist() == [1, REJECTED, 1] and seen == [[0, 2]]


def test_latency_stats_report_percentiles_and_batch_sizes():
    server = InferenceServer(CountingPolicy(), max_batch_size=4)
    server.reset_slots(4)
    sent = time.perf_counter() - np.array([0.001, 0.002, 0.003, 0.004])
    server.infer(
        np.arange(4),
        np.zeros((4, 1), np.float32),
        np.zeros(4, np.float32),
        np.zeros(4, np.uint8),
        sent_at=sent,
    )
    stats = server.stats()
    assert stats["requests"] == 4 and stats["batches"] == 1 and stats["max_batch_size_reached"] == 4
    assert 1.0 <= stats["queue_wait_p50_ms"] <= stats["queue_wait_p99_ms"] < 1000
    assert stats["latency_p99_ms"] >= stats["queue_wait_p99_ms"]


@pytest.mark.parametrize(
    "bad", [dict(max_batch_size=0), dict(max_batch_size=2.5), dict(timeout=-1.0)]
)
def test_bad_server_settings_name_the_fix(bad):
    kwargs = dict(max_batch_size=4, timeout=0.001) | bad
    with pytest.raises(ValueError, match="max_batch_size|timeout"):
        InferenceServer(CountingPolicy(), **kwargs)


def test_request_flags_mark_the_next_episode_start():
    flags = request_flags(
        np.array([True, False, False]),
        np.array([False, True, False]),
        np.array([True, True, False]),
    )
    assert flags.tolist() == [
        FIRST | TERMINATED | EPISODE_DONE,
        FIRST | TRUNCATED | EPISODE_DONE,
        0,
    ]


def test_serial_actors_step_every_env_through_the_server():
    torch.manual_seed(0)
    server = InferenceServer(SampledPolicy(ActorCritic((4,), 2)), max_batch_size=4)
    with SerialActors(server, "CartPole-v1", 4, seed=0) as actors:
        for _ in range(50):
            actors.step()
    assert actors.steps == 200 and server.stats()["requests"] == 200


# --- the client's side of the local transport ----------------------------------------------------


def _client(num_slots=2):
    slots = SharedSlots.allocate(multiprocessing.get_context("spawn"), num_slots, (3,), np.float32)
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    client = InferenceClient(slots, np.arange(num_slots), 1, request_write, reply_read)
    return slots, client, request_read, reply_write


def test_a_malformed_observation_is_refused_before_it_is_sent():
    _, client, request_read, _ = _client()
    with pytest.raises(ValueError, match=r"malformed observation.*float32 \(2, 3\)"):
        client.step(np.zeros((2, 4), np.float32), np.zeros(2), np.zeros(2, np.uint8))
    os.set_blocking(request_read, False)
    with pytest.raises(BlockingIOError):
        os.read(request_read, 64)  # nothing was sent


def test_the_server_answers_through_shared_memory_and_one_write_each_way():
    slots, client, request_read, reply_write = _client()
    server = InferenceServer(CountingPolicy(), max_batch_size=2)
    server.reset_slots(2)
    box = {}

    def act():
        try:
            box["actions"] = client.step(
                np.array([[7.0, 0, 0], [np.nan, 0, 0]], np.float32),
                np.zeros(2),
                np.full(2, FIRST, np.uint8),
            )
        except ValueError as error:
            box["error"] = str(error)

    thread = threading.Thread(target=act)
    thread.start()
    requests = list(REQUEST.iter_unpack(os.read(request_read, 64)))
    assert requests == [(0, 1), (1, 1)]
    a = slots.arrays()
    ids = np.array([s for s, _ in requests])
    actions = server.infer(
        ids, a["obs"][ids], a["reward"][ids], a["flags"][ids], sent_at=a["sent_at"][ids]
    )
    os.write(reply_write, b"".join(REPLY.pack(int(s), int(x)) for s, x in zip(ids, actions)))
    thread.join(5)
    assert "actions" not in box and "slot 1" in box["error"]  # slot 1's NaN was rejected
    assert actions.tolist() == [1, REJECTED]


def test_a_rejected_observation_raises_a_clear_error_in_the_actor():
    _, client, request_read, reply_write = _client(1)
    os.write(reply_write, REPLY.pack(0, REJECTED))
    with pytest.raises(ValueError, match="NaN or infinite"):
        client.step(np.zeros((1, 3), np.float32), np.zeros(1), np.zeros(1, np.uint8))


def test_an_actor_waiting_when_the_server_stops_gets_server_stopped():
    _, client, _, reply_write = _client(1)
    os.close(reply_write)  # the server went away
    with pytest.raises(ServerStopped):
        client.step(np.zeros((1, 3), np.float32), np.zeros(1), np.zeros(1, np.uint8))


def test_env_only_actors_never_import_torch():
    # What an actor process loads: its module through the package (whose names load lazily), and
    # the transports' package.
    code = (
        "import sys, workbench.seed.env_actors, workbench.seed.transports; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- actor processes ------------------------------------------------------------------------------


@pytest.fixture
def local_actors():
    torch.manual_seed(0)
    server = InferenceServer(SampledPolicy(ActorCritic((4,), 2)), max_batch_size=4, timeout=0.005)
    actors = LocalActors(server, "CartPole-v1", 3, max_actors=4, nice=5)
    yield actors
    actors.stop()
    assert wait_gone(actors_pids(actors), 5.0) == []


def actors_pids(actors):
    return [a.process.pid for a in actors._actors.values()]


def _wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_local_actors_are_served_in_batches(local_actors):
    local_actors.start()
    _wait_for(lambda: local_actors.steps > 2000)
    stats = local_actors.server.stats()
    assert stats["mean_batch_size"] > 1.0 and stats["max_batch_size_reached"] <= 4
    local_actors.check()


def test_a_killed_actor_is_restarted_and_the_others_go_on(local_actors):
    local_actors.start()
    _wait_for(lambda: local_actors.steps > 500)
    victim = local_actors._actors[0].process.pid
    os.kill(victim, signal.SIGKILL)
    _wait_for(lambda: any(e.kind == "restarted" for e in local_actors.events))
    before = local_actors.steps
    _wait_for(lambda: local_actors.steps > before + 500)
    assert victim not in local_actors.pids and len(local_actors.pids) == 3
    local_actors.check()


def test_actors_can_be_added_and_retired_while_serving(local_actors):
    local_actors.start()
    local_actors.set_num_actors(4)
    assert len(local_actors.pids) == 4
    retired = local_actors._actors[3].process
    local_actors.set_num_actors(2)
    retired.join(10)
    assert retired.exitcode == 0  # told STOPPED: a clean exit, not a kill
    _wait_for(lambda: len(local_actors.pids) == 2)
    with pytest.raises(ValueError, match="max_actors"):
        local_actors.set_num_actors(5)


def test_stopping_the_server_lets_every_actor_exit_cleanly(local_actors):
    local_actors.start()
    _wait_for(lambda: local_actors.steps > 200)
    processes = [a.process for a in local_actors._actors.values()]
    local_actors.stop()
    assert [p.exitcode for p in processes] == [0, 0, 0]


class SlotCounter:
    """A listener: how many steps each slot was served, and the sizes of the batches."""

    def __init__(self, slots: int) -> None:
        self.counts = np.zeros(slots, dtype=np.int64)
        self.batches: list[int] = []

    def on_step(self, batch) -> None:
        np.add.at(self.counts, batch.slots, 1)
        self.batches.append(len(batch.slots))

    def on_restart(self, slots) -> None:
        pass


def test_an_asynchronous_actor_sends_one_batch_of_its_envs_per_request():
    """2 Pong actors of 4 envs each, 2 envs per request: ale_py steps one pair while the other
    waits for its actions; every env is served about equally, and a batch holds at most one
    request of each actor (4 envs), never an actor's 4 envs at once."""
    counter = SlotCounter(8)
    server = InferenceServer(
        SampledPolicy(ActorCritic((4, 84, 84), 6)), max_batch_size=8, timeout=0.002
    )
    server.listeners.append(counter)
    actors = LocalActors(server, "ALE/Pong-v5", 2, envs_per_actor=4, actor_batch=2)
    try:
        actors.start()
        _wait_for(lambda: actors.steps > 400, timeout=120)
        actors.check()
    finally:
        actors.stop()
    assert (counter.counts > 30).all(), counter.counts
    assert counter.counts.max() <= 2 * counter.counts.min() + 10, counter.counts
    assert set(counter.batches) <= {2, 4}, sorted(set(counter.batches))


@pytest.mark.parametrize(
    ("env_id", "actor_batch", "message"),
    [
        ("ALE/Pong-v5", 3, "actor_batch must divide envs_per_actor=4"),
        ("ALE/Pong-v5", 0, "actor_batch must divide"),
        ("CartPole-v1", 2, "Atari only"),
    ],
)
def test_a_bad_actor_batch_names_the_fix(env_id, actor_batch, message):
    server = InferenceServer(CountingPolicy(), max_batch_size=2)
    with pytest.raises(ValueError, match=message):
        LocalActors(server, env_id, 1, envs_per_actor=4, actor_batch=actor_batch)


def test_an_unknown_env_id_fails_before_any_process_starts():
    before = live_children()
    server = InferenceServer(CountingPolicy(), max_batch_size=2)
    with pytest.raises(ValueError, match="CartPole-v1"):
        LocalActors(server, "CartPol-v1", 2)
    assert live_children() == before


@pytest.mark.slow
def test_killing_the_kernel_ends_every_env_actor(tmp_path):
    process = subprocess.Popen(
        [sys.executable, str(HOLDER), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HOLDER.parents[2],
    )
    try:
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(180)
        stderr = process.stderr.read() if process.poll() is not None else ""
        assert box and box[0], f"the holder printed nothing: {stderr}"
        actors = json.loads(box[0])["actors"]
        descendants = [p.pid for p in psutil.Process(process.pid).children(recursive=True)]
        assert len(actors) == 2 and set(actors) <= set(descendants)
        process.kill()
        process.wait(10)
        assert wait_gone(descendants, 5.0) == [], "an env actor outlived its kernel"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_a_model_on_another_device_than_the_server_names_the_fix():
    from workbench.models import ActorCritic
    from workbench.seed.server import InferenceServer, SampledPolicy

    elsewhere = ActorCritic((4,), 2).to("meta")  # any device but the server's: a GPU's, here meta
    with pytest.raises(ValueError, match="move the model first"):
        InferenceServer(SampledPolicy(elsewhere), 4, device="cpu")
