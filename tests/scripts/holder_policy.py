"""The policy of hold_sampler.py, in its own module so that spawned workers can unpickle it
without importing the holder's torch-free main module's dependencies."""

from __future__ import annotations

import time

import torch

from workbench.models import ActorCritic


class SleepyActorCritic(ActorCritic):
    """ActorCritic that sleeps ``delay`` seconds per act; ``delay`` is a buffer, so a
    ParallelSampler syncs it to its workers at each collect."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register_buffer("delay", torch.zeros(()))

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> dict[str, torch.Tensor]:
        time.sleep(float(self.delay))
        return super().act(obs, deterministic)
