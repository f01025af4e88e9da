"""The contract of Ape-X's transports (``workbench.apex.transports.ApexTransport``), each test run
on both transports: ``"local"`` (actor processes and a replay process) and ``"ray"`` (Ray actors,
on one local Ray instance shared by the module's Ray cases). A behaviour that needs the same
preamble as another (a fresh transport; two actors sending) is checked in that test, after it, as
its name says.

The learner's side is driven by hand, as ``apex.Apex`` drives it: start actors, poll ``stats()``
(which also keeps Ray's actors collecting), request and take batches, send priorities back.

Last, an Ape-X run on the Ray transport end to end (``apex.Apex``, on the same Ray instance). On
two nodes: notebook 10's checked cell.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from processes import running, wait_gone

from workbench.apex import (
    Apex,
    ApexConfig,
    ApexTransport,
    actor_epsilons,
    make_learner,
    make_transport,
)
from workbench.learners import DQNConfig
from workbench.studies.apex_studies import apex_cartpole_config

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

BATCH = 64
TIMEOUT = 120.0  # seconds for anything to happen on a busy 2-core machine


@pytest.fixture(scope="module")
def ray_instance(local_ray):
    """One private local Ray instance for every Ray case of the module (tests/conftest.py)."""
    return local_ray


@pytest.fixture
def config():
    # Short blocks, a short warm-up (the replay gives batches after a few blocks) and a parameter
    # refresh every 5 blocks.
    return apex_cartpole_config(
        num_actors=2,
        max_actors=4,
        learning_starts=BATCH,
        block_steps=20,
        parameter_sync_frames=100,
        seed=0,
    )


@pytest.fixture(params=["local", "ray"])
def transport(request, config):
    if request.param == "ray":
        request.getfixturevalue("ray_instance")
    config = replace(config, transport=request.param)
    transport = make_transport(config, make_learner(config).actor_state())
    transport.set_explorations(config.explorations(config.num_actors))
    try:
        yield transport
    finally:
        transport.close()


def wait_for(condition: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    """Poll ``condition()`` until it returns something truthy; fail naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:g} s")
        time.sleep(0.1)


def sent(transport: ApexTransport, actors, more_than: dict[int, int] | None = None):
    """``stats()`` once every actor in ``actors`` has sent transitions (more than ``more_than``
    says, per actor), else None."""
    stats = transport.stats()
    per_actor = stats["per_actor"]
    more_than = more_than or {}
    if all(per_actor.get(i, {}).get("transitions", 0) > more_than.get(i, 0) for i in actors):
        return stats
    return None


def take_batch(transport: ApexTransport, timeout: float = TIMEOUT):
    """One batch, asked for as the learner asks (a request kept pending until it is answered)."""

    def ask():
        if transport.pending_batches < 1:
            transport.request_sample(BATCH)
        return transport.take_batch(timeout=0.5)

    return wait_for(ask, "a sampled batch")


def replay_pid(transport: ApexTransport) -> int:
    """The process id of the replay (not part of the interface: each transport's own way)."""
    if transport.name == "local":
        return transport.replay.pid
    import ray

    return ray.get(transport.replay.__ray_call__.remote(lambda _: os.getpid()), timeout=TIMEOUT)


def test_started_actors_send_blocks_to_the_replay_and_act_with_published_parameters(
    transport, config
):
    transport.start_actor(0)
    transport.start_actor(1)
    assert set(transport.actor_pids()) == {0, 1}
    first = wait_for(lambda: sent(transport, (0, 1)), "both actors sending")
    assert first["added"] > 0 and first["replay_size"] > 0
    explorations = config.explorations(2)
    for index in (0, 1):
        assert first["per_actor"][index]["exploration"] == pytest.approx(explorations[index])
        assert first["per_actor"][index]["env_steps"] > 0
    counts = {i: a["transitions"] for i, a in first["per_actor"].items()}
    later = wait_for(lambda: sent(transport, (0, 1), more_than=counts), "both actors sending more")
    assert later["added"] > first["added"]

    # Parameters published to the running actors reach every one of them.
    versions = {i: later["per_actor"][i]["parameter_version"] for i in (0, 1)}
    transport.publish(make_learner(config).actor_state())

    def refreshed():
        per_actor = transport.stats()["per_actor"]
        return all(per_actor[i]["parameter_version"] > versions[i] for i in (0, 1))

    # Each actor loads them at its next refresh (every parameter_sync_frames = 100 steps).
    wait_for(refreshed, "both actors acting with the published parameters")


def test_is_an_apex_transport_and_a_requested_batch_comes_once_the_replay_is_warm(transport):
    # A fresh transport: an ApexTransport with no actor, no pending batch, no dead actor.
    assert isinstance(transport, ApexTransport)
    assert transport.pending_batches == 0 and transport.actor_pids() == {}
    assert transport.dead_actors() == []
    transport.request_sample(BATCH)
    assert transport.take_batch(timeout=0.5) is None  # no actor yet: nothing to sample
    transport.start_actor(0)
    batch, indices, weights = take_batch(transport)
    assert transport.pending_batches == 0
    assert batch["obs"].shape == (BATCH, 4) and batch["actions"].shape == (BATCH,)
    assert indices.shape == (BATCH,) and weights.shape == (BATCH,)
    assert np.all(weights > 0) and np.all(weights <= 1.0 + 1e-6)  # normalised by their maximum
    stats = transport.stats()
    assert stats["replay_size"] >= BATCH and stats["sampled"] == BATCH
    assert 0 <= indices.min() and indices.max() < stats["replay_size"]


def test_priorities_sent_back_change_what_is_sampled(transport):
    transport.start_actor(0)
    wait_for(lambda: (s := transport.stats())["replay_size"] >= 2 * BATCH and s, "a warm replay")
    transport.stop_actor(0)  # the replay's contents stay as they are from here on
    _, indices, _ = take_batch(transport)
    favourite = int(indices[0])
    priorities = np.zeros(BATCH)
    priorities[indices == favourite] = 1e9
    transport.update_priorities(indices, priorities)
    # (1e9 + eps) ** 0.6 = 2.5e5 against about 2 for each of the (hundreds of) others, and about
    # 0 for the rest of the batch: nearly all the mass, so most of the next batch's strata.
    _, again, weights = take_batch(transport)
    assert np.sum(again == favourite) > BATCH // 2, again
    others = weights[again != favourite]
    if others.size:  # the most likely sample has the smallest importance weight
        assert weights[again == favourite].max() < others.min()


def test_stop_actor_retires_one_and_keeps_what_it_sent(transport):
    transport.start_actor(0)
    transport.start_actor(1)
    first = wait_for(lambda: sent(transport, (0, 1)), "both actors sending")
    pids = transport.actor_pids()
    transport.stop_actor(1)
    assert set(transport.actor_pids()) == {0}
    assert wait_gone([pids[1]], 10.0) == [], "the retired actor's process still runs"
    assert running([pids[0]]) == [pids[0]] and transport.dead_actors() == []
    counts = {0: first["per_actor"][0]["transitions"]}
    later = wait_for(lambda: sent(transport, (0,), more_than=counts), "actor 0 sending on")
    assert later["per_actor"][1]["transitions"] >= first["per_actor"][1]["transitions"]


def test_a_killed_actor_is_reported_dead_a_restart_sends_again_and_close_leaves_no_process(
    transport, config
):
    transport.start_actor(0)
    transport.start_actor(1)
    wait_for(lambda: sent(transport, (0, 1)), "both actors sending")
    old_pid = transport.actor_pids()[0]
    os.kill(old_pid, signal.SIGKILL)
    assert wait_for(transport.dead_actors, "the killed actor reported dead") == [0]
    # An exploration no actor has used yet: only blocks of the new actor 0 carry it.
    marker = 0.123
    transport.set_explorations([marker, *config.explorations(2)[1:]])
    transport.restart_actor(0)
    new_pid = wait_for(lambda: transport.actor_pids().get(0), "the new actor's pid")
    assert new_pid != old_pid and set(transport.actor_pids()) == {0, 1}

    def fresh():
        actor = transport.stats()["per_actor"][0]
        return actor["exploration"] == pytest.approx(marker)

    wait_for(fresh, "the restarted actor sending")
    assert transport.dead_actors() == []

    # close() then ends every process of the transport, the restarted actor's included.
    pids = [*transport.actor_pids().values(), replay_pid(transport)]
    assert len(set(pids)) == 3 and running(pids) == pids
    transport.close()
    assert transport.actor_pids() == {}
    assert wait_gone(pids, 10.0) == [], "a process outlived close()"


# --- Ape-X end to end on the Ray transport (apex.Apex) ------------------------------------------


def small_config(num_actors: int) -> ApexConfig:
    return ApexConfig(
        env_id="CartPole-v1",
        learner=DQNConfig(batch_size=32, target_update_interval=100, learning_rate=1e-3),
        model_options=dict(dueling=True, hidden=(32, 32)),
        num_actors=num_actors,
        learning_starts=200,
        seed=0,
    )


@pytest.mark.slow
def test_ray_transport_learns_from_every_actor_and_restarts_a_killed_one(ray_instance, tmp_path):
    ray = ray_instance  # the module's Ray instance (skipped where Ray is not installed)
    apex = Apex(replace(small_config(2), transport="ray"), runs_dir=tmp_path, log_interval=1.0)
    killed = {}

    @apex.on_row
    def kill_once(row: dict) -> None:
        if "event" in row:
            return
        if not killed and row["charts/updates"] > 0:
            killed["handle"] = apex.transport.actor_handles()[1]
            ray.kill(killed["handle"])
        if (
            killed
            and apex.actor_restarts.count
            and row["charts/updates"] >= 300
            and 1 in row["apex/per_actor"]
        ):
            apex.stop()

    apex.run(seconds=240)
    last = [row for row in apex.metrics if "event" not in row][-1]
    assert apex.status == "stopped", "the run hit its time limit before the killed actor came back"
    assert [e["actor"] for e in apex.events if e["event"] == "actor_restart"] == [1]
    assert last["charts/updates"] >= 300
    per_actor = last["apex/per_actor"]
    assert set(per_actor) == {0, 1} and all(a["transitions"] > 0 for a in per_actor.values())
    assert [per_actor[i]["exploration"] for i in (0, 1)] == pytest.approx(actor_epsilons(2))
