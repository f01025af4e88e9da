"""The parallel sampler: worker processes that each step their envs and run their own CPU copy of
the policy (Stooke & Abbeel 2018, Sec. 3.1, Fig. 1a: the CPU sampler)."""

from __future__ import annotations

import copy
import os
import struct
import time
from typing import Any

import numpy as np
import torch
import torch.multiprocessing

from workbench.rollout import Rollout
from workbench.sampling.base import Sampler
from workbench.sampling.buffers import (
    Policy,
    PolicyMemory,
    RolloutBuffers,
    StepBoundaryInterrupts,
    check_sizes,
    keep_size,
    numpy_dtype,
    output_specs,
    shared_allocate,
    split_envs,
)
from workbench.sampling.workers import (
    COLLECT,
    RESET,
    WorkerDied,
    WorkerPool,
    WorkerSpec,
    policy_worker,
)

__all__ = ["ParallelSampler"]


class ParallelSampler(Sampler):
    """Worker processes that each step their envs and run their own CPU copy of the policy.

    The policy's parameters live in shared memory; each collect copies the caller's current
    parameters into them, then every worker runs T steps on its own. A worker that dies is
    restarted (its envs reset) and the collect is taken again; ``take_events()`` reports it.

    Args:
        env_id, num_envs, horizon, seed, env_options: as for ``SerialSampler``.
        num_workers: worker processes (one torch thread each).
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        horizon: int,
        num_workers: int = 2,
        seed: int = 0,
        env_options: dict | None = None,
    ) -> None:
        super().__init__(
            env_id,
            num_envs=num_envs,
            horizon=horizon,
            seed=seed,
            device="cpu",
            env_options=env_options,
        )
        check_sizes(num_envs, horizon, num_workers)
        self.num_workers = num_workers
        self._pool: WorkerPool | None = None
        self._shared_policy: Any = None
        self._policy_memory = PolicyMemory()
        self._pending: set[int] = set()  # workers sent a COLLECT that have not answered

    @property
    def worker_pids(self) -> list[int]:
        return self._pool.pids if self._pool else []

    def _start(self, policy: Any) -> None:
        """Workers start at the first collect: they need a copy of the policy."""
        if not isinstance(policy, torch.nn.Module):
            raise TypeError(
                "ParallelSampler needs a torch.nn.Module policy (its workers hold copies of it)."
            )
        context = torch.multiprocessing.get_context("spawn")
        allocate = shared_allocate(context)
        self.buffers = RolloutBuffers(
            allocate, self.horizon, self.num_envs, self.observation_space, self.action_space
        )
        self._shared_policy = copy.deepcopy(policy).cpu().share_memory()
        obs_example = np.zeros(self.observation_space.shape, self.observation_space.dtype)
        specs = output_specs(self._shared_policy, obs_example, torch.device("cpu"))
        for name, spec in specs.items():
            if name != "action":
                shape = (self.horizon, self.num_envs, *spec.shape)
                self.buffers.add(allocate, "out_" + name, shape, numpy_dtype(spec.dtype), 0)
        self.slices = split_envs(self.num_envs, self.num_workers)
        worker_specs = [
            WorkerSpec(self.env_id, lo, hi, self.seed, self.env_options, 1, os.getpid(), index)
            for index, (lo, hi) in enumerate(self.slices)
        ]
        args = [(self.buffers.shared, self._shared_policy)] * len(worker_specs)
        self._pool = WorkerPool(context, policy_worker, worker_specs, args)
        for index, (lo, _) in enumerate(self.slices):
            self._pool.send(index, RESET, self.env_seed() + lo)
        for index in range(len(self.slices)):
            self._pool.receive(index)

    def _sync_parameters(self, policy: Any) -> None:
        with torch.no_grad():
            for shared, current in zip(
                self._shared_policy.state_dict().values(), policy.state_dict().values()
            ):
                shared.copy_(current)

    def _drain(self) -> None:
        """Take the replies still owed: a worker always finishes its T steps (a dead one is
        dropped)."""
        for index in sorted(self._pending):
            try:
                self._pool.receive(index)
            except WorkerDied:
                pass
        self._pending.clear()
        self.buffers.latest_row[:] = self.horizon

    def _restart_dead(self, death: WorkerDied) -> None:
        self.generation += 1  # the restarted envs start a new episode stream
        events, dead = [], self._pool.dead()
        waited = self.wait_to_restart(dead, death)
        for index in dead:
            old = self._pool.processes[index]
            old.join(timeout=1.0)
            pid = self._pool.restart(index, self.env_seed())
            lo, hi = self.slices[index]
            # The restarted envs' first observation is in row 0; the others carry their newest.
            self.buffers.arrays["obs"][self.horizon, lo:hi] = self.buffers.arrays["obs"][0, lo:hi]
            events.append(
                {
                    "event": "worker_restart",
                    "worker": index,
                    "old_pid": old.pid,
                    "exit_code": old.exitcode,
                    "pid": pid,
                }
            )
        self.record_restarts(events, waited)

    def collect(self, policy: Policy) -> Rollout:
        if self.closed:
            raise RuntimeError("ParallelSampler is closed; make a new sampler.")
        if self._pool is not None and self._policy_memory.is_new(policy):
            self.resize()  # another policy: workers restart with a copy of it
        if self._pool is None:
            self._start(policy)
            self._policy_memory.remember(policy)
        while True:
            if self._pending:
                self._drain()
            try:
                return self._collect(policy)
            except WorkerDied as death:
                self._drain()
                self._restart_dead(death)

    def _collect(self, policy: Policy) -> Rollout:
        self._sync_parameters(policy)
        self.buffers.start_collect()
        everyone = range(self.num_workers)
        start = time.perf_counter()
        try:
            # Workers run the whole collect on their own: an interrupt takes effect once they end.
            with StepBoundaryInterrupts():
                for index in everyone:
                    self._pool.send(index, COLLECT, self.horizon)
                    self._pending.add(index)
                env_s = inference_s = 0.0
                for index in everyone:
                    worker_env, worker_inference = struct.unpack("<dd", self._pool.receive(index))
                    self._pending.discard(index)
                    env_s += worker_env / self.num_workers
                    inference_s += worker_inference / self.num_workers
        except KeyboardInterrupt:
            self._drain()
            raise
        total = time.perf_counter() - start
        self.buffers.latest_row[:] = self.horizon
        a = self.buffers.arrays
        outputs = {name[4:]: torch.from_numpy(a[name]) for name in a if name.startswith("out_")}
        timings = {"env": env_s, "inference": inference_s, "wait": total, "total": total}
        return self.buffers.rollout(outputs, timings)

    def resize(
        self,
        *,
        num_workers: int | None = None,
        num_envs: int | None = None,
        horizon: int | None = None,
    ) -> None:
        """Change workers, envs (B) or steps (T) between collects: workers restart at the next
        collect."""
        num_workers = keep_size(num_workers, self.num_workers)
        num_envs = keep_size(num_envs, self.num_envs)
        horizon = keep_size(horizon, self.horizon)
        check_sizes(num_envs, horizon, num_workers)
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self.num_workers, self.num_envs, self.horizon = num_workers, num_envs, horizon
        self.generation += 1

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._pool is not None:
                self._pool.close()
