"""Specifications for ``workbench.studies.curves`` and ``workbench.studies.pg_studies``: the curves
and comparisons the notebooks plot."""

from __future__ import annotations

import math
import time

import pytest

from workbench.studies import pg_studies
from workbench.studies.curves import learning_curve, wait_for_row

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def row(steps: int, seconds: float, mean_return: float | None, episodes: int) -> dict:
    out = {
        "charts/env_steps": steps,
        "charts/wall_seconds": seconds,
        "charts/episodes": episodes,
        "charts/iteration": steps // 100,
    }
    if mean_return is not None:
        out["charts/episode_return"] = mean_return
    return out


def test_the_curve_averages_the_latest_batches_holding_the_window_weighted_by_episodes():
    rows = [
        row(100, 1.0, 10.0, 10),
        row(200, 2.0, None, 0),
        row(300, 3.0, 30.0, 10),
        row(400, 4.0, 40.0, 30),
    ]
    curve = learning_curve(rows, "x", window=20)
    assert curve.env_steps == [100, 300, 400]  # a batch without ended episodes adds no point
    assert curve.wall_seconds == [1.0, 3.0, 4.0]
    assert curve.returns[0] == 10.0
    assert curve.returns[1] == pytest.approx((10 * 10 + 30 * 10) / 20)
    assert curve.returns[2] == 40.0  # 30 episodes fill the window alone
    assert curve.steps_per_second == pytest.approx(100.0)


def test_event_rows_are_not_points():
    event = {
        "event": "settings",
        "charts/iteration": 1,
        "charts/env_steps": 100,
        "new": {},
        "old": {},
    }
    rows = [row(100, 1.0, 5.0, 1), event]
    assert learning_curve(rows, "x").env_steps == [100]


def test_steps_and_seconds_to_a_target():
    curve = learning_curve([row(100, 1.0, 10.0, 20), row(200, 2.5, 50.0, 20)], "x")
    assert curve.steps_to(50.0) == 200 and curve.seconds_to(50.0) == 2.5
    assert curve.steps_to(51.0) is None and math.isnan(learning_curve([], "empty").final_return)


def test_a_batch_the_minibatches_do_not_divide_names_the_fix(tmp_path):
    with pytest.raises(ValueError, match="not divisible by the recipe's"):
        pg_studies.make_recipe_run("ppo-pong", num_envs=3, horizon=5, runs_dir=str(tmp_path))


def test_a_recipe_run_takes_the_recipes_sizes_and_the_changes_asked_for(tmp_path):
    run = pg_studies.make_recipe_run(
        "ppo-cartpole",
        num_envs=4,
        total_steps=1_000,
        runs_dir=str(tmp_path),
        scale_learning_rate="sqrt",
        reference_batch_size=256,
    )
    assert (run.settings.current.num_envs, run.settings.current.horizon) == (4, 32)
    assert run.config.total_steps == 1_000 and run.algo.config.scale_learning_rate == "sqrt"


def test_wait_for_row_says_when_the_run_ended_first(tmp_path):
    run = pg_studies.make_recipe_run(
        "ppo-cartpole", num_envs=2, horizon=8, total_steps=32, runs_dir=str(tmp_path)
    )
    run.run()
    assert wait_for_row(run, lambda r: r.get("charts/iteration") == 2)["charts/env_steps"] == 32
    with pytest.raises(RuntimeError, match="ended"):
        wait_for_row(run, lambda r: r.get("event") == "never", timeout=5)


def test_sync_against_async_measures_the_policy_lag(tmp_path):
    def make_run(mode):
        return pg_studies.make_recipe_run(
            "ppo-cartpole",
            num_envs=2,
            horizon=8,
            total_steps=4 * 16,
            mode=mode,
            runs_dir=str(tmp_path),
            name=mode,
        )

    results = pg_studies.sync_vs_async(make_run)
    assert results["sync"].policy_lag == 0 and results["async"].policy_lag == 1
    assert results["sync"].iterations == results["async"].iterations == 3


def test_busy_cores_spin_while_the_block_runs_and_end_with_it():
    import psutil

    with pg_studies.busy_cores(1) as pids:
        spinner = psutil.Process(pids[0])
        spinner.cpu_percent()
        time.sleep(1.0)
        # It spins: an idle process shows ~0 %; a loaded machine can cut a spinner's share to 20 %.
        assert spinner.cpu_percent() > 5
    assert (
        not psutil.pid_exists(pids[0]) or psutil.Process(pids[0]).status() == psutil.STATUS_ZOMBIE
    )


def test_busy_cores_end_when_their_parent_is_killed(tmp_path):
    import subprocess
    import sys

    import psutil

    script = (
        "import sys, time\nfrom workbench.studies import pg_studies\n"
        "with pg_studies.busy_cores(1) as pids:\n"
        "    print(pids[0], flush=True)\n"
        "    time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the spinning process outlived its killed parent"
        time.sleep(0.05)
