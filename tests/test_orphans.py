"""Every worker dies with its parent: a killed kernel (SIGKILL) or an interrupted cell leaves no
process behind, and no file in /dev/shm (``workbench.processes``: every child process dies with
its parent).

Each test starts ``tests/scripts/hold_sampler.py`` in its own Python process (a stand-in for a
Jupyter kernel) holding a BatchedSampler and a ParallelSampler with live workers, ends that process
the way a kernel ends, and checks with psutil that every process it started is gone (or a zombie
waiting for init to reap it) within 5 s.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from processes import running, wait_gone

HOLDER = Path(__file__).parent / "scripts" / "hold_sampler.py"
SHM = Path("/dev/shm")
GONE_WITHIN = 5.0  # seconds
START_WITHIN = 120.0  # seconds for the holder to start its samplers (2 slow cores, shared)


def shm_paths_in_use(pids: list[int]) -> set[str]:
    """/dev/shm paths that these processes hold open or mapped (deleted ones included)."""
    paths = set()
    for pid in pids:
        proc = Path(f"/proc/{pid}")
        try:
            for fd in (proc / "fd").iterdir():
                try:
                    paths.add(os.readlink(fd))
                except OSError:
                    pass
            for line in (proc / "maps").read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) == 6:
                    paths.add(parts[5])
        except OSError:
            pass
    return {p for p in paths if p.startswith(str(SHM) + "/")}


class Holder:
    """The holder script, started in ``mode``; ``info`` is the JSON line of pids it prints."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.shm_before = set(os.listdir(SHM)) if SHM.is_dir() else set()
        self.process = subprocess.Popen(
            [sys.executable, str(HOLDER), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HOLDER.parents[2],
        )

    def wait_started(self) -> "Holder":
        """Read the pids it prints once its samplers have collected, and what it started."""
        self.info = json.loads(self.read_line())
        assert self.info["holder"] == self.process.pid
        self.workers = self.info["batched"] + self.info["parallel"]
        assert len(self.workers) == 4 and all(running([pid]) for pid in self.workers)
        # Everything it started, workers and multiprocessing's resource tracker included.
        self.descendants = [
            p.pid for p in psutil.Process(self.process.pid).children(recursive=True)
        ]
        assert set(self.workers) <= set(self.descendants)
        self.shm_in_use = shm_paths_in_use([self.process.pid, *self.descendants])
        return self

    def read_line(self) -> str:
        box = []
        reader = threading.Thread(
            target=lambda: box.append(self.process.stdout.readline()), daemon=True
        )
        reader.start()
        reader.join(START_WITHIN)
        if not box or not box[0]:
            self.kill_all()
            _, stderr = self.process.communicate(timeout=10)
            pytest.fail(f"the holder printed nothing in {START_WITHIN:.0f} s; stderr:\n{stderr}")
        return box[0]

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            pytest.fail(f"the holder did not exit within {timeout:.0f} s")

    def kill_all(self) -> None:
        """Clean up after a failed test: only the processes this test started."""
        pids = set(getattr(self, "descendants", []))
        try:
            pids.update(p.pid for p in psutil.Process(self.process.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
        for pid in [self.process.pid, *pids]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(10)

    def assert_nothing_left(self) -> None:
        left = wait_gone(self.descendants, GONE_WITHIN)
        assert left == [], f"processes outlived their parent: {describe(left)}"
        # Shared memory: what the processes used was unlinked, and nothing new names them.
        still_there = sorted(
            p.removesuffix(" (deleted)") for p in self.shm_in_use if not p.endswith(" (deleted)")
        )
        assert [p for p in still_there if os.path.exists(p)] == []
        ours = {str(pid) for pid in [self.process.pid, *self.descendants]}
        new = set(os.listdir(SHM)) - self.shm_before if SHM.is_dir() else set()
        assert [n for n in new if any(pid in n for pid in ours)] == [], "files left in /dev/shm"


def describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            out.append(f"{pid}: {' '.join(psutil.Process(pid).cmdline())[:120]}")
        except psutil.NoSuchProcess:
            out.append(f"{pid}: gone")
    return out


MODES = ["main", "thread", "interrupt"]


@pytest.fixture(scope="module")
def holders():
    """One holder per mode, all started at once: their start-up (spawning 4 workers each, most of
    this file's time) overlaps. Each test then waits for its own and ends it."""
    started = {mode: Holder(mode) for mode in MODES}
    yield started
    for holder in started.values():
        if holder.process.poll() is None or running(getattr(holder, "descendants", [])):
            holder.kill_all()


@pytest.mark.parametrize("mode", ["main", "thread"])
def test_killed_parent_leaves_no_worker_behind(holders, mode: str) -> None:
    """SIGKILL (a kernel restart, a crash, the OOM killer): nothing runs the parent's cleanup,
    and the ParallelSampler's workers are busy in a collect, so end-of-file on their pipe cannot
    end them either: only the parent-death signal or the watchdog can.

    ``thread``: the samplers were made, and are used, by a background thread (as a notebook run
    is), which matters because Linux's parent-death signal follows the thread that started a child.
    """
    holder = holders[mode].wait_started()
    time.sleep(0.5)  # the ParallelSampler's workers are now inside their endless collect
    os.kill(holder.process.pid, signal.SIGKILL)
    assert holder.wait_exit(10) == -signal.SIGKILL
    holder.assert_nothing_left()


def test_interrupted_parent_leaves_no_worker_behind(holders) -> None:
    """SIGINT while collecting (an interrupted cell that ends the program): KeyboardInterrupt
    propagates out of ``collect`` and the interpreter exits without closing the samplers."""
    holder = holders["interrupt"].wait_started()
    holder.process.stdin.write("go\n")
    holder.process.stdin.flush()
    assert holder.read_line().strip() == "collecting"
    time.sleep(0.3)  # well inside the collect loop
    os.kill(holder.process.pid, signal.SIGINT)
    returncode = holder.wait_exit(30)
    stderr = holder.process.stderr.read()
    assert "KeyboardInterrupt" in stderr, stderr[-2000:]
    assert returncode != 0
    holder.assert_nothing_left()
