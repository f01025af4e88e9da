"""SEED's cost argument from a recorded study (``studies.scale_out_studies.step_costs``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.studies.scale_out_studies import step_costs


def result(steps_per_second: float, cpu_ms: float, rss: float) -> dict:
    return {"steps_per_second": steps_per_second, "cpu_ms_per_step": cpu_ms, "actor_rss_mb": rss}


def test_cpu_hours_per_million_frames_count_four_frames_a_step():
    rows = [{"num_actors": 16, "seed": result(2500, 0.72, 48), "impala": result(1300, 1.8, 273)}]
    (cost,) = step_costs(rows)
    # 1M frames = 250k agent steps; 0.72 ms each = 180 CPU s = 0.05 CPU hours
    assert cost["seed"]["cpu_hours_per_million_frames"] == pytest.approx(0.05)
    assert cost["impala"]["cpu_hours_per_million_frames"] == pytest.approx(0.125)
    assert cost["cpu_ratio"] == pytest.approx(2.5)
    assert (cost["seed"]["mb_per_actor"], cost["impala"]["mb_per_actor"]) == (48, 273)


def test_rows_come_back_in_actor_order():
    rows = [
        {"num_actors": n, "seed": result(1, 1, 1), "impala": result(1, 1, 1)} for n in (8, 1, 4)
    ]
    assert [c["num_actors"] for c in step_costs(rows)] == [1, 4, 8]


def test_the_recorded_study_shows_seed_cheaper_per_step_from_four_actors():
    path = Path(__file__).resolve().parent.parent / "data" / "central_inference.json"
    costs = {c["num_actors"]: c for c in step_costs(json.loads(path.read_text())["rows"])}
    assert all(costs[n]["cpu_ratio"] > 1.2 for n in costs if n >= 4), costs
    assert all(
        c["seed"]["mb_per_actor"] < 0.3 * c["impala"]["mb_per_actor"] for c in costs.values()
    )
