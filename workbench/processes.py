"""Child processes that die with their parent, and the shared memory they write into.

Every process the workbench starts (sampler workers, Ape-X actors and replay, SEED's env actors,
data-parallel learners) is made with ``multiprocessing``'s spawn context, is daemonic, calls
``die_with_parent`` first thing, and is ended by ``end_processes``: so an interrupted cell, a
kernel restart or a crash leaves no orphan (``tests/test_orphans.py``).

``SharedArray`` is a numpy array in anonymous shared memory (a ``RawArray``: an unlinked file, so
nothing is left in /dev/shm if the parent is killed), allocated once by the parent and handed to a
spawned child at start. What crosses a pipe per step is then indices and small messages, never
observations.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["WORKER_TIMEOUT", "SharedArray", "die_with_parent", "end_processes"]

#: Seconds a child may take to start (imports, env construction) or to answer one command.
WORKER_TIMEOUT = 120.0


@dataclass
class SharedArray:
    """A numpy array in shared memory that can be handed to a spawned process."""

    raw: Any
    dtype: str
    shape: tuple[int, ...]

    @classmethod
    def allocate(cls, context, shape: tuple[int, ...], dtype: Any, fill: Any = 0) -> "SharedArray":
        dtype = np.dtype(dtype)
        nbytes = max(1, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        shared = cls(context.RawArray(ctypes.c_uint8, nbytes), dtype.str, tuple(shape))
        shared.array()[...] = fill
        return shared

    def array(self) -> np.ndarray:
        count = int(np.prod(self.shape, dtype=np.int64))
        return np.frombuffer(self.raw, dtype=np.dtype(self.dtype), count=count).reshape(self.shape)


def die_with_parent(parent_pid: int) -> None:
    """Make this process exit when ``parent_pid`` goes away, however it goes (SIGKILL included).

    A watchdog thread polls the parent's pid. Linux's parent-death signal (``PR_SET_PDEATHSIG``)
    is not used: it fires when the *thread* that started the worker ends, and in a notebook that
    is often a run's background thread, not the end of the kernel.
    """
    if os.getppid() != parent_pid:  # the parent died before we got here
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(0.2)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def end_processes(
    processes: list, connections: list, ask_to_close: Callable[[Any], None], grace: float = 3.0
) -> None:
    """Ask each process to close (``ask_to_close(connection)``), wait up to ``grace`` seconds in
    all, kill what is still alive, and close the pipes. Shared by every pool of child processes."""
    for connection in connections:
        try:
            ask_to_close(connection)
        except (BrokenPipeError, OSError):
            pass
    deadline = time.monotonic() + grace
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(timeout=2.0)
    for connection in connections:
        connection.close()
