"""The learning benchmark's record (``benchmarks/learning.py``): a ``--merge`` keeps every run's
provenance, so one file can hold seeds and recipes recorded at different commits."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

import learning  # noqa: E402  (the benchmarks folder, as when the script runs)

OLD_HEADER = {
    "benchmark": "learning",
    "command": "python benchmarks/learning.py --seeds 0 1 2",
    "git_commit": "0" * 40,
    "date": "2026-11-01T00:00:00+00:00",
    "machine": {"cores": 2},
}


def test_a_merge_keeps_the_provenance_of_runs_recorded_under_an_older_header(tmp_path):
    # An older file: its runs carry no provenance of their own, only the file's header does.
    earlier = {
        **OLD_HEADER,
        "max_seconds": None,
        "recipes": {
            "dqn-cartpole": {"runs": [{"seed": 0, "solved": True}]},
            "ppo-cartpole": {"runs": [{"seed": 1, "solved": True}, {"seed": 7, "solved": True}]},
        },
    }
    out = tmp_path / "learning.json"
    out.write_text(json.dumps(earlier))

    argv = ["--recipes", "ppo-cartpole", "--seeds", "7", "--max-seconds", "1", "--log-every", "0"]
    learning.main([*argv, "--merge", "--out", str(out)])  # 1 s: not solved, recorded all the same

    merged = json.loads(out.read_text())
    assert merged["git_commit"] != OLD_HEADER["git_commit"]  # the header is this run's
    kept = merged["recipes"]["dqn-cartpole"]["runs"][0]
    assert {key: kept[key] for key in OLD_HEADER} == OLD_HEADER
    ppo_runs = {run["seed"]: run for run in merged["recipes"]["ppo-cartpole"]["runs"]}
    assert sorted(ppo_runs) == [1, 7]
    assert ppo_runs[1]["git_commit"] == OLD_HEADER["git_commit"]
    assert ppo_runs[7]["git_commit"] == merged["git_commit"]  # rerun: the new provenance
    assert ppo_runs[7]["stopped"] == "time"


def test_device_moves_the_learner_of_an_apex_or_seed_recipe():
    args = learning.parse_args(
        ["--recipes", "seed-vtrace-pong-fast", "apex-dqn-pong-fast", "--device", "cuda"]
    )
    for name in args.recipes:
        recipe = learning.all_recipes()[name]
        chosen = learning.chosen_recipe(recipe, args)
        assert (recipe.device, chosen.device) == ("cpu", "cuda")
        assert chosen.config == recipe.config and chosen.target_return == recipe.target_return


def test_device_refuses_a_recipe_that_chooses_its_device_in_its_config(capsys):
    try:
        learning.parse_args(["--recipes", "ppo-pong-fast", "--device", "cuda"])
    except SystemExit as exit:
        assert exit.code == 2
    else:
        raise AssertionError("--device on a PPO recipe was accepted")
    assert "ppo-pong-fast" in capsys.readouterr().err


def test_a_resumed_run_prints_one_progress_line_per_log_interval(capsys):
    # A run resumed from a checkpoint reports wall seconds from its first segment's start: its
    # first point is at 3,300 s, and the points after it come every 2 s.
    curve = learning.Curve(frameskip=4, every=10, log_every=60, prefix="resumed")
    for seconds in range(3300, 3420, 2):
        curve({"env_steps": seconds * 200, "mean_return": None, "episodes": 0, "seconds": seconds})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[-2] for line in lines] == ["3300", "3360"]


def test_set_changes_nested_settings_of_a_recipe_in_their_own_types():
    from workbench.apex import APEX_RECIPES

    recipe = APEX_RECIPES["apex-dqn-pong-fast"]
    registered = recipe.config.learner.learning_rate
    settings = [
        learning.parse_setting("config.learner.learning_rate=3e-4"),
        learning.parse_setting("config.min_replay_ratio=2"),
        learning.parse_setting("config.learner.batch_size=32.0"),
    ]
    probe = learning.with_settings(recipe, settings)
    assert probe.config.learner.learning_rate == 3e-4 != registered
    assert probe.config.min_replay_ratio == 2.0 and isinstance(probe.config.min_replay_ratio, float)
    assert probe.config.learner.batch_size == 32 and isinstance(
        probe.config.learner.batch_size, int
    )
    assert recipe.config.learner.learning_rate == registered  # the registered recipe is unchanged


def test_set_refuses_an_unknown_setting_and_names_the_ones_there_are(tmp_path, capsys):
    args = ["--recipes", "apex-dqn-pong-fast", "--set", "config.learner.lr=3e-4"]
    with pytest.raises(SystemExit):
        learning.parse_args([*args, "--out", str(tmp_path / "probe.json")])
    error = capsys.readouterr().err
    assert "no setting 'lr'" in error and "learning_rate" in error


def test_set_refuses_a_fraction_for_an_integer_setting(tmp_path, capsys):
    args = ["--recipes", "apex-dqn-pong-fast", "--set", "config.learner.batch_size=2.5"]
    with pytest.raises(SystemExit):
        learning.parse_args([*args, "--out", str(tmp_path / "probe.json")])
    assert "batch_size=2.5" in capsys.readouterr().err


def test_set_needs_an_out_of_its_own(capsys):
    # Without --out a probe would overwrite (or --merge into) the recipe's own record.
    with pytest.raises(SystemExit):
        learning.parse_args(["--recipes", "apex-dqn-pong-fast", "--set", "config.seed=1"])
    assert "--out" in capsys.readouterr().err


def test_a_probe_runs_the_recipe_its_settings_describe(tmp_path):
    out = str(tmp_path / "probe.json")
    args = learning.parse_args(
        ["--recipes", "dqn-pong-fast", "--set", "config.learning_rate=3e-4", "--out", out]
    )
    recipe = learning.chosen_recipe(learning.all_recipes()["dqn-pong-fast"], args)
    assert recipe.config.learning_rate == 3e-4 and args.settings == [("config.learning_rate", 3e-4)]
