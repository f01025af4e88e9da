"""Data-parallel learning across machines: learner processes that meet through torch.distributed's
standard environment, as ``torchrun`` sets it.

``DataParallelLearner`` spreads one learner over the devices of this machine: it spawns the
processes and cuts each batch into shards. Across machines there is no caller to do that: each
machine runs its own process, with its own environments, and the processes meet through four
variables (Stooke & Abbeel 2018, Sec. 3.2; CleanRL's ``ppo_atari_multigpu.py`` under torchrun):

* ``MASTER_ADDR`` / ``MASTER_PORT``: where rank 0 listens (its TCP store, the rendezvous);
* ``WORLD_SIZE``: how many processes join; ``RANK``: this one's index (0 .. WORLD_SIZE - 1).

``join_learner_group(learner)`` reads them, joins the group (gloo between CPUs, NCCL between
GPUs), copies rank 0's parameters to every replica, and makes the learner's ``reduction`` an
``all_reduce.AllReduce``: each update then sums its losses' statistics and its gradients over the
group, so every replica takes the step one learner takes on the joined batch (each process's batch
is its shard). Replicas must draw the same minibatch permutations: make each learner with the same
seed, and seed the environments by rank. ``workbench.runs.distributed`` runs a whole recipe this
way.

Two machines, one process each (``torchrun`` sets the variables; open ``MASTER_PORT`` on rank 0's
machine to the other, and gloo's own ports, which it picks at random, between the two)::

    torchrun --nnodes=2 --nproc-per-node=1 --node-rank=0 --master-addr=10.0.0.1 \\
        --master-port=29500 -m workbench.runs.distributed --recipe ppo-cartpole
    torchrun --nnodes=2 --nproc-per-node=1 --node-rank=1 --master-addr=10.0.0.1 \\
        --master-port=29500 -m workbench.runs.distributed --recipe ppo-cartpole
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from workbench.learners.all_reduce import AllReduce

__all__ = ["RENDEZVOUS_VARIABLES", "Rendezvous", "join_learner_group", "leave_learner_group"]

RENDEZVOUS_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


@dataclass(frozen=True)
class Rendezvous:
    """Where and as whom a learner process joins its group."""

    master_addr: str
    master_port: int
    world_size: int
    rank: int
    local_rank: int = 0
    """This process's index on its machine (``LOCAL_RANK``): which GPU it takes."""

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> "Rendezvous":
        """The four variables (and ``LOCAL_RANK``, default 0), checked; errors name the fix."""
        environ = os.environ if environ is None else environ
        missing = [name for name in RENDEZVOUS_VARIABLES if not environ.get(name)]
        if missing:
            raise RuntimeError(
                f"{', '.join(missing)} not set: start each learner process with torchrun (which "
                "sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK), or set them yourself: "
                "MASTER_ADDR/MASTER_PORT of rank 0's machine, WORLD_SIZE processes, RANK 0.."
                "WORLD_SIZE-1 (workbench.learners.rendezvous)."
            )
        numbers = {}
        for name in ("MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
            text = environ.get(name, "0")
            if not text.isdigit():
                raise ValueError(f"{name} must be a non-negative integer, got {text!r}")
            numbers[name] = int(text)
        if numbers["WORLD_SIZE"] < 1 or numbers["RANK"] >= numbers["WORLD_SIZE"]:
            raise ValueError(
                f"RANK must be in 0..WORLD_SIZE-1, got RANK={numbers['RANK']} with "
                f"WORLD_SIZE={numbers['WORLD_SIZE']}"
            )
        if not 0 < numbers["MASTER_PORT"] < 65536:
            raise ValueError(f"MASTER_PORT must be a TCP port, got {numbers['MASTER_PORT']}")
        return cls(
            master_addr=environ["MASTER_ADDR"],
            master_port=numbers["MASTER_PORT"],
            world_size=numbers["WORLD_SIZE"],
            rank=numbers["RANK"],
            local_rank=numbers["LOCAL_RANK"],
        )

    def device(self) -> torch.device:
        """This process's GPU (``cuda:LOCAL_RANK``) when the machine has one, else the CPU."""
        if torch.cuda.is_available():
            return torch.device("cuda", self.local_rank % torch.cuda.device_count())
        return torch.device("cpu")


def join_learner_group(
    learner: Any,
    rendezvous: Rendezvous | None = None,
    *,
    backend: str | None = None,
    timeout: float = 300.0,
) -> AllReduce:
    """Join the learner group and make ``learner`` one of its replicas.

    Waits up to ``timeout`` seconds for every process to arrive (torch raises after that),
    copies rank 0's learner state (every tensor of ``learner.state_dict()``: model, target networks,
    optimizer) into this replica, and sets ``learner.reduction`` to an ``AllReduce`` over the
    group, which it returns. ``backend``: None picks NCCL for a CUDA model, gloo otherwise.
    """
    rendezvous = rendezvous or Rendezvous.from_environment()
    if torch.distributed.is_initialized():
        raise RuntimeError(
            "this process is already in a torch.distributed group; call leave_learner_group() first"
        )
    device = next(learner.model.parameters()).device
    backend = backend or ("nccl" if device.type == "cuda" else "gloo")
    if backend == "gloo" and rendezvous.master_addr in ("127.0.0.1", "localhost"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every process is on this machine
    torch.distributed.init_process_group(
        backend,
        init_method=f"tcp://{rendezvous.master_addr}:{rendezvous.master_port}",
        rank=rendezvous.rank,
        world_size=rendezvous.world_size,
        timeout=datetime.timedelta(seconds=timeout),
    )
    state = learner.state_dict()
    with torch.no_grad():
        for tensor in tensors_in(state):
            torch.distributed.broadcast(tensor, src=0)
    learner.load_state_dict(state)
    learner.reduction = AllReduce(rendezvous.rank, rendezvous.world_size, device)
    return learner.reduction


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in a nested state (dicts, lists, tuples), in a fixed order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for key in sorted(value, key=str) for t in tensors_in(value[key])]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    return []


def leave_learner_group() -> None:
    """Leave the group this process joined (no-op when it joined none)."""
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
