"""An Ape-X run: actors, one central prioritized replay, and the learner (Horgan et al. 2018,
Fig. 1).

The learner (this process, Alg. 2) keeps two sampled batches in flight while it learns: it takes a
prioritized batch, makes one ``DQN`` or ``DDPG`` update on it with its importance weights, sends
the new priorities back, and publishes its parameters every ``publish_interval`` updates. The
actors (``actor.ApexActor``) and the replay (``replay_server.ReplayServer``) run where the
transport puts them (``transports``: local processes, or Ray actors over a cluster).

On the shared life cycle (``runs.lifecycle``): ``start`` / ``run`` with the four limits, ``stop``,
``wait``; a row every ``log_interval`` seconds (``charts/...``, ``losses/...`` and ``apex/...``:
transitions added and sampled, the replay's size, the return of the actor exploring least, per-actor
counts); events when actors are added, retired or restarted; a checkpoint of the learner (model,
optimizer, counters) that ``Apex.from_checkpoint`` continues from. The replay is not saved: the
actors refill it on resume (``apex/replay_size`` starts again from 0).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np
import torch

from workbench.apex.algorithms import make_learner
from workbench.apex.config import ApexConfig
from workbench.apex.exploration import returns_by_exploration
from workbench.apex.transports import ApexTransport, make_transport
from workbench.restarts import RestartSchedule
from workbench.runs.checkpoints import CHECKPOINT_SECONDS
from workbench.runs.faults import check_finite
from workbench.runs.lifecycle import Limits, RunLifecycle
from workbench.runs.records import config_to_dict, resume_point
from workbench.runs.settings import ActorSettings, actor_settings
from workbench.system import resolve_device

__all__ = ["Apex", "TARGET_METRICS"]

TARGET_METRICS = ("apex/return_least_exploring", "apex/return_exploiting", "charts/mean_return")
"""The row keys an Ape-X run's ``target_return`` can apply to (``Apex``'s ``target_metric``)."""


class Apex(RunLifecycle):
    """An Ape-X run (module docstring).

    Args:
        config: an ``ApexConfig`` (``config.transport``: where the actors and the replay run).
        device: where the learner trains (``"cuda"`` needs a GPU; the actors act on the CPU).
        name, runs_dir: the run's folder (``runs.lifecycle.RunLifecycle``).
        limits: the default limits of ``start()`` / ``run()``.
        target_metric: the row key a ``target_return`` applies to: ``"apex/return_least_exploring"``
            (the actor exploring least, its last 10 episodes, at least 5: the default for Ape-X
            DQN), ``"apex/return_exploiting"`` (every actor but the one exploring most, the last
            10 episodes of each, at least 10 in all: a reading several times sooner, without the
            epsilon-0.4 actor's games) or ``"charts/mean_return"`` (the last 20 episodes of all
            actors; Ape-X DPG's).
        log_interval: seconds between rows.
        checkpoint_every, checkpoint_seconds: rows and wall seconds between checkpoints
            (``runs.checkpoints``; 0 and None: never; one is written when the loop ends).
    """

    kind = "apex"

    def __init__(
        self,
        config: ApexConfig,
        *,
        device: str = "cpu",
        name: str | None = None,
        runs_dir: str | None = None,
        limits: Limits | None = None,
        target_metric: str | None = None,
        log_interval: float = 1.0,
        checkpoint_every: int = 0,
        checkpoint_seconds: float | None = CHECKPOINT_SECONDS,
    ) -> None:
        if config.transport == "ray":
            from workbench.cluster import import_ray

            import_ray()  # a clear ImportError now, not when the loop starts
        if target_metric is None:
            target_metric = config.apex_algorithm.target_metric
        if target_metric not in TARGET_METRICS:
            raise ValueError(
                f"target_metric must be one of {', '.join(map(repr, TARGET_METRICS))}, "
                f"got {target_metric!r}"
            )
        self.config = config
        self.device = resolve_device(device)
        self.learner = make_learner(config, self.device)
        self.target_metric = target_metric
        self.log_interval = float(log_interval)
        super().__init__(
            name=name,
            runs_dir=runs_dir,
            label=f"apex_{config.env_id}",
            settings=actor_settings(config.num_actors, config.max_actors),
            limits=limits or Limits(),
            checkpoint_every=checkpoint_every,
            checkpoint_seconds=checkpoint_seconds,
        )
        self.transport: ApexTransport | None = None
        self.actor_restarts = RestartSchedule()
        """Dead actors and their restarts, after a backoff (``restarts``); ``count`` is kept."""
        self.running_actors: list[int] = []
        self._env_steps_before = 0  # env steps of earlier segments (the replay counts this one's)
        self._episodes: dict[int, deque] = {}

    # --- control ----------------------------------------------------------------------------------

    def run(self, **limits: Any) -> "Apex":
        """``RunLifecycle.run``, which needs a limit here: in this thread a run without one would
        only end at Ctrl-C (``start()`` and ``stop()`` run one without a limit)."""
        if not self.limits.replace(**limits).any():
            raise ValueError(
                "give run() a limit: updates, seconds, env_steps or target_return "
                "(or use start() and stop())."
            )
        return super().run(**limits)

    def set_num_actors(self, num_actors: int) -> None:
        """Ask for ``num_actors`` actors (``ActorSettings`` bounds them by ``max_actors``); the
        learner applies it at its next step."""
        self.update_settings(num_actors=num_actors)

    def actor_pids(self) -> dict[int, int]:
        """Process ids of the actors (index -> pid) while the run goes."""
        transport = self.transport  # read once: the loop's thread sets it to None when it ends
        return {} if transport is None else transport.actor_pids()

    # --- the loop's steps -------------------------------------------------------------------------

    def open_loop(self) -> None:
        self._threads = torch.get_num_threads()
        torch.set_num_threads(self.config.learner_threads)
        self._env_steps_before = self.env_steps
        self._metrics: dict[str, float] = {}
        self._next_row = time.monotonic() + self.log_interval
        self._last_added, self._last_row_wall = 0, self.wall_seconds
        self.transport = make_transport(self.config, self.learner.actor_state())
        self.actor_restarts.waiting.clear()  # deaths of an earlier segment's actors
        self.running_actors = []
        self._resize(self.settings.applied.num_actors)

    def close_loop(self) -> None:
        try:
            if self.transport is not None:
                self.transport.close()
        finally:
            self.transport = None
            torch.set_num_threads(self._threads)

    def apply_settings(self, new: ActorSettings, old: ActorSettings) -> None:
        if new.num_actors != len(self.running_actors):
            self._resize(new.num_actors)

    def _resize(self, num_actors: int) -> None:
        self.transport.set_explorations(self.config.explorations(num_actors))
        for index in range(len(self.running_actors), num_actors):
            self.transport.start_actor(index)
        for index in range(num_actors, len(self.running_actors)):
            self.transport.stop_actor(index)
        self.running_actors = list(range(num_actors))

    def step(self) -> dict[str, Any] | None:
        transport = self.transport
        self._restart_dead(transport)
        batch_size = self.config.learner.batch_size
        while transport.pending_batches < 2:  # one batch in flight while the learner learns
            transport.request_sample(batch_size)
        sample = transport.take_batch(timeout=0.05)
        if sample is not None:
            batch, indices, weights = sample
            batch = {**batch, "weights": weights}
            self._metrics = self.learner.update(batch)
            check_finite(self._metrics, batch, f"update {self.updates + 1}")
            transport.update_priorities(indices, self.learner.priorities)
            self.updates += 1
            if self.updates % self.config.publish_interval == 0:
                transport.publish(self.learner.actor_state())
        if time.monotonic() < self._next_row:
            return None
        self._next_row = time.monotonic() + self.log_interval
        return self._row()

    def final_row(self) -> dict[str, Any] | None:
        return self._row() if self.transport is not None else None

    def _restart_dead(self, transport: ApexTransport) -> None:
        """Restart dead actors after the budget's backoff; an actor that keeps dying ends the run
        (``restarts.RestartSchedule``: ``ActorKeepsDying`` names it)."""
        for index in transport.dead_actors():
            self.actor_restarts.died(index)
        restarted = self.actor_restarts.restart_due(
            transport.restart_actor, wanted=lambda index: index in self.running_actors
        )
        for index, delay, _ in restarted:
            self.event("actor_restart", actor=index, after_seconds=delay)

    def _row(self) -> dict[str, Any]:
        stats = self.transport.stats()
        for actor, episode_return in stats["episodes"]:
            self._episodes.setdefault(actor, deque(maxlen=10)).append(episode_return)
        self.record_episodes([r for _, r in stats["episodes"]])
        per_actor = stats["per_actor"]
        self.env_steps = self._env_steps_before + sum(a["env_steps"] for a in per_actor.values())
        least_exploring, exploiting = returns_by_exploration(self._episodes, self.running_actors)
        elapsed = max(self.wall_seconds - self._last_row_wall, 1e-9)
        row = {
            **self._metrics,
            "charts/num_actors": len(self.running_actors),
            "apex/transitions_added": stats["added"],
            "apex/samples_trained": stats["sampled"],
            "apex/replay_size": stats["replay_size"],
            "apex/transitions_per_second": (stats["added"] - self._last_added) / elapsed,
            "apex/return_least_exploring": least_exploring,
            "apex/return_exploiting": exploiting,
            "apex/restarts": self.actor_restarts.count,
            "apex/per_actor": {
                int(i): {
                    "transitions": a["transitions"],
                    "env_steps": a["env_steps"],
                    "episodes": a["episodes"],
                    "exploration": a.get("exploration"),
                    "mean_return": float(np.mean(a["returns"])) if a["returns"] else None,
                }
                for i, a in per_actor.items()
            },
        }
        self._last_added, self._last_row_wall = stats["added"], self.wall_seconds
        return row

    # --- checkpoints ------------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        return {
            "env_id": self.config.env_id,
            "config": config_to_dict(self.config),
            "transport": self.config.transport,
            "device": str(self.device),
            "algo": f"{type(self.learner).__module__}.{type(self.learner).__qualname__}",
        }

    def run_state(self) -> dict[str, Any]:
        return {
            "config": config_to_dict(self.config),
            "agent": self.learner.state_dict(),
            "restarts": self.actor_restarts.count,
            "replay": "not saved: the actors refill the replay on resume",
        }

    def load_run_state(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["agent"])
        self.actor_restarts.count = int(state.get("restarts", 0))

    @classmethod
    def from_checkpoint(
        cls,
        path: Any,
        *,
        config: ApexConfig | None = None,
        seed: int | None = None,
        name: str | None = None,
        device: str = "cpu",
        runs_dir: str | None = None,
        **options: Any,
    ) -> "Apex":
        """An Ape-X run that continues a checkpoint (a file, or a run's folder): the learner's
        weights, optimizer and counters, the env steps, the wall clock, the RNG states. The config
        defaults to the saved one; the run keeps its name, so its metrics file grows. With
        ``seed``, a continuation of its own (``runs.records.resume_point``): that seed's actors
        and replay sampling, a name (``name``, else a fresh one) and metrics file of its own. Not
        started."""
        saved, config, runs_dir, saved_name = resume_point(path, config, runs_dir, seed)
        run = cls(config, device=device, name=name or saved_name, runs_dir=runs_dir, **options)
        run.settings.update(num_actors=saved["settings"]["num_actors"])
        run.settings.take_changes(0)
        return run.load_checkpoint(saved, str(path), seed=seed)
