"""Every process of a private Ray instance gone after its owner's SIGKILL: kills in a row, under
load, each timed.

    .venv/bin/python benchmarks/ray_teardown.py --kills 10 --load-cores 1

Each round starts a process that owns an Ape-X or a SEED run (in turn) on a private Ray instance
that the run starts itself, as a notebook's kernel does (``tests/scripts/hold_ray_run.py``, the
holder of ``tests/test_cluster.py``), waits until the run steps envs, SIGKILLs the owner, and
times how long until no process carrying the instance's marker is left (GCS, raylet, the dashboard
and runtime-env agents, the actors' workers: ``workbench.reaper`` ends them) and until its temp
folder is gone. ``--load-cores`` busy loops, one per core, compete the whole time, beside the runs'
own actors. Prints each round (the processes killed, the seconds, the last to go), writes
``--out`` (JSON: machine, command, commit, every round) and ends with ``ratios:
max_seconds=<slowest round> bound_seconds=<--bound>``; exits 1 if a round passed the bound.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import record  # this folder is sys.path[0] when the script runs
from repeat_tests import busy_loop

from workbench.reaper import marked_processes

HOLDER = os.path.join(record.ROOT, "tests", "scripts", "hold_ray_run.py")
START_TIMEOUT = 300.0  # seconds for a holder's run to start stepping envs under load
POLL = 0.05  # seconds between looks at the instance's processes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="rounds (default 10)")
    parser.add_argument("--load-cores", type=int, default=1, help="busy loops, one per core")
    parser.add_argument("--bound", type=float, default=10.0, help="seconds allowed (default 10)")
    parser.add_argument("--out", default="data/ray_teardown.json")
    args = parser.parse_args(argv)
    if args.kills < 1 or args.load_cores < 0 or not args.bound > 0:
        parser.error("--kills must be positive, --load-cores >= 0 and --bound > 0.")
    return args


def start_holder(kind: str, runs_dir: str) -> tuple[subprocess.Popen, dict]:
    """The owner of a run of ``kind`` on its own private instance, once the run steps envs."""
    process = subprocess.Popen(
        [sys.executable, HOLDER, kind, "hold", runs_dir],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=record.ROOT,
    )
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT)
    if not (box and box[0]):
        process.kill()
        tail = process.stderr.read()[-3000:]
        raise SystemExit(f"the {kind} holder printed nothing in {START_TIMEOUT:g} s:\n{tail}")
    return process, json.loads(box[0])


def names(processes: list[psutil.Process]) -> list[str]:
    found = []
    for process in processes:
        try:
            found.append(" ".join(process.cmdline())[:80] or process.name())
        except psutil.Error:
            pass
    return found


def one_kill(kind: str, bound: float) -> dict:
    """Start, SIGKILL and time one owner (``bound``: stop waiting at 3 times it)."""
    with tempfile.TemporaryDirectory() as runs_dir:
        process, info = start_holder(kind, runs_dir)
        at_kill = marked_processes(info["marker"])
        killed_names = names(at_kill)
        killed = time.monotonic()
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        last = killed_names
        gone = folder_gone = None
        while time.monotonic() - killed < 3 * bound and (gone is None or folder_gone is None):
            if gone is None:
                left = marked_processes(info["marker"])
                if left:
                    last = names(left) or last
                else:
                    gone = time.monotonic() - killed
            if folder_gone is None and not os.path.exists(info["temp_dir"]):
                folder_gone = time.monotonic() - killed
            time.sleep(POLL)
        left = names(marked_processes(info["marker"]))
        for leftover in marked_processes(info["marker"]):  # never leave them to the next round
            leftover.kill()
    return {
        "kind": kind,
        "processes_at_kill": len(at_kill),
        "killed": killed_names,
        "seconds_to_gone": gone,
        "seconds_to_folder_gone": folder_gone,
        "last_to_go": last[:3],
        "left_after_wait": left,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recording = record.Recording("ray_teardown")
    cores = sorted(os.sched_getaffinity(0))
    context = multiprocessing.get_context("spawn")
    load = [
        context.Process(target=busy_loop, args=(cores[i % len(cores)],), daemon=True)
        for i in range(args.load_cores)
    ]
    rounds = []
    try:
        for process in load:
            process.start()
        print(f"{len(load)} busy loop(s) beside the runs", flush=True)
        for number in range(args.kills):
            kind = ("apex", "seed")[number % 2]
            result = one_kill(kind, args.bound)
            rounds.append(result)
            record.write({**recording.header, "rounds": rounds, "complete": False}, args.out)
            shown = lambda s: "not within the wait" if s is None else f"{s:.2f} s"  # noqa: E731
            print(
                f"kill {number + 1:>2} ({kind}): {result['processes_at_kill']} processes, all "
                f"gone after {shown(result['seconds_to_gone'])}, folder after "
                f"{shown(result['seconds_to_folder_gone'])}; last: {result['last_to_go'][:1]}",
                flush=True,
            )
    finally:
        for process in load:
            process.kill()
            process.join()
    seconds = [r["seconds_to_gone"] for r in rounds]
    ended = [x for x in seconds if x is not None]
    # A round whose processes outlived the wait (3 bounds) counts as that wait, a lower bound.
    slowest = max(x if x is not None else 3 * args.bound for x in seconds)
    figures = {
        "load_cores": args.load_cores,
        "bound_seconds": args.bound,
        "rounds": rounds,
        "all_ended": len(ended) == len(seconds),
        "seconds_to_gone_median": statistics.median(ended) if ended else None,
        "seconds_to_gone_max": slowest,
        "within_bound": len(ended) == len(seconds) and slowest <= args.bound,
        "complete": True,
    }
    recording.finish(figures, {"max_seconds": slowest, "bound_seconds": args.bound}, args.out)
    return 0 if figures["within_bound"] else 1


if __name__ == "__main__":
    sys.exit(main())
