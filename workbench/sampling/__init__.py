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
"""

from typing import Any

from workbench.sampling.base import Sampler
from workbench.sampling.batched import AlternatingSampler, BatchedSampler
from workbench.sampling.parallel import ParallelSampler
from workbench.sampling.serial import SerialSampler
from workbench.sampling.workers import WorkerDied

__all__ = [
    "SAMPLERS",
    "AlternatingSampler",
    "BatchedSampler",
    "ParallelSampler",
    "Sampler",
    "SerialSampler",
    "WorkerDied",
    "make_sampler",
]

SAMPLERS = {
    "serial": SerialSampler,
    "parallel": ParallelSampler,
    "batched": BatchedSampler,
    "alternating": AlternatingSampler,
}


def make_sampler(kind: str, env_id: str, **kwargs: Any) -> Sampler:
    """A sampler by name: ``serial``, ``parallel``, ``batched`` or ``alternating``."""
    if kind not in SAMPLERS:
        raise ValueError(f"Unknown sampler {kind!r}; choose one of {', '.join(SAMPLERS)}.")
    if kind == "serial":
        kwargs.pop("num_workers", None)
    if kind == "parallel":
        kwargs.pop("device", None)
    return SAMPLERS[kind](env_id, **kwargs)
