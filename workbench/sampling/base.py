"""What every sampler shares: sizes, seeds, the inference copy of the policy, the step helpers, and
the restarts of dead workers.

The interface (Stooke & Abbeel 2018, Sec. 3): ``sampler.collect(policy) -> Rollout`` (time-major
``[T, B, ...]``), ``sampler.resize(num_workers=..., num_envs=..., horizon=...)`` between collects,
``sampler.close()``, and ``sampler.take_events()``: what happened to its workers since the last
call (a worker that died is restarted into the same envs, which reset, and the collect it broke is
taken again; a run records each as an event in its metrics).

The policy is any object with ``act(obs [B, *obs_shape]) -> dict`` of ``[B, ...]`` tensors that
holds at least ``"action"``; every other entry is stored per step in ``Rollout.policy_outputs``,
and ``"value"``, when present, also bootstraps truncated episodes (``Rollout.truncation_values``).
Env ``i`` is seeded ``seed + i`` in every sampler, so with a deterministic policy all four samplers
collect the same rollout.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from workbench.envs import env_spaces
from workbench.restarts import ActorKeepsDying, RestartBudget
from workbench.rollout import Rollout
from workbench.sampling.buffers import PolicyMemory, RolloutBuffers, check_sizes, output_specs
from workbench.system import resolve_device

__all__ = ["MAX_RESTARTS_PER_MINUTE", "Sampler"]

#: A worker that dies more often than this within a minute is not restarted again: the collect
#: fails with the reason (an env that crashes at reset would otherwise restart forever). Each
#: restart waits first, 0.5 s doubling (``restarts.RestartBudget``, as Ape-X's and SEED's actors).
MAX_RESTARTS_PER_MINUTE = 3


class Sampler:
    """The shared half of the four samplers (module docstring). A subclass provides ``collect``,
    ``resize`` and ``close``; the stepping samplers use ``start_buffers``, ``prepare_collect``,
    ``infer_rows`` and ``bootstrap_truncated`` around their own way of stepping envs."""

    def __init__(
        self,
        env_id: str,
        *,
        num_envs: int,
        horizon: int,
        seed: int,
        device: "str | torch.device",
        env_options: dict | None,
    ) -> None:
        check_sizes(num_envs, horizon)
        self.env_id = env_id
        self.num_envs = num_envs
        self.horizon = horizon
        self.seed = seed
        self.env_options = dict(env_options or {})
        self.device = resolve_device(device)
        # Checks the id and options once, here, with a clear error, before any worker starts.
        self.observation_space, self.action_space = env_spaces(env_id, **self.env_options)
        self.generation = (
            0  # bumped by resize and restarts, so that new envs do not replay old episodes
        )
        self.closed = False
        self.events: list[dict[str, Any]] = []
        self._inference_policy: Any = None
        self._inference_memory = PolicyMemory()
        self._outputs: dict[str, torch.Tensor] | None = None
        self._outputs_memory = PolicyMemory()
        self._has_value = False
        self.restart_budget = RestartBudget(MAX_RESTARTS_PER_MINUTE, noun="worker")
        """How often a dead worker is restarted, and after what wait."""

    def env_seed(self) -> int:
        """The base seed of the envs started now (env ``i`` gets ``env_seed() + i``)."""
        return self.seed + 1_000_003 * self.generation

    # --- events --------------------------------------------------------------------------------

    def take_events(self) -> list[dict[str, Any]]:
        """What happened to the workers since the last call (``worker_restart`` events)."""
        events, self.events = self.events, []
        return events

    def wait_to_restart(self, workers: list[int], cause: BaseException) -> float:
        """Wait the restart budget's backoff before the dead ``workers`` start again (0.5 s, then
        1, then 2 for a worker that died again within the minute); returns the seconds waited.
        Raises instead once one has died too often, or when none is dead."""
        if not workers:
            raise RuntimeError(f"{type(self).__name__}: {cause}") from cause
        try:
            wait = max(self.restart_budget.delay(i, f"{cause}") for i in workers)
        except ActorKeepsDying as error:
            raise RuntimeError(
                f"{type(self).__name__}: {error} Check the env (an error in its step or reset), "
                "then make a new sampler."
            ) from cause
        time.sleep(wait)
        return wait

    def record_restarts(self, events: list[dict[str, Any]], waited: float) -> None:
        """Keep the restart events (each with the seconds waited before it)."""
        for event in events:
            self.restart_budget.restarted(event["worker"])
            event["time"], event["after_seconds"] = time.time(), waited
        self.events.extend(events)

    # --- the policy on the inference device ---------------------------------------------------

    def inference_copy(self, policy: Any) -> Any:
        """The policy on ``self.device``: itself if it is there, else a synced copy."""
        params = list(policy.parameters()) if isinstance(policy, torch.nn.Module) else []
        if not params or params[0].device == self.device:
            return policy
        if self._inference_policy is None or self._inference_memory.is_new(policy):
            self._inference_memory.remember(policy)
            self._inference_policy = copy.deepcopy(policy).to(self.device)
        self._inference_policy.load_state_dict(policy.state_dict())
        return self._inference_policy

    def act(self, policy: Any, obs: np.ndarray) -> dict[str, torch.Tensor]:
        """``policy.act`` on a numpy batch of observations, on the inference device."""
        with torch.no_grad():
            return policy.act(torch.from_numpy(obs).to(self.device, non_blocking=True))

    # --- the step helpers of the samplers that run inference here -------------------------------

    def start_buffers(self, allocate: Callable) -> None:
        """Allocate the rollout buffers (``buffers.local_allocate`` or ``shared_allocate``)."""
        self.buffers = RolloutBuffers(
            allocate, self.horizon, self.num_envs, self.observation_space, self.action_space
        )
        self._outputs = None
        self._outputs_memory = PolicyMemory()

    def prepare_collect(self, policy: Any) -> Any:
        """Start a collect: the policy's inference copy, its output buffers (remade for another
        policy), and row 0 holding each env's newest observation. Returns the policy to act with."""
        if self.closed:
            raise RuntimeError(f"{type(self).__name__} is closed; make a new sampler.")
        new_policy = self._outputs_memory.is_new(policy)
        self._outputs_memory.remember(policy)
        policy = self.inference_copy(policy)
        if self._outputs is None or new_policy:  # another policy: its outputs may differ
            specs = output_specs(policy, self.buffers.arrays["obs"][0, 0], self.device)
            self._outputs = {
                name: torch.zeros((self.horizon, self.num_envs, *spec.shape), dtype=spec.dtype)
                for name, spec in specs.items()
                if name != "action"
            }
            self._has_value = "value" in specs
        self.buffers.start_collect()
        return policy

    def infer_rows(self, policy: Any, t: int, lo: int, hi: int) -> None:
        """Actions (and the policy's other outputs) of envs ``[lo, hi)`` at step ``t``."""
        a = self.buffers.arrays
        out = self.act(policy, a["obs"][t, lo:hi])
        a["actions"][t, lo:hi] = out["action"].cpu().numpy()
        for name, buffer in self._outputs.items():
            buffer[t, lo:hi] = out[name].cpu()

    def bootstrap_truncated(self, policy: Any, t: int, lo: int, hi: int) -> None:
        """Value of the final observation of episodes cut by a time limit at step t."""
        a = self.buffers.arrays
        truncated = a["truncated"][t, lo:hi]
        if not truncated.any():
            return
        if not self._has_value:
            a["truncation_values"][t, lo:hi][truncated] = np.nan
            return
        final = np.ascontiguousarray(a["final_obs"][lo:hi][truncated])
        values = self.act(policy, final)["value"].float().cpu().numpy()
        a["truncation_values"][t, lo:hi][truncated] = values

    def finish_collect(self, timings: dict[str, float]) -> Rollout:
        """The buffers as a ``Rollout`` (copied: the buffers serve the next collect)."""
        return self.buffers.rollout(self._outputs, timings)

    # --- the rest of the interface ---------------------------------------------------------------

    def collect(self, policy: Any) -> Rollout:
        raise NotImplementedError(f"{type(self).__name__} must define collect(policy)")

    def resize(
        self,
        *,
        num_workers: int | None = None,
        num_envs: int | None = None,
        horizon: int | None = None,
    ) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define resize(...)")

    def close(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define close()")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.env_id!r}, num_envs={self.num_envs}, "
            f"horizon={self.horizon}, device={self.device})"
        )
