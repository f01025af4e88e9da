"""Worker processes for the samplers, and the shared memory they write into.

Two kinds of worker, each owning a contiguous slice ``[lo, hi)`` of the sampler's environments:

* ``env_worker`` only steps environments (BatchedSampler, AlternatingSampler). It never imports
  torch, so it stays small (NOTES.md: ~40 MB against ~320 MB) and starts fast.
* ``policy_worker`` steps environments and runs its own copy of the policy (ParallelSampler).

Buffers are ``multiprocessing.RawArray`` s allocated once by the parent and handed to workers at
start: anonymous shared memory (an unlinked file), so nothing is left in /dev/shm if the parent is
killed. Per step only a few bytes cross the pipe (a command and a step index one way, a status and
a timing the other), never observations.

Every worker dies with its parent: a watchdog thread polls the parent's pid, and the worker exits
on end-of-file from its pipe. ``WorkerPool`` is the parent's side: start, command, reply, and an
error (the worker's traceback, its death, or a time-out) instead of a hang.
"""

from __future__ import annotations

import ctypes
import os
import signal
import struct
import threading
import time
import traceback
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_connections
from typing import Any

import numpy as np

# Commands (parent -> worker): one byte and an int.
RESET, STEP, COLLECT, CLOSE = b"R", b"S", b"C", b"Q"
# Replies (worker -> parent): one byte, then a payload.
OK, ERROR = b"K", b"E"

_COMMAND = struct.Struct("<cq")

#: Seconds a worker may take to start (imports, env construction) or to answer one command.
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


@dataclass
class WorkerSpec:
    """What a worker needs to build its share of the environments."""

    env_id: str
    lo: int
    hi: int
    seed: int
    env_options: dict = field(default_factory=dict)
    env_threads: int = 1
    parent_pid: int = 0
    worker_index: int = 0


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


def _write_step(arrays: dict[str, np.ndarray], t: int, sl: slice, result: tuple) -> None:
    """Write one env step of the slice ``sl`` into the rollout buffers (rows t and t + 1)."""
    obs, reward, terminated, truncated, info = result
    arrays["obs"][t + 1, sl] = obs
    arrays["rewards"][t, sl] = reward
    arrays["terminated"][t, sl] = terminated
    arrays["truncated"][t, sl] = truncated
    arrays["episode_done"][t, sl] = info["episode_done"]
    arrays["episode_return"][t, sl] = info["episode_return"]
    arrays["episode_length"][t, sl] = info["episode_length"]
    if truncated.any():
        arrays["final_obs"][sl][truncated] = info["final_obs"][truncated]


def _serve(conn, spec: WorkerSpec, buffers: dict[str, SharedArray], handle) -> None:
    """The worker's loop: receive a command, run ``handle``, reply; exit on CLOSE or EOF."""
    die_with_parent(spec.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C / a kernel interrupt is the parent's
    try:
        from workbench.envs import make_vector_env

        arrays = {name: shared.array() for name, shared in buffers.items()}
        env = make_vector_env(
            spec.env_id, spec.hi - spec.lo, num_threads=spec.env_threads, **spec.env_options
        )
        state = {"env": env, "arrays": arrays, "slice": slice(spec.lo, spec.hi)}
        conn.send_bytes(OK)
    except BaseException:
        conn.send_bytes(ERROR + traceback.format_exc().encode())
        return
    while True:
        try:
            command, argument = _COMMAND.unpack(conn.recv_bytes())
        except (EOFError, OSError):  # the parent is gone
            break
        if command == CLOSE:
            break
        try:
            payload = handle(state, command, argument)
            conn.send_bytes(OK + payload)
        except BaseException:
            try:
                conn.send_bytes(ERROR + traceback.format_exc().encode())
            except (BrokenPipeError, OSError):
                break
    env.close()


def _env_command(state: dict, command: bytes, t: int) -> bytes:
    env, arrays, sl = state["env"], state["arrays"], state["slice"]
    if command == RESET:
        obs, _ = env.reset(seed=t)
        arrays["obs"][0, sl] = obs
        return b""
    if command == STEP:
        start = time.perf_counter()
        result = env.step(arrays["actions"][t, sl])
        _write_step(arrays, t, sl, result)
        return struct.pack("<d", time.perf_counter() - start)
    raise ValueError(f"env worker: unknown command {command!r}")


def env_worker(conn, spec: WorkerSpec, buffers: dict[str, SharedArray]) -> None:
    """Steps its slice of envs on command; never imports torch."""
    _serve(conn, spec, buffers, _env_command)


def policy_worker(conn, spec: WorkerSpec, buffers: dict[str, SharedArray], policy) -> None:
    """Steps its slice of envs and chooses their actions with its own copy of the policy.

    ``policy`` arrives once, its parameters in shared memory: the parent copies new values into
    them between collects, so the worker always acts with the parameters of the latest collect.
    """
    import torch

    torch.set_num_threads(1)  # one core per worker: processes, not threads, give the parallelism
    torch.manual_seed(spec.seed + 7919 * spec.worker_index)
    output_names = [name[len("out_"):] for name in buffers if name.startswith("out_")]

    def handle(state: dict, command: bytes, horizon: int) -> bytes:
        env, arrays, sl = state["env"], state["arrays"], state["slice"]
        if command == RESET:
            return _env_command(state, command, horizon)
        if command != COLLECT:
            raise ValueError(f"policy worker: unknown command {command!r}")
        env_seconds = inference_seconds = 0.0
        for t in range(horizon):
            start = time.perf_counter()
            with torch.no_grad():
                out = policy.act(torch.from_numpy(arrays["obs"][t, sl]))
            arrays["actions"][t, sl] = out["action"].numpy()
            for name in output_names:
                arrays["out_" + name][t, sl] = out[name].numpy()
            middle = time.perf_counter()
            result = env.step(arrays["actions"][t, sl])
            _write_step(arrays, t, sl, result)
            stepped = time.perf_counter()
            truncated = result[3]
            if truncated.any():
                if "value" in output_names:
                    final = torch.from_numpy(np.ascontiguousarray(result[4]["final_obs"][truncated]))
                    with torch.no_grad():
                        values = policy.act(final)["value"].float().numpy()
                else:
                    values = np.nan  # the policy gives no value: the algorithm must not bootstrap
                arrays["truncation_values"][t, sl][truncated] = values
            inference_seconds += (middle - start) + (time.perf_counter() - stepped)
            env_seconds += stepped - middle
        return struct.pack("<dd", env_seconds, inference_seconds)

    _serve(conn, spec, buffers, handle)


def end_processes(processes, connections, ask_to_close, grace: float = 3.0) -> None:
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


class WorkerPool:
    """Worker processes, their pipes, and the parent's side of the protocol."""

    def __init__(self, context, target, specs: list[WorkerSpec], args_per_worker: list[tuple]) -> None:
        self.processes = []
        self.connections = []
        try:
            for spec, args in zip(specs, args_per_worker):
                parent_end, child_end = context.Pipe(duplex=True)
                process = context.Process(
                    target=target,
                    args=(child_end, spec, *args),
                    name=f"workbench-worker-{spec.worker_index}",
                    daemon=True,
                )
                process.start()
                child_end.close()  # so that the worker's death reads as EOF here
                self.processes.append(process)
                self.connections.append(parent_end)
            for index in range(len(self.processes)):
                self.receive(index)  # each worker reports it built its envs
        except BaseException:
            self.close()
            raise
        self._finalizer = weakref.finalize(self, WorkerPool._terminate, self.processes, self.connections)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def send(self, index: int, command: bytes, argument: int = 0) -> None:
        try:
            self.connections[index].send_bytes(_COMMAND.pack(command, argument))
        except (BrokenPipeError, OSError) as error:
            raise self._died(index) from error

    def receive(self, index: int) -> bytes:
        """The payload of worker ``index``'s next reply; its error, re-raised here, or its death."""
        connection = self.connections[index]
        process = self.processes[index]
        ready = wait_connections([connection, process.sentinel], timeout=WORKER_TIMEOUT)
        if connection not in ready:
            if process.sentinel in ready:
                raise self._died(index)
            raise TimeoutError(
                f"worker {index} (pid {process.pid}) did not answer in {WORKER_TIMEOUT:.0f} s; "
                "the machine may be overloaded: use fewer workers or envs."
            )
        try:
            reply = connection.recv_bytes()
        except (EOFError, OSError) as error:
            raise self._died(index) from error
        if reply[:1] == ERROR:
            raise RuntimeError(f"worker {index} failed:\n{reply[1:].decode()}")
        return reply[1:]

    def _died(self, index: int) -> RuntimeError:
        process = self.processes[index]
        process.join(timeout=1.0)
        return RuntimeError(
            f"worker {index} (pid {process.pid}) died (exit code {process.exitcode}). The sampler "
            "cannot continue; close it and make a new one (or call resize to restart workers)."
        )

    @staticmethod
    def _terminate(processes, connections) -> None:
        end_processes(processes, connections, lambda c: c.send_bytes(_COMMAND.pack(CLOSE, 0)))

    def close(self) -> None:
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()
        else:
            WorkerPool._terminate(self.processes, self.connections)
