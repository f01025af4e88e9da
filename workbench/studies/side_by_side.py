"""A study's independent runs on every core: one child process per core, a queue of jobs.

The runs of a learning study that compares settings by env steps (the DQN family's members) are
independent and each keeps to one torch thread, so on a 2-core machine two at a time take half the
wall time and reach the same returns: each run seeds its own learner and envs. ``run_side_by_side``
hands the jobs to spawned children (``multiprocessing``'s spawn context, daemonic, each calling
``die_with_parent`` first, as every process of the workbench), which take the next job when one
ends and send back what the job returns (it must pickle: a ``LearningCurve``, not a ``Run``).

An error in a job ends the study with that job's traceback; an interrupted cell or a killed kernel
ends the children (``tests/test_side_by_side.py``). With one core, one job or ``processes=1`` the
jobs run in this process, one after the other.

Studies that *measure speed* (a learner's samples per second against its batch) stay one run at a
time: two runs on two cores share the memory bus, and their speeds are then not each alone's.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from workbench.checks import positive_int
from workbench.processes import die_with_parent
from workbench.progress import each
from workbench.system import usable_cores

__all__ = ["run_side_by_side"]

#: Seconds between looks at the children while no result comes: a dead child is noticed this soon.
POLL_SECONDS = 0.5


def _serve(parent_pid: int, function: Callable[..., Any], jobs: Any, results: Any) -> None:
    """A child: run jobs from ``jobs`` until it hands out ``None``; send ``(index, ok, value)``."""
    die_with_parent(parent_pid)
    while (job := jobs.get()) is not None:
        index, args = job
        try:
            results.put((index, True, function(*args)))
        except BaseException:  # the parent raises it with the child's traceback
            results.put((index, False, traceback.format_exc()))


def run_side_by_side(
    function: Callable[..., Any],
    jobs: Sequence[tuple],
    *,
    processes: int | None = None,
    desc: str = "runs",
    on_result: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """``[function(*job) for job in jobs]``, the jobs spread over ``processes`` child processes
    (default: this process's usable cores, at most one per job).

    ``function`` must be importable by name (a module-level function) and its arguments and result
    must pickle. ``on_result(index, value)`` is called in this process as each job ends (in the
    order they end); the list returned is in the jobs' order. Raises ``RuntimeError`` with the
    child's traceback when a job fails, or when a child dies with jobs left."""
    jobs = [tuple(job) for job in jobs]
    processes = usable_cores() if processes is None else positive_int(processes, "processes")
    processes = min(processes, len(jobs))
    if processes <= 1:
        values = []
        for index, job in enumerate(each(jobs, desc)):
            values.append(function(*job))
            if on_result is not None:
                on_result(index, values[-1])
        return values
    context = multiprocessing.get_context("spawn")
    todo, results = context.Queue(), context.Queue()
    for index, job in enumerate(jobs):
        todo.put((index, job))
    for _ in range(processes):
        todo.put(None)
    children = [
        context.Process(
            target=_serve,
            args=(os.getpid(), function, todo, results),
            name=f"side-by-side-{i}",
            daemon=True,
        )
        for i in range(processes)
    ]
    try:
        for child in children:
            child.start()
        return _collect(children, results, len(jobs), desc, on_result)
    finally:
        for child in children:
            if child.pid is None:  # never started: start() of an earlier one failed
                continue
            if child.is_alive():
                child.kill()
            child.join(timeout=5.0)
        for channel in (todo, results):
            channel.cancel_join_thread()
            channel.close()


def _collect(
    children: list, results: Any, count: int, desc: str, on_result: Callable | None
) -> list[Any]:
    values: list[Any] = [None] * count
    for _ in each(range(count), desc):
        while True:
            try:
                index, ok, value = results.get(timeout=POLL_SECONDS)
                break
            except queue.Empty:
                if not any(child.is_alive() for child in children):
                    codes = [child.exitcode for child in children]
                    raise RuntimeError(
                        f"the study's processes ended with jobs left (exit codes {codes}): "
                        "killed, out of memory, or unable to start (their stderr says why); run "
                        "the study with processes=1 to see a job fail in this process."
                    ) from None
        if not ok:
            raise RuntimeError(f"job {index} of the study failed in its process:\n{value}")
        values[index] = value
        if on_result is not None:
            on_result(index, value)
    return values
