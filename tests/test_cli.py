"""Specifications for the package from the terminal (``python -m workbench``: ``workbench.cli``)
and for the TensorBoard event files every run writes beside its metrics (``runs.tensorboard``).

The commands run as a user runs them, in a child process (``sys.executable -m workbench``), with
their runs under ``tmp_path``; one short ``ppo-cartpole`` run (1,024 env steps, a few seconds) is
shared by the tests that read, continue or play it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench import cli
from workbench.runs.rows import RowLog
from workbench.runs.tensorboard import ENV_SWITCH

FIRST_STEPS = 1024  # ppo-cartpole: 4 updates of 8 envs x 32 steps


def workbench(*args: str, runs: Path, env: dict | None = None, timeout: float = 120):
    """``python -m workbench *args`` in a child process, its runs under ``runs``."""
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=runs.parent,
        env=environment(runs, env),
    )


def environment(runs: Path, extra: dict | None = None) -> dict:
    return {
        **os.environ,
        "WORKBENCH_PROGRESS": "0",
        "WORKBENCH_RUNS_DIR": str(runs),
        **(extra or {}),
    }


def metric_rows(folder: Path) -> list[dict]:
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [line for line in lines if line.get("type") != "header" and "event" not in line]


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """A finished ``train ppo-cartpole`` of ``FIRST_STEPS`` env steps, and its run folder."""
    runs = tmp_path_factory.mktemp("cli") / "runs"
    done = workbench(
        "train", "ppo-cartpole", "--env-steps", str(FIRST_STEPS), "--name", "first", runs=runs
    )
    return done, runs / "first"


# --- list and bad input ---------------------------------------------------------------------------


def test_list_shows_every_recipe_of_the_three_registries(tmp_path):
    done = workbench("list", runs=tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    names = {line.split()[0] for line in done.stdout.splitlines()[1:]}
    assert names == set(cli.all_recipes())
    kinds = {line.split()[1] for line in done.stdout.splitlines()[1:]}
    assert kinds == {"Run", "SEED", "Ape-X"}


def test_help_imports_no_torch():
    code = "import sys; from workbench import cli; cli.parser(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_an_unknown_recipe_exits_2_naming_close_names_and_the_list_command(tmp_path):
    done = workbench("train", "ppo-cartpol", runs=tmp_path / "runs")
    assert done.returncode == 2
    assert "ppo-cartpole" in done.stderr and "python -m workbench list" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def test_a_limit_below_one_is_refused_before_anything_starts(tmp_path):
    done = workbench("train", "ppo-cartpole", "--env-steps", "0", runs=tmp_path / "runs")
    assert done.returncode == 2 and "--env-steps: 0 must be at least 1" in done.stderr


def test_evaluate_of_a_missing_checkpoint_names_what_to_pass(tmp_path):
    done = workbench("evaluate", str(tmp_path / "nowhere"), runs=tmp_path / "runs")
    assert done.returncode == 2 and "no checkpoint at" in done.stderr
    assert "Traceback" not in done.stderr


# --- train, resume, evaluate ----------------------------------------------------------------------


def test_train_writes_a_run_folder_with_rows_a_checkpoint_and_its_recipe(first):
    done, folder = first
    assert done.returncode == 0, done.stderr  # ended at the --env-steps the command named
    assert f"run folder {folder}" in done.stdout
    assert "[first] env steps" in done.stdout  # a line per row
    assert f"after {FIRST_STEPS:,} env steps" in done.stdout and "not reached" in done.stdout
    assert metric_rows(folder)[-1]["charts/env_steps"] == FIRST_STEPS
    assert (folder / "checkpoint.pt").is_file()
    assert json.loads((folder / cli.RECIPE_FILE).read_text())["recipe"] == "ppo-cartpole"


def test_resume_continues_the_checkpoint_past_its_env_steps(first, tmp_path):
    _, folder = first
    runs = folder.parent
    done = workbench(
        "train",
        "ppo-cartpole",
        "--resume",
        str(folder),
        "--env-steps",
        "2048",
        "--name",
        "second",
        runs=runs,
    )
    assert done.returncode == 0, done.stderr
    rows = metric_rows(runs / "second")
    assert rows[0]["charts/env_steps"] > FIRST_STEPS  # counters go on from the checkpoint's
    assert rows[-1]["charts/env_steps"] == 2048
    header = json.loads((runs / "second" / "metrics.jsonl").read_text().splitlines()[0])
    assert header["resumed_from"] == str(folder)


def test_evaluate_plays_games_with_the_recipe_its_run_folder_names(first):
    _, folder = first
    done = workbench("evaluate", str(folder / "checkpoint.pt"), "--games", "2", runs=folder.parent)
    assert done.returncode == 0, done.stderr
    assert "ppo-cartpole on CartPole-v1, 2 games, greedy actions: mean" in done.stdout


def test_evaluate_of_a_checkpoint_without_its_recipe_asks_for_recipe(first, tmp_path):
    _, folder = first
    alone = tmp_path / "kept.pt"
    alone.write_bytes((folder / "checkpoint.pt").read_bytes())
    done = workbench("evaluate", str(alone), runs=tmp_path / "runs")
    assert done.returncode == 2 and "--recipe NAME" in done.stderr


def test_a_seed_recipe_trains_to_a_small_env_step_limit(tmp_path):
    runs = tmp_path / "runs"
    done = workbench(
        "train", "seed-vtrace-cartpole", "--env-steps", "1500", "--name", "seed", runs=runs
    )
    assert done.returncode == 0, done.stderr
    assert metric_rows(runs / "seed")[-1]["charts/env_steps"] >= 1500
    assert (runs / "seed" / "checkpoint.pt").is_file()


def test_ctrl_c_stops_cleanly_keeping_the_checkpoint_and_printing_the_resume_command(tmp_path):
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "workbench", "train", "ppo-cartpole", "--name", "long"]
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env=environment(runs),
    ) as child:
        for line in child.stdout:  # the first row: the loop runs
            if line.startswith("[long] env steps"):
                break
        child.send_signal(signal.SIGINT)
        output, _ = child.communicate(timeout=60)
    assert child.returncode == 130, output
    assert "stopped after" in output and (runs / "long" / "checkpoint.pt").is_file()
    assert f"--resume {runs / 'long'} --name long" in output


def run_ending(ended_by: str) -> SimpleNamespace:
    return SimpleNamespace(
        ended_by=ended_by,
        status="finished",
        metrics=[],
        target_metric="charts/mean_return",
        name="x",
        env_steps=10,
        updates=1,
        wall_seconds=1.0,
        metrics_path="m",
        checkpoint_path="c",
    )


@pytest.mark.parametrize(
    "ended_by, options, status",
    [
        ("target", {}, 0),
        ("env_steps", {"env_steps": 5000}, 0),  # the command's own limit
        ("seconds", {"seconds": 60.0}, 0),
        ("env_steps", {"no_target": True}, 0),  # no target asked: the budget is what was asked
        ("env_steps", {}, 1),  # the recipe's own budget ran out below its target
    ],
)
def test_train_exits_0_at_the_target_or_a_limit_it_was_given_and_1_short_of_the_recipes_claim(
    ended_by, options, status, capsys
):
    given = {"env_steps": None, "updates": None, "seconds": None, "no_target": False, **options}
    args = Namespace(**given)
    assert cli.summary(args, run_ending(ended_by), target=475.0) == status


# --- TensorBoard ----------------------------------------------------------------------------------


def test_tensorboard_event_files_hold_each_rows_scalars_at_its_env_steps(first):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    _, folder = first
    assert list(folder.glob("events.out.tfevents.*"))
    events = accumulator.EventAccumulator(str(folder))
    events.Reload()
    written = [(e.step, e.value) for e in events.Scalars("charts/updates")]
    rows = metric_rows(folder)
    assert written == [(row["charts/env_steps"], row["charts/updates"]) for row in rows]
    assert "charts/mean_return" in events.Tags()["scalars"]


def test_no_event_file_when_tensorboard_is_switched_off(tmp_path):
    runs = tmp_path / "runs"
    done = workbench(
        "train",
        "ppo-cartpole",
        "--env-steps",
        "256",
        "--name",
        "off",
        runs=runs,
        env={ENV_SWITCH: "0"},
    )
    assert done.returncode == 0, done.stderr
    assert metric_rows(runs / "off") and not list((runs / "off").glob("events.out.tfevents.*"))


def test_a_new_event_file_sorts_after_every_earlier_one_in_its_folder(tmp_path):
    # TensorBoard reads a folder's event files in name order, and the writer's counter at the end
    # of the name is compared as text: a file ".10" opened in the same second as ".9" sorted
    # first, and a continued run's rows were read before (and purged by) the run they continue.
    pytest.importorskip("tensorboard")
    import socket
    import time

    from workbench.runs.tensorboard import TensorBoardRows

    # This process's own earlier file of this second, its counter text-sorting after any new one.
    name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.99999"
    earlier = tmp_path / name
    earlier.write_bytes(b"")
    rows = TensorBoardRows(tmp_path)
    rows.add({"charts/env_steps": 100, "charts/updates": 1})
    rows.close()
    files = sorted(p.name for p in tmp_path.glob("events.out.tfevents.*"))
    assert len(files) == 2 and files[0] == earlier.name


def test_a_run_continued_in_its_folder_hides_the_event_rows_past_its_checkpoint(tmp_path):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    log = RowLog(tmp_path / "metrics.jsonl", "killed")
    for i in range(1, 9):  # a run killed after its checkpoint at row 4 had written 8 rows
        log.record({"charts/iteration": i, "charts/env_steps": 100 * i, "charts/updates": i})
    log.close()
    continued = RowLog(tmp_path / "metrics.jsonl", "continued")
    assert continued.reload(4) == 4
    for i in range(5, 7):  # its continuation's rows, from other episodes: other values
        continued.record({"charts/iteration": i, "charts/env_steps": 100 * i, "charts/updates": -i})
    continued.close()
    events = accumulator.EventAccumulator(str(tmp_path))
    events.Reload()
    written = [(e.step, e.value) for e in events.Scalars("charts/updates")]
    assert written == [(100, 1), (200, 2), (300, 3), (400, 4), (500, -5), (600, -6)]
