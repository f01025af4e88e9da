"""SEED's multi-machine transport on a local Ray instance (``workbench[distributed]``): the server
as a Ray async actor batching concurrent requests, env-only Ray actors on CartPole, and the bad
inputs (a malformed observation, an actor killed mid-run, the server stopped while actors wait)
that must end in a clear error or a clean exit, never a hang. First, the transport's measurement
(``measure.seed_transports.measure_transport``) states what a request costs beyond serving."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
import torch
from processes import ray_actor_pids, running

ray = pytest.importorskip(
    "ray", reason='the Ray transport needs pip install "workbench[distributed]"'
)

from workbench.models import ActorCritic  # noqa: E402
from workbench.seed.env_actors import FIRST, ServerStopped  # noqa: E402
from workbench.seed.transports.ray import RayActors  # noqa: E402
from workbench.seed.transports.ray_server import RayInferenceServer  # noqa: E402


def described(pids) -> list[str]:
    """Each process's pid, title, age and private instance, for a failure's message."""
    import psutil

    from workbench.reaper import INSTANCE_ENV

    out = []
    for pid in sorted(pids):
        try:
            process = psutil.Process(pid)
            age = time.time() - process.create_time()
            marker = process.environ().get(INSTANCE_ENV)
            out.append(f"{pid} {process.cmdline()[0]!r} {age:.0f} s old, instance {marker}")
        except psutil.Error:
            out.append(f"{pid} gone")
    return out


def instance() -> str | None:
    from workbench import cluster

    private = cluster.private_ray()
    return private.marker if private else None


def wait_until(condition, actors: RayActors, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, (
            f"{what} did not happen in {seconds} s; events: {actors.events}"
        )
        actors.check()
        time.sleep(0.05)


def test_the_ray_transport_states_what_a_request_costs_beyond_serving(local_ray):
    # First in the module: the measurement has the instance to itself (no ``serving`` actors yet).
    from workbench.measure.seed_transports import measure_transport

    already = set(ray_actor_pids("RayEnvActor", "RayInferenceServer"))
    result = measure_transport("ray", "CartPole-v1", 2, 2, seconds=1.0, warmup=0.3)
    assert result.transport == "ray" and result.steps > 0
    assert result.round_trip_p50_ms > result.latency_p50_ms > 0
    assert result.request_overhead_ms == pytest.approx(
        result.round_trip_p50_ms - result.latency_p50_ms
    )
    assert result.cpu_ms_per_step > 0  # every process of the private instance counted
    deadline = time.monotonic() + 15
    while left := set(ray_actor_pids("RayEnvActor", "RayInferenceServer")) - already:
        assert time.monotonic() < deadline, (
            f"the measurement left Ray actors: {described(left)}; this instance: {instance()}"
        )
        time.sleep(0.2)


@pytest.fixture(scope="module")
def serving(local_ray):
    """A CartPole server and 4 env actors; slot 4 is left free for the tests' own requests."""
    torch.manual_seed(0)
    server = RayInferenceServer.launch(
        ActorCritic((4,), 2), max_batch_size=8, timeout=0.02, record_steps=5000
    )
    actors = RayActors(server, "CartPole-v1", 4, max_actors=5, seed=0, nice=5).start()
    yield server, actors
    actors.stop()
    ray.kill(server)


def test_batches_of_concurrent_requests_step_cartpole(serving):
    server, actors = serving
    wait_until(lambda: actors.steps >= 200, actors, 40, "200 steps")  # every actor is up by then
    ray.get(server.take_steps.remote())  # the steady state only: actor 0 may have started alone
    start, batches = time.monotonic(), []

    def served() -> tuple[int, set[int]]:
        """Steps and slots of the batches answered since, as the server recorded them: what is
        asserted below (the coordinator's ``steps`` is the server's count at another moment)."""
        batches.extend(item for kind, item in ray.get(server.take_steps.remote()) if kind == "step")
        return sum(len(b.slots) for b in batches), {int(s) for b in batches for s in b.slots}

    def enough_served() -> bool:
        steps, slots = served()
        return steps >= 1000 and slots >= {0, 1, 2, 3} and len(actors.episodes) >= 4

    wait_until(enough_served, actors, 40, "1000 more steps, every actor's, and 4 episodes")
    seconds = time.monotonic() - start
    sizes = np.array([len(b.slots) for b in batches])
    assert sizes.max() > 1 and sizes.mean() > 1.5, np.bincount(sizes)  # 4 actors, 8 at most a batch
    actions = np.concatenate([b.actions for b in batches])
    assert set(np.unique(actions)) <= {0, 1} and len(actions) >= 1000
    assert set(np.concatenate([b.slots for b in batches])) == {0, 1, 2, 3}  # slot 4 has no actor
    assert all("logp" in b.extras for b in batches)
    returns = [r for _, _, r, _ in actors.episodes]
    assert all(r >= 8 for r in returns), returns  # CartPole: at least 8 steps before a pole falls
    stats = ray.get(server.stats.remote())
    for key in (
        "latency_p50_ms",
        "latency_p99_ms",
        "queue_wait_p50_ms",
        "forward_p50_ms",
        "transit_p50_ms",
    ):
        assert 0 <= stats[key] < 1000, (key, stats)
    per_actor: dict[int, dict] = {}

    def every_actor_past_100_steps() -> bool:  # each actor counts its own steps as it goes
        per_actor.update(actors.actor_stats())
        return all(s["steps"] > 100 for s in per_actor.values())

    wait_until(every_actor_past_100_steps, actors, 40, "100 steps of every actor")
    assert all(s["round_trip_p50_ms"] > 0 for s in per_actor.values()), per_actor
    round_trip = np.median([s["round_trip_p50_ms"] for s in per_actor.values()])
    print(
        f"\n{len(actions)} steps in {seconds:.1f} s, batch sizes "
        f"{np.bincount(sizes).tolist()} (mean {sizes.mean():.2f}), latency p50 "
        f"{stats['latency_p50_ms']:.2f} ms, round trip p50 {round_trip:.2f} ms"
    )


def test_a_malformed_observation_fails_only_its_caller(serving):
    server, actors = serving
    actors.check()
    before = actors.steps
    expected = (
        r"malformed observations: got float32 \(1, 3\), the server serves float32 \[n, \*\(4,\)\]"
    )
    with pytest.raises(ValueError, match=expected):
        ray.get(server.infer.remote(4, np.zeros((1, 3), np.float32), 0.0, FIRST))
    with pytest.raises(ValueError, match=r"malformed observations: got float32 \(4,\)"):
        ray.get(server.infer.remote(4, np.zeros(4, np.float32), 0.0, FIRST))  # no env axis
    with pytest.raises(ValueError, match=r"malformed observations: got <U1 \(1, 4\)"):
        ray.get(server.infer.remote(4, np.array([list("abcd")]), 0.0, FIRST))
    with pytest.raises(ValueError, match="NaN or infinite"):
        bad = np.array([[0.0, np.nan, 0.0, 0.0]], np.float32)
        ray.get(server.infer.remote(4, bad, 0.0, FIRST))
    with pytest.raises(ValueError, match="slot 9 is not served"):
        ray.get(server.infer.remote(9, np.zeros((1, 4), np.float32), 0.0, FIRST))
    with pytest.raises(ValueError, match="slot 5 is not served"):  # a block past the last slot
        ray.get(server.infer.remote(4, np.zeros((2, 4), np.float32), 0.0, FIRST))
    float64 = ray.get(server.infer.remote(4, np.zeros((1, 4)), 0.0, FIRST))
    assert float64.tolist() in ([0], [1])  # float64 -> float32 is fine
    ray.get(server.restart.remote([4]))  # slot 4 has no actor: batches need not wait for it
    wait_until(lambda: actors.steps >= before + 200, actors, 20, "200 more steps")
    assert not [e for e in actors.events if e.kind in ("died", "error")]


def test_a_killed_actor_does_not_stall_the_others_and_is_restarted(serving):
    server, actors = serving
    actors.check()
    others = {i: s["steps"] for i, s in actors.actor_stats().items() if i != 1}
    ray.kill(actors.actor_handles()[1])
    wait_until(
        lambda: any(e.kind == "restarted" and e.actor == 1 for e in actors.events),
        actors,
        20,
        "the restart",
    )
    kinds = [e.kind for e in actors.events if e.actor == 1]
    assert kinds[kinds.index("died") :][:2] == ["died", "restarted"]  # then "started", once up
    after: dict[int, dict] = {}

    def all_stepping_on() -> bool:  # each actor counts its own steps as it goes
        after.update(actors.actor_stats())
        return after[1]["steps"] > 50 and all(after[i]["steps"] > others[i] + 50 for i in others)

    wait_until(
        all_stepping_on, actors, 30, "the restarted actor's 50 steps and 50 more of each other"
    )


def test_stopping_the_server_ends_waiting_actors_cleanly(local_ray):
    server = RayInferenceServer.launch(ActorCritic((4,), 2), max_batch_size=4, timeout=0.01)
    actors = RayActors(server, "CartPole-v1", 2, seed=1, nice=5).start()
    try:
        wait_until(lambda: actors.steps >= 100, actors, 30, "100 steps")
        ray.get(server.stop.remote())
        stopped = time.monotonic()
        wait_until(lambda: len(actors.finished) == 2, actors, 5, "both actors ending")
        print(f"\nactors ended {time.monotonic() - stopped:.2f} s after the server stopped")
        assert all(r["reason"].startswith("server stopped") for r in actors.finished.values()), (
            actors.finished
        )
        assert not [e for e in actors.events if e.kind in ("died", "error", "restarted")]
        with pytest.raises(ServerStopped, match="stopped"):
            ray.get(server.infer.remote(0, np.zeros((1, 4), np.float32), 0.0, FIRST), timeout=10)
    finally:
        actors.stop()
        ray.kill(server)


class CountingPolicy:
    """A recurrent policy whose state counts each slot's steps since its episode began; the action
    is that count, so the test reads the server-side state from the answers."""

    def initial_state(self, batch_size, device):
        return (torch.zeros(batch_size, 1, device=device),)

    def step(self, obs, state, first, slots):
        count = state[0] + 1
        return count[:, 0].long(), (count,), {}


# Ray's workers cannot import this test module: ship its classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_recurrent_state_is_kept_per_slot_on_the_server(local_ray):
    server = RayInferenceServer.launch(CountingPolicy(), max_batch_size=8, timeout=0.05)
    obs = np.zeros((1, 1), np.float32)
    try:
        ray.get(server.reset_slots.remote(3, (1,), "float32"))

        def step(*requests):  # (slot, flags) pairs sent at once: one batch
            answers = [server.infer.remote(slot, obs, 0.0, flags) for slot, flags in requests]
            return [int(a[0]) for a in ray.get(answers)]

        assert step((0, FIRST), (1, FIRST), (2, FIRST)) == [1, 1, 1]
        assert step((0, 0), (1, 0)) == [2, 2]
        assert step((0, 0)) == [3]
        assert step((0, FIRST), (1, 0), (2, 0)) == [1, 3, 2]  # FIRST resets slot 0 only
        assert ray.get(server.restart.remote([1])) == [1]  # a new actor in slot 1: zero state
        assert step((1, 0), (2, 0)) == [1, 3]
        with pytest.raises(ServerStopped, match="replaced"):  # the old actor's late request
            ray.get(server.infer.remote(1, obs, 0.0, 0, generation=0))
        assert ray.get(server.infer.remote(1, obs, 0.0, 0, generation=1)).tolist() == [2]
    finally:
        ray.kill(server)


def test_an_actor_with_several_envs_sends_them_in_one_request(local_ray):
    """A block of envs in consecutive slots: one request, one row per env, one action each; its
    rows share a forward pass with other actors' requests, and keep their own state."""
    server = RayInferenceServer.launch(CountingPolicy(), max_batch_size=8, timeout=0.05)
    try:
        ray.get(server.reset_slots.remote(6, (1,), "float32"))
        three = np.zeros((3, 1), np.float32)
        flags = np.full(3, FIRST, np.uint8)
        first = ray.get(server.infer.remote(0, three, np.zeros(3), flags))
        assert first.tolist() == [1, 1, 1]
        again = ray.get(
            [
                server.infer.remote(0, three, np.zeros(3), np.array([0, FIRST, 0], np.uint8)),
                server.infer.remote(3, np.zeros((2, 1), np.float32), 0.0, FIRST),
            ]
        )
        assert [a.tolist() for a in again] == [[2, 1, 2], [1, 1]]
        stats = ray.get(server.stats.remote())
        assert stats["steps"] == 8
        assert ray.get(server.restart.remote([0, 1, 2])) == [1, 1, 1]
        with pytest.raises(ServerStopped, match="replaced"):
            ray.get(server.infer.remote(0, three, np.zeros(3), flags, generation=0))
    finally:
        ray.kill(server)


def test_a_killed_actors_lingering_process_is_ended_and_nothing_else_is(local_ray):
    # ray.kill returns before the actor's process ends; on a loaded machine one lingered 16 s.
    import os
    import subprocess

    from workbench import cluster
    from workbench.reaper import INSTANCE_ENV

    marked = dict(os.environ, **{INSTANCE_ENV: cluster.private_ray().marker})
    lingering = subprocess.Popen(["sleep", "60"], env=marked)  # one of the instance's processes
    unrelated = subprocess.Popen(["sleep", "60"])  # not the instance's: never touched
    try:
        started = time.monotonic()
        killed = cluster.end_killed_actors([lingering.pid, unrelated.pid], grace=0.5)
        assert killed == [lingering.pid] and lingering.pid not in running([lingering.pid])
        assert time.monotonic() - started < 5 and unrelated.poll() is None
    finally:
        for process in (lingering, unrelated):
            process.kill()
            process.wait()
