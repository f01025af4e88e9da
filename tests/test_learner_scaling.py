"""Data-parallel learners against their number (``measure.learner_scaling`` and
``benchmarks/learner_scaling.py``) at a tiny size: one learner and a gloo group each time the same
update; no speed is asserted (that is the benchmark's, in data/)."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from workbench.measure.learner_scaling import learner_scaling
from workbench.runs.recipes import RECIPES

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

import learner_scaling as bench  # noqa: E402  (the benchmarks folder, as when the script runs)


def test_one_learner_and_a_group_each_train_the_recipes_batch():
    rows = learner_scaling((1, 2), recipe="ppo-cartpole", updates=1, warmup=0)
    recipe = RECIPES["ppo-cartpole"]
    batch = recipe.num_envs * recipe.horizon
    assert [(r.learners, r.devices) for r in rows] == [(1, ("cpu",)), (2, ("cpu:0", "cpu:1"))]
    for row in rows:
        assert row.samples_per_second == pytest.approx(batch / row.seconds_per_update)


def test_counts_that_are_not_positive_ints_are_refused():
    with pytest.raises(ValueError, match="positive ints"):
        learner_scaling((0, 2), recipe="ppo-cartpole")


def test_command_prints_the_table_and_ratios_and_writes_json(tmp_path, capsys):
    out = tmp_path / "scaling.json"
    argv = ["--learners", "1", "2", "--updates", "1", "--warmup", "0", "--recipe", "ppo-cartpole"]
    assert bench.main([*argv, "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"ratios: samples_2_vs_1=\d+\.\d\d", lines[-1])
    report = json.loads(out.read_text())
    assert [r["learners"] for r in report["rows"]] == [1, 2]
