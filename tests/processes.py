"""Helpers for the tests that check no process outlives its owner."""

from __future__ import annotations

import subprocess
import threading
import time

import psutil


def running(pids: list[int]) -> list[int]:
    """The pids that still run (neither gone nor a zombie)."""
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def wait_gone(pids: list[int], timeout: float = 5.0) -> list[int]:
    """The pids still running after waiting up to ``timeout`` seconds for them to end."""
    deadline = time.monotonic() + timeout
    while (alive := running(pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def live_children() -> set[int]:
    """Live child processes of this one, less multiprocessing's resource tracker (one per parent,
    for life)."""
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            command = " ".join(child.cmdline())
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in command:
                pids.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return pids


def ray_actor_pids(*class_names: str) -> list[int]:
    """Live Ray actor processes of these classes (Ray titles an actor's worker ``ray::Class``), on
    every node of a cluster on this machine."""
    titles = tuple(f"ray::{name}" for name in class_names)
    pids = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            command = " ".join(process.info["cmdline"] or ())
            if command.startswith(titles) and process.status() != psutil.STATUS_ZOMBIE:
                pids.append(process.info["pid"])
        except psutil.NoSuchProcess:
            pass
    return pids


def first_line(process: subprocess.Popen, seconds: float) -> str:
    """The first line a holder process prints (its pids, as JSON); fails the test, with the
    holder's stderr, when none comes within ``seconds``."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(seconds)
    if not (box and box[0]):
        stderr = process.stderr.read() if process.poll() is not None else ""
        raise AssertionError(f"the holder printed nothing in {seconds:.0f} s: {stderr[-3000:]}")
    return box[0]


def start_private_ray(start, **options):
    """``start(**options)`` (``cluster.local_ray`` or ``cluster.simulated_cluster``), once more if
    the raylet missed Ray's fixed start window on a loaded machine."""
    from workbench import cluster

    for attempt in range(2):
        try:
            return start(**options)
        except Exception as error:
            cluster.shutdown()
            if attempt or "timed out" not in str(error).lower():
                raise
            time.sleep(2)
