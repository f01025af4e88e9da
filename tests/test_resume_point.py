"""Where a continued run writes (``runs.records.resume_point``): beside its own run, or, for a
checkpoint kept apart from its run (``data/seed_vtrace_pong_fast_climb.pt``), in the runs folder;
and the config a checkpoint saved, read back under today's field names."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from workbench.apex import APEX_RECIPES
from workbench.runs.records import config_from_dict, config_to_dict, resume_point


def saved_checkpoint(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state": {"config": {}}, "name": "climb"}, path)
    return path


def test_a_run_s_own_checkpoint_continues_in_its_runs_folder(tmp_path):
    run = tmp_path / "runs" / "2026-11-28_seed_Pong"
    checkpoint = saved_checkpoint(run / "checkpoint.pt")
    (run / "metrics.jsonl").write_text("")
    assert resume_point(checkpoint, config=object())[2] == str(tmp_path / "runs")
    assert resume_point(run, config=object())[2] == str(tmp_path / "runs")


def test_a_kept_checkpoint_continues_in_the_default_runs_folder_not_beside_it(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("WORKBENCH_RUNS_DIR", str(tmp_path / "elsewhere"))
    checkpoint = saved_checkpoint(tmp_path / "repo" / "data" / "seed_vtrace_pong_fast_climb.pt")
    # before: the data folder's parent, the repository's root, got the run's folder
    assert resume_point(checkpoint, config=object())[2] == str(tmp_path / "elsewhere")


def test_a_folder_named_by_the_caller_wins(tmp_path):
    checkpoint = saved_checkpoint(tmp_path / "data" / "climb.pt")
    assert resume_point(checkpoint, config=object(), runs_dir="mine")[2] == "mine"


@dataclass
class Config:
    seed: int


def test_without_a_seed_the_same_run_goes_on_under_its_name(tmp_path):
    checkpoint = saved_checkpoint(tmp_path / "data" / "climb.pt")
    point = resume_point(checkpoint, config=Config(seed=0))
    assert (point.name, point.config.seed) == ("climb", 0)


def test_with_a_seed_a_continuation_of_its_own_takes_that_seed_and_a_fresh_name(tmp_path):
    checkpoint = saved_checkpoint(tmp_path / "data" / "climb.pt")
    point = resume_point(checkpoint, config=Config(seed=0), seed=2)
    assert (point.name, point.config.seed) == (None, 2)


def test_a_config_saved_under_earlier_field_names_is_read_under_today_s():
    """An Ape-X checkpoint from before its learner's settings were ``learner`` (``agent``) and
    its algorithm ``algorithm`` (``algo``), with the replay fields its DQNConfig held then: the
    config it describes, the fields that moved elsewhere left out."""
    config = APEX_RECIPES["apex-dqn-pong-fast"].config
    saved = config_to_dict(config)
    saved["agent"], saved["algo"] = saved.pop("learner"), saved.pop("algorithm")
    saved["agent"].update(replay_capacity=400_000, prioritized=True, epsilon_end=0.01)
    assert config_from_dict(saved) == config


def test_a_saved_config_with_a_field_its_class_never_had_is_refused_by_name():
    # A mistyped or foreign field must not vanish: the run would continue with a default in its
    # place. Only the fields a class declares retired (moved to another config) are left out.
    saved = config_to_dict(APEX_RECIPES["apex-dqn-pong-fast"].config)
    saved["learner"]["batch_sise"] = 512
    with pytest.raises(ValueError, match=r"DQNConfig has field\(s\) \['batch_sise'\].*batch_size"):
        config_from_dict(saved)
