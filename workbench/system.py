"""What this machine has (cores, accelerators, a free port), and device names checked with a clear
error."""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


#: The CPU instruction sets that decide this package's speed (Linux's /proc/cpuinfo names): AVX2
#: alone (an older AMD EPYC: no bfloat16, the same recipe ~3x slower), AVX-512 with bfloat16 (the
#: AMD EPYC most records come from, an Intel Xeon), AVX-512 fp16 and AMX (newer Xeons).
CPU_FLAGS_OF_NOTE = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


@dataclass(frozen=True)
class MachineInfo:
    cpu_model: str
    cores: int
    memory_gib: float
    python: str
    torch: str
    cuda_devices: tuple[str, ...]
    cpu_flags: tuple[str, ...] = ()
    """Which of ``CPU_FLAGS_OF_NOTE`` the CPU has."""
    torch_cpu_capability: str = ""
    """The kernels torch's ATen picked (``torch.backends.cpu.get_cpu_capability()``: ``AVX512``,
    ``AVX2``, ``DEFAULT``); lower than ``cpu_flags`` allow when ``ATEN_CPU_CAPABILITY`` caps it."""
    isa_caps: tuple[str, ...] = ()
    """Instruction-set caps set in the environment (``ATEN_CPU_CAPABILITY``,
    ``ONEDNN_MAX_CPU_ISA``): a record made under them simulates an older CPU."""


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> tuple[str, ...]:
    """Which of ``CPU_FLAGS_OF_NOTE`` this CPU has (empty off Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    present = set(line.split(":", 1)[1].split())
                    return tuple(flag for flag in CPU_FLAGS_OF_NOTE if flag in present)
    except OSError:
        pass
    return ()


#: Environment variables that cap the instruction sets torch uses (ATen's kernels, oneDNN's).
ISA_CAP_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


def machine_info() -> MachineInfo:
    import psutil
    import torch

    cuda = tuple(
        f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())
    )
    return MachineInfo(
        cpu_model=_cpu_model(),
        cores=usable_cores(),
        memory_gib=round(psutil.virtual_memory().total / 2**30, 1),
        python=platform.python_version(),
        torch=torch.__version__,
        cuda_devices=cuda,
        cpu_flags=cpu_flags(),
        torch_cpu_capability=torch.backends.cpu.get_cpu_capability(),
        isa_caps=tuple(f"{k}={os.environ[k]}" for k in ISA_CAP_VARIABLES if os.environ.get(k)),
    )


def available_devices() -> list[str]:
    """Device names this machine can run torch on: ``cpu`` then ``cuda:0`` ... ``cuda:n-1``."""
    import torch

    return ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]


def resolve_device(device: "str | None" = "auto"):
    """A ``torch.device`` for ``device``; ``"auto"`` (or None) picks cuda:0 when present, else cpu.

    Raises ValueError naming the fix when a CUDA device is asked for where there is none, or when
    the index is past the devices this machine has.
    """
    import torch

    if device is None or device == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"device={device!r} is not a device name; use 'cpu', 'cuda', 'cuda:N' or 'auto'."
        ) from error
    if resolved.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            raise ValueError(
                f"device={device!r} asks for a GPU, but torch sees none on this machine "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda is not None}). "
                "Use device='cpu' or 'auto', or install a CUDA build of torch (README, 'GPU')."
            )
        index = 0 if resolved.index is None else resolved.index
        if index >= count:
            raise ValueError(
                f"device={device!r} does not exist: this machine has {count} GPU(s), "
                f"cuda:0 to cuda:{count - 1}."
            )
        return torch.device("cuda", index)
    if resolved.type != "cpu":
        raise ValueError(f"device={device!r} is not supported; use 'cpu', 'cuda:N' or 'auto'.")
    return resolved


def check_learner_devices(
    devices: Sequence[str], backend: str | None
) -> tuple[list[torch.device], str]:
    """The devices of a data-parallel learner group to compute on (cpu indices are only labels) and
    its backend (gloo, NCCL), checked with errors that name the fix."""
    import torch

    if isinstance(devices, (str, torch.device)):
        raise ValueError(
            f"devices={devices!r} is a single device; DataParallelLearner takes a sequence of at "
            "least 2, e.g. ('cpu:0', 'cpu:1') or ('cuda:0', 'cuda:1'). With a single device "
            "use the algorithm directly: PPO(model, config, device=...), DQN(...) ..."
        )
    devices = list(devices)
    if len(devices) < 2:
        raise ValueError(
            f"DataParallelLearner needs at least 2 devices, got {devices!r}. With a single device "
            "use the algorithm directly: PPO(model, config, device=...), DQN(...) ..."
        )
    resolved = [resolve_device(str(d)) for d in devices]  # ValueError naming the fix (no GPU...)
    kinds = {d.type for d in resolved}
    if len(kinds) > 1:
        raise ValueError(
            f"devices {devices!r} mix cpu and cuda: one learner group runs on one kind, all "
            "'cpu:N' (gloo) or all 'cuda:N' (NCCL). Use ('cpu:0', 'cpu:1') or ('cuda:0', 'cuda:1')."
        )
    kind = kinds.pop()
    if kind == "cuda":
        indices = [d.index for d in resolved]
        if len(set(indices)) != len(indices):
            raise ValueError(
                f"devices {devices!r} name a GPU twice; NCCL runs one learner per GPU. Use "
                f"distinct GPUs (this machine has {torch.cuda.device_count()})."
            )
    if backend is None:
        backend = "nccl" if kind == "cuda" else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be None, 'gloo' or 'nccl', got {backend!r}")
    if backend == "nccl" and kind == "cpu":
        raise ValueError("backend='nccl' needs cuda devices; CPU learners use backend='gloo'")
    if not torch.distributed.is_available():
        raise ValueError("this torch build has no torch.distributed; install the standard wheel")
    available = {
        "gloo": torch.distributed.is_gloo_available(),
        "nccl": torch.distributed.is_nccl_available(),
    }
    if not available[backend]:
        raise ValueError(
            f"backend {backend!r} is not available in this torch build ({torch.__version__}); "
            "use backend='gloo', or a CUDA build of torch for NCCL"
        )
    compute = [torch.device("cpu") if d.type == "cpu" else d for d in resolved]
    return compute, backend


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
