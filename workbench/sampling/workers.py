"""Worker processes for the samplers: what they run, and the parent's side of their pipes.

Two kinds of worker, each owning a contiguous slice ``[lo, hi)`` of the sampler's environments:

* ``env_worker`` only steps environments (BatchedSampler, AlternatingSampler). It never imports
  torch, so it stays small (about 40 MB against about 320 MB with torch) and starts fast.
* ``policy_worker`` steps environments and runs its own copy of the policy (ParallelSampler).

Both write into the rollout's shared buffers (``processes.SharedArray``); per step only a few
bytes cross the pipe (a command and a step index one way, a status and a timing the other), never
observations.

``WorkerPool`` is the parent's side: start, command, reply, and an error instead of a hang (the
worker's traceback, a time-out, or ``WorkerDied``). A dead worker can be restarted into the same
slice (``WorkerPool.restart``); ``EnvWorkers`` adds what the env-only samplers do with a pool:
send a step to a group of workers, take their replies, drain what an interrupt left owed.
"""

from __future__ import annotations

import signal
import struct
import time
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_connections
from typing import Any

import numpy as np

from workbench.processes import WORKER_TIMEOUT, SharedArray, die_with_parent, end_processes

__all__ = [
    "CLOSE",
    "COLLECT",
    "RESET",
    "STEP",
    "EnvWorkers",
    "WorkerDied",
    "WorkerPool",
    "WorkerSpec",
    "env_worker",
    "policy_worker",
    "write_step",
]

# Commands (parent -> worker): one byte and an int.
RESET, STEP, COLLECT, CLOSE = b"R", b"S", b"C", b"Q"
# Replies (worker -> parent): one byte, then a payload.
OK, ERROR = b"K", b"E"

COMMAND = struct.Struct("<cq")


class WorkerDied(RuntimeError):
    """A worker process died (killed, or crashed in C code); ``index`` says which."""

    def __init__(self, index: int, pid: int, exitcode: int | None) -> None:
        super().__init__(f"worker {index} (pid {pid}) died (exit code {exitcode})")
        self.index, self.pid, self.exitcode = index, pid, exitcode


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


def write_step(arrays: dict[str, np.ndarray], t: int, sl: slice, result: tuple) -> None:
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


def _serve(conn: Any, spec: WorkerSpec, buffers: dict[str, SharedArray], handle: Callable) -> None:
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
            command, argument = COMMAND.unpack(conn.recv_bytes())
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
        write_step(arrays, t, sl, result)
        return struct.pack("<d", time.perf_counter() - start)
    raise ValueError(f"env worker: unknown command {command!r}")


def env_worker(conn: Any, spec: WorkerSpec, buffers: dict[str, SharedArray]) -> None:
    """Steps its slice of envs on command; never imports torch."""
    _serve(conn, spec, buffers, _env_command)


def policy_worker(
    conn: Any, spec: WorkerSpec, buffers: dict[str, SharedArray], policy: Any
) -> None:
    """Steps its slice of envs and chooses their actions with its own copy of the policy.

    ``policy`` arrives once, its parameters in shared memory: the parent copies new values into
    them between collects, so the worker always acts with the parameters of the latest collect.
    """
    import torch

    torch.set_num_threads(1)  # one core per worker: processes, not threads, give the parallelism
    torch.manual_seed(spec.seed + 7919 * spec.worker_index)
    output_names = [name[len("out_") :] for name in buffers if name.startswith("out_")]

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
            write_step(arrays, t, sl, result)
            stepped = time.perf_counter()
            truncated = result[3]
            if truncated.any():
                if "value" in output_names:
                    final = torch.from_numpy(
                        np.ascontiguousarray(result[4]["final_obs"][truncated])
                    )
                    with torch.no_grad():
                        values = policy.act(final)["value"].float().numpy()
                else:
                    values = np.nan  # the policy gives no value: the algorithm must not bootstrap
                arrays["truncation_values"][t, sl][truncated] = values
            inference_seconds += (middle - start) + (time.perf_counter() - stepped)
            env_seconds += stepped - middle
        return struct.pack("<dd", env_seconds, inference_seconds)

    _serve(conn, spec, buffers, handle)


class WorkerPool:
    """Worker processes, their pipes, and the parent's side of the protocol.

    Args:
        context: a spawn context (``torch.multiprocessing`` or ``multiprocessing``).
        target: ``env_worker`` or ``policy_worker``.
        specs: one ``WorkerSpec`` per worker.
        args_per_worker: the extra arguments of each (the shared buffers, the policy).
    """

    def __init__(
        self, context: Any, target: Callable, specs: list[WorkerSpec], args_per_worker: list[tuple]
    ) -> None:
        self.context, self.target = context, target
        self.specs, self.args = list(specs), list(args_per_worker)
        self.processes: list[Any] = []
        self.connections: list[Any] = []
        try:
            for index in range(len(self.specs)):
                process, connection = self._spawn(index)
                self.processes.append(process)
                self.connections.append(connection)
            for index in range(len(self.processes)):
                self.receive(index)  # each worker reports it built its envs
        except BaseException:
            _end_workers(self.processes, self.connections)
            raise
        self._finalizer = weakref.finalize(self, _end_workers, self.processes, self.connections)

    def _spawn(self, index: int) -> tuple[Any, Any]:
        parent_end, child_end = self.context.Pipe(duplex=True)
        process = self.context.Process(
            target=self.target,
            args=(child_end, self.specs[index], *self.args[index]),
            name=f"workbench-worker-{self.specs[index].worker_index}",
            daemon=True,
        )
        process.start()
        child_end.close()  # so that the worker's death reads as EOF here
        return process, parent_end

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def dead(self) -> list[int]:
        """Indices of the workers that are not alive."""
        return [index for index, process in enumerate(self.processes) if not process.is_alive()]

    def restart(self, index: int, seed: int) -> int:
        """Start a fresh worker in place of worker ``index`` (dead or alive), its envs seeded
        ``seed + lo``; returns its pid once it has built and reset them."""
        old, connection = self.processes[index], self.connections[index]
        if old.is_alive():
            old.kill()
        old.join(timeout=2.0)
        connection.close()
        process, connection = self._spawn(index)
        self.processes[index], self.connections[index] = process, connection
        self.receive(index)
        self.send(index, RESET, seed + self.specs[index].lo)
        self.receive(index)
        return process.pid

    def send(self, index: int, command: bytes, argument: int = 0) -> None:
        try:
            self.connections[index].send_bytes(COMMAND.pack(command, argument))
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

    def _died(self, index: int) -> WorkerDied:
        process = self.processes[index]
        process.join(timeout=1.0)
        return WorkerDied(index, process.pid, process.exitcode)

    def close(self) -> None:
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()
        else:
            _end_workers(self.processes, self.connections)


class EnvWorkers:
    """Env-only workers over slices of the sampler's envs, stepped in groups (Batched, Alternating).

    Args:
        context: a spawn context. env_id, env_options: the environments.
        slices: ``[lo, hi)`` per worker. buffers: the rollout's shared arrays.
        seed: the envs' base seed (env ``i`` of a reset gets ``seed + i``). parent_pid: ours.
    """

    def __init__(
        self,
        context: Any,
        env_id: str,
        env_options: dict,
        slices: list[tuple[int, int]],
        buffers: dict[str, SharedArray],
        seed: int,
        parent_pid: int,
    ) -> None:
        self.slices = slices
        specs = [
            WorkerSpec(env_id, lo, hi, seed, env_options, 1, parent_pid, index)
            for index, (lo, hi) in enumerate(slices)
        ]
        self.pool = WorkerPool(context, env_worker, specs, [(buffers,)] * len(specs))
        self.pending: dict[
            int, int
        ] = {}  # worker index -> the step it was sent and has not answered

    def reset(self, seed: int) -> None:
        """Reset every worker's envs, env ``i`` seeded ``seed + i`` (the observations go to
        row 0)."""
        for index, (lo, _) in enumerate(self.slices):
            self.pool.send(index, RESET, seed + lo)
        for index in range(len(self.slices)):
            self.pool.receive(index)

    def send(self, t: int, indices: list[int]) -> None:
        """Start step ``t`` (actions in row t) on these workers."""
        for index in indices:
            self.pool.send(index, STEP, t)
            self.pending[index] = t

    def receive(self, indices: list[int], latest_row: np.ndarray) -> float:
        """Wait for these workers' step, record each env's newest row in ``latest_row``; returns
        the mean seconds they spent stepping. Raises ``WorkerDied`` for a dead worker."""
        busy = 0.0
        for index in indices:
            payload = self.pool.receive(index)
            lo, hi = self.slices[index]
            latest_row[lo:hi] = self.pending.pop(index) + 1
            busy += struct.unpack("<d", payload)[0]
        return busy / max(1, len(indices))

    def drain(self, latest_row: np.ndarray) -> None:
        """Take the replies still owed (after an interrupt or a death), so the next collect starts
        clean; a dead worker's owed reply is dropped."""
        for index in sorted(self.pending):
            try:
                self.receive([index], latest_row)
            except WorkerDied:
                self.pending.pop(index, None)

    def restart_dead(self, seed: int, latest_row: np.ndarray) -> list[dict[str, Any]]:
        """Restart every dead worker, its envs reset (seeded ``seed + lo``, their first
        observation in row 0); returns one event per restart."""
        events = []
        for index in self.pool.dead():
            old = self.pool.processes[index]
            old.join(timeout=1.0)
            self.pending.pop(index, None)
            pid = self.pool.restart(index, seed)
            lo, hi = self.slices[index]
            latest_row[lo:hi] = 0
            events.append(
                {
                    "event": "worker_restart",
                    "worker": index,
                    "old_pid": old.pid,
                    "exit_code": old.exitcode,
                    "pid": pid,
                }
            )
        return events

    @property
    def pids(self) -> list[int]:
        return self.pool.pids

    def close(self) -> None:
        self.pool.close()


def _end_workers(processes: list, connections: list) -> None:
    """Ask each worker process to close, then end those that do not (also the finalizer's)."""
    end_processes(processes, connections, lambda c: c.send_bytes(COMMAND.pack(CLOSE, 0)))
