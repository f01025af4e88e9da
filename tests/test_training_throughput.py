"""The training-throughput benchmark (``benchmarks/training_throughput.py``) at a tiny size, so its
code cannot rot: every row is measured and the command writes its table, JSON and ratios line.

No timing is asserted (CartPole, 2 envs x 16 steps, a fraction of a second per row; one Pong row
checks the Atari path: uint8 frames into the NatureCNN, bfloat16 learner).
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

import training_throughput as bench  # noqa: E402  (the benchmarks folder, as when the script runs)

TINY = bench.Hyperparameters(num_envs=2, num_steps=16, num_minibatches=2, update_epochs=1)


def check(measured, kind: str) -> None:
    assert measured.details["kind"] == kind
    assert measured.details["iterations"] >= 1
    assert measured.steps == measured.details["iterations"] * TINY.batch_size
    assert measured.steps_per_second > 0
    assert set(measured.stages) == {"env", "inference", "learn", "wait", "total"}
    assert measured.stages["learn"] > 0


def test_plain_loop_runs_whole_iterations():
    check(bench.plain_loop("CartPole-v1", 0.05, TINY), "plain")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_measure_run_times_the_run(mode):
    measured = bench.measure_run("CartPole-v1", 0.05, TINY, mode=mode, sampler="serial")
    check(measured, mode)
    assert measured.details["policy_lag"] == (1 if mode == "async" else 0)


def test_measure_run_on_pong_with_the_bfloat16_learner():
    measured = bench.measure_run(
        "ALE/Pong-v5",
        0.01,
        TINY,
        mode="sync",
        sampler="serial",
        autocast="bfloat16",
        channels_last=True,
    )
    check(measured, "sync")
    assert measured.frames_per_second == pytest.approx(4 * measured.steps_per_second)


def test_command_prints_the_table_and_ratios_and_writes_json(tmp_path, capsys):
    out = tmp_path / "training.json"
    code = bench.main(
        [
            "--env",
            "CartPole-v1",
            "--num-envs",
            "2",
            "--horizon",
            "16",
            "--seconds",
            "0.05",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"ratios: vs_plain=\d+\.\d\d async_vs_sync=\d+\.\d\d", lines[-1])
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"plain", "sync", "async"}
    assert set(report["ratios"]) == {"vs_plain", "async_vs_sync"}
    assert report["benchmark"] == "training_throughput" and report["git_commit"]
