"""Four ways to collect a time-major ``[T, B]`` rollout (Stooke & Abbeel 2018, Sec. 3 and Fig. 1).

One interface (``base.Sampler``): ``sampler.collect(policy) -> Rollout``, ``sampler.resize(...)``,
``sampler.close()``, ``sampler.take_events()``.

* ``SerialSampler``: one process steps a vector env (C++ threads for Atari) and runs inference.
* ``ParallelSampler``: worker processes, each with its envs and its own copy of the policy on the
  CPU; parameters (in shared memory) are refreshed at every collect.
* ``BatchedSampler``: workers only step envs into shared memory; the sampler's process runs one
  batched forward pass for all envs on the chosen device (the paper's GPU sampler).
* ``AlternatingSampler``: the envs form two groups; while one group steps, the other's actions
  are computed, so env stepping and inference overlap (the paper's alternating GPU sampler).

Buffers are allocated once (``buffers.RolloutBuffers``) and reallocated only by ``resize``; a
worker that dies is restarted into the same envs (``workers``).

The samplers load on first use (PEP 562): an env-only worker process imports
``workbench.sampling.workers`` through this package and must not pay for torch (about 40 MB
against about 320 MB, and a faster start, which a restart waits for).
"""

from __future__ import annotations

import importlib
from typing import Any

from workbench.sampling.workers import WorkerDied

_EXPORTS = {
    "Sampler": "base",
    "MAX_RESTARTS_PER_MINUTE": "base",
    "SerialSampler": "serial",
    "ParallelSampler": "parallel",
    "BatchedSampler": "batched",
    "AlternatingSampler": "batched",
}

_KINDS = {
    "serial": "SerialSampler",
    "parallel": "ParallelSampler",
    "batched": "BatchedSampler",
    "alternating": "AlternatingSampler",
}

__all__ = [
    "MAX_RESTARTS_PER_MINUTE",
    "SAMPLERS",
    "AlternatingSampler",
    "BatchedSampler",
    "ParallelSampler",
    "Sampler",
    "SerialSampler",
    "WorkerDied",
    "make_sampler",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"workbench.sampling.{_EXPORTS[name]}"), name)
    if name == "SAMPLERS":  # kind -> class: {"serial": SerialSampler, "parallel": ..., ...}
        samplers = {kind: __getattr__(class_name) for kind, class_name in _KINDS.items()}
        globals()["SAMPLERS"] = samplers  # made once: later lookups find it here
        return samplers
    raise AttributeError(f"module 'workbench.sampling' has no attribute {name!r}")


def make_sampler(kind: str, env_id: str, **kwargs: Any) -> Any:
    """A sampler by name: ``serial``, ``parallel``, ``batched`` or ``alternating``."""
    if kind not in _KINDS:
        raise ValueError(f"Unknown sampler {kind!r}; choose one of {', '.join(_KINDS)}.")
    if kind == "serial":
        kwargs.pop("num_workers", None)
    if kind == "parallel":
        kwargs.pop("device", None)
    samplers = globals().get("SAMPLERS") or __getattr__("SAMPLERS")
    return samplers[kind](env_id, **kwargs)
