"""A study's independent runs side by side (``workbench.studies.side_by_side``): each job runs in a
child process, the results come back in the jobs' order, a failing or dying job is a clear error,
and an interrupted or killed parent leaves no child behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from processes import wait_gone

from workbench.studies.side_by_side import run_side_by_side

HOLDER = Path(__file__).parent / "scripts" / "hold_side_by_side.py"


def test_results_come_back_in_the_jobs_order():
    seen = []
    values = run_side_by_side(
        pow, [(2, 3), (3, 2), (5, 1)], processes=2, on_result=lambda i, v: seen.append((i, v))
    )
    assert values == [8, 9, 5]
    assert sorted(seen) == [(0, 8), (1, 9), (2, 5)]  # each once, in the order they ended


def test_the_jobs_run_in_as_many_child_processes_as_asked():
    pids = run_side_by_side(os.getpid, [()] * 6, processes=2)
    assert os.getpid() not in pids and 1 <= len(set(pids)) <= 2


def test_one_process_runs_the_jobs_here():
    assert run_side_by_side(os.getpid, [(), ()], processes=1) == [os.getpid()] * 2


def test_a_failing_job_raises_with_the_childs_traceback():
    with pytest.raises(RuntimeError, match=r"job 1 of the study failed(.|\n)*invalid literal"):
        run_side_by_side(int, [("1",), ("one",)], processes=2)


def test_children_that_die_with_jobs_left_are_an_error_not_a_hang():
    with pytest.raises(RuntimeError, match="ended with jobs left"):
        run_side_by_side(os._exit, [(3,), (3,), (3,)], processes=2)


def test_a_bad_process_count_names_itself():
    with pytest.raises(ValueError, match="processes must be a positive integer, got 0"):
        run_side_by_side(pow, [(2, 3)], processes=0)


def children_of(pid: int, count: int, seconds: float = 60.0) -> list[int]:
    """The spawned children of ``pid`` once there are ``count`` (the resource tracker left out)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = []
        for child in psutil.Process(pid).children():
            try:
                command = " ".join(child.cmdline())
            except psutil.NoSuchProcess:
                continue
            if "spawn_main" in command and "resource_tracker" not in command:
                found.append(child.pid)
        if len(found) >= count:
            return found
        time.sleep(0.1)
    pytest.fail(f"the holder started fewer than {count} children in {seconds:.0f} s")


@pytest.mark.parametrize("ending", [signal.SIGKILL, signal.SIGINT], ids=["killed", "interrupted"])
def test_an_ended_parent_leaves_no_child_behind(ending):
    holder = subprocess.Popen(
        [sys.executable, str(HOLDER)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    children = []
    try:
        assert json.loads(holder.stdout.readline())["holder"] == holder.pid
        children = children_of(holder.pid, 2)
        time.sleep(0.5)  # both children inside their job
        os.kill(holder.pid, ending)
        holder.wait(30)
        assert wait_gone(children, 5.0) == []
    finally:
        for pid in [holder.pid, *children]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        holder.wait(10)
