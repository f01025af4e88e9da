"""Ape-X on Ray (``pip install "workbench[distributed]"``): the replay and the actors as Ray actors.

Actors send their blocks straight to the replay actor (the learner's process never touches the
data) and are placed round-robin over the cluster's nodes (``cluster.node_for``); the replay is
pinned to ``ApexConfig.replay_node`` (default: the learner's node); the learner runs in the calling
process. Ray is the instance this process uses, else a private local one that ends with the run
(``cluster.acquire_ray``); ``cluster.connect(address)`` or ``cluster.simulated_cluster`` first to
spread the actors over nodes.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from typing import Any

import numpy as np
import torch

from workbench.apex.actor import ApexActor
from workbench.apex.config import ApexConfig
from workbench.apex.replay_server import ReplayServer
from workbench.cluster import (
    acquire_ray,
    node_for,
    node_left,
    node_strategy,
    pinned_node,
    release_ray,
)
from workbench.restarts import RoleLost

REPLAY_LOST = (
    "Apex.from_checkpoint({checkpoint}, "
    "config=dataclasses.replace(config, replay_node=None)) starts a new replay on the learner's "
    "node, which the actors refill (a checkpoint does not hold the replay)."
)
"""How to continue when the replay's node dies (``RoleLost``)."""

STARTUP_SECONDS = 180.0
"""How long ``actor_pids`` waits for actors still running their constructors (under
``benchmarks/repeat_tests.py``'s load, a core taken, one needed more than the 30 s once allowed)."""

__all__ = ["ApexRayActor", "RayReplayServer", "RayTransport"]


class ApexRayActor:
    """An ``ApexActor`` inside a Ray actor: collects a block and sends it straight to the replay
    actor (the learner's process never touches the data)."""

    def __init__(self, config: ApexConfig, index: int, exploration: float, replay: Any) -> None:
        self.actor = ApexActor(config, index, exploration)
        self.replay = replay
        self._last_add = None

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        return os.getpid()

    def collect(
        self, parameters: dict[str, torch.Tensor] | None, version: int, exploration: float
    ) -> int:
        import ray

        if parameters is not None and version != self.actor.parameter_version:
            self.actor.load_parameters(parameters, version)
        self.actor.exploration = exploration
        block = self.actor.collect()
        if self._last_add is not None:
            ray.get(self._last_add)  # one block in flight per actor: the replay sets the pace
        while not ray.get(self.replay.accepting.remote()):  # the learner lags (min_replay_ratio)
            time.sleep(0.01)
        self._last_add = self.replay.add_block.remote(block)
        return block["env_steps"]


class RayReplayServer(ReplayServer):
    """The central replay as a Ray actor: a ``ReplayServer`` that can say where it runs."""

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


class RayTransport:
    """The replay and the actors as Ray actors; the learner in this process."""

    name = "ray"

    def __init__(self, config: ApexConfig, actor_state: dict[str, torch.Tensor]) -> None:
        ray = self.ray = acquire_ray()
        self.config = config
        try:
            self.replay_node = pinned_node(config.replay_node, "ApexConfig.replay_node")
        except BaseException:
            release_ray()
            raise
        # num_cpus=0: the roles are scheduled by placement, not by CPU accounting, so a 2-core
        # machine runs 16 actors (as the local back end does).
        self.replay = (
            ray.remote(num_cpus=0)(RayReplayServer)
            .options(scheduling_strategy=node_strategy(self.replay_node))
            .remote(config)
        )
        self._remote_actor = ray.remote(num_cpus=0, max_restarts=0)(ApexRayActor)
        self.parameters_ref = ray.put(actor_state)
        self.version = 1
        self.actors: dict[int, Any] = {}
        self.explorations: list[float] = []
        self._in_flight: dict[Any, int] = {}
        self._blocks_since_sync: dict[int, int] = {}
        self._dead: set[int] = set()
        self._samples: deque = deque()
        self._priority_refs: deque = deque()

    def set_explorations(self, values: list[float]) -> None:
        self.explorations = list(values)

    def start_actor(self, index: int) -> None:
        # Round-robin over the nodes alive now (cluster.node_for).
        handle = self._remote_actor.options(scheduling_strategy=node_for(index)).remote(
            self.config, index, self.explorations[index], self.replay
        )
        self.actors[index] = handle
        self._blocks_since_sync[index] = math.inf
        self._dead.discard(index)
        self._launch(index)

    def _launch(self, index: int) -> None:
        sync_blocks = math.ceil(self.config.parameter_sync_steps / self.config.block_steps)
        parameters = None
        if self._blocks_since_sync[index] >= sync_blocks:
            parameters, self._blocks_since_sync[index] = self.parameters_ref, 0
        self._blocks_since_sync[index] += 1
        ref = self.actors[index].collect.remote(parameters, self.version, self.explorations[index])
        self._in_flight[ref] = index

    def _poll(self) -> None:
        if not self._in_flight:
            return
        done, _ = self.ray.wait(list(self._in_flight), num_returns=len(self._in_flight), timeout=0)
        for ref in done:
            index = self._in_flight.pop(ref)
            try:
                self.ray.get(ref)
            except self.ray.exceptions.RayError:
                self._dead.add(index)
                continue
            if index in self.actors:
                self._launch(index)

    def stop_actor(self, index: int) -> None:
        handle = self.actors.pop(index)
        self.ray.kill(handle)

    def restart_actor(self, index: int) -> None:
        """A fresh actor in place of a dead one (the replay keeps what the dead one sent)."""
        self.actors.pop(index, None)
        self.start_actor(index)

    def dead_actors(self) -> list[int]:
        self._poll()
        return [index for index in self._dead if index in self.actors]

    def actor_handles(self) -> dict[int, Any]:
        return dict(self.actors)

    def actor_pids(self, timeout: float = STARTUP_SECONDS) -> dict[int, int]:
        """Process ids of the actors (index -> pid), asked of each Ray actor (``ask_actors``)."""
        return self.ask_actors("pid", timeout)

    def ask_actors(self, method: str, timeout: float = STARTUP_SECONDS) -> dict[int, Any]:
        """``method()`` of every actor (index -> answer). An actor answers once its constructor
        has run (torch imported, envs made: tens of seconds on a busy 2-core machine), so one still
        starting is waited for, all of them within ``timeout`` seconds; a dead one has no answer."""
        refs = {i: getattr(handle, method).remote() for i, handle in list(self.actors.items())}
        deadline = time.monotonic() + timeout
        answers = {}
        for index, ref in refs.items():
            try:
                answers[index] = self.ray.get(ref, timeout=max(0.1, deadline - time.monotonic()))
            except self.ray.exceptions.RayError:
                pass  # dead, or dying, or not started within the timeout
        return answers

    def publish(self, state: dict[str, torch.Tensor]) -> None:
        self.parameters_ref = self.ray.put({key: value.cpu() for key, value in state.items()})
        self.version += 1

    @property
    def pending_batches(self) -> int:
        return len(self._samples)

    def request_sample(self, batch_size: int) -> None:
        self._samples.append(self.replay.sample.remote(batch_size))

    def take_batch(self, timeout: float) -> Any:
        self._poll()
        if not self._samples:
            return None
        done, _ = self.ray.wait([self._samples[0]], timeout=timeout)
        if not done:
            return None
        sample = self._from_replay(self._samples.popleft())
        if sample is None:  # the replay is warming up: the learner asks again
            time.sleep(min(timeout, 0.02))
            return None
        batch, indices, weights = sample
        # Ray hands out read-only views of its object store; torch wants arrays it may write.
        return {key: np.array(value) for key, value in batch.items()}, indices, np.array(weights)

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        self._priority_refs.append(self.replay.update_priorities.remote(indices, priorities))
        while len(self._priority_refs) > 4:  # bound what is queued at the replay
            self._from_replay(self._priority_refs.popleft())

    def stats(self) -> dict[str, Any]:
        self._poll()
        return self._from_replay(self.replay.take_stats.remote(), timeout=60)

    def replay_node_id(self) -> str:
        """The node the replay actor runs on (asked of it)."""
        return self._from_replay(self.replay.node_id.remote(), timeout=60)

    def _from_replay(self, ref: Any, timeout: float | None = None) -> Any:
        """The replay's answer; its actor's death (its node's, most often) is a ``RoleLost``: the
        run cannot go on without the data it held."""
        try:
            return self.ray.get(ref, timeout=timeout)
        except self.ray.exceptions.RayActorError as error:
            raise RoleLost(
                "Ape-X's replay", self.replay_node, node_left(self.replay_node), error, REPLAY_LOST
            ) from None

    def actor_nodes(self) -> dict[int, str]:
        """The node id of each actor (index -> node id), asked of each (``ask_actors``)."""
        return self.ask_actors("node_id")

    def close(self) -> None:
        try:
            for handle in self.actors.values():
                self.ray.kill(handle)
            self.actors.clear()
            self.ray.kill(self.replay)
        finally:
            release_ray()
