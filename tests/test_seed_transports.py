"""The contract of ``workbench.seed.transports.SeedTransport``, held by each of SEED's transports:
``serial`` (``SerialActors``: every env stepped in this thread), ``local`` (``LocalActors``: actor
processes, shared memory, pipes) and ``ray`` (``RayActors`` served by a ``RayInferenceServer``).

Each test is one behaviour of the interface (the last also reads the events of the start and stop
it drives), on CartPole with a fresh server and 2 actors (serial: 2 envs); a run drives a
transport as ``drive`` does: ``check()``, ``advance()``, wait ``wait_seconds``, again. The Ray
cases share one local Ray instance (2 CPUs) and are skipped where Ray is not installed
(``pip install "workbench[distributed]"``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from processes import live_children, wait_gone

from workbench.models import ActorCritic
from workbench.restarts import RestartBudget, RestartSchedule
from workbench.seed.server import InferenceServer, SampledPolicy
from workbench.seed.transports import TRANSPORTS, SeedTransport
from workbench.seed.transports.local import LocalActors
from workbench.seed.transports.serial import SerialActors

ENV = "CartPole-v1"
NUM_ACTORS = 2
MAX_ACTORS = 3


class ExplodingPolicy:
    """Serves nothing: every forward pass raises (a policy bug)."""

    def initial_state(self, batch_size, device):
        return None

    def step(self, obs, state, first, slots):
        raise RuntimeError("the policy exploded")


class SlotRecorder:
    """A listener of an ``InferenceServer``: the slots of every step it answered (a deque: the
    serving thread appends while the test takes)."""

    def __init__(self) -> None:
        self.slots: deque[int] = deque()

    def on_step(self, batch) -> None:
        self.slots.extend(batch.slots.tolist())

    def take(self) -> list[int]:
        return [self.slots.popleft() for _ in range(len(self.slots))]

    def on_restart(self, slots) -> None:
        pass


@dataclass
class Served:
    """A transport under test and what its server answered."""

    kind: str
    transport: SeedTransport
    read_slots: Callable[[], list[int]]
    """The slots answered since the last call (each env step, one entry)."""
    seen: list[int] = field(default_factory=list)

    def slots(self) -> set[int]:
        """Every slot answered so far."""
        self.seen.extend(self.read_slots())
        return set(self.seen)

    def forget(self) -> None:
        """Count answers from now on only."""
        self.slots()
        self.seen.clear()


@pytest.fixture(scope="module")
def ray_for_contract(local_ray):
    """The module's private Ray instance (tests/conftest.py); Ray's workers cannot import this test
    module, so its classes (the policies) travel by value."""
    local_ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return local_ray


@pytest.fixture
def make(request):
    """``make(kind, policy=None)``: a transport of ``kind`` (not started) with ``NUM_ACTORS`` actors
    (at most ``MAX_ACTORS``) and a fresh server; stopped at the test's end, its server too."""
    cleanup: list[Callable[[], None]] = []

    def build(kind: str, policy: Any = None) -> Served:
        torch.manual_seed(0)
        policy = policy if policy is not None else SampledPolicy(ActorCritic((4,), 2))
        if kind == "ray":
            ray = request.getfixturevalue("ray_for_contract")
            from workbench.seed.transports.ray import RayActors
            from workbench.seed.transports.ray_server import RayInferenceServer

            server = RayInferenceServer.launch(
                policy, max_batch_size=MAX_ACTORS, timeout=0.005, record_steps=100_000
            )
            cleanup.append(lambda: ray.kill(server))
            transport = RayActors(server, ENV, NUM_ACTORS, max_actors=MAX_ACTORS, seed=0, nice=5)

            def read_slots() -> list[int]:
                steps = ray.get(server.take_steps.remote(), timeout=60)
                return [s for what, batch in steps if what == "step" for s in batch.slots.tolist()]

        else:
            recorder = SlotRecorder()
            server = InferenceServer(
                policy, max_batch_size=MAX_ACTORS, timeout=0.005, listeners=[recorder]
            )
            if kind == "serial":
                transport = SerialActors(server, ENV, NUM_ACTORS, seed=0)
            elif kind == "local":
                transport = LocalActors(server, ENV, NUM_ACTORS, max_actors=MAX_ACTORS, nice=5)
            else:
                raise ValueError(f"no transport {kind!r} under contract here")
            read_slots = recorder.take

        cleanup.append(transport.stop)
        return Served(kind, transport, read_slots)

    yield build
    for step in reversed(cleanup):
        step()


def drive(served: Served, until: Callable[[], bool], seconds: float, what: str) -> None:
    """Drive the transport as a run's loop does until ``until()``; fail after ``seconds``."""
    transport = served.transport
    deadline = time.monotonic() + seconds
    while True:
        transport.check()
        transport.advance()
        if until():
            return
        events = [(e.kind, e.actor, e.detail[:60]) for e in transport.events]
        assert time.monotonic() < deadline, f"{what}: not in {seconds} s; events {events}"
        time.sleep(transport.wait_seconds)


def kinds_of(transport: SeedTransport, actor: int) -> list[str]:
    return [e.kind for e in transport.events if e.actor == actor]


def test_every_transport_is_under_contract():
    assert set(TRANSPORTS) == {"serial", "local", "ray"}  # each built by ``make`` below


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_each_transport_is_a_seed_transport(kind, make):
    served = make(kind)
    assert isinstance(served.transport, SeedTransport)
    assert served.transport.steps == 0 and served.transport.events == []
    assert served.transport.wait_seconds >= 0


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_steps_grow_and_every_env_slot_is_served(kind, make):
    served = make(kind)
    transport = served.transport
    assert transport.start() is transport
    drive(
        served,
        lambda: transport.steps >= 200 and served.slots() >= set(range(NUM_ACTORS)),
        90,
        "200 steps of every env",
    )
    before = transport.steps
    drive(served, lambda: transport.steps >= before + 100, 60, "100 more steps")
    steps = transport.steps
    assert served.slots() == set(range(NUM_ACTORS))  # every actor's slot, and only theirs
    # Every step the transport counts, the server answered (its listeners heard it first).
    assert len(served.seen) >= steps >= 300
    if kind == "serial":
        assert len(served.seen) == steps  # one server.infer per advance, in this thread


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_set_num_actors_grows_and_shrinks(kind, make):
    served = make(kind)
    transport = served.transport.start()
    drive(served, lambda: transport.steps >= 50, 90, "50 steps")
    if kind == "serial":
        transport.set_num_actors(NUM_ACTORS)  # the count it has: nothing to do
        with pytest.raises(ValueError, match="transport='local'"):
            transport.set_num_actors(NUM_ACTORS + 1)
        with pytest.raises(ValueError, match="transport='local'"):
            transport.set_num_actors(1)
        return
    transport.set_num_actors(MAX_ACTORS)
    assert len(transport.pids) == MAX_ACTORS
    added = MAX_ACTORS - 1
    # Local: the serving thread marks the new actor ready (set_num_actors returns then), and records
    # its "started" event just after.
    drive(served, lambda: kinds_of(transport, added) != [], 30, "the new actor's first event")
    assert kinds_of(transport, added) == ["started"]
    served.forget()
    drive(served, lambda: added in served.slots(), 60, "the new actor's env served")
    with pytest.raises(ValueError, match="max_actors"):
        transport.set_num_actors(MAX_ACTORS + 1)

    transport.set_num_actors(1)
    drive(served, lambda: len(transport.pids) == 1, 30, "two actors retired")
    for index in (1, 2):
        assert kinds_of(transport, index)[-1] == "stopped"
    served.forget()
    before = transport.steps
    drive(served, lambda: transport.steps >= before + 50, 60, "50 steps of the one actor left")
    assert served.slots() == {0}


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_check_raises_when_serving_failed(kind, make):
    """A policy that raises fails serving, and the run learns it from the transport: from
    ``check()`` (local and ray: serving runs elsewhere), or from ``advance()`` itself (serial:
    serving runs in the caller's thread). Its actors exit, none hangs."""
    served = make(kind, policy=ExplodingPolicy())
    transport = served.transport.start()
    with pytest.raises(RuntimeError, match="the policy exploded"):
        drive(served, lambda: False, 60, "serving failing")
    pids = transport.pids
    transport.stop()
    assert wait_gone(pids, 10.0) == []


@pytest.mark.parametrize("kind", ["local", "ray"])
def test_check_restarts_a_killed_actor_with_an_event(kind, make):
    """Local and ray only: the serial transport has no actor process of its own to kill (its envs
    step in the caller's thread, and nothing of it can die apart from the caller)."""
    served = make(kind)
    transport = served.transport.start()
    drive(served, lambda: transport.steps >= 100, 90, "100 steps")
    victim = transport.pids[0]  # actor 0's process (pids lists the live actors in order)
    os.kill(victim, signal.SIGKILL)
    drive(served, lambda: "restarted" in kinds_of(transport, 0), 60, "actor 0 restarted")
    assert kinds_of(transport, 0)[:3] == ["started", "died", "restarted"]
    assert not [e for e in transport.events if e.actor != 0 and e.kind != "started"]
    served.forget()
    drive(
        served,
        lambda: len(transport.pids) == NUM_ACTORS and 0 in served.slots(),
        60,
        "the restarted actor's env served",
    )
    assert victim not in transport.pids
    assert wait_gone([victim]) == []


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_events_record_starts_and_stops_and_stop_leaves_no_actor_process(kind, make):
    # One start and stop: the events record a start, then a stop, of each actor, in time order;
    # and no actor process outlives stop().
    before = live_children()
    served = make(kind)
    transport = served.transport
    assert transport.events == []
    transport.start()
    drive(served, lambda: transport.steps >= 50, 90, "50 steps")
    started = [(e.kind, e.actor) for e in transport.events]
    assert started == [("started", i) for i in range(NUM_ACTORS)]
    assert all(e.time <= time.time() for e in transport.events)
    pids = transport.pids
    assert len(pids) == (0 if kind == "serial" else NUM_ACTORS)  # serial: no actor process
    transport.stop()
    stopped = sorted((e.kind, e.actor) for e in transport.events[len(started) :])
    assert stopped == [("stopped", i) for i in range(NUM_ACTORS)]
    times = [e.time for e in transport.events]
    assert times == sorted(times)
    assert wait_gone(pids, 10.0) == [], "an actor outlived stop()"
    assert transport.pids == []
    if kind != "ray":  # Ray's actors are the raylet's children, not this process's
        assert wait_gone(list(live_children() - before), 10.0) == []


@pytest.mark.parametrize("kind", ["local", "ray"])
def test_an_actor_that_keeps_dying_is_restarted_after_a_growing_wait_then_fails_serving(kind, make):
    served = make(kind)
    transport = served.transport
    transport.actor_restarts = RestartSchedule(
        RestartBudget(max_restarts=2, window=60.0, backoff=0.2)
    )
    transport.start()
    drive(served, lambda: transport.steps >= 50, 90, "50 steps")
    killed: list[int] = []

    def kill_actor_0_once_up() -> bool:
        starts = [e for e in transport.events if e.actor == 0 and e.kind == "started"]
        if len(starts) > len(killed):  # a (re)started actor 0 is up: kill it again
            pid = int(starts[-1].detail.split()[1])  # "pid N ..."
            killed.append(pid)
            os.kill(pid, signal.SIGKILL)
        return False

    with pytest.raises(RuntimeError, match="actor 0 died 3 times within 60 s"):
        drive(served, kill_actor_0_once_up, 120, "actor 0 given up")
    died = [e.time for e in transport.events if e.actor == 0 and e.kind == "died"]
    restarted = [e.time for e in transport.events if e.actor == 0 and e.kind == "restarted"]
    waits = [r - d for d, r in zip(died, restarted)]
    assert len(waits) == 2 and waits[0] >= 0.2 and waits[1] >= 0.4, waits  # the backoff doubles
    assert len(killed) == 3
