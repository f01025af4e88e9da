"""Data-parallel learners: any ``Learner`` on several devices, one process each, gradients
all-reduced.

Stooke & Abbeel 2018, *Accelerated Methods for Deep Reinforcement Learning*,
https://arxiv.org/abs/1803.02811, Section 3.2 ("Multi-GPU optimization", synchronous variant) and
Section 4: the learner runs on several devices at once. Each holds a replica of the model and its
own optimizer; at every gradient step each computes the gradient of its share of the batch, the
gradients are summed over the devices, and every replica applies the same step, so the replicas
stay identical without ever sending parameters. The collectives are torch.distributed's:
``gloo`` between CPU processes, ``NCCL`` between GPUs.

``DataParallelLearner(learner_factory, devices)`` behaves like the learner it replicates
(``update(batch) -> metrics``, ``model``, ``set_progress``, ``state_dict``, ``priorities``), so a
run drives it unchanged. It adds only processes and an all-reduce: what one update does, for
``n`` learners,

1. the caller copies the batch into shared memory, shard-major ``[n, ...]``: a time-major batch
   splits along B (learner ``r`` owns environments ``[r B/n, (r+1) B/n)``), a batch of
   transitions along N (the learner's ``batch_axis``). Only a small command crosses each pipe;
2. every learner runs its own ``update`` on its shard, with an ``all_reduce.AllReduce`` as its
   ``reduction``: every mean, normalisation, metric and gradient it takes over the batch is summed
   over the learners (``base.Reduction``: the seam every learner computes through).

So an update equals the single learner's update on the joined batch, up to float rounding
(``tests/test_data_parallel.py``: PPO, A2C, DQN, C51 and IMPALA). Learning-rate scaling is the
caller's business: the update is the single-learner update on the joined batch whatever the
number of learners, so pick the rate for the joined batch size (``scale_learning_rate``).

Processes: every learner, rank 0 included, is a spawned process; the caller only coordinates.
That keeps torch.distributed's process-global state out of the Jupyter kernel, lets the learner
group be closed and re-formed on other devices at any time, and means a crashed learner can never
wedge the kernel in a collective: the caller only ever waits on pipes and process sentinels, with a
timeout. The cost is one copy of rank 0's parameters into the caller's model after each update
(through shared memory: 0.07 ms for CartPole's MLP, 16 ms for NatureCNN, whose update takes
seconds). Learners die with their parent (``processes.die_with_parent``), are ended by ``close()``,
by garbage collection and at exit.
"""

from __future__ import annotations

import functools
import math
import os
import pickle
import time
import weakref
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait as wait_connections
from typing import Any

import torch
import torch.multiprocessing
from torch import nn

from workbench.learners.all_reduce import (
    SCHEDULES,
    LearnerSpec,
    ShardLayout,
    cpu_clone,
    learner_main,
)
from workbench.learners.base import Learner, missing_members
from workbench.processes import end_processes
from workbench.system import check_learner_devices, free_port, usable_cores

__all__ = ["LEARNER_TIMEOUT", "DataParallelLearner", "RunLearner", "replica_factory"]

#: Seconds the caller waits for a learner to start or to answer one command.
LEARNER_TIMEOUT = 300.0


def _replica(learner_bytes: bytes, device: torch.device) -> Any:
    learner = pickle.loads(learner_bytes)
    learner.to(device)
    return learner


def replica_factory(learner: Any) -> Callable[..., Any]:
    """A picklable ``factory(device=...)`` of copies of ``learner`` (its whole state, by value)."""
    return functools.partial(_replica, pickle.dumps(learner))


class DataParallelLearner:
    """A learner whose updates run data-parallel on several devices (module docstring: how).

    Args:
        learner_factory: ``learner_factory(device=torch.device) -> learner``, called in each learner
            process (and here, on the CPU, unless ``local`` is given). It must be picklable: a
            module-level function, ``functools.partial(PPO, model, config)`` or
            ``replica_factory(learner)``, not a lambda. Every learner starts from the local copy's
            state (``load_state_dict``), so the factory need not be deterministic.
        devices: one device per learner, at least two, all of one kind: ``("cpu:0", "cpu:1")``
            (the index only names the learner; gloo) or ``("cuda:0", "cuda:1")`` (NCCL).
        backend: ``None`` (gloo for cpu, nccl for cuda), ``"gloo"`` or ``"nccl"``.
        threads_per_learner: torch threads in each learner; default: this process's usable cores
            divided among the CPU learners (1 per GPU learner).
        timeout: seconds to wait for the learners to start and for each answer; a learner that
            dies is reported at once, one that hangs after this.
        local: the learner in this process that mirrors rank 0 (its ``model`` gets rank 0's
            parameters after every update, so a sampler holding it sees them); default: one made
            by ``learner_factory`` on the CPU.

    Attributes:
        model: the local copy's model (on its device); after every update, rank 0's parameters.
        devices: the device names, one per learner (rank ``r`` on ``devices[r]``).
        pids: the learner processes' ids. priorities: the last update's, joined in batch order.
    """

    def __init__(
        self,
        learner_factory: Callable[..., Any],
        devices: Sequence[str],
        *,
        backend: str | None = None,
        threads_per_learner: int | None = None,
        timeout: float = LEARNER_TIMEOUT,
        local: Any = None,
    ) -> None:
        compute, self.backend = check_learner_devices(devices, backend)
        self.devices = [str(d) for d in devices]
        self.world_size = len(compute)
        if not timeout > 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout}")
        self.timeout = float(timeout)
        try:
            # By value: the standard pickler copies tensors (ForkingPickler would move them into
            # shared memory that every learner maps, and the replicas would step one another).
            factory_bytes = pickle.dumps(learner_factory)
        except Exception as error:
            raise TypeError(
                "learner_factory must be picklable to reach the learner processes: use a "
                "module-level function, functools.partial(PPO, model, config) or "
                "replica_factory(learner), not a lambda or a closure "
                f"({type(error).__name__}: {error})"
            ) from error
        self.learner = local if local is not None else learner_factory(device=torch.device("cpu"))
        missing = missing_members(self.learner, Learner)
        if missing:
            raise TypeError(
                f"learner_factory must make a workbench Learner (learners.base.Learner: update, "
                f"state_dict, model, batch_axis ...); {type(self.learner).__name__} lacks {missing}"
            )
        if threads_per_learner is None:
            cpu = compute[0].type == "cpu"
            threads_per_learner = max(1, usable_cores() // self.world_size) if cpu else 1
        self.priorities: torch.Tensor | None = None
        self._closed = False
        self._failed: str | None = None
        self._seq = 0
        self._awaiting: set[int] = set()  # ranks that owe a reply to an interrupted command
        self._layout: tuple | None = None
        self._buffers: dict[str, torch.Tensor] = {}
        # Rank 0 writes its parameters here after each update; update() copies them into .model.
        self._model_out = {
            name: t.detach().to("cpu", copy=True).share_memory_()
            for name, t in self.learner.model.state_dict().items()
        }
        initial_state = pickle.dumps(cpu_clone(self.learner.state_dict()))
        context = torch.multiprocessing.get_context("spawn")
        for attempt in range(3):  # a new port when another program took ours meanwhile
            self.processes: list[Any] = []
            self.connections: list[Any] = []
            self._awaiting.clear()
            self._failed, self._closed = None, False
            self._finalizer = weakref.finalize(
                self, _end_learners, self.processes, self.connections
            )
            try:
                self._start(context, compute, factory_bytes, initial_state, threads_per_learner)
                break
            except BaseException as error:  # _fail stopped them, or an interrupt: stop them now
                self._finalizer.detach()
                _end_learners(self.processes, self.connections, grace=0.0)
                self._closed = True
                retry = isinstance(error, RuntimeError) and "address already in use" in str(error)
                if attempt == 2 or not retry:
                    raise

    def _start(
        self, context: Any, compute: list, factory_bytes: bytes, initial_state: bytes, threads: int
    ) -> None:
        port = free_port()
        for rank, device in enumerate(compute):
            spec = LearnerSpec(
                rank=rank,
                world_size=self.world_size,
                device=str(device),
                backend=self.backend,
                master_addr="127.0.0.1",
                master_port=port,
                parent_pid=os.getpid(),
                threads=threads,
                timeout=self.timeout,
            )
            parent_end, child_end = context.Pipe(duplex=True)
            process = context.Process(
                target=learner_main,
                args=(child_end, spec, factory_bytes, initial_state, self._model_out),
                name=f"workbench-learner-{rank}",
                daemon=True,
            )
            process.start()
            child_end.close()  # so that the learner's death reads as end-of-file here
            self.processes.append(process)
            self.connections.append(parent_end)
            self._awaiting.add(rank)
        self._gather(0, range(self.world_size), what="start")

    # --- the learner's interface ----------------------------------------------------------------

    @property
    def model(self) -> nn.Module:
        return self.learner.model

    @property
    def config(self) -> Any:
        return getattr(self.learner, "config", None)

    @property
    def device(self) -> torch.device:
        return self.learner.device

    @property
    def batch_axis(self) -> int:
        return self.learner.batch_axis

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def __getattr__(self, name: str) -> Any:
        # The local copy's counters and schedules (num_updates, learning_rate, set_progress ...).
        if name.startswith("_") or name in ("learner", "processes", "connections"):
            raise AttributeError(name)
        return getattr(self.learner, name)

    def update(self, batch: Any) -> dict[str, float]:
        """One update on ``batch``, split into equal shards (module docstring). Returns the single
        learner's metrics (the same keys and, up to rounding, the same values) over the joined
        batch; the joined priorities (if the learner keeps them) are in ``self.priorities``."""
        self._check_usable()
        kind, tensors, axes = ShardLayout.tensors(batch, self.learner.batch_axis)
        self._check_batch(tensors, axes)
        self._drain()
        self._write(kind, tensors, axes)
        schedules = {
            name: getattr(self.learner, name)
            for name, _ in SCHEDULES
            if hasattr(self.learner, name)
        }
        replies = self._command("update", schedules)
        with torch.no_grad():
            for name, tensor in self.learner.model.state_dict().items():
                tensor.copy_(self._model_out[name])
        for name, value in replies[0]["mirrored"].items():
            setattr(self.learner, name, value)
        parts = [replies[rank]["priorities"] for rank in range(self.world_size)]
        self.priorities = None if parts[0] is None else torch.cat(parts)
        return replies[0]["metrics"]

    def state_dict(self) -> dict[str, Any]:
        """Rank 0's ``state_dict`` on the CPU; the replicas are identical, so it is every one's."""
        self._check_usable()
        self._drain()
        return pickle.loads(self._command("state_dict", None, ranks=[0])[0])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a ``state_dict`` (of this learner, or of a single learner of the same model) into
        every learner and into the local copy."""
        self._check_usable()
        self._drain()
        state = cpu_clone(state)
        self._command("load_state_dict", pickle.dumps(state))
        self.learner.load_state_dict(state)

    def to(self, device: "str | torch.device") -> None:
        raise ValueError(
            "a DataParallelLearner's devices are fixed when it is made; close() it and make a new "
            "one on the other devices (a run does this when its learner_devices change)"
        )

    # --- processes ------------------------------------------------------------------------------

    def close(self) -> None:
        """End the learner processes (idempotent). Also runs on garbage collection and at exit."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> "DataParallelLearner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running"
        if self._failed is not None:
            state = f"failed: {self._failed}"
        elif self._closed:
            state = "closed"
        return (
            f"DataParallelLearner({type(self.learner).__name__}, devices={self.devices}, "
            f"backend={self.backend!r}, {state})"
        )

    def _fail(self, message: str) -> RuntimeError:
        """End every learner (the group cannot go on without one of them) and say why."""
        self._failed = message.splitlines()[0]
        self._closed = True
        self._finalizer.detach()
        _end_learners(self.processes, self.connections, grace=0.0)
        return RuntimeError(message)

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise RuntimeError(
                f"this DataParallelLearner failed ({self._failed}); make a new one "
                "(learner.state_dict() of a failed learner is gone: restore from a checkpoint)"
            )
        if self._closed:
            raise RuntimeError("this DataParallelLearner is closed; make a new one")
        for rank, process in enumerate(self.processes):
            if not process.is_alive():
                raise self._died(rank)

    def _died(self, rank: int) -> RuntimeError:
        process = self.processes[rank]
        process.join(timeout=1.0)
        return self._fail(
            f"learner {rank} on {self.devices[rank]} (pid {process.pid}) died (exit code "
            f"{process.exitcode}); the others were stopped. Make a new DataParallelLearner."
        )

    # --- commands -------------------------------------------------------------------------------

    def _command(
        self, name: str, payload: Any, ranks: Sequence[int] | None = None
    ) -> dict[int, Any]:
        ranks = range(self.world_size) if ranks is None else ranks
        self._seq += 1
        for rank in ranks:
            try:
                self.connections[rank].send((name, self._seq, payload))
            except (BrokenPipeError, OSError):
                raise self._died(rank) from None
            self._awaiting.add(rank)
        return self._gather(self._seq, ranks, what=name)

    def _gather(self, seq: int, ranks: Sequence[int], *, what: str) -> dict[int, Any]:
        """Each rank's reply to command ``seq``; a death, an error or a time-out raises."""
        pending = set(ranks)
        results: dict[int, Any] = {}
        deadline = time.monotonic() + self.timeout
        while pending:
            waitables = {}
            for rank in pending:
                waitables[self.connections[rank]] = rank
                waitables[self.processes[rank].sentinel] = rank
            ready = wait_connections(list(waitables), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                names = ", ".join(f"{r} ({self.devices[r]})" for r in sorted(pending))
                self._fail(f"learner(s) {names} did not answer {what!r} in {self.timeout:.0f} s")
                raise TimeoutError(
                    f"learner(s) {names} did not answer {what!r} in {self.timeout:.0f} s; they "
                    "were stopped. Raise timeout= for slow updates, or use fewer learners."
                )
            for rank in sorted({waitables[obj] for obj in ready}):
                connection = self.connections[rank]
                if not connection.poll():
                    raise self._died(rank)
                try:
                    status, reply_seq, result = connection.recv()
                except (EOFError, OSError):
                    raise self._died(rank) from None
                if reply_seq != seq:
                    continue  # the answer to an interrupted command
                if status == "error":
                    raise self._fail(
                        f"learner {rank} on {self.devices[rank]} failed during {what!r}; the "
                        f"learners were stopped:\n{result}"
                    )
                results[rank] = result
                pending.discard(rank)
                self._awaiting.discard(rank)
        return results

    def _drain(self) -> None:
        """Wait for the answers to a command interrupted in this process (KeyboardInterrupt), so
        that no learner still reads the shared batch when it is overwritten."""
        if self._awaiting:
            self._gather(self._seq, sorted(self._awaiting), what="the interrupted command")

    # --- the batch in shared memory -------------------------------------------------------------

    def _check_batch(self, tensors: dict[str, torch.Tensor], axes: dict[str, int]) -> None:
        n = self.world_size
        sizes = {
            key: value.shape[axes[key]] if value.dim() > axes[key] else None
            for key, value in tensors.items()
        }
        size = next(iter(sizes.values()))
        if any(s != size for s in sizes.values()) or size is None:
            raise ValueError(
                "DataParallelLearner.update: the batch's arrays do not share one size along the "
                f"axis it splits on (the learner's batch_axis {self.learner.batch_axis}): {sizes}"
            )
        if size % n:
            name = "N" if self.learner.batch_axis == 0 else "B"
            lower, upper = (size // n) * n, (size // n + 1) * n
            hint = f"{lower} or {upper}" if lower else f"{upper}"
            what = "samples" if name == "N" else "environments"
            raise ValueError(
                f"DataParallelLearner.update: the batch has {name} = {size} {what}, which do not "
                f"split into {n} equal shards (one per learner): use a multiple of {n} "
                f"(e.g. {hint}), or {math.gcd(size, n)} learner(s)"
            )

    def _write(self, kind: str, tensors: dict[str, torch.Tensor], axes: dict[str, int]) -> None:
        """Copy the batch into the shared buffers, shard-major ``[n, ...]``."""
        n = self.world_size
        layout = (kind, tuple((k, tuple(v.shape), v.dtype, axes[k]) for k, v in tensors.items()))
        if layout != self._layout:
            # Allocated once per layout; the learners receive the handles (not the data) once.
            buffers = {}
            for key, value in tensors.items():
                shape = list(value.shape)
                shape[axes[key]] //= n
                buffers[key] = torch.empty((n, *shape), dtype=value.dtype).share_memory_()
            self._command("buffers", (kind, buffers))
            self._buffers, self._layout = buffers, layout
        for key, value in tensors.items():
            axis = axes[key]
            parts = value.reshape(
                *value.shape[:axis], n, value.shape[axis] // n, *value.shape[axis + 1 :]
            )
            self._buffers[key].copy_(parts.movedim(axis, 0))


class RunLearner(DataParallelLearner):
    """A run's ``learner_factory``: learners that start from ``learner`` and hand it back.

    ``Run(..., learner_factory=RunLearner)`` forms the data-parallel group when the learner devices
    become several, starting from the learner's whole state (parameters, optimizer moments,
    counters); when they become one again, ``close()`` loads the group's state back into it, so the
    run continues on one learner where the group left off. ``learner`` itself is the local copy:
    its ``model`` (what the sampler acts with) holds rank 0's parameters after every update.
    """

    def __init__(self, learner: Any, devices: Sequence[str]) -> None:
        super().__init__(replica_factory(learner), devices, local=learner)
        self._learner_to_return = learner

    def close(self) -> None:
        learner, self._learner_to_return = getattr(self, "_learner_to_return", None), None
        if learner is not None:
            try:
                learner.load_state_dict(self.state_dict())
            except RuntimeError:  # a learner died: the learner keeps its last parameters
                pass
        super().close()


def _end_learners(processes: list, connections: list, grace: float = 3.0) -> None:
    """Ask each learner process to close, then end those that do not (also the finalizer's)."""
    end_processes(processes, connections, lambda c: c.send(("close", 0, None)), grace)
