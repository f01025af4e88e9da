"""The learner processes of a data-parallel learner: the ``AllReduce`` seam and the process loop.

Each process holds a replica of the learner. Its ``reduction`` is an ``AllReduce``: every
quantity the update takes over its batch is summed over the processes with
``torch.distributed.all_reduce`` (gloo between CPU processes, NCCL between GPUs), and so are the
gradients before each optimizer step. A learner written against ``base.Reduction`` therefore makes,
on its shard, its share of the update one learner makes on the joined batch, and the replicas stay
identical without ever sending parameters (Stooke & Abbeel 2018, Sec. 3.2; CleanRL's
``ppo_atari_multigpu.py``: the same loop plus one all-reduce of the gradients).

Batches travel through shared memory (``ShardLayout``): the caller copies each batch once,
shard-major ``[n, ...]``; only a small command crosses each process's pipe.
"""

from __future__ import annotations

import datetime
import os
import pickle
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Any

import torch

from workbench.learners.base import Reduction
from workbench.processes import die_with_parent
from workbench.rollout import Rollout

__all__ = ["AllReduce", "LearnerSpec", "ShardLayout", "cpu_clone", "learner_main"]

_ROLLOUT_FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "truncation_values")


# --------------------------------------------------------------------------------------------------
# The reduction over processes


class AllReduce(Reduction):
    """``Reduction`` over the ``world_size`` processes of the default process group.

    Sums in float64. ``mean`` returns the mean over the joined batch as its value, with the gradient
    of this process's share (its samples' sum over the joined count): summed over the processes by
    ``gradients``, that is the gradient of the joined mean. Every method is a collective: each
    process calls them in the same order, whatever its shard holds (an empty share included).
    """

    def __init__(self, rank: int, world_size: int, device: torch.device) -> None:
        self.rank, self.world_size, self.device = rank, world_size, device

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        total = values.detach().to(self.device, torch.float64, copy=True)
        torch.distributed.all_reduce(total)
        return total

    def count(self, n: int) -> int:
        return int(self.sum(torch.tensor(float(n))).item())

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        local = values.sum()
        n = torch.tensor(float(values.numel()), dtype=torch.float64, device=local.device)
        both = self.sum(torch.stack([local.detach().double(), n]))
        total, count = both[0].to(local.dtype), both[1].to(local.dtype)
        return local / count + (total - local.detach()) / count

    def normalize(self, advantages: torch.Tensor) -> torch.Tensor:
        x = advantages.double()
        n = torch.tensor(float(x.numel()), dtype=torch.float64, device=x.device)
        both = self.sum(torch.stack([x.sum(), n]))
        count = both[1]
        centred = x - both[0] / count
        squares = self.sum((centred**2).sum())  # two passes, as torch.std; always a collective
        if count < 2:  # a single sample has no spread: only centred
            return centred.to(advantages.dtype)
        return (centred / ((squares / (count - 1)).sqrt() + 1e-8)).to(advantages.dtype)

    def explained_variance(self, values: torch.Tensor, returns: torch.Tensor) -> float:
        r = returns.double().reshape(-1)
        d = (returns.double() - values.double()).reshape(-1)
        size = torch.tensor(float(r.numel()), dtype=torch.float64, device=r.device)
        n, sum_r, sum_d = self.sum(torch.stack([size, r.sum(), d.sum()])).tolist()
        squares = self.sum(
            torch.stack([((r - sum_r / n) ** 2).sum(), ((d - sum_d / n) ** 2).sum()])
        )
        if n < 2 or squares[0] == 0:
            return float("nan")
        return float(1 - squares[1] / squares[0])

    def local_samples(self, indices: torch.Tensor, horizon: int, num_envs: int) -> torch.Tensor:
        joined_envs = num_envs * self.world_size
        t, b = indices // joined_envs, indices % joined_envs
        lo = self.rank * num_envs
        mine = (b >= lo) & (b < lo + num_envs)
        return t[mine] * num_envs + (b[mine] - lo)

    def gradients(self, parameters: list[torch.nn.Parameter]) -> None:
        """Sum every gradient over the processes in one all-reduce (a parameter without a gradient,
        which an empty share leaves, contributes zeros)."""
        if not parameters:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch.distributed.all_reduce(flat)
        offset = 0
        for p, g in zip(parameters, grads):
            n = g.numel()
            p.grad = flat[offset : offset + n].view_as(g).clone()
            offset += n


# --------------------------------------------------------------------------------------------------
# Batches in shared memory


def cpu_clone(obj: Any) -> Any:
    """A copy of a (nested) state dict with every tensor cloned onto the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: cpu_clone(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(cpu_clone(v) for v in obj)
    return obj


@dataclass(frozen=True)
class ShardLayout:
    """How one kind of batch is cut into ``n`` shards: its tensors by name, each with the axis it
    splits along. A ``Rollout`` splits along B (axis 1 of ``[T, B, ...]``, axis 0 of ``next_obs``);
    a dict batch splits every value along the learner's ``batch_axis``."""

    kind: str  # "rollout" or "dict"
    axes: tuple[tuple[str, int], ...]

    @staticmethod
    def tensors(batch: Any, batch_axis: int) -> tuple[str, dict[str, torch.Tensor], dict[str, int]]:
        """``(kind, tensors, axes)`` of a batch."""
        if isinstance(batch, Rollout):
            tensors = {name: getattr(batch, name) for name in _ROLLOUT_FIELDS}
            tensors.update({f"out_{k}": v for k, v in batch.policy_outputs.items()})
            axes = dict.fromkeys(tensors, 1)
            tensors["next_obs"], axes["next_obs"] = batch.next_obs, 0
            return "rollout", tensors, axes
        if not isinstance(batch, dict):
            raise TypeError(
                "a data-parallel batch is a Rollout or a dict of arrays, "
                f"got {type(batch).__name__}"
            )
        tensors = {key: torch.as_tensor(value) for key, value in batch.items()}
        return "dict", tensors, dict.fromkeys(tensors, batch_axis)

    @staticmethod
    def shard(kind: str, buffers: dict[str, torch.Tensor], rank: int) -> Any:
        """Process ``rank``'s shard of the shared buffers, as the learner takes it."""
        part = {key: value[rank] for key, value in buffers.items()}
        if kind == "dict":
            return part
        return Rollout(
            **{name: part[name] for name in _ROLLOUT_FIELDS},
            policy_outputs={k[4:]: v for k, v in part.items() if k.startswith("out_")},
            next_obs=part["next_obs"],
        )


# --------------------------------------------------------------------------------------------------
# The learner process


@dataclass
class LearnerSpec:
    """What a learner process needs to join its group."""

    rank: int
    world_size: int
    device: str
    backend: str
    master_addr: str
    master_port: int
    parent_pid: int
    threads: int
    timeout: float


# Attributes of the learner that the caller's copy mirrors after each update (those the learner
# stores; a read-only property, such as IMPALA's annealed rate, follows from the counters).
MIRRORED = ("num_updates", "num_gradient_steps", "learning_rate")
# Schedules the caller's copy holds and every replica applies before each update.
SCHEDULES = (("progress", "set_progress"), ("base_learning_rate", "set_learning_rate"))


def join_group(spec: LearnerSpec, factory_bytes: bytes, initial_state: bytes) -> Any:
    """In a learner process: join the gloo or NCCL group ``spec`` names (on this machine's
    loopback when the master is), and build the replica from the caller's factory and state,
    its reductions over the group."""
    torch.set_num_threads(spec.threads)
    os.environ["MASTER_ADDR"] = spec.master_addr
    os.environ["MASTER_PORT"] = str(spec.master_port)
    if (
        spec.backend == "gloo"
        and spec.master_addr == "127.0.0.1"
        and os.path.exists("/sys/class/net/lo")
    ):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every learner is on this machine
    device = torch.device(spec.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.distributed.init_process_group(
        spec.backend,
        init_method="env://",
        rank=spec.rank,
        world_size=spec.world_size,
        timeout=datetime.timedelta(seconds=spec.timeout),
    )
    learner = pickle.loads(factory_bytes)(device=device)
    learner.load_state_dict(pickle.loads(initial_state))
    learner.reduction = AllReduce(spec.rank, spec.world_size, device)
    return learner


def learner_main(
    conn: Any, spec: LearnerSpec, factory_bytes: bytes, initial_state: bytes, model_out: dict
) -> None:
    """A learner process: join the group, build the replica, then serve commands until ``close``.

    Commands (caller -> learner) are ``(name, seq, payload)``; every one gets one reply
    ``("ok", seq, result)`` or ``("error", seq, traceback)``. Model and optimizer states travel
    pickled by value (bytes), never as shared tensors: a replica must own its parameters.
    """
    die_with_parent(spec.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a kernel interrupt is the caller's to handle
    try:
        learner = join_group(spec, factory_bytes, initial_state)
        conn.send(("ok", 0, None))
    except BaseException:
        _send_quietly(conn, ("error", 0, traceback.format_exc()))
        return
    buffers: dict[str, torch.Tensor] = {}
    kind = "dict"
    while True:
        try:
            command, seq, payload = conn.recv()
        except (EOFError, OSError):  # the caller is gone
            break
        if command == "close":
            break
        try:
            if command == "buffers":
                kind, buffers = payload
                result = None
            elif command == "update":
                result = _update(
                    learner,
                    spec.rank,
                    payload,
                    ShardLayout.shard(kind, buffers, spec.rank),
                    model_out,
                )
            elif command == "state_dict":
                result = pickle.dumps(cpu_clone(learner.state_dict()))
            elif command == "load_state_dict":
                learner.load_state_dict(pickle.loads(payload))
                result = None
            else:
                raise ValueError(f"learner: unknown command {command!r}")
            conn.send(("ok", seq, result))
        except BaseException:
            if not _send_quietly(conn, ("error", seq, traceback.format_exc())):
                break
    try:
        torch.distributed.destroy_process_group()
    except Exception:
        pass
    # Skip the interpreter's teardown of torch (about a second): nothing is left to flush.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _update(learner: Any, rank: int, schedules: dict, batch: Any, model_out: dict) -> dict:
    for name, setter in SCHEDULES:
        if name in schedules:
            getattr(learner, setter)(schedules[name])
    metrics = learner.update(batch)
    if rank == 0:  # the caller's copy acts with rank 0's parameters
        with torch.no_grad():
            for name, tensor in learner.model.state_dict().items():
                model_out[name].copy_(tensor)
    priorities = getattr(learner, "priorities", None)
    return {
        "metrics": metrics,
        "priorities": None if priorities is None else torch.as_tensor(priorities).cpu(),
        "mirrored": {name: getattr(learner, name) for name in MIRRORED if name in vars(learner)},
    }


def _send_quietly(conn: Any, message: Any) -> bool:
    try:
        conn.send(message)
        return True
    except (BrokenPipeError, OSError):
        return False
