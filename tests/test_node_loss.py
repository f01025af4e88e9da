"""A node of a Ray cluster dies while a run has actors on it (issue 26): the run goes on with those
actors restarted on the nodes left (SEED; Ape-X, whose replay keeps its data), and event rows say
what happened. On a simulated cluster
(``cluster.simulated_cluster``: a head and a worker node on this machine, each with its own
raylet), whose worker node is removed mid-run as a machine that fails would be. Its own cluster:
the node removed, the module's cluster could serve no other test.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from conftest import start_private_ray

ray = pytest.importorskip("ray", reason='Ray needs pip install "workbench[distributed]"')

from workbench import cluster  # noqa: E402
from workbench.apex import Apex, ApexConfig  # noqa: E402
from workbench.learners import DQNConfig  # noqa: E402
from workbench.seed import SEED_RECIPES, Seed  # noqa: E402

pytestmark = pytest.mark.slow
VTRACE_ON_RAY = replace(
    SEED_RECIPES["seed-vtrace-cartpole"].config, transport="ray", num_actors=2, envs_per_actor=8
)


def rows(run) -> list[dict]:
    return [row for row in run.metrics if "event" not in row]


def wait_for(condition, seconds: float, run, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert run.error is None, run.error
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s; {run.events}"
        time.sleep(0.2)


def test_a_seed_run_goes_on_when_the_node_of_some_of_its_actors_dies(tmp_path):
    instance = start_private_ray(cluster.simulated_cluster, nodes=2)
    try:
        run = Seed(VTRACE_ON_RAY, runs_dir=tmp_path, log_interval=0.5)
        run.start(seconds=400)
        try:
            wait_for(lambda: len(set(run.actor_nodes().values())) == 2, 180, run, "both nodes")
            wait_for(lambda: rows(run) and rows(run)[-1]["charts/updates"] >= 3, 120, run, "3")
            (worker,) = instance.cluster.worker_nodes
            lost = [i for i, node in run.actor_nodes().items() if node == worker.node_id]
            assert lost, run.actor_nodes()
            instance.cluster.remove_node(worker)
            updates_at_loss = run.updates

            def restarted_elsewhere() -> bool:
                nodes = run.actor_nodes()
                return all(i in nodes and nodes[i] != worker.node_id for i in lost)

            wait_for(restarted_elsewhere, 180, run, "the lost actors restarted on the head")
            wait_for(lambda: run.updates >= updates_at_loss + 20, 180, run, "20 more updates")
            died = [e for e in run.events if e["event"] == "actor_died" and e["actor"] in lost]
            again = [e for e in run.events if e["event"] == "actor_restarted"]
            assert died and {e["actor"] for e in again} >= set(lost), run.events
            assert run.status == "running"
        finally:
            assert run.stop() == "stopped", run.error
    finally:
        cluster.shutdown()


def test_an_apex_run_goes_on_when_the_node_of_some_of_its_actors_dies_and_keeps_its_replay(
    tmp_path,
):
    instance = start_private_ray(cluster.simulated_cluster, nodes=2)
    try:
        config = ApexConfig(
            env_id="CartPole-v1",
            agent=DQNConfig(batch_size=32, replay_capacity=20_000),
            model_options=dict(hidden=(32, 32)),
            num_actors=2,
            learning_starts=200,
        )
        run = Apex(config, transport="ray", runs_dir=tmp_path, log_interval=0.5)
        run.start(seconds=400)
        try:
            wait_for(lambda: rows(run) and run.updates >= 3, 180, run, "3 updates")
            nodes = run.transport.actor_nodes()
            (worker,) = instance.cluster.worker_nodes
            assert set(nodes.values()) == {worker.node_id, run.transport.replay_node_id()}
            lost = [i for i, node in nodes.items() if node == worker.node_id]
            size_at_loss = rows(run)[-1]["apex/replay_size"]
            instance.cluster.remove_node(worker)
            wait_for(
                lambda: (
                    {e["actor"] for e in run.events if e["event"] == "actor_restart"} >= set(lost)
                ),
                180,
                run,
                "the lost actors restarted",
            )
            updates_after = run.updates
            wait_for(lambda: run.updates >= updates_after + 20, 180, run, "20 more updates")
            assert worker.node_id not in run.transport.actor_nodes().values()
            assert rows(run)[-1]["apex/replay_size"] > size_at_loss  # the replay kept its data
            assert run.status == "running"
        finally:
            assert run.stop() == "stopped", run.error
    finally:
        cluster.shutdown()
