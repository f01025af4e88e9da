"""The serial sampler: one process steps a vector env and runs the policy, step by step."""

from __future__ import annotations

import time

import torch

from workbench.envs import make_vector_env
from workbench.rollout import Rollout
from workbench.sampling.base import Sampler
from workbench.sampling.buffers import (
    Policy,
    StepBoundaryInterrupts,
    check_sizes,
    keep_size,
    local_allocate,
)
from workbench.sampling.workers import write_step

__all__ = ["SerialSampler"]


class SerialSampler(Sampler):
    """One process: a vector env (ALE's C++ threads for Atari) and the policy, step by step.

    Args:
        env_id: gymnasium id (``ALE/Pong-v5``, ``CartPole-v1``).
        num_envs: B, the number of environments.
        horizon: T, steps per environment per collect.
        seed: env ``i`` is seeded ``seed + i``.
        device: where inference runs (``"auto"``: cuda:0 when present, else cpu).
        env_threads: C++ stepping threads for Atari (default: one per core).
        env_options: options for ``make_vector_env`` (e.g. ``{"episodic_life": False}``).
    """

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        horizon: int,
        seed: int = 0,
        device: "str | torch.device" = "cpu",
        env_threads: int | None = None,
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
        self.env_threads = env_threads
        self._start()

    def _start(self) -> None:
        self.start_buffers(local_allocate)
        self.env = make_vector_env(
            self.env_id, self.num_envs, num_threads=self.env_threads, **self.env_options
        )
        obs, _ = self.env.reset(seed=self.env_seed())
        self.buffers.arrays["obs"][0] = obs

    def collect(self, policy: Policy) -> Rollout:
        policy = self.prepare_collect(policy)
        a = self.buffers.arrays
        env_s = inference_s = 0.0
        start = time.perf_counter()
        with StepBoundaryInterrupts() as interrupts:
            for t in range(self.horizon):
                interrupts.check()
                t0 = time.perf_counter()
                self.infer_rows(policy, t, 0, self.num_envs)
                t1 = time.perf_counter()
                write_step(a, t, slice(None), self.env.step(a["actions"][t]))
                self.buffers.latest_row[:] = t + 1
                t2 = time.perf_counter()
                self.bootstrap_truncated(policy, t, 0, self.num_envs)
                inference_s += (t1 - t0) + (time.perf_counter() - t2)
                env_s += t2 - t1
        total = time.perf_counter() - start
        return self.finish_collect(
            {"env": env_s, "inference": inference_s, "wait": 0.0, "total": total}
        )

    def resize(
        self,
        *,
        num_workers: int | None = None,
        num_envs: int | None = None,
        horizon: int | None = None,
    ) -> None:
        """Change B or T between collects (the envs restart). A serial sampler has no workers:
        ``num_workers`` is accepted, for one interface across samplers, and must be None or 1."""
        num_envs = keep_size(num_envs, self.num_envs)
        horizon = keep_size(horizon, self.horizon)
        check_sizes(num_envs, horizon)
        if num_workers not in (None, 1):
            raise ValueError(
                f"SerialSampler has no worker processes (num_workers={num_workers!r}); use "
                "ParallelSampler, BatchedSampler or AlternatingSampler for workers."
            )
        self.env.close()
        self.num_envs, self.horizon = num_envs, horizon
        self.generation += 1
        self._start()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.env.close()
