"""A watcher that ends every process of a private Ray instance when the process that owns it dies.

Ray ties its own children (GCS, raylet) to the driver with a parent-death signal, but the agents the
raylet starts (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) outlived a SIGKILLed kernel by
minutes here and ignored SIGTERM. ``workbench.cluster`` starts this watcher before it starts Ray:

    python -m workbench.reaper OWNER_PID MARKER FOLDER

It waits until ``OWNER_PID`` is gone (its stdin, a pipe from the owner, reaches end of file, or the
pid disappears), then kills every process started with ``WORKBENCH_RAY_INSTANCE=MARKER`` in its
environment (the owner sets it while Ray starts its GCS and raylets; their agents and workers
inherit it, and it survives Ray renaming its processes ``ray::...``) and removes ``FOLDER``, the
instance's temp folder. A clean shutdown does the same from the owner (``cluster.shutdown``) and
then ends the watcher. It imports neither torch nor Ray.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import sys
import time

import psutil

__all__ = ["INSTANCE_ENV", "kill_marked", "marked_processes", "watch"]

INSTANCE_ENV = "WORKBENCH_RAY_INSTANCE"
"""The environment variable that marks every process of one private Ray instance."""

GRACE_SECONDS = 1.0
"""Between SIGTERM and SIGKILL: Ray's processes flush their logs in that time; its agents ignore
SIGTERM and get the SIGKILL."""


def marked_processes(marker: str) -> list[psutil.Process]:
    """Every live process (not this one) started with ``INSTANCE_ENV=marker``."""
    found = []
    for process in psutil.process_iter(["pid"]):
        if process.info["pid"] == os.getpid():
            continue
        try:
            if process.environ().get(INSTANCE_ENV) == marker:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def kill_marked(marker: str, grace: float = GRACE_SECONDS) -> int:
    """SIGTERM every process marked ``marker``, SIGKILL the ones alive ``grace`` seconds later;
    returns how many there were."""
    processes = marked_processes(marker)
    for process in processes:
        try:
            process.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return len(processes)


def watch(owner_pid: int, marker: str, folder: str, poll: float = 0.5) -> None:
    """Block until ``owner_pid`` dies (or stdin closes), then kill the processes marked ``marker``
    and remove ``folder``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the owner's terminal is not ours
    stdin = sys.stdin.fileno()
    while psutil.pid_exists(owner_pid):
        ready, _, _ = select.select([stdin], [], [], poll)
        if ready and not os.read(stdin, 4096):
            break  # end of file: the owner closed its end, or died
    # A clean shutdown killed everything before closing the pipe; after a crash this does it.
    time.sleep(0.2)
    kill_marked(marker)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.argv[2], sys.argv[3])
