"""Ape-X on this machine: actor processes and a replay process (``torch.multiprocessing``, spawn).

Each actor has its own pipe to the replay (an actor killed mid-message breaks only its own pipe);
blocks and sampled batches cross as numpy arrays; the learner's parameters are published into
shared-memory tensors (``SharedParameters``). Actors run at a lower CPU priority than the learner
and the replay, and every process dies with its parent.
"""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from multiprocessing.connection import wait as wait_connections
from typing import Any

import numpy as np
import torch

from workbench.apex.actor import ApexActor
from workbench.apex.config import ApexConfig
from workbench.apex.replay_server import ReplayServer
from workbench.processes import WORKER_TIMEOUT, die_with_parent, end_processes

__all__ = ["LocalTransport", "SharedParameters"]

#: Scheduling niceness of local actor processes (0 = as the learner; 19 = only idle CPU).
ACTOR_NICENESS = 10


# --- the local back end: processes and shared memory ----------------------------------------------


class SharedParameters:
    """The learner's published parameters in shared-memory tensors, with a version number.

    A sequence lock: the version is odd while the learner writes, so a reader that saw an odd or
    changed version retries; a torn copy is never loaded."""

    def __init__(self, context: Any, state: dict[str, torch.Tensor]) -> None:
        # CPU shared memory whatever the learner's device: actors read it without CUDA.
        self.tensors = {
            key: value.detach().to("cpu", copy=True).share_memory_() for key, value in state.items()
        }
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


def _actor_main(
    config: ApexConfig,
    index: int,
    explorations: Any,
    conn: Any,
    parameters: SharedParameters,
    parent_pid: int,
) -> None:
    """An actor process: collect blocks, send them, refresh parameters between blocks."""
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
            actor.exploration = float(
                explorations[index]
            )  # changes when actors are added or removed
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
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    server = ReplayServer(config)
    learner.send(("ready", True))
    actors: dict[Any, int] = {}  # connection -> actor index
    pending_samples: deque[int] = deque()
    try:
        while True:
            # While the learner lags (min_replay_ratio), blocks stay in the actors' pipes: they
            # wait.
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
                elif conn in actors:  # a "disconnect" earlier in this ready list closed it
                    try:
                        server.add_block(conn.recv())
                    except (EOFError, OSError, RuntimeError):  # the actor died, maybe mid-message
                        conn.close()
                        actors.pop(conn, None)
            while pending_samples and server.ready(pending_samples[0]):
                learner.send(("batch", server.sample(pending_samples.popleft())))
    except (EOFError, BrokenPipeError, OSError):
        pass  # the learner went away
    finally:
        for conn in actors:
            conn.close()


class LocalTransport:
    """Actor processes and a replay process on this machine (``torch.multiprocessing``)."""

    name = "local"

    def __init__(self, config: ApexConfig, actor_state: dict[str, torch.Tensor]) -> None:
        import torch.multiprocessing as mp

        self.config = config
        self.context = mp.get_context("spawn")
        self.parameters = SharedParameters(self.context, actor_state)
        self.explorations = self.context.Array("d", config.max_actors, lock=False)
        self.learner_conn, replay_end = self.context.Pipe(duplex=True)
        self.replay = self.context.Process(
            target=_replay_main,
            args=(config, replay_end, os.getpid()),
            name="workbench-apex-replay",
            daemon=True,
        )
        self.replay.start()
        replay_end.close()
        self.actors: dict[int, Any] = {}
        self.pending_batches = 0
        self._batches: deque = deque()
        try:
            if self._receive("ready", WORKER_TIMEOUT) is None:
                raise TimeoutError(
                    f"the Ape-X replay process did not start in {WORKER_TIMEOUT:.0f} s; "
                    "the machine may be overloaded: fewer actors, or wait for other work to end."
                )
        except BaseException:
            self.close()
            raise

    # actors
    def set_explorations(self, values: list[float]) -> None:
        self.explorations[: len(values)] = values

    def start_actor(self, index: int) -> None:
        receive, send = self.context.Pipe(duplex=False)
        process = self.context.Process(
            target=_actor_main,
            args=(self.config, index, self.explorations, send, self.parameters, os.getpid()),
            name=f"workbench-apex-actor-{index}",
            daemon=True,
        )
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

    def restart_actor(self, index: int) -> None:
        """A fresh actor in place of a dead one (the replay keeps what the dead one sent)."""
        process = self.actors.pop(index, None)
        if process is not None:
            self.learner_conn.send(("disconnect", index))
            process.join(timeout=1.0)
        self.start_actor(index)

    def dead_actors(self) -> list[int]:
        return [index for index, process in self.actors.items() if not process.is_alive()]

    def actor_pids(self) -> dict[int, int]:
        return {index: process.pid for index, process in list(self.actors.items())}

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
        # numpy, not tensors, through the pipe: a tensor crosses as a shared-memory file
        # descriptor fetched through a socket, which cost the learner and the replay more than the
        # 64 floats themselves (as for the actors' blocks).
        self.learner_conn.send(("priorities", np.asarray(indices), np.asarray(priorities)))

    def stats(self) -> dict[str, Any]:
        self.learner_conn.send(("stats",))
        stats = self._receive("stats", WORKER_TIMEOUT)
        if stats is None:
            raise TimeoutError(
                f"the Ape-X replay process did not answer in {WORKER_TIMEOUT:.0f} s; the machine "
                "may be overloaded: fewer actors, or wait for other work to end."
            )
        return stats

    def _receive(self, wanted: str, timeout: float) -> Any:
        """Read replies until one of kind ``wanted`` (batches that come first are queued)."""
        deadline = time.monotonic() + timeout
        while True:
            ready = wait_connections(
                [self.learner_conn, self.replay.sentinel],
                timeout=max(0.0, deadline - time.monotonic()),
            )
            if self.learner_conn in ready:
                try:
                    kind, payload = self.learner_conn.recv()
                except (EOFError, OSError) as error:
                    self.replay.join(timeout=2.0)
                    raise RuntimeError(
                        f"the Ape-X replay process died (exit code {self.replay.exitcode}); "
                        "its error is above in this output."
                    ) from error
                if kind == "batch":
                    self._batches.append(payload)
                if kind == wanted:
                    return payload
            elif self.replay.sentinel in ready:
                raise RuntimeError(
                    f"the Ape-X replay process died (exit code {self.replay.exitcode})."
                )
            else:
                return None

    def close(self) -> None:
        for process in self.actors.values():
            process.kill()
        for process in self.actors.values():
            process.join(timeout=5.0)
        self.actors.clear()
        end_processes([self.replay], [self.learner_conn], lambda c: c.send(("close",)))
