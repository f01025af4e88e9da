"""SEED RL end to end on Ray over a simulated two-node cluster (``cluster.simulated_cluster``: a
head and a worker node on this machine, each with its own raylet, as two machines would have).

The learner and the inference server share one Ray actor on the driver's node (SEED's design:
parameters never travel to the actors); env-only actors are Ray actors placed over both nodes.
Specified here: an R2D2 run trains on sequences from both nodes (checked by node id), a killed
env actor is restarted, actors are added and retired live, the panel steers it, a stop leaves no
Ray actor behind, and (last: they remove nodes) SEED and Ape-X go on when the worker node with
some of their actors dies, and stop with a clear error, then resume from their checkpoints on the
nodes left (into the same metrics file; the checkpoint of the resumed run, once it ends, holds its
counters), when the node with SEED's learner or Ape-X's replay dies.
Notebook 10's checked cells hold the rest on two nodes: V-trace learning with actors on both
nodes (its target at each budget; notebook 07's holds the recipe to 475 on one machine), and Ape-X
with its replay on the node asked for, actors on both nodes, every actor feeding the one replay
(that no Ape-X Ray actor outlives its transport's close or its run's stop:
tests/test_apex_transports.py, test_cluster.py).
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from processes import ray_actor_pids

ray = pytest.importorskip("ray", reason='Ray needs pip install "workbench[distributed]"')

from workbench.apex import Apex, ApexConfig  # noqa: E402
from workbench.learners import DQNConfig  # noqa: E402
from workbench.restarts import RoleLost  # noqa: E402
from workbench.seed import SEED_RECIPES, Seed  # noqa: E402

pytestmark = pytest.mark.slow
VTRACE = SEED_RECIPES["seed-vtrace-cartpole"]
R2D2 = SEED_RECIPES["seed-r2d2-cartpole-novelocity"]
ROLES = ("RayEnvActor", "RaySeedLearner")
# The V-trace recipe's actors on Ray: 2 actors of 8 envs each send 8 observations per request (4
# actors of one env each reach 475 too, in about 4 minutes here instead of 1).
VTRACE_ON_RAY = replace(VTRACE.config, transport="ray", num_actors=2, envs_per_actor=8)
# A small Ape-X on CartPole whose actors go on both nodes (the transport is the run's).
APEX_ON_RAY = ApexConfig(
    env_id="CartPole-v1",
    transport="ray",
    learner=DQNConfig(batch_size=32),
    model_options=dict(hidden=(32, 32)),
    num_actors=2,
    learning_starts=200,
)


def metric_rows(run: Seed) -> list[dict]:
    return [row for row in run.metrics if "event" not in row]


def actors_on_nodes(run: Seed) -> dict[str, list[int]]:
    """Actor indices by the node id they run on."""
    by_node: dict[str, list[int]] = {}
    for index, node in sorted(run.actor_nodes().items()):
        by_node.setdefault(node, []).append(index)
    return by_node


def actor_counts_applied(run: Seed) -> list[int]:
    """The actor counts of the run's ``settings`` events, in the order the loop applied them."""
    return [e["new"]["num_actors"] for e in run.events if e["event"] == "settings"]


def record_placement(run: Seed) -> dict[str, list[int]]:
    """Where the run's actors are, read at its first row (the placement ends with the run)."""
    placed: dict[str, list[int]] = {}

    @run.on_row
    def where(row: dict) -> None:
        if "event" not in row and not placed:
            placed.update(actors_on_nodes(run))

    return placed


def assert_no_ray_actor_left(seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while ray_actor_pids(*ROLES) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_actor_pids(*ROLES) == [], "a stopped SEED run left Ray actors behind"


def test_r2d2_trains_on_sequences_from_both_nodes(two_nodes, tmp_path):
    run = Seed(replace(R2D2.config, transport="ray"), runs_dir=tmp_path)
    placed = record_placement(run)

    def nodes_fed(row: dict) -> set[str]:
        windows = row["seed/windows_per_actor"]
        return {n for n, actors in placed.items() if sum(windows.get(str(i), 0) for i in actors)}

    @run.on_row
    def enough(row: dict) -> None:  # wait for what is asserted: a slow starter may lag 40 updates
        if "event" not in row and run.updates >= 40 and len(nodes_fed(row)) == 2:
            run.stop()

    run.run(seconds=240)
    last = metric_rows(run)[-1]
    assert run.status == "stopped", f"no 40 updates from both nodes within 240 s: {last}"
    assert run.updates >= 40 and last["seed/replay_size"] > 0
    assert len(nodes_fed(last)) == 2, (placed, last["seed/windows_per_actor"])
    assert run.learner_state()["learner"]["num_updates"] == run.updates
    assert_no_ray_actor_left()


def test_a_killed_env_actor_is_restarted_and_actors_come_and_go_live(two_nodes, tmp_path):
    config = replace(VTRACE_ON_RAY, max_actors=3)
    run = Seed(config, runs_dir=tmp_path, log_interval=0.5)
    run.start(seconds=240)
    try:
        deadline = time.monotonic() + 120
        while not metric_rows(run) or metric_rows(run)[-1]["charts/updates"] < 3:
            assert time.monotonic() < deadline and run.error is None, run.error
            time.sleep(0.1)
        ray.kill(run.transport.actor_handles()[1])
        while not any(e["event"] == "actor_restarted" and e["actor"] == 1 for e in run.events):
            assert time.monotonic() < deadline + 60 and run.error is None, run.events
            time.sleep(0.1)
        run.set_num_actors(3)
        while len(run.actor_nodes()) < 3:
            assert time.monotonic() < deadline + 120 and run.error is None, run.events
            time.sleep(0.1)
        assert len(set(run.actor_nodes().values())) == 2
        run.set_num_actors(1)
        while len(run.actor_nodes()) != 1:
            assert time.monotonic() < deadline + 150 and run.error is None, run.events
            time.sleep(0.1)
        # The loop applies a change, then records its settings event (``_take_settings``): the
        # actors are gone before the event for 1 is there, so wait for the event too.
        while actor_counts_applied(run)[-1:] != [1]:
            assert time.monotonic() < deadline + 180 and run.error is None, run.events
            time.sleep(0.1)
        kinds = [e["event"] for e in run.events]
        assert "actor_died" in kinds and "actor_restarted" in kinds
        assert actor_counts_applied(run) == [3, 1]
    finally:
        assert run.stop() == "stopped", run.error
    assert_no_ray_actor_left()


def test_the_seed_panel_steers_a_ray_run(two_nodes, tmp_path):
    from workbench.lab.system_panels import SeedPanel

    config = replace(VTRACE.config, transport="ray", num_actors=2, max_actors=3)  # an env each
    run = Seed(config, runs_dir=tmp_path, log_interval=0.5)
    panel = SeedPanel(run, limits={"seconds": 120})
    panel.start()
    try:
        deadline = time.monotonic() + 120
        while not metric_rows(run) or metric_rows(run)[-1]["charts/updates"] == 0:
            assert time.monotonic() < deadline and run.error is None, run.error
            time.sleep(0.1)
        panel.batch.value = 1  # the server answers one env per forward pass from now on
        assert run.max_batch_size == 1
        marked = len(metric_rows(run))
        while len(metric_rows(run)) < marked + 3:
            assert time.monotonic() < deadline + 30 and run.error is None, run.error
            time.sleep(0.1)
        assert metric_rows(run)[-1]["seed/mean_batch_size"] == pytest.approx(1.0)
        assert [e["new"] for e in run.events if e["event"] == "batch"] == [1]
    finally:
        panel.stop()
    assert run.status == "stopped"
    assert_no_ray_actor_left()


def test_seed_and_apex_go_on_when_a_node_with_their_actors_dies(two_nodes, tmp_path):
    """Last in this module: it removes the cluster's worker node, as a machine that fails would
    go. A SEED V-trace run and an Ape-X run, each with an actor on both nodes, go on: the actors
    of the lost node restart after their backoff on the node left (event rows), the learners,
    SEED's server and Ape-X's replay (on the head) keep their data and learn on."""
    seed = Seed(VTRACE_ON_RAY, runs_dir=tmp_path / "seed", log_interval=0.5)
    apex = Apex(APEX_ON_RAY, runs_dir=tmp_path / "apex", log_interval=0.5)
    (worker,) = two_nodes.cluster.worker_nodes
    runs = (seed, apex)
    for run in runs:
        run.start(seconds=500)
    try:
        wait_for(lambda: all(metric_rows(r) and r.updates >= 3 for r in runs), 240, runs, "3")
        placed = {run: nodes_of(run) for run in runs}
        lost = {run: [i for i, n in placed[run].items() if n == worker.node_id] for run in runs}
        assert all(lost.values()), placed  # each has an actor on the worker node
        replay_at_loss = metric_rows(apex)[-1]["apex/replay_size"]
        two_nodes.cluster.remove_node(worker)
        updates_at_loss = {run: run.updates for run in runs}

        def recovered(run) -> bool:
            nodes = nodes_of(run)
            moved = all(i in nodes and nodes[i] != worker.node_id for i in lost[run])
            return moved and run.updates >= updates_at_loss[run] + 20

        wait_for(lambda: all(recovered(r) for r in runs), 240, runs, "actors moved, 20 updates")
        for run in runs:
            kinds = {e["event"] for e in run.events}
            assert {"actor_restart", "actor_restarted"} & kinds, run.events
            assert run.status == "running"
        assert metric_rows(apex)[-1]["apex/replay_size"] > replay_at_loss  # the replay kept it
    finally:
        for run in runs:
            assert run.stop() == "stopped", run.error


def nodes_of(run) -> dict[int, str]:
    """Actor index -> node id (Ape-X asks its transport, SEED its run)."""
    return run.transport.actor_nodes() if isinstance(run, Apex) else run.actor_nodes()


def wait_for(condition, seconds: float, runs, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        for run in runs:
            assert run.error is None, run.error
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.2)


def test_a_run_whose_learner_or_replay_node_dies_stops_and_resumes_on_the_nodes_left(
    two_nodes, tmp_path
):
    """After the module's node loss: a node joins, SEED's learner (with its server) and Ape-X's
    replay are pinned to it, and it dies. Those roles hold the runs' state, so neither is
    restarted: each run stops with a ``RoleLost`` that names the role, the node and the call that
    continues; the saved config, naming the dead node, is refused with the fix; each run then
    continues from its last timed checkpoint on the node left, with its counters."""
    joined = two_nodes.add_node()
    seed = Seed(
        replace(VTRACE_ON_RAY, learner_node=joined.node_id),
        runs_dir=tmp_path / "seed",
        log_interval=0.5,
        checkpoint_seconds=3,
    )
    apex = Apex(
        replace(APEX_ON_RAY, replay_node=joined.node_id),
        runs_dir=tmp_path / "apex",
        log_interval=0.5,
        checkpoint_seconds=3,
    )
    runs = (seed, apex)
    for run in runs:
        run.start(seconds=500)

    def saved_after_updates(run) -> bool:
        return any(e["event"] == "checkpoint" and e["charts/updates"] >= 3 for e in run.events)

    wait_for(lambda: all(saved_after_updates(r) for r in runs), 240, runs, "a checkpoint")
    two_nodes.cluster.remove_node(joined)
    for run in runs:
        with pytest.raises(RoleLost):
            run.wait(timeout=120)
        assert run.status == "failed"
    roles = {seed: ("SEED's learner", "learner_node"), apex: ("Ape-X's replay", "replay_node")}
    for run, (role, setting) in roles.items():
        message = str(run.error)
        assert isinstance(run.error, RoleLost), repr(run.error)
        assert role in message and joined.node_id in message and "left the cluster" in message
        assert f"from_checkpoint({str(run.dir)!r}" in message and f"{setting}=None" in message
    resumed = {}
    for kind, run in ((Seed, seed), (Apex, apex)):
        saved = kind.from_checkpoint(run.dir)  # its saved config: the Ray transport, the lost node
        with pytest.raises(ValueError, match=f"{roles[run][1]}=None"):
            saved.run(seconds=saved.wall_seconds + 60)
        setting = {roles[run][1]: None}
        again = kind.from_checkpoint(run.dir, config=replace(run.config, **setting))
        assert 3 <= again.updates <= run.updates
        resumed[again] = again.updates
        again.start(updates=again.updates + 10)
        assert again.metrics_path == run.metrics_path  # one run's rows, before and after
    for again, at_checkpoint in resumed.items():
        assert again.wait(timeout=240) == "finished"
        assert again.updates >= at_checkpoint + 10
        # the checkpoint of a Ray run that ended holds its counters: it resumes where it stopped
        assert type(again).from_checkpoint(again.dir).updates == again.updates
    assert_no_ray_actor_left()
