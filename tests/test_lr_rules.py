"""Learning-rate rules at large batch (``studies.lr_rules`` and ``benchmarks/lr_rules.py``) at a
tiny size: each rule gives the batch its rate, every run is kept with its seed, and the summary and
figure reduce the seeds. Learning itself is the recorded study's (data/lr_rules_*.json)."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from workbench.studies.lr_rules import RuleRun, lr_rules_study, rules_figure, rules_summary

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

import lr_rules as bench  # noqa: E402  (the benchmarks folder, as when the script runs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    # ppo-cartpole is tuned at 8 x 32 = 256 with lr 1e-3; 32 x 32 is 4 times that batch
    return lr_rules_study(
        "ppo-cartpole",
        [(32, 32)],
        total_steps=2048,
        rules=("none", "sqrt", "linear"),
        seeds=(0, 1),
        runs_dir=str(tmp_path_factory.mktemp("rules")),
    )


def test_each_rule_gives_the_batch_its_rate(runs):
    rates = {r.rule: r.learning_rate for r in runs}
    assert rates == pytest.approx({"none": 1e-3, "sqrt": 2e-3, "linear": 4e-3})


def test_every_rule_and_seed_is_one_run_of_the_budget(runs):
    assert [(r.rule, r.seed) for r in runs] == [
        (rule, seed) for rule in ("none", "sqrt", "linear") for seed in (0, 1)
    ]
    assert all(r.batch_size == 1024 and r.env_steps == 2048 for r in runs)


def run(rule: str, seed: int, steps: int | None, batch: int = 1024) -> RuleRun:
    return RuleRun(rule, batch // 32, 32, batch, seed, 1e-3, steps, steps and steps / 1000, 0, 0, 0)


def test_the_summary_takes_the_median_and_range_of_the_seeds_that_reached_it():
    (row,) = rules_summary([run("sqrt", 0, 30_000), run("sqrt", 1, 50_000), run("sqrt", 2, None)])
    assert (row["runs"], row["reached"]) == (3, 2)
    assert row["median_steps"] == 40_000 and row["steps_range"] == (30_000, 50_000)


def test_the_figure_draws_a_line_per_rule_and_skips_batches_never_reached():
    figure = rules_figure(
        [run("none", 0, None), run("linear", 0, 20_000), run("linear", 0, 30_000, batch=4096)]
    )
    lines = {trace.name: list(trace.x) for trace in figure.data}
    assert lines == {"linear": [1024, 4096]}


def test_each_point_says_how_many_seeds_reached_the_target():
    figure = rules_figure([run("sqrt", 0, 20_000), run("sqrt", 1, None), run("sqrt", 2, 40_000)])
    assert [list(trace.text) for trace in figure.data] == [["2/3"], ["2/3"]]


def test_unknown_rules_are_refused_with_the_choices():
    with pytest.raises(ValueError, match="the rules are"):
        lr_rules_study("ppo-cartpole", [(8, 32)], total_steps=256, rules=("cubic",))


def test_command_prints_the_runs_and_writes_json(tmp_path, capsys):
    out = tmp_path / "rules.json"
    argv = ["--shapes", "16x16", "--rules", "none", "linear", "--seeds", "0"]
    assert bench.main([*argv, "--total-steps", "512", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"ratios: none_reached_at_256=0\.00 linear_reached_at_256=0\.00", lines[-1])
    report = json.loads(out.read_text())
    assert [r["rule"] for r in report["runs"]] == ["none", "linear"]
    assert {r["rule"] for r in report["summary"]} == {"none", "linear"}
