"""What each part of a deep-RL system costs on one machine: the performance model's inputs.

``benchmarks/component_costs.py`` measures them (``data/component_costs_<device>.json``): an env
step per thread, a forward pass against its batch, a gradient step against its minibatch, on one
torch thread and on all of them, and on a GPU the same plus the copy to it. This module reads
such a record into :class:`MachineCosts`, the only thing ``performance_model`` knows of a machine.

Every cost is in seconds. A :class:`Curve` holds the seconds of one call against its batch at the
measured batches and reads between them on log-log axes (a forward pass's time grows less than
linearly with its batch until the device is full); below the smallest measured batch a call costs
what the smallest did, beyond the largest it costs the largest's seconds per item.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = ["Curve", "DeviceCosts", "MachineCosts", "machine_costs", "load_record"]


@dataclass(frozen=True)
class Curve:
    """Seconds per call against the batch, from measured ``(batch, seconds)`` points."""

    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        points = tuple(sorted((float(b), float(s)) for b, s in self.points))
        if not points:
            raise ValueError("a Curve needs at least one measured (batch, seconds) point")
        if any(b <= 0 or s <= 0 for b, s in points):
            raise ValueError(f"a Curve's batches and seconds must be positive, got {points}")
        object.__setattr__(self, "points", points)

    @classmethod
    def from_rates(cls, rates: Iterable[tuple[float, float]]) -> Curve:
        """From ``(batch, items per second)`` pairs, as the benchmarks record them."""
        return cls(tuple((b, b / rate) for b, rate in rates))

    def __call__(self, batch: float) -> float:
        if not batch > 0:
            raise ValueError(f"a batch must be positive, got {batch}")
        (b0, s0), (bn, sn) = self.points[0], self.points[-1]
        if batch <= b0:
            return s0
        if batch >= bn:
            return sn * batch / bn
        for (b1, s1), (b2, s2) in zip(self.points, self.points[1:]):
            if b1 <= batch <= b2:
                t = (math.log(batch) - math.log(b1)) / (math.log(b2) - math.log(b1))
                return math.exp(math.log(s1) + t * (math.log(s2) - math.log(s1)))
        raise AssertionError("unreachable: the batch lies between two measured points")

    def per_item(self, batch: float) -> float:
        """Seconds per item at this batch."""
        return self(batch) / batch

    def scaled(self, factor: float) -> Curve:
        """The same curve on a device ``factor`` times as slow (``factor`` < 1: faster)."""
        return Curve(tuple((b, s * factor) for b, s in self.points))


@dataclass(frozen=True)
class DeviceCosts:
    """What one device costs for one network: a forward pass (``inference``) and a gradient step
    with Adam (``update``), each against its batch; on a GPU also the copy of a batch of
    observations to it (seconds per call and per byte)."""

    name: str
    inference: Curve
    update: Curve
    copy_seconds: float = 0.0
    copy_seconds_per_byte: float = 0.0

    def copy(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` of observations to the device (0 on the CPU)."""
        return self.copy_seconds + nbytes * self.copy_seconds_per_byte if nbytes else 0.0


@dataclass(frozen=True)
class MachineCosts:
    """One machine, for one network: its cores and what they cost, and its accelerators.

    ``env_seconds``: CPU-seconds per env step on one thread (the game and frame size the network
    reads); ``env_all_seconds``: wall seconds per env step of one vector env stepped by
    ``threads_all`` C++ threads (ale_py's ``AtariVectorEnv``, 16 envs); ``env_one_seconds``: an
    actor's step of its one env (the call's overhead not shared). ``cpu_one`` and
    ``cpu_all``: the network on one torch thread and on ``threads_all`` threads.
    ``request_seconds``: what one request adds to an actor's step at each end (a pipe write and
    read, a copy into shared memory, a process waking), ``request_cpu_seconds`` the CPU of it;
    ``sampler_seconds``: each sampler layout's own work per env step (handing data between its
    processes, writing the rollout), beyond stepping and inference;
    ``accelerator``: a GPU's costs, ``accelerators`` of them. ``apex_roles``: CPU-seconds of
    Ape-X's roles (``measure.process_costs.apex_role_costs``); ``data_parallel``: a gloo
    all-reduce's ``seconds_per_byte`` and ``latency_seconds`` over the network's ``parameters``
    (``measure.process_costs.all_reduce_costs``) and the learner's own ``updates`` on each
    replica's shard (``measure.process_costs.learner_update_costs``).
    """

    name: str
    cores: int
    env_seconds: float
    env_all_seconds: float
    env_one_seconds: float
    cpu_one: DeviceCosts
    cpu_all: DeviceCosts
    threads_all: int
    obs_bytes: int
    request_seconds: float = 0.0
    request_cpu_seconds: float = 0.0
    sampler_seconds: Mapping[str, float] = field(default_factory=dict)
    accelerator: DeviceCosts | None = None
    accelerators: int = 0
    apex_roles: Mapping[str, float] = field(default_factory=dict)
    data_parallel: Mapping[str, Any] = field(default_factory=dict)
    source: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.cores < 1 or self.threads_all < 1:
            raise ValueError(f"cores and threads_all must be at least 1, got {self.cores}")
        if not self.env_seconds > 0:
            raise ValueError(f"env_seconds must be positive, got {self.env_seconds}")
        if self.accelerators and self.accelerator is None:
            raise ValueError("accelerators > 0 needs the accelerator's costs")

    def with_hardware(
        self, *, cores: int | None = None, accelerators: int | None = None
    ) -> MachineCosts:
        """The same per-core and per-device costs with more or fewer of them (a projection keeps
        what one core and one device cost, and the vector env's efficiency per thread)."""
        cores = self.cores if cores is None else cores
        return replace(
            self,
            cores=cores,
            env_all_seconds=self.env_all_seconds * self.cores / cores,
            accelerators=self.accelerators if accelerators is None else accelerators,
        )

    def cpu_threads(self, threads: int) -> DeviceCosts:
        """The network on ``threads`` torch threads: one thread's or all threads' measured
        costs, the nearer in thread count."""
        return self.cpu_one if threads <= (1 + self.threads_all) / 2 else self.cpu_all


def load_record(path: "str | Path") -> dict[str, Any]:
    """A ``benchmarks/component_costs.py`` record, read as JSON."""
    return json.loads(Path(path).read_text())


def _curve(rows: list[dict], key: str, rate: str) -> Curve:
    best: dict[float, float] = {}
    for row in rows:  # several passes may measure a batch: the fastest is the device's cost
        best[row[key]] = max(best.get(row[key], 0.0), row[rate])
    return Curve.from_rates(best.items())


def _device(record: Mapping[str, Any], network: str, threads: int, precision: str) -> DeviceCosts:
    inference = [
        r for r in record["inference"] if r["network"] == network and r["threads"] == threads
    ]
    learning = [
        r
        for r in record["learning"]
        if r["network"] == network and r["threads"] == threads and r["precision"] == precision
    ]
    if not inference or not learning:
        raise ValueError(
            f"the record has no {network} rows at {threads} thread(s) and {precision}; "
            f"measure them with benchmarks/component_costs.py"
        )
    copy_seconds = per_byte = 0.0
    copies = [r for r in record.get("copy", ()) if r["network"] == network and r["pinned"]]
    if len(copies) >= 2:  # a line through the smallest and largest copy: a fixed cost + bandwidth
        lo, hi = min(copies, key=lambda r: r["batch"]), max(copies, key=lambda r: r["batch"])
        size = hi["gb_per_second"] * 1e9 * hi["us_per_copy"] * 1e-6 / hi["batch"]  # bytes/obs
        per_byte = (
            (hi["us_per_copy"] - lo["us_per_copy"]) * 1e-6 / ((hi["batch"] - lo["batch"]) * size)
        )
        copy_seconds = max(lo["us_per_copy"] * 1e-6 - per_byte * lo["batch"] * size, 0.0)
    return DeviceCosts(
        name=str(record.get("device", "cpu")),
        inference=_curve(inference, "batch", "obs_per_second"),
        update=_curve(learning, "minibatch", "samples_per_second"),
        copy_seconds=copy_seconds,
        copy_seconds_per_byte=per_byte,
    )


def _sampler_seconds(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    least: dict[str, float] = {}
    for row in rows:  # several passes: the least overhead is the layout's own
        kind = row["sampler"]
        least[kind] = min(least.get(kind, math.inf), row["overhead_seconds_per_step"])
    return least


NETWORK_FRAMES = {"universe-42": 42, "nature-84": 84}
"""The frame size (pixels a side, 4 frames stacked, uint8) each measured network reads."""


def machine_costs(
    cpu_record: Mapping[str, Any],
    network: str = "nature-84",
    *,
    gpu_record: Mapping[str, Any] | None = None,
    accelerators: int | None = None,
    precision: str = "float32",
    request_seconds: float | None = None,
) -> MachineCosts:
    """A machine's costs for ``network`` from its CPU record (and a GPU record, for a machine
    with ``accelerators`` of that GPU; one by default)."""
    if network not in NETWORK_FRAMES:
        raise ValueError(f"unknown network {network!r}; measured: {sorted(NETWORK_FRAMES)}")
    frames = NETWORK_FRAMES[network]
    cores = int(cpu_record["machine"]["cores"])
    threads = sorted({r["threads"] for r in cpu_record["inference"]})
    env = [r for r in cpu_record["env"] if r["screen_size"] == frames]
    vector = [r for r in env if r.get("num_envs", 16) > 1]
    one = [r["steps_per_second"] for r in vector if r["threads"] == 1]
    every = [r["steps_per_second"] for r in vector if r["threads"] == threads[-1]]
    single = [r["steps_per_second"] for r in env if r.get("num_envs", 16) == 1] or one
    if not one or not every:
        raise ValueError(
            f"the CPU record has no env rows at {frames}x{frames} on 1 and {threads[-1]} threads"
        )
    transport = cpu_record.get("transport", {})
    accelerator = None
    if gpu_record is not None:
        accelerator = _device(gpu_record, network, 1, precision)
    return MachineCosts(
        name=f"{cpu_record['machine']['cpu_model']}, {cores} cores",
        cores=cores,
        env_seconds=1.0 / max(one),
        env_all_seconds=1.0 / max(every),
        env_one_seconds=1.0 / max(single),
        cpu_one=_device(cpu_record, network, threads[0], precision),
        cpu_all=_device(cpu_record, network, threads[-1], precision),
        threads_all=threads[-1],
        obs_bytes=4 * frames * frames,
        request_seconds=(
            transport.get("request_seconds", 0.0) if request_seconds is None else request_seconds
        ),
        request_cpu_seconds=transport.get(
            "request_cpu_seconds", transport.get("request_seconds", 0.0)
        ),
        sampler_seconds=_sampler_seconds(cpu_record.get("samplers", ())),
        accelerator=accelerator,
        accelerators=(1 if accelerators is None else accelerators) if accelerator else 0,
        apex_roles=dict(cpu_record.get("apex", {})),
        data_parallel=dict(cpu_record.get("data_parallel", {})),
        source={"cpu": cpu_record.get("command"), "gpu": (gpu_record or {}).get("command")},
    )
