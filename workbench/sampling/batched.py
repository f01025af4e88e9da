"""Env-only workers and one batched forward pass here: the batched and alternating samplers.

* ``BatchedSampler``: workers only step envs into shared memory; the sampler's process runs one
  batched forward pass for all envs on the chosen device (Stooke & Abbeel 2018, Sec. 3.1, Fig. 1b:
  the GPU sampler).
* ``AlternatingSampler``: the envs form two groups; while one group steps, the other's actions are
  computed, so env stepping and inference overlap (Fig. 1c: the alternating GPU sampler).

A worker that dies mid-collect is restarted into the same envs (they reset) and the collect is
taken again from each env's newest observation: no step is invented, the broken collect's steps
are dropped, and ``take_events()`` reports the restart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.multiprocessing

from workbench.rollout import Rollout
from workbench.sampling.base import Sampler
from workbench.sampling.buffers import (
    Policy,
    StepBoundaryInterrupts,
    check_sizes,
    keep_size,
    shared_allocate,
    split_envs,
)
from workbench.sampling.workers import EnvWorkers, WorkerDied

__all__ = ["AlternatingSampler", "BatchedSampler"]


def _start_workers(sampler: Sampler, slices: list[tuple[int, int]]) -> EnvWorkers:
    """Shared buffers, env-only workers over ``slices``, their envs reset (row 0)."""
    context = torch.multiprocessing.get_context("spawn")
    sampler.start_buffers(shared_allocate(context))
    workers = EnvWorkers(
        context,
        sampler.env_id,
        sampler.env_options,
        slices,
        sampler.buffers.shared,
        sampler.seed,
        os.getpid(),
    )
    try:
        workers.reset(sampler.env_seed())
    except BaseException:
        workers.close()
        raise
    return workers


def _collect(
    sampler: Any, policy: Policy, steps: Callable[[Any, StepBoundaryInterrupts], Rollout]
) -> Rollout:
    """A collect that survives a worker's death: restart it, then collect again."""
    while True:
        workers = sampler.workers
        if workers.pending:
            workers.drain(sampler.buffers.latest_row)
        acting = sampler.prepare_collect(policy)
        try:
            with StepBoundaryInterrupts() as interrupts:
                return steps(acting, interrupts)
        except KeyboardInterrupt:
            workers.drain(sampler.buffers.latest_row)
            raise
        except WorkerDied as death:
            workers.drain(sampler.buffers.latest_row)
            sampler.generation += 1  # the restarted envs start a new episode stream
            waited = sampler.wait_to_restart(workers.pool.dead(), death)
            sampler.record_restarts(
                workers.restart_dead(sampler.env_seed(), sampler.buffers.latest_row), waited
            )


def _resize(
    sampler: Any, num_workers: int | None, num_envs: int | None, horizon: int | None
) -> None:
    """Change workers, envs (B) or steps (T) between collects: the workers restart."""
    num_workers = keep_size(num_workers, sampler.num_workers)
    num_envs = keep_size(num_envs, sampler.num_envs)
    horizon = keep_size(horizon, sampler.horizon)
    sampler.check_workers(num_envs, num_workers, horizon)
    sampler.workers.close()
    sampler.num_workers, sampler.num_envs, sampler.horizon = num_workers, num_envs, horizon
    sampler.generation += 1
    sampler.workers = _start_workers(sampler, sampler.worker_slices())


class BatchedSampler(Sampler):
    """Env-only workers step into shared memory; one batched forward here, on ``device``.

    Each step: write all actions, signal every worker, wait for all, run one forward pass over
    all B observations.

    Args:
        env_id, num_envs, horizon, seed, env_options: as for ``SerialSampler``.
        num_workers: env worker processes; envs are split among them as evenly as possible.
        device: where the batched forward pass runs (``"auto"``: cuda:0 when present).
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        horizon: int,
        num_workers: int = 2,
        seed: int = 0,
        device: "str | torch.device" = "auto",
        env_options: dict | None = None,
    ) -> None:
        super().__init__(
            env_id,
            num_envs=num_envs,
            horizon=horizon,
            seed=seed,
            device=device,
            env_options=env_options,
        )
        self.check_workers(num_envs, num_workers, horizon)
        self.num_workers = num_workers
        self.workers = _start_workers(self, self.worker_slices())

    def check_workers(self, num_envs: int, num_workers: int, horizon: int) -> None:
        check_sizes(num_envs, horizon, num_workers)

    def worker_slices(self) -> list[tuple[int, int]]:
        return split_envs(self.num_envs, self.num_workers)

    @property
    def worker_pids(self) -> list[int]:
        return self.workers.pids

    def collect(self, policy: Policy) -> Rollout:
        return _collect(self, policy, self._steps)

    def _steps(self, policy: Any, interrupts: StepBoundaryInterrupts) -> Rollout:
        everyone = list(range(self.num_workers))
        latest = self.buffers.latest_row
        env_s = inference_s = wait_s = 0.0
        start = time.perf_counter()
        for t in range(self.horizon):
            interrupts.check()
            t0 = time.perf_counter()
            self.infer_rows(policy, t, 0, self.num_envs)
            t1 = time.perf_counter()
            self.workers.send(t, everyone)
            env_s += self.workers.receive(everyone, latest)
            t2 = time.perf_counter()
            self.bootstrap_truncated(policy, t, 0, self.num_envs)
            inference_s += (t1 - t0) + (time.perf_counter() - t2)
            wait_s += t2 - t1
        total = time.perf_counter() - start
        return self.finish_collect(
            {"env": env_s, "inference": inference_s, "wait": wait_s, "total": total}
        )

    def resize(
        self,
        *,
        num_workers: int | None = None,
        num_envs: int | None = None,
        horizon: int | None = None,
    ) -> None:
        """Change the number of workers, envs (B) or steps (T) between collects: workers restart."""
        _resize(self, num_workers, num_envs, horizon)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.workers.close()


class AlternatingSampler(Sampler):
    """Two env groups take turns: one steps while the other's actions are computed.

    With group A's step in flight, the forward pass for group B runs; then B steps while A's next
    actions are computed. Inference hides behind env stepping (or the reverse), so neither the
    workers nor the inference device sit idle.

    Args:
        as for ``BatchedSampler``; ``num_workers`` must be even (half per group) and ``num_envs`` a
        multiple of 2.
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        horizon: int,
        num_workers: int = 2,
        seed: int = 0,
        device: "str | torch.device" = "auto",
        env_options: dict | None = None,
    ) -> None:
        super().__init__(
            env_id,
            num_envs=num_envs,
            horizon=horizon,
            seed=seed,
            device=device,
            env_options=env_options,
        )
        self.check_workers(num_envs, num_workers, horizon)
        self.num_workers = num_workers
        self.workers = _start_workers(self, self.worker_slices())

    @property
    def worker_pids(self) -> list[int]:
        return self.workers.pids

    def collect(self, policy: Policy) -> Rollout:
        return _collect(self, policy, self._steps)

    def resize(
        self,
        *,
        num_workers: int | None = None,
        num_envs: int | None = None,
        horizon: int | None = None,
    ) -> None:
        """Change the number of workers, envs (B) or steps (T) between collects: workers restart."""
        _resize(self, num_workers, num_envs, horizon)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.workers.close()

    def check_workers(self, num_envs: int, num_workers: int, horizon: int) -> None:
        check_sizes(num_envs, horizon, num_workers)
        if num_workers % 2 or num_envs % 2:
            raise ValueError(
                f"AlternatingSampler splits envs and workers into two equal groups, so num_workers "
                f"and num_envs must be even (got num_workers={num_workers}, num_envs={num_envs}). "
                f"Use num_workers={max(2, num_workers + num_workers % 2)}, "
                f"num_envs={num_envs + num_envs % 2}."
            )
        if num_workers > num_envs:
            raise ValueError(f"num_workers={num_workers} > num_envs={num_envs}; use more envs.")

    def worker_slices(self) -> list[tuple[int, int]]:
        half_envs, half_workers = self.num_envs // 2, self.num_workers // 2
        first = split_envs(half_envs, half_workers)
        return first + [(lo + half_envs, hi + half_envs) for lo, hi in first]

    def _steps(self, policy: Any, interrupts: StepBoundaryInterrupts) -> Rollout:
        half = self.num_envs // 2
        groups = [
            list(range(self.num_workers // 2)),
            list(range(self.num_workers // 2, self.num_workers)),
        ]
        bounds = [(0, half), (half, self.num_envs)]
        latest = self.buffers.latest_row
        seconds = {"env": 0.0, "inference": 0.0, "wait": 0.0}
        start = time.perf_counter()

        def infer_and_send(group: int, t: int) -> None:
            t0 = time.perf_counter()
            self.infer_rows(policy, t, *bounds[group])
            t1 = time.perf_counter()
            self.workers.send(t, groups[group])
            seconds["inference"] += t1 - t0
            seconds["wait"] += (
                time.perf_counter() - t1
            )  # messaging counts as waiting, as in BatchedSampler

        def receive(group: int, t: int) -> None:
            t0 = time.perf_counter()
            seconds["env"] += (
                self.workers.receive(groups[group], latest) / 2
            )  # each group is half the envs
            t1 = time.perf_counter()
            self.bootstrap_truncated(policy, t, *bounds[group])
            seconds["wait"] += t1 - t0
            seconds["inference"] += time.perf_counter() - t1

        infer_and_send(0, 0)
        for t in range(self.horizon):
            interrupts.check()  # group 0's step t is in flight and recorded: drain takes it
            infer_and_send(1, t)  # group 1 is computed while group 0 steps
            receive(0, t)
            if t + 1 < self.horizon:
                infer_and_send(0, t + 1)  # group 0 is computed while group 1 steps
            receive(1, t)
        total = time.perf_counter() - start
        return self.finish_collect({**seconds, "env": seconds["env"] * 2, "total": total})
