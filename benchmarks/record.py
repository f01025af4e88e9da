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
    """``git rev-parse HEAD``, plus ``-dirty`` when tracked files have changes ("unknown" if no
    git)."""
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


def provenance(benchmark: str) -> dict:
    """The header of a results file: which benchmark, the exact command, commit and date."""
    return {
        "benchmark": benchmark,
        "command": shlex.join([sys.executable, *sys.argv]),
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
