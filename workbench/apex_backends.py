"""Ape-X's back ends: where the roles of ``workbench.apex`` run, and how data moves between them.

* ``LocalBackend``: actor processes and a replay process on this machine (``torch.multiprocessing``,
  spawn). Each actor has its own pipe to the replay (an actor killed mid-message breaks only its
  own pipe); blocks and sampled batches cross as numpy arrays; the learner's parameters are
  published into shared-memory tensors (``SharedParameters``). Actors run at a lower CPU priority
  than the learner and the replay, and every process dies with its parent.
* ``RayBackend``: the replay and the actors as Ray actors (``workbench[distributed]``); actors
  send blocks straight to the replay actor and are placed round-robin over the cluster's nodes.

Both give the learner (``apex.Apex``) the same calls: ``start_actor``, ``stop_actor``,
``dead_actors``, ``set_explorations``, ``publish``, ``request_sample``, ``take_batch``,
``update_priorities``, ``stats``, ``close``.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections import deque
from multiprocessing.connection import wait as wait_connections
from typing import Any

import numpy as np
import torch

from workbench.apex import ApexActor, ApexConfig, ReplayServer
from workbench.workers import WORKER_TIMEOUT

__all__ = ["LocalBackend", "RayBackend", "SharedParameters", "import_ray"]

#: Scheduling niceness of local actor processes (0 = as the learner; 19 = only idle CPU).
ACTOR_NICENESS = 10


# --- the local back end: processes and shared memory -------------------------------------------------


class SharedParameters:
    """The learner's published parameters in shared-memory tensors, with a version number.

    A sequence lock: the version is odd while the learner writes, so a reader that saw an odd or
    changed version retries; a torn copy is never loaded."""

    def __init__(self, context: Any, state: dict[str, torch.Tensor]) -> None:
        self.tensors = {key: value.detach().clone().share_memory_() for key, value in state.items()}
        self.version = context.Value("q", 0, lock=False)

    def publish(self, state: dict[str, torch.Tensor]) -> None:
        self.version.value += 1
        for key, value in state.items():
            self.tensors[key].copy_(value)
        self.version.value += 1

    def read(self) -> tuple[dict[str, torch.Tensor], int] | None:
        before = self.version.value
        if before % 2:
            return None
        state = {key: value.clone() for key, value in self.tensors.items()}
        return (state, before) if self.version.value == before else None


def _actor_main(config: ApexConfig, index: int, explorations: Any, conn: Any, parameters: SharedParameters,
                parent_pid: int) -> None:
    """An actor process: collect blocks, send them, refresh parameters between blocks."""
    from workbench.workers import die_with_parent

    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the kernel's interrupt is the parent's to handle
    # Actors yield the CPU to the learner and the replay: with more actors than cores an unthrottled
    # actor pool would starve the one process that learns (Ape-X puts them on other machines).
    os.nice(ACTOR_NICENESS)
    actor = ApexActor(config, index, explorations[index])
    try:
        while True:
            if actor.wants_parameters() and parameters.version.value != actor.parameter_version:
                read = parameters.read()
                if read is not None:
                    actor.load_parameters(*read)
            actor.exploration = float(explorations[index])  # changes when actors are added or removed
            conn.send(actor.collect())
    except (BrokenPipeError, EOFError, OSError):
        pass  # the replay went away: the run is over
    finally:
        actor.close()


def _replay_main(config: ApexConfig, learner: Any, parent_pid: int) -> None:
    """The replay process: adds the actors' blocks, answers the learner's requests.

    The learner sends ``("sample", n)`` (kept pending while the replay warms up),
    ``("priorities", indices, priorities)``, ``("connect", actor, conn)``, ``("disconnect",
    actor)``, ``("stats",)`` and ``("close",)``; batches and stats go back on the same pipe.
    """
    from workbench.workers import die_with_parent

    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    server = ReplayServer(config)
    learner.send(("ready", True))
    actors: dict[Any, int] = {}  # connection -> actor index
    pending_samples: deque[int] = deque()
    try:
        while True:
            # While the learner lags (min_replay_ratio), blocks stay in the actors' pipes: they wait.
            readers = [learner, *actors] if server.accepting() else [learner]
            for conn in wait_connections(readers, timeout=0.05):
                if conn is learner:
                    message = learner.recv()
                    kind = message[0]
                    if kind == "sample":
                        pending_samples.append(message[1])
                    elif kind == "priorities":
                        server.update_priorities(message[1], message[2])
                    elif kind == "connect":
                        actors[message[2]] = message[1]
                    elif kind == "disconnect":
                        for actor_conn, index in list(actors.items()):
                            if index == message[1]:
                                actor_conn.close()
                                del actors[actor_conn]
                    elif kind == "stats":
                        learner.send(("stats", server.take_stats()))
                    elif kind == "close":
                        return
                else:
                    try:
                        server.add_block(conn.recv())
                    except (EOFError, OSError, RuntimeError):  # the actor died, maybe mid-message
                        conn.close()
                        del actors[conn]
            while pending_samples and server.ready(pending_samples[0]):
                learner.send(("batch", server.sample(pending_samples.popleft())))
    except (EOFError, BrokenPipeError, OSError):
        pass  # the learner went away
    finally:
        for conn in actors:
            conn.close()


class LocalBackend:
    """Actor processes and a replay process on this machine (``torch.multiprocessing``)."""

    name = "local"

    def __init__(self, config: ApexConfig, actor_state: dict[str, torch.Tensor]) -> None:
        import torch.multiprocessing as mp

        self.config = config
        self.context = mp.get_context("spawn")
        self.parameters = SharedParameters(self.context, actor_state)
        self.explorations = self.context.Array("d", config.max_actors, lock=False)
        self.learner_conn, replay_end = self.context.Pipe(duplex=True)
        self.replay = self.context.Process(target=_replay_main, args=(config, replay_end, os.getpid()),
                                           name="workbench-apex-replay", daemon=True)
        self.replay.start()
        replay_end.close()
        self.actors: dict[int, Any] = {}
        self.pending_batches = 0
        self._batches: deque = deque()
        try:
            if self._receive("ready", WORKER_TIMEOUT) is None:
                raise TimeoutError(f"the Ape-X replay process did not start in {WORKER_TIMEOUT:.0f} s; "
                                   "the machine may be overloaded: fewer actors, or wait for other work to end.")
        except BaseException:
            self.close()
            raise

    # actors
    def set_explorations(self, values: list[float]) -> None:
        self.explorations[: len(values)] = values

    def start_actor(self, index: int) -> None:
        receive, send = self.context.Pipe(duplex=False)
        process = self.context.Process(
            target=_actor_main, args=(self.config, index, self.explorations, send, self.parameters, os.getpid()),
            name=f"workbench-apex-actor-{index}", daemon=True)
        process.start()
        send.close()
        self.learner_conn.send(("connect", index, receive))
        receive.close()
        self.actors[index] = process

    def stop_actor(self, index: int) -> None:
        process = self.actors.pop(index)
        self.learner_conn.send(("disconnect", index))
        process.kill()  # an actor holds nothing that needs saving
        process.join(timeout=5.0)

    def dead_actors(self) -> list[int]:
        return [index for index, process in self.actors.items() if not process.is_alive()]

    def actor_pids(self) -> dict[int, int]:
        return {index: process.pid for index, process in self.actors.items()}

    # learner side
    def publish(self, state: dict[str, torch.Tensor]) -> None:
        self.parameters.publish(state)

    def request_sample(self, batch_size: int) -> None:
        self.learner_conn.send(("sample", batch_size))
        self.pending_batches += 1

    def take_batch(self, timeout: float) -> Any:
        """The next sampled batch, or None if none came within ``timeout`` seconds."""
        if not self._batches:
            self._receive("batch", timeout)
        if not self._batches:
            return None
        self.pending_batches -= 1
        return self._batches.popleft()

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        self.learner_conn.send(("priorities", indices, priorities))

    def stats(self) -> dict[str, Any]:
        self.learner_conn.send(("stats",))
        stats = self._receive("stats", WORKER_TIMEOUT)
        if stats is None:
            raise TimeoutError(f"the Ape-X replay process did not answer in {WORKER_TIMEOUT:.0f} s; the machine "
                               "may be overloaded: fewer actors, or wait for other work to end.")
        return stats

    def _receive(self, wanted: str, timeout: float) -> Any:
        """Read replies until one of kind ``wanted`` (batches that come first are queued)."""
        deadline = time.monotonic() + timeout
        while True:
            ready = wait_connections([self.learner_conn, self.replay.sentinel],
                                     timeout=max(0.0, deadline - time.monotonic()))
            if self.learner_conn in ready:
                try:
                    kind, payload = self.learner_conn.recv()
                except (EOFError, OSError) as error:
                    self.replay.join(timeout=2.0)
                    raise RuntimeError(f"the Ape-X replay process died (exit code {self.replay.exitcode}); "
                                       "its error is above in this output.") from error
                if kind == "batch":
                    self._batches.append(payload)
                if kind == wanted:
                    return payload
            elif self.replay.sentinel in ready:
                raise RuntimeError(f"the Ape-X replay process died (exit code {self.replay.exitcode}).")
            else:
                return None

    def close(self) -> None:
        from workbench.workers import end_processes

        for process in self.actors.values():
            process.kill()
        for process in self.actors.values():
            process.join(timeout=5.0)
        self.actors.clear()
        end_processes([self.replay], [self.learner_conn], lambda c: c.send(("close",)))


# --- the Ray back end: the same roles as Ray actors ------------------------------------------------


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError('backend="ray" needs Ray: pip install "workbench[distributed]" '
                          '(or use backend="local" on one machine).') from None
    return ray


class _RayActorRole:
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

    def collect(self, parameters: dict[str, torch.Tensor] | None, version: int, exploration: float) -> int:
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


class RayBackend:
    """The replay and the actors as Ray actors; the learner in this process."""

    name = "ray"

    def __init__(self, config: ApexConfig, actor_state: dict[str, torch.Tensor]) -> None:
        ray = self.ray = import_ray()
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        self.config = config
        # num_cpus=0: the roles are scheduled by placement, not by CPU accounting, so a 2-core
        # machine runs 16 actors (as the local back end does).
        self.replay = ray.remote(num_cpus=0)(ReplayServer).remote(config)
        self._remote_actor = ray.remote(num_cpus=0, max_restarts=0)(_RayActorRole)
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
        # Round-robin over the nodes alive now (a restarted actor goes to a live one). num_cpus=0
        # actors are not spread by Ray's default or SPREAD policies, and a soft affinity may still
        # put them all on the head node.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = sorted(node["NodeID"] for node in self.ray.nodes() if node["Alive"])
        strategy = NodeAffinitySchedulingStrategy(node_id=nodes[index % len(nodes)], soft=False)
        handle = self._remote_actor.options(scheduling_strategy=strategy).remote(
            self.config, index, self.explorations[index], self.replay)
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

    def dead_actors(self) -> list[int]:
        self._poll()
        return [index for index in self._dead if index in self.actors]

    def actor_handles(self) -> dict[int, Any]:
        return dict(self.actors)

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
        sample = self.ray.get(self._samples.popleft())
        if sample is None:  # the replay is warming up: the learner asks again
            time.sleep(min(timeout, 0.02))
            return None
        batch, indices, weights = sample
        # Ray hands out read-only views of its object store; torch wants arrays it may write.
        return {key: np.array(value) for key, value in batch.items()}, indices, np.array(weights)

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        self._priority_refs.append(self.replay.update_priorities.remote(indices, priorities))
        while len(self._priority_refs) > 4:  # bound what is queued at the replay
            self.ray.get(self._priority_refs.popleft())

    def stats(self) -> dict[str, Any]:
        self._poll()
        return self.ray.get(self.replay.take_stats.remote(), timeout=60)

    def close(self) -> None:
        for handle in self.actors.values():
            self.ray.kill(handle)
        self.actors.clear()
        self.ray.kill(self.replay)
