"""What this machine has (cores, accelerators), and device names checked with a clear error."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class MachineInfo:
    cpu_model: str
    cores: int
    memory_gib: float
    python: str
    torch: str
    cuda_devices: tuple[str, ...]


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
