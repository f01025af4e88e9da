"""The tests that race a run: run them many times in a row under load, and count the passes.

    .venv/bin/python benchmarks/repeat_tests.py --times 10 --load-cores 1

Tests that read a run's events, metrics or processes while the run changes them must wait for the
state they assert; a race shows only on some passes, and more often on a busy or slow machine
(an AVX2-only CPU found one). This runs the Ray, SEED, Ape-X and orphan test modules (``--tests``)
``--times`` times in a row (``--without-learning``: less the learning claims, marked ``learns``,
which take minutes each and are bounded by env steps or updates, not by time), each pass a fresh
pytest process, with ``--load-cores`` busy loops pinned one per core (a competing job at normal
priority) for the whole time. It prints each pass
(passed, failed, seconds, the failing tests), writes ``--out`` (JSON: command, commit, machine,
date, every pass) and ends with ``ratios: pass_rate=<clean passes / times>``; it exits 1 if any
pass failed. The load processes end with it (``finally``; they also die with their parent).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree

import record  # this folder is sys.path[0] when the script runs

TESTS = [
    "tests/test_apex.py",
    "tests/test_apex_orphans.py",
    "tests/test_apex_study.py",
    "tests/test_apex_transports.py",
    "tests/test_seed.py",
    "tests/test_seed_r2d2.py",
    "tests/test_seed_ray.py",
    "tests/test_seed_transports.py",
    "tests/test_scale_out.py",
    "tests/test_cluster.py",
    "tests/test_orphans.py",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--times", type=int, default=10, help="passes (default 10)")
    parser.add_argument(
        "--load-cores", type=int, default=1, help="busy loops, one per core (default 1)"
    )
    parser.add_argument("--tests", nargs="+", default=TESTS, help="test files or ids")
    parser.add_argument(
        "--without-learning",
        action="store_true",
        help="leave out the learning claims (pytest -m 'not learns'): a return reached within env "
        "steps or updates, a minute or more each, bounded by steps rather than time",
    )
    parser.add_argument("--out", default="data/test_repeats.json")
    args = parser.parse_args(argv)
    if args.times < 1 or args.load_cores < 0:
        parser.error("--times must be positive and --load-cores >= 0.")
    return args


def busy_loop(core: int) -> None:
    """Spin on ``core`` until killed (a competing job at normal priority)."""
    from workbench.processes import die_with_parent

    die_with_parent(os.getppid())
    os.sched_setaffinity(0, {core})
    while True:
        pass


def one_pass(tests: list[str], without_learning: bool = False) -> dict:
    """One pytest process over ``tests``: counts, seconds and the failing test ids."""
    select = ["-m", "not learns"] if without_learning else []
    with tempfile.TemporaryDirectory() as folder:
        report = os.path.join(folder, "junit.xml")
        started = time.perf_counter()
        completed = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", report]
            + select
            + tests,
            cwd=record.ROOT,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - started
        failed, counts = [], {"passed": 0, "failed": 0, "skipped": 0}
        if os.path.exists(report):
            for case in ElementTree.parse(report).getroot().iter("testcase"):
                name = f"{case.get('classname')}::{case.get('name')}"
                if case.find("failure") is not None or case.find("error") is not None:
                    counts["failed"] += 1
                    failed.append(name)
                elif case.find("skipped") is not None:
                    counts["skipped"] += 1
                else:
                    counts["passed"] += 1
    return {
        **counts,
        "failing": failed,
        "exit_code": completed.returncode,
        "seconds": seconds,
        "tail": completed.stdout[-2000:] if completed.returncode else "",
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recording = record.Recording("repeat_tests")
    cores = sorted(os.sched_getaffinity(0))
    context = multiprocessing.get_context("spawn")
    load = [
        context.Process(target=busy_loop, args=(cores[i % len(cores)],), daemon=True)
        for i in range(args.load_cores)
    ]
    passes = []
    try:
        for process in load:
            process.start()
        loaded = [cores[i % len(cores)] for i in range(len(load))]
        print(f"{len(load)} busy loop(s) on core(s) {loaded}", flush=True)
        for number in range(1, args.times + 1):
            result = one_pass(args.tests, args.without_learning)
            passes.append(result)
            # Kept after every pass: a loop stopped early still leaves what it counted.
            record.write({**recording.header, **summary(args, passes), "complete": False}, args.out)
            print(
                f"pass {number:>2}: {result['passed']} passed, {result['failed']} failed, "
                f"{result['skipped']} skipped in {result['seconds']:.0f} s"
                + (f"; failing: {result['failing']}" if result["failing"] else ""),
                flush=True,
            )
    finally:
        for process in load:
            process.kill()
            process.join()
    figures = {**summary(args, passes), "complete": len(passes) == args.times}
    print(f"clean passes: {figures['clean']}/{len(passes)}")
    recording.finish(figures, {"pass_rate": figures["clean"] / max(len(passes), 1)}, args.out)
    return 0 if figures["clean"] == len(passes) else 1


def summary(args: argparse.Namespace, passes: list[dict]) -> dict:
    """What the record holds of the passes so far."""
    return {
        "tests": args.tests,
        "without_learning": args.without_learning,
        "load_cores": args.load_cores,
        "times": args.times,
        "clean": sum(1 for p in passes if p["exit_code"] == 0 and not p["failed"]),
        "passes": passes,
    }


if __name__ == "__main__":
    sys.exit(main())
