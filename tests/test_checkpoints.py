"""Specifications for what a run keeps when it ends the hard way (``workbench.runs.checkpoints``).

Every run kind checkpoints on a timer by default; a write is whole or absent and keeps the one
before it; a damaged newest checkpoint gives way to the previous one, and a damaged metrics line
is named. A run whose owner is SIGKILLed continues from disk with ``from_checkpoint`` without a
gap or a duplicate row: tested for ``Run``, ``Apex`` and ``Seed`` (CartPole, a second between
checkpoints).
"""

from __future__ import annotations

import errno
import inspect
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from processes import first_line, wait_gone

from workbench.apex import Apex
from workbench.learners import PPO, PPOConfig
from workbench.models import ActorCritic
from workbench.runs import Run, RunConfig, RunSettings, load_metrics, rows
from workbench.runs.checkpoints import (
    CHECKPOINT_SECONDS,
    CheckpointError,
    load_checkpoint_file,
    previous_checkpoint,
    save_keeping_previous,
)
from workbench.seed import Seed

HOLDER = Path(__file__).parent / "scripts" / "hold_checkpointed_run.py"
STEPS = 64  # env steps per iteration of small_run


def small_run(tmp_path, **config) -> Run:
    torch.manual_seed(0)
    algo = PPO(ActorCritic((4,), 2), PPOConfig(num_epochs=2, num_minibatches=2))
    settings = RunSettings(num_workers=1, num_envs=4, horizon=16, num_minibatches=2)
    config = RunConfig(runs_dir=str(tmp_path), name="small", **config)
    return Run("CartPole-v1", algo, config=config, settings=settings)


def metric_rows(rows: list[dict]) -> list[dict]:
    return [row for row in rows if "event" not in row]


# --- the timer ------------------------------------------------------------------------------------


def test_every_run_kind_checkpoints_every_few_minutes_by_default():
    assert 60 <= CHECKPOINT_SECONDS <= 600
    assert RunConfig().checkpoint_seconds == CHECKPOINT_SECONDS
    for kind in (Apex, Seed):
        default = inspect.signature(kind.__init__).parameters["checkpoint_seconds"].default
        assert default == CHECKPOINT_SECONDS, kind


def test_a_run_checkpoints_on_its_timer_and_records_each_with_its_cost(tmp_path):
    run = small_run(tmp_path, checkpoint_seconds=0.2)
    done = threading.Event()

    @run.on_row
    def stop_after_two(row: dict) -> None:
        if sum(r.get("event") == "checkpoint" for r in run.events) >= 2 and not done.is_set():
            done.set()
            run.stop(wait=False)

    run.run(seconds=120)
    checkpoints = [row for row in run.events if row["event"] == "checkpoint"]
    assert len(checkpoints) >= 2, run.events
    assert all(row["seconds"] > 0 and row["bytes"] > 1000 for row in checkpoints)
    gaps = [
        b["charts/wall_seconds"] - a["charts/wall_seconds"]
        for a, b in zip(checkpoints, checkpoints[1:])
    ]
    assert all(gap >= 0.2 for gap in gaps), gaps
    assert previous_checkpoint(run.checkpoint_path).is_file()  # the one before, kept


def test_no_timer_means_a_checkpoint_only_when_the_loop_ends(tmp_path):
    run = small_run(tmp_path, checkpoint_seconds=None, total_steps=6 * STEPS).run()
    assert not [row for row in run.events if row["event"] == "checkpoint"]
    assert load_checkpoint_file(run.dir)["env_steps"] == 6 * STEPS


def test_a_period_that_cannot_work_names_the_fix(tmp_path):
    with pytest.raises(ValueError, match="checkpoint_seconds=0.*None for no timed"):
        small_run(tmp_path, checkpoint_seconds=0)


# --- writing and reading back ---------------------------------------------------------------------


def test_a_damaged_newest_checkpoint_gives_way_to_the_previous_one(tmp_path, capsys):
    path = tmp_path / "checkpoint.pt"
    save_keeping_previous({"env_steps": 100}, path)
    save_keeping_previous({"env_steps": 200}, path)
    assert load_checkpoint_file(tmp_path)["env_steps"] == 200
    path.write_bytes(path.read_bytes()[:40])  # truncated, as by a kill mid-copy
    assert load_checkpoint_file(tmp_path)["env_steps"] == 100
    assert "continuing from the checkpoint before it" in capsys.readouterr().err


def test_no_readable_checkpoint_is_an_error_that_names_both_files(tmp_path):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"not a checkpoint")
    previous_checkpoint(path).write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt: .*checkpoint\.previous\.pt: "):
        load_checkpoint_file(path)


def test_a_full_disk_is_a_clear_error_and_leaves_the_checkpoint_there_whole(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_keeping_previous({"env_steps": 100}, path)
    before = path.read_bytes()

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", no_space)
    with pytest.raises(CheckpointError, match="No space left.*free space there"):
        save_keeping_previous({"env_steps": 200}, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # no temporary left


def test_an_unfinished_last_metrics_line_is_left_out(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"type": "header", "env_steps": 0}\n{"charts/env_steps": 64}\n{"charts/en')
    headers, rows = load_metrics(path)
    assert len(headers) == 1 and rows == [{"charts/env_steps": 64}]


def test_a_damaged_metrics_line_before_the_last_is_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"charts/env_steps": 64}\n{"charts/en\n{"charts/env_steps": 128}\n')
    with pytest.raises(ValueError, match="line 2, is not JSON"):
        load_metrics(path)


# --- limits of a run that has gone before ---------------------------------------------------------


def test_a_limit_a_resumed_run_has_already_passed_names_the_fix(tmp_path):
    first = small_run(tmp_path, total_steps=4 * STEPS).run()
    resumed = Run.from_checkpoint(
        first.dir, PPO(ActorCritic((4,), 2), PPOConfig(num_epochs=2, num_minibatches=2))
    )
    status = resumed.status
    with pytest.raises(ValueError, match=r"already run 256 env steps.*give env_steps=384"):
        resumed.start(env_steps=2 * STEPS)
    assert resumed.status == status  # nothing started
    resumed.run(env_steps=6 * STEPS)  # the fix the message names works
    assert resumed.env_steps == 6 * STEPS


# --- a kill of the process that owns the run ------------------------------------------------------


def kill_after_a_checkpoint(kind: str, runs_dir: Path) -> tuple[dict, list[int]]:
    """Start the holder, wait for its first timed checkpoint and a few rows after it, SIGKILL it;
    returns the checkpoint it left and the pids of its children."""
    process = subprocess.Popen(
        [sys.executable, str(HOLDER), kind, str(runs_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HOLDER.parents[2],
    )
    try:
        children = json.loads(first_line(process, 180))["children"]
        metrics = runs_dir / "killed" / "metrics.jsonl"
        saved = load_checkpoint_file(runs_dir / "killed")
        deadline = 120
        while deadline > 0:  # rows past the checkpoint, which the kill will strand
            rows = metric_rows(load_metrics(metrics)[1])
            if rows and rows[-1]["charts/env_steps"] > saved["env_steps"]:
                break
            threading.Event().wait(0.1)
            deadline -= 0.1
        process.kill()
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    return load_checkpoint_file(runs_dir / "killed"), children


def resume(kind: str, folder: Path):
    if kind == "run":
        return Run.from_checkpoint(
            folder, PPO(ActorCritic((4,), 2), PPOConfig(num_epochs=2, num_minibatches=2))
        )
    if kind == "apex":
        return Apex.from_checkpoint(folder, log_interval=0.3)
    return Seed.from_checkpoint(folder, log_interval=0.3)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["run", "apex", "seed"])
def test_a_run_whose_owner_is_killed_continues_from_disk_without_a_gap_or_a_duplicate(
    kind, tmp_path
):
    saved, children = kill_after_a_checkpoint(kind, tmp_path)
    assert wait_gone(children, 10.0) == [], f"a process of the killed {kind} outlived it"
    folder = tmp_path / "killed"
    _, stranded = load_metrics(folder)
    assert metric_rows(stranded)[-1]["charts/env_steps"] > saved["env_steps"]  # work lost

    resumed = resume(kind, folder)
    assert (resumed.env_steps, resumed.updates) == (saved["env_steps"], saved["updates"])
    resumed.run(env_steps=saved["env_steps"] + 2_000, seconds=saved["wall_seconds"] + 120)
    assert resumed.status == "finished" and resumed.env_steps >= saved["env_steps"] + 2_000

    headers, rows = load_metrics(folder)
    rows = metric_rows(rows)
    assert headers[-1]["resumed_from"] == str(folder)
    assert headers[-1]["env_steps"] == saved["env_steps"]
    iterations = [row["charts/iteration"] for row in rows]
    assert iterations == list(range(1, len(rows) + 1))  # no row twice, none missing
    steps = [row["charts/env_steps"] for row in rows]
    assert steps == sorted(steps) and steps[-1] > saved["env_steps"], steps  # it counts on
    assert saved["env_steps"] in steps  # from the checkpoint's row, not past it


def test_a_full_disk_under_the_metrics_fails_the_run_clearly_and_the_checkpoint_survives(
    tmp_path, monkeypatch
):
    run = small_run(tmp_path, checkpoint_every=2, total_steps=10**6)
    real_open = open

    def full_after_six_rows(path, mode="r", *args, **kwargs):
        if str(path).endswith("metrics.jsonl") and "a" in mode and run.iteration >= 6:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(rows, "open", full_after_six_rows, raising=False)
    with pytest.raises(OSError, match="No space left.*free space there or give the run"):
        run.run()
    assert run.status == "failed"
    monkeypatch.undo()
    # Row 6 found the disk full; the last checkpoint (every 2 rows) was at row 4, row 5 is past it.
    assert load_checkpoint_file(run.dir)["iteration"] == 4
    resumed = Run.from_checkpoint(
        run.dir, PPO(ActorCritic((4,), 2), PPOConfig(num_epochs=2, num_minibatches=2))
    )
    resumed.run(env_steps=8 * STEPS)
    steps = [row["charts/env_steps"] for row in metric_rows(load_metrics(run.dir)[1])]
    assert steps == [STEPS * i for i in range(1, 9)]
