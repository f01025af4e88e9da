"""SEED's batching trade-off (``measure.seed_latency`` and ``benchmarks/seed_latency.py``) at a tiny
size: each (batch, timeout) is measured with its own server settings, and the command writes its
table, JSON and ratios line. No timing is asserted beyond what the settings force."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from workbench.measure.seed_latency import latency_figure, latency_sweep

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

import seed_latency as bench  # noqa: E402  (the benchmarks folder, as when the script runs)


@pytest.fixture(scope="module")
def rows():
    return latency_sweep(2, (1, 2), (0.0, 0.005), 0.5, env_id="CartPole-v1", warmup=0.2)


def test_every_setting_is_measured_once_with_its_own_server(rows):
    assert [(r["max_batch_size"], r["timeout_ms"]) for r in rows] == [
        (1, 0.0),
        (1, 5.0),
        (2, 0.0),
        (2, 5.0),
    ]
    assert all(r["num_actors"] == 2 and r["steps_per_second"] > 0 for r in rows)


def test_a_batch_of_one_is_never_more_than_one(rows):
    assert all(r["mean_batch_size"] == 1.0 for r in rows if r["max_batch_size"] == 1)
    assert all(1.0 <= r["mean_batch_size"] <= 2.0 for r in rows)


def test_a_timeout_lets_batches_fill(rows):
    waited = next(r for r in rows if (r["max_batch_size"], r["timeout_ms"]) == (2, 5.0))
    assert waited["mean_batch_size"] > 1.3, waited  # 5 ms is ample for 2 CartPole actors


def test_the_figure_has_latency_and_throughput_for_each_timeout(rows):
    figure = latency_figure(rows, recorded=rows)
    names = {trace.name for trace in figure.data}
    assert names == {"timeout 0 ms", "timeout 5 ms"}
    assert len(figure.data) == 2 * 2 * 2  # latency and steps/s, per timeout, this run and record


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((2, (4,), (0.0,)), "never fills"),
        ((2, (1,), (-1.0,)), "timeouts"),
        ((2, (0,), (0,)), "positive"),
    ],
)
def test_settings_that_cannot_work_are_refused_with_the_fix(args, message):
    with pytest.raises(ValueError, match=message):
        latency_sweep(*args, 0.5, env_id="CartPole-v1")


def test_command_prints_the_table_and_ratios_and_writes_json(tmp_path, capsys):
    out = tmp_path / "latency.json"
    argv = ["--env", "CartPole-v1", "--actors", "2", "--batches", "1", "2", "--timeouts", "0"]
    assert bench.main([*argv, "--seconds", "0.3", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(
        r"ratios: steps_best_vs_batch1=\d+\.\d\d p50_at_best_vs_batch1=\d+\.\d\d", lines[-1]
    )
    report = json.loads(out.read_text())
    assert [r["max_batch_size"] for r in report["rows"]] == [1, 2]
    assert report["num_actors"] == 2 and report["benchmark"] == "seed_latency"


def test_the_tradeoff_figure_has_a_curve_per_actor_count_ordered_by_latency(rows):
    from workbench.measure.seed_latency import tradeoff_figure

    more = [{**r, "num_actors": 4, "latency_p99_ms": 2 * r["latency_p99_ms"]} for r in rows]
    figure = tradeoff_figure([*rows, *more])
    assert [trace.name for trace in figure.data] == ["2 actors", "4 actors"]
    for trace in figure.data:
        assert list(trace.x) == sorted(trace.x) and len(trace.x) == len(rows)


def test_the_command_sweeps_each_actor_count_with_the_batches_that_can_fill(tmp_path):
    out = tmp_path / "latency.json"
    argv = ["--env", "CartPole-v1", "--actors", "1", "2", "--batches", "1", "2", "--timeouts", "0"]
    assert bench.main([*argv, "--seconds", "0.3", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [(r["num_actors"], r["max_batch_size"]) for r in report["rows"]] == [
        (1, 1),
        (2, 1),
        (2, 2),
    ]
    assert report["actor_counts"] == [1, 2] and report["num_actors"] == 2
