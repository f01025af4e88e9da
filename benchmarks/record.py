"""What every benchmark writes beside its figures: command, commit, machine and date (stdlib only:
benchmark scripts are re-imported by spawned workers, which must not import torch for it)."""

from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_commit() -> str:
    """``git rev-parse HEAD``, plus ``-dirty`` when tracked files have changes ("unknown" without
    git). ``$WORKBENCH_GIT_COMMIT``, when set, names it instead: a committed tree copied to another
    machine (a lent GPU) may arrive beside no ``.git``, or an older one."""
    if os.environ.get("WORKBENCH_GIT_COMMIT"):
        return os.environ["WORKBENCH_GIT_COMMIT"]
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")  # read-only: never take the index lock
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if status.strip() else "")


def shown_interpreter(executable: str = sys.executable) -> str:
    """The interpreter as a reader would type it: relative to the repository when it is inside it
    (``.venv/bin/python``), else its name alone: a record names no folder of the machine that
    made it."""
    path = os.path.abspath(executable)
    if path.startswith(ROOT + os.sep):
        return os.path.relpath(path, ROOT)
    return os.path.basename(path)


def provenance(benchmark: str) -> dict:
    """The header of a results file: which benchmark, the exact command, commit and date."""
    return {
        "benchmark": benchmark,
        "command": shlex.join([shown_interpreter(), *sys.argv]),
        "git_commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write(report: dict, path: str) -> str:
    """Write ``report`` as JSON to ``path`` (folders made as needed); returns the absolute path."""
    out = os.path.abspath(path)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    return out


class Recording:
    """One benchmark run's record: the header (provenance, machine, budget, load average) taken at
    the start, and ``finish`` adding the figures, the load average after and the wall time, writing
    the JSON and printing the closing lines (the file, then ``ratios: key=value ...``)."""

    def __init__(self, benchmark: str) -> None:
        import dataclasses
        import time

        from workbench.course.budget import budget_name
        from workbench.system import machine_info

        self.clock = time.perf_counter
        self.started = self.clock()
        self.machine = machine_info()
        self.header = {
            **provenance(benchmark),
            "workbench_budget": budget_name(),
            "machine": dataclasses.asdict(self.machine),
            "load_average_before": list(os.getloadavg()),
        }

    def finish(self, figures: dict, ratios: dict, path: str) -> dict:
        report = {
            **self.header,
            **figures,
            "load_average_after": list(os.getloadavg()),
            "ratios": ratios,
            "wall_seconds": self.clock() - self.started,
        }
        write(report, path)
        print(f"\nwrote {path} ({report['wall_seconds']:.0f} s)")
        print("ratios: " + " ".join(f"{key}={value:.2f}" for key, value in ratios.items()))
        return report
