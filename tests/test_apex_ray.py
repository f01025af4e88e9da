"""Ape-X on Ray (``workbench[distributed]``): the same roles as Ray actors, first on a local Ray
instance, then on a two-node cluster started on this machine as Ray's own tests do
(``ray.cluster_utils.Cluster``), with actors placed on both nodes feeding one replay."""

from __future__ import annotations

import pytest

ray = pytest.importorskip(
    "ray", reason='the Ray transport needs pip install "workbench[distributed]"'
)

from workbench.apex import Apex, ApexConfig, actor_epsilons  # noqa: E402
from workbench.learners import DQNConfig  # noqa: E402


def small_config(num_actors: int) -> ApexConfig:
    return ApexConfig(
        env_id="CartPole-v1",
        agent=DQNConfig(
            batch_size=32, replay_capacity=10_000, target_update_interval=100, learning_rate=1e-3
        ),
        model_options=dict(dueling=True, hidden=(32, 32)),
        num_actors=num_actors,
        learning_starts=200,
        seed=0,
    )


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_transport_learns_from_every_actor_and_restarts_a_killed_one(local_ray, tmp_path):
    apex = Apex(small_config(2), transport="ray", runs_dir=tmp_path, log_interval=1.0)
    killed = {}

    @apex.on_row
    def kill_once(row: dict) -> None:
        if "event" in row:
            return
        if not killed and row["charts/updates"] > 0:
            killed["handle"] = apex.transport.actor_handles()[1]
            ray.kill(killed["handle"])
        if killed and apex.restarts and row["charts/updates"] >= 300 and 1 in row["apex/per_actor"]:
            apex.stop()

    apex.run(seconds=240)
    last = [row for row in apex.metrics if "event" not in row][-1]
    assert apex.status == "stopped", "the run hit its time limit before the killed actor came back"
    assert [e["actor"] for e in apex.events if e["event"] == "actor_restart"] == [1]
    assert last["charts/updates"] >= 300
    per_actor = last["apex/per_actor"]
    assert set(per_actor) == {0, 1} and all(a["transitions"] > 0 for a in per_actor.values())
    assert [per_actor[i]["exploration"] for i in (0, 1)] == pytest.approx(actor_epsilons(2))


@pytest.mark.slow
def test_actors_on_two_nodes_feed_one_replay(tmp_path):
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        cluster.wait_for_nodes()
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        apex = Apex(small_config(2), transport="ray", runs_dir=tmp_path, log_interval=1.0)
        nodes = {}

        @apex.on_row
        def place(row: dict) -> None:
            if "event" in row:
                return
            if not nodes and apex.transport is not None:
                handles = apex.transport.actor_handles()
                nodes.update({i: ray.get(h.node_id.remote()) for i, h in handles.items()})
            if row["charts/updates"] >= 50 and len(row["apex/per_actor"]) == 2:
                apex.stop()

        apex.run(seconds=240)
        assert len(set(nodes.values())) == 2, f"both actors ran on one node: {nodes}"
        last = [row for row in apex.metrics if "event" not in row][-1]
        per_actor = last["apex/per_actor"]
        assert all(per_actor[i]["transitions"] > 0 for i in (0, 1))  # both nodes fed the one replay
        assert last["charts/updates"] >= 50
    finally:
        ray.shutdown()
        cluster.shutdown()
