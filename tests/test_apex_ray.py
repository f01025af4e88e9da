"""Ape-X on Ray (``workbench[distributed]``): the same roles as Ray actors on a private local Ray
instance. On two nodes: ``tests/test_scale_out.py``."""

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
