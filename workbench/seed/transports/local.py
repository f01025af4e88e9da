"""The local SEED transport: env-only actor processes on this machine, one system call each way.

Observations live in shared memory (``env_actors.SharedSlots``); each step costs one system call
each way: ``(slot, generation)`` on a request pipe that all actors share, ``(slot, action)`` on the
actor's own reply pipe. A serving thread batches "until full, every live env waits, or timeout" and
calls ``InferenceServer.infer``. A dead actor is restarted into the same slots; a new generation
makes the server ignore the dead actor's leftover requests. Actors die with this process.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import select
import threading
import time
import traceback
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.checks import positive_int
from workbench.envs import is_atari
from workbench.processes import WORKER_TIMEOUT
from workbench.restarts import RestartSchedule
from workbench.seed.env_actors import (
    REPLY,
    REQUEST,
    STOPPED,
    TRUNCATED,
    EnvActorSpec,
    SharedSlots,
    env_actor_main,
    served_spaces,
)
from workbench.seed.server import InferenceServer
from workbench.seed.transports import ActorEvent

__all__ = ["LocalActors", "check_actor_batch"]


def check_actor_batch(actor_batch: Any, envs_per_actor: int, env_id: str) -> int:
    """Envs per request of an actor: ``actor_batch`` (asynchronous stepping needs ale_py's Atari
    envs and a divisor of ``envs_per_actor``), or all its envs when None."""
    if actor_batch is None or actor_batch == envs_per_actor:
        return envs_per_actor
    if (
        isinstance(actor_batch, bool)
        or not isinstance(actor_batch, int)
        or not 1 <= actor_batch < envs_per_actor
        or envs_per_actor % actor_batch
    ):
        raise ValueError(
            f"actor_batch must divide envs_per_actor={envs_per_actor} (or be None: every env in "
            f"one request), got {actor_batch!r}"
        )
    if not is_atari(env_id):
        raise ValueError(
            f"actor_batch steps envs asynchronously with ale_py's C++ threads: Atari only, not "
            f"{env_id}; leave it None"
        )
    return actor_batch


@dataclass
class _Actor:
    index: int
    slot_ids: np.ndarray
    generation: int
    process: Any = None
    reply_writer: Any = None
    control: Any = None
    started_at: float = 0.0
    retiring: bool = False
    starting: bool = True


class LocalActors:
    """Env-only actor processes on this machine, served by ``server`` from a thread of this one.

    Each actor steps ``envs_per_actor`` envs of ``env_id`` (one slot each). ``start()`` spawns
    ``num_actors`` of them and the serving thread; ``set_num_actors(n)`` adds or retires actors
    while it runs (up to ``max_actors``); an actor that dies is restarted into the same slots
    (``events`` records it). ``stop()`` answers every waiting actor ``STOPPED`` (they exit cleanly),
    then joins them; actors die with this process however it ends.

    Args:
        server: the :class:`InferenceServer` (its ``max_batch_size`` and ``timeout`` decide
            batching; a batch is also full when every live env waits).
        env_id: the environments' id (validated here, before any process starts).
        num_actors: actor processes to start.
        envs_per_actor: envs (slots) per actor; each actor sends all of them in one request.
        actor_batch: envs per request (Atari): below ``envs_per_actor`` an actor's envs step
            asynchronously, one batch in ale_py's C++ thread while another waits for its actions
            (``env_actors``); None: all of them, synchronously.
        max_actors: the most actors ``set_num_actors`` may reach (slots are allocated once).
        seed: actor i's envs are seeded ``seed + 1000 * i + j``.
        nice: niceness added to actor processes (on a small machine, so they cannot starve the
            server and learner in this process).
    """

    wait_seconds = 0.05  # a learner waiting for data waits this long, then does its other work

    def __init__(
        self,
        server: InferenceServer,
        env_id: str,
        num_actors: int,
        *,
        envs_per_actor: int = 1,
        max_actors: int | None = None,
        seed: int = 0,
        env_options: dict | None = None,
        nice: int = 0,
        actor_batch: int | None = None,
    ) -> None:
        positive_int(num_actors, "num_actors")
        positive_int(envs_per_actor, "envs_per_actor")
        self.actor_batch = check_actor_batch(actor_batch, envs_per_actor, env_id)
        self.max_actors = max(num_actors, max_actors or num_actors)
        observation_space, action_space = served_spaces(env_id, env_options)
        self.server = server
        self.env_id = env_id
        self.num_actors = num_actors
        self.envs_per_actor = envs_per_actor
        self.seed = seed
        self.env_options = dict(env_options or {})
        self.nice = nice
        self.observation_space, self.action_space = observation_space, action_space
        self.events: list[ActorEvent] = []
        self.last_progress: dict = {}  # the server is in this process: nothing to poll
        self.error: str | None = None
        self.steps = 0
        self.episodes: deque = deque(maxlen=10_000)  # (time, slot, return, length)
        self._context = multiprocessing.get_context("spawn")
        self._actors: dict[int, _Actor] = {}
        self._generation = np.zeros(self.max_actors * envs_per_actor, dtype=np.int64)
        self._live_slots = np.zeros(self.max_actors * envs_per_actor, dtype=bool)
        self.actor_restarts = RestartSchedule()
        """Dead actors and their restarts, after a backoff (``restarts``)."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._slots: SharedSlots | None = None
        self._finalizer = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> "LocalActors":
        if self._thread is not None:
            raise RuntimeError(
                "these actors already started; make a new LocalActors to start again"
            )
        num_slots = self.max_actors * self.envs_per_actor
        space = self.observation_space
        self._slots = SharedSlots.allocate(
            self._context, num_slots, tuple(space.shape), space.dtype
        )
        self._arrays = self._slots.arrays()
        self.server.reset_slots(num_slots)
        self._request_reader, self._request_writer = self._context.Pipe(duplex=False)
        os.set_blocking(self._request_reader.fileno(), False)
        self._finalizer = weakref.finalize(self, _kill_actors, self._actors)
        try:
            started = [self._spawn(i) for i in range(self.num_actors)]
            for actor in started:
                self._await_ready(actor)
        except BaseException:
            self._finalizer()
            raise
        self._thread = threading.Thread(target=self._serve, name="inference-server", daemon=True)
        self._thread.start()
        return self

    def _spawn(self, index: int, restart: bool = False) -> _Actor:
        slot_ids = np.arange(index * self.envs_per_actor, (index + 1) * self.envs_per_actor)
        self._generation[slot_ids] += 1
        generation = int(self._generation[slot_ids[0]])
        if restart:
            self.server.restart(slot_ids)
        reply_reader, reply_writer = self._context.Pipe(duplex=False)
        control_reader, control_writer = self._context.Pipe(duplex=False)
        spec = EnvActorSpec(
            self.env_id,
            slot_ids.tolist(),
            generation,
            self.seed + 1000 * index + generation - 1,
            os.getpid(),
            self.env_options,
            index,
            self.nice,
            None if self.actor_batch == self.envs_per_actor else self.actor_batch,
        )
        process = self._context.Process(
            target=env_actor_main,
            name=f"workbench-env-actor-{index}",
            daemon=True,
            args=(spec, self._slots, self._request_writer, reply_reader, control_writer),
        )
        process.start()
        reply_reader.close()  # the actor's death must read as a broken pipe here
        control_writer.close()
        actor = _Actor(
            index, slot_ids, generation, process, reply_writer, control_reader, time.monotonic()
        )
        self._actors[index] = actor
        return actor

    def _await_ready(self, actor: _Actor) -> None:
        if not actor.control.poll(WORKER_TIMEOUT):
            raise TimeoutError(
                f"env actor {actor.index} did not start in {WORKER_TIMEOUT:.0f} s; "
                "the machine may be overloaded: use fewer actors."
            )
        self._ready(actor)

    def _ready(self, actor: _Actor) -> None:
        try:
            kind, detail = actor.control.recv()
        except (EOFError, OSError):
            actor.process.join(timeout=5.0)
            raise RuntimeError(
                f"env actor {actor.index} exited (code {actor.process.exitcode}) "
                "before it was ready. "
                'In a script, start actors under `if __name__ == "__main__":` (multiprocessing\'s '
                "spawn re-imports the main module)."
            ) from None
        if kind == "error":
            raise RuntimeError(f"env actor {actor.index} failed to start:\n{detail}")
        # The event first: whoever sees the actor started (set_num_actors returns) sees its event.
        self.events.append(ActorEvent(time.time(), "started", actor.index, f"pid {detail}"))
        actor.starting = False
        with self._lock:
            self._live_slots[actor.slot_ids] = True

    def set_num_actors(self, num_actors: int) -> None:
        """Start or retire actors so that ``num_actors`` step envs (1 .. ``max_actors``)."""
        if not isinstance(num_actors, int) or not 1 <= num_actors <= self.max_actors:
            raise ValueError(
                f"num_actors must be an int in 1..{self.max_actors} (max_actors), "
                f"got {num_actors!r}"
            )
        if self._thread is None:
            self.num_actors = num_actors
            return
        with self._lock:
            current = sorted(i for i, a in self._actors.items() if not a.retiring)
        for index in current[num_actors:]:
            self._retire(self._actors[index])
        started = [self._spawn(index) for index in range(num_actors) if index not in current]
        deadline = time.monotonic() + WORKER_TIMEOUT
        while any(a.starting for a in started):  # the serving thread reads their "ready"
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"new env actors did not start in {WORKER_TIMEOUT:.0f} s")
            time.sleep(0.01)
        self.num_actors = num_actors

    def _retire(self, actor: _Actor) -> None:
        with self._lock:
            actor.retiring = True
            self._live_slots[actor.slot_ids] = False
        self._tell_stopped(actor)
        self.events.append(ActorEvent(time.time(), "stopped", actor.index))

    def stop(self) -> None:
        """Answer ``STOPPED`` to every actor (those mid-request included), join them, end the
        thread."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)
        if self._finalizer is not None:
            for actor in list(self._actors.values()):
                self._tell_stopped(actor)
            deadline = time.monotonic() + 3.0
            for actor in list(self._actors.values()):
                actor.process.join(timeout=max(0.0, deadline - time.monotonic()))
            first_stop = self._finalizer.alive
            self._finalizer()
            if first_stop:  # retired actors were recorded when they were retired
                for index, actor in sorted(self._actors.items()):
                    if not actor.retiring:
                        detail = f"exit code {actor.process.exitcode}"
                        self.events.append(ActorEvent(time.time(), "stopped", index, detail))

    def _tell_stopped(self, actor: _Actor) -> None:
        try:
            os.write(
                actor.reply_writer.fileno(),
                b"".join(REPLY.pack(int(s), STOPPED) for s in actor.slot_ids),
            )
        except (BrokenPipeError, OSError):
            pass

    def __enter__(self) -> "LocalActors":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the serving thread ------------------------------------------------------------------------

    def _serve(self) -> None:
        poller = select.poll()
        poller.register(self._request_reader.fileno(), select.POLLIN)
        pending: list[int] = []
        oldest = 0.0
        next_check = 0.0
        try:
            while not self._stopping.is_set():
                now = time.perf_counter()
                wait = max(0.0, oldest + self.server.timeout - now) if pending else 0.05
                if poller.poll(math.ceil(wait * 1000)):
                    received = self._read_requests()
                    if received and not pending:
                        oldest = time.perf_counter()
                    pending.extend(received)
                now = time.perf_counter()
                with self._lock:
                    live = int(self._live_slots.sum())
                # Full when every live actor's request waits (an asynchronous actor's request is
                # one batch of its envs): nothing more can come before an answer.
                waiting = live // self.envs_per_actor * self.actor_batch
                full = min(self.server.max_batch_size, max(waiting, 1))
                while pending and (len(pending) >= full or now - oldest >= self.server.timeout):
                    batch, pending = (
                        pending[: self.server.max_batch_size],
                        pending[self.server.max_batch_size :],
                    )
                    self._answer(np.asarray(batch, dtype=np.int64))
                    oldest = time.perf_counter()
                    now = oldest
                if now >= next_check:
                    self._check_actors()
                    next_check = now + 0.2
        except BaseException as error:  # the run must learn why serving ended, not hang
            self.error = f"the inference server failed: {error!r}\n{traceback.format_exc()}"
            self._stopping.set()
            for actor in list(self._actors.values()):
                self._tell_stopped(actor)

    def _read_requests(self) -> list[int]:
        try:
            data = os.read(self._request_reader.fileno(), 1 << 16)
        except BlockingIOError:
            return []
        slots = []
        for slot, generation in REQUEST.iter_unpack(data):
            if generation != self._generation[slot]:
                continue  # a dead actor's leftover request
            if not self._live_slots[slot] and not self._ready_early(slot):
                continue  # a retired actor's last request
            slots.append(slot)
        return slots

    def _ready_early(self, slot: int) -> bool:
        """The first request of an actor started while serving (added, or restarted) can come
        before ``_check_actors`` reads its "ready", which the actor sent first: read it now, or
        the actor would wait for an answer that never comes."""
        actor = self._actors.get(slot // self.envs_per_actor)
        if actor is None or actor.retiring or not actor.starting or not actor.control.poll():
            return False
        self._ready(actor)
        return True

    def _answer(self, slots: np.ndarray) -> None:
        a = self._arrays
        flags = a["flags"][slots]
        actions = self.server.infer(
            slots,
            a["obs"][slots],
            a["reward"][slots],
            flags,
            final_obs=a["final_obs"][slots] if (flags & TRUNCATED).any() else None,
            episode_return=a["episode_return"][slots],
            episode_length=a["episode_length"][slots],
            sent_at=a["sent_at"][slots],
        )
        self.steps += len(slots)
        done = np.flatnonzero(flags & 8)
        if len(done):
            now = time.time()
            for i in done:
                self.episodes.append(
                    (
                        now,
                        int(slots[i]),
                        float(a["episode_return"][slots[i]]),
                        int(a["episode_length"][slots[i]]),
                    )
                )
        per_actor: dict[int, list[bytes]] = {}
        for slot, action in zip(slots.tolist(), actions.tolist()):
            per_actor.setdefault(slot // self.envs_per_actor, []).append(REPLY.pack(slot, action))
        for index, replies in per_actor.items():
            actor = self._actors.get(index)
            if actor is None:
                continue
            try:
                os.write(actor.reply_writer.fileno(), b"".join(replies))
            except (BrokenPipeError, OSError):
                pass  # it died mid-request; _check_actors restarts it

    def _check_actors(self) -> None:
        for index, _, restarted in self.actor_restarts.restart_due(
            lambda index: self._spawn(index, restart=True),
            wanted=self._restart_wanted,
        ):
            self.events.append(
                ActorEvent(time.time(), "restarted", index, f"pid {restarted.process.pid}")
            )
        for index, actor in list(self._actors.items()):
            if index in self.actor_restarts:
                continue
            if actor.starting and actor.control.poll():
                self._ready(actor)  # a restarted actor: ready, or a failure that ends the run
            elif actor.control.poll():
                try:
                    kind, detail = actor.control.recv()
                except (EOFError, OSError):
                    kind, detail = None, ""
                if kind == "error":
                    self.events.append(ActorEvent(time.time(), "error", index, detail))
            if actor.process.is_alive():
                continue
            actor.process.join(timeout=0)
            with self._lock:
                self._live_slots[actor.slot_ids] = False
            for connection in (actor.reply_writer, actor.control):
                connection.close()
            if actor.retiring:
                with self._lock:
                    del self._actors[index]
                continue
            exit_code = f"exit code {actor.process.exitcode}"
            self.events.append(ActorEvent(time.time(), "died", index, exit_code))
            self.actor_restarts.died(index, exit_code)

    def _restart_wanted(self, index: int) -> bool:
        """A dead actor is started again unless fewer actors were asked for meanwhile."""
        if not self._actors[index].retiring:
            return True
        with self._lock:
            del self._actors[index]
        return False

    # -- what the run reads ------------------------------------------------------------------------

    @property
    def pids(self) -> list[int]:
        # list(): the serving thread adds and removes actors while another thread reads
        return [a.process.pid for a in list(self._actors.values()) if a.process.is_alive()]

    def check(self) -> None:
        """Raise the serving thread's failure, if it failed."""
        if self.error is not None:
            raise RuntimeError(self.error)

    def advance(self) -> None:
        """Nothing to do: the actor processes step their envs on their own."""


def _kill_actors(actors: dict) -> None:
    """Kill every actor process and close its pipes (the finalizer's, so it holds no ``self``)."""
    for actor in list(actors.values()):
        if actor.process.is_alive():
            actor.process.kill()
    for actor in list(actors.values()):
        actor.process.join(timeout=2.0)
        for connection in (actor.reply_writer, actor.control):
            try:
                connection.close()
            except OSError:
                pass
