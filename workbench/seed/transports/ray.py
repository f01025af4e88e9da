"""SEED RL's multi-machine transport on Ray (``pip install "workbench[distributed]"``): env actors.

SEED (Espeholt et al. 2020, https://arxiv.org/abs/1910.06591, Sec. 3 and Fig. 2) puts env-only
actors on many CPU machines and one inference server on the accelerator's host, next to the
learner. Each actor streams (observation, reward, flags) to the server and waits for an action;
the server gathers the requests of all actors into batches and answers each batch with one
forward pass. The paper's transport is a gRPC streaming service; here it is Ray's RPC:

* ``ray_server.RayInferenceServer`` is a Ray **async actor** that holds an ``InferenceServer``.
  ``infer`` is one actor's request: it is validated (a malformed observation is that caller's
  error, nobody else's), appended to a pending list, and awaits a future. A batching coroutine
  answers when ``max_batch_size`` requests wait, when every active slot waits, or when ``timeout``
  passed since the oldest arrived (the pattern of Ray Serve's ``@serve.batch``), runs **one**
  ``InferenceServer.infer`` for the batch and resolves the futures. Recurrent state stays on the
  server, one row per slot, as ``InferenceServer`` keeps it.
* :class:`RayEnvActor` is a Ray actor that only steps ``make_vector_env(env_id, envs_per_actor)``
  and asks the server for all its envs' actions in one request, with the flags protocol of
  ``env_actors`` (``request_flags``, ``FIRST`` ...): several envs per actor share one network
  round trip. It never imports torch. Its ``run`` loop ends cleanly when the server stops or goes
  away.
* :class:`RayActors` is the coordinator in the learner's process, with ``LocalActors``' calls
  (``start``, ``stop``, ``set_num_actors``, ``check``, ``events``, ``steps``, ``episodes``): it
  places env actors round-robin over the cluster's nodes and restarts one that dies.

Each env actor owns ``envs_per_actor`` consecutive slots; a restarted actor's slots get a new
*generation*, and the server refuses requests of an older generation (a dead actor's request still
in flight cannot reach the new actor's trajectory). Statuses travel as exceptions:
``env_actors.ServerStopped`` (the server stopped, or this actor's slot was handed on: exit cleanly)
and ``ValueError`` (a malformed or non-finite observation). Ray re-raises an actor's exception at
the caller as a ``RayTaskError`` that is also an instance of the original class, so ``except
ServerStopped`` works across machines.

Ray is the instance this process uses (``workbench.cluster``: a private local one unless a
cluster was joined); on a cluster the same calls place env actors on every node and the server on
this one (the learner's). The learner itself joins the server in one Ray actor in
``ray_learner``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.checks import positive_int
from workbench.cluster import end_killed_actors, ensure_ray, import_ray, node_for
from workbench.envs import make_vector_env
from workbench.restarts import ActorKeepsDying, RestartSchedule
from workbench.seed.env_actors import (
    FIRST,
    REPLY_TIMEOUT,
    ServerStopped,
    request_flags,
    served_spaces,
)
from workbench.seed.transports import ActorEvent
from workbench.seed.transports.batching import percentiles_ms
from workbench.seed.transports.ray_server import RayInferenceServer

__all__ = ["RayActors", "RayEnvActor", "RayInferenceServer", "ServerStopped"]

#: Seconds a new env actor may take to build its env (Ray starts a worker process for it).
ACTOR_START_TIMEOUT = 120.0


class RayEnvActor:
    """An env-only SEED actor as a Ray actor: a block of envs in consecutive slots, one request to
    the server per step of all of them.

    Args:
        server: the server's handle (a :class:`RayInferenceServer`, or the learner's actor).
        env_id: the env to step (``make_vector_env(env_id, num_envs)``, same-step autoreset).
        slot: the server slot of this actor's first env (the others follow);
            ``generation``: from ``server.restart``.
        num_envs: envs this actor steps.
        seed: the first env's seed (env j: ``seed + j``).
        env_options: ``make_vector_env``'s options (Atari preprocessing).
        nice: niceness added to this actor's process (so actors cannot starve a learner on the
            same machine).
    """

    def __init__(
        self,
        server: Any,
        env_id: str,
        slot: int,
        *,
        num_envs: int = 1,
        generation: int = 0,
        seed: int = 0,
        env_options: dict | None = None,
        nice: int = 0,
    ) -> None:
        if nice:
            os.nice(nice)
        self.server = server
        self.slot = slot
        self.generation = generation
        self.envs = make_vector_env(env_id, num_envs, num_threads=1, **(env_options or {}))
        self.obs, _ = self.envs.reset(seed=seed)
        self.steps = 0
        self.returns: list[float] = []
        self.round_trip: deque = deque(maxlen=10_000)
        self._stop = False
        self.reason: str | None = None

    async def ready(self) -> dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}

    async def run(self, max_steps: int | None = None) -> dict[str, Any]:
        """Step until ``max_steps`` (env steps of all envs), ``stop()``, or the server stops or
        goes away (a clean return: ``reason`` says which). A malformed observation raises (the
        coordinator restarts us)."""
        import ray

        count = len(self.obs)
        reward = np.zeros(count, dtype=np.float32)
        flags = np.full(count, FIRST, dtype=np.uint8)
        final_obs = None
        episode_return, episode_length = np.zeros(count), np.zeros(count, dtype=np.int64)
        self.reason = None
        while self.reason is None:
            if self._stop:
                self.reason = "stopped"
                break
            if max_steps is not None and self.steps >= max_steps:
                self.reason = "max_steps"
                break
            started = time.perf_counter()
            request = self.server.infer.remote(
                self.slot,
                self.obs,
                reward,
                flags,
                final_obs,
                episode_return,
                episode_length,
                time.time(),
                self.generation,
            )
            try:
                actions = await asyncio.wait_for(request, REPLY_TIMEOUT)
            except ServerStopped as error:
                self.reason = (
                    f"server stopped: {error.args[0] if error.args else error}".splitlines()[0]
                )
                break
            except ray.exceptions.RayActorError:
                self.reason = "server died"
                break
            except asyncio.TimeoutError:
                self.reason = f"no reply from the inference server in {REPLY_TIMEOUT:.0f} s"
                break
            self.round_trip.append(time.perf_counter() - started)
            self.obs, reward, terminated, truncated, info = self.envs.step(np.asarray(actions))
            self.steps += count
            reward = reward.astype(np.float32, copy=False)
            flags = request_flags(terminated, truncated, info["episode_done"])
            final_obs = info["final_obs"] if truncated.any() else None
            done = info["episode_done"]
            episode_return = np.where(done, info["episode_return"], 0.0)
            episode_length = np.where(done, info["episode_length"], 0)
            self.returns.extend(float(r) for r in info["episode_return"][done])
        return await self.stats()

    async def stop(self) -> None:
        """End ``run`` after the step in progress."""
        self._stop = True

    async def reset_round_trips(self) -> None:
        """Start the ``round_trip`` percentiles afresh, with the server's (a measured window)."""
        self.round_trip.clear()

    async def stats(self) -> dict[str, Any]:
        """``steps``, ``episodes``, ``returns`` (the last 100), ``round_trip`` p50/p99 (request ->
        action, as this actor saw it), and ``reason`` (why ``run`` ended, or None)."""
        return {
            "slot": self.slot,
            "steps": self.steps,
            "episodes": len(self.returns),
            "returns": self.returns[-100:],
            "reason": self.reason,
            **percentiles_ms(list(self.round_trip), "round_trip"),
        }

    def __del__(self) -> None:
        try:
            self.envs.close()
        except Exception:
            pass


# --------------------------------------------------------------------------------------------------
# The coordinator


@dataclass
class _Handle:
    index: int
    actor: Any
    run: Any  # the ObjectRef of its run()
    generation: int
    ready: Any = None  # the ObjectRef of its ready()
    pid: int | None = None
    node_id: str | None = None


class RayActors:
    """Env actors on the Ray cluster, served by a :class:`RayInferenceServer`: the Ray counterpart
    of ``transports.local.LocalActors`` (the same calls), for the learner's process.

    ``start()`` sets the server's slots and starts ``num_actors`` env actors, placed round-robin on
    the cluster's live nodes; ``set_num_actors(n)`` adds or retires actors (up to ``max_actors``);
    ``check()`` restarts an actor that died (``events`` records it) and reads the server's steps and
    finished episodes; ``stop()`` ends the actors' loops and frees them. The server is not stopped
    here: it belongs to whoever launched it (``ray.get(server.stop.remote())``).

    Args:
        server: a :class:`RayInferenceServer` handle (``RayInferenceServer.launch``).
        env_id: the environments' id (validated here, before any actor starts).
        num_actors: env actors to start.
        envs_per_actor: envs each actor steps (one slot each, one request for all of them).
        max_actors: the most ``set_num_actors`` may reach (the server's slots are allocated once).
        seed: actor i's envs are seeded from ``seed + 1000 * i + 100 * (generation - 1)``.
        env_options: ``make_vector_env`` options.
        nice: niceness added to actor processes.
        max_steps: each actor's ``run(max_steps)`` (None: until stopped).
    """

    wait_seconds = 0.05  # a learner waiting for data waits this long, then does its other work

    def __init__(
        self,
        server: Any,
        env_id: str,
        num_actors: int,
        *,
        envs_per_actor: int = 1,
        max_actors: int | None = None,
        seed: int = 0,
        env_options: dict | None = None,
        nice: int = 0,
        max_steps: int | None = None,
    ) -> None:
        positive_int(num_actors, "num_actors")
        positive_int(envs_per_actor, "envs_per_actor")
        self.ray = import_ray()
        observation_space, action_space = served_spaces(env_id, env_options)
        self.server = server
        self.env_id = env_id
        self.num_actors = num_actors
        self.envs_per_actor = envs_per_actor
        self.max_actors = max(num_actors, max_actors or num_actors)
        self.seed = seed
        self.env_options = dict(env_options or {})
        self.nice = nice
        self.max_steps = max_steps
        self.observation_space, self.action_space = observation_space, action_space
        self.events: list[ActorEvent] = []
        self._killed_pids: list[int] = []  # retired or dead ones' processes: ``stop`` ends them
        self.actor_restarts = RestartSchedule()
        """Dead actors and their restarts, after a backoff (``restarts``)."""
        self.error: str | None = None
        self.steps = 0
        self.episodes: deque = deque(maxlen=10_000)  # (time, slot, return, length)
        self.last_progress: dict[str, Any] = {}  # the server's last progress() answer
        self.finished: dict[int, dict] = {}  # actor -> its run()'s result, once it ended cleanly
        self._actors: dict[int, _Handle] = {}
        self._remote = None
        self._started = False

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> "RayActors":
        if self._started:
            raise RuntimeError("these actors already started; make a new RayActors to start again")
        ray = self.ray = ensure_ray()
        self._remote = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=8)(RayEnvActor)
        space = self.observation_space
        ray.get(
            self.server.reset_slots.remote(
                self.max_actors * self.envs_per_actor, tuple(space.shape), space.dtype.str
            ),
            timeout=ACTOR_START_TIMEOUT,
        )
        self._started = True
        self._start_actors(range(self.num_actors))
        return self

    def _start_actors(self, indices: Sequence[int]) -> None:
        handles = [self._spawn(index) for index in indices]
        try:
            ready = self.ray.get([h.ready for h in handles], timeout=ACTOR_START_TIMEOUT)
        except self.ray.exceptions.GetTimeoutError:
            raise TimeoutError(
                f"env actors did not start in {ACTOR_START_TIMEOUT:.0f} s; the cluster "
                "may be overloaded: use fewer actors."
            ) from None
        except self.ray.exceptions.RayError as error:
            raise RuntimeError(f"an env actor failed to start: {error}") from None
        for handle, info in zip(handles, ready):
            handle.pid, handle.node_id = info["pid"], info["node_id"]
            self._event("started", handle.index, f"pid {info['pid']} node {info['node_id'][:8]}")

    def _spawn(self, index: int) -> Any:
        ray = self.ray
        generation = ray.get(self.server.restart.remote(self.slots_of(index)))[0]
        actor = self._remote.options(scheduling_strategy=node_for(index)).remote(
            self.server,
            self.env_id,
            index * self.envs_per_actor,
            num_envs=self.envs_per_actor,
            generation=generation,
            seed=self.seed + 1000 * index + 100 * (generation - 1),
            env_options=self.env_options,
            nice=self.nice,
        )
        ready = actor.ready.remote()  # submitted before run: answered first
        handle = _Handle(index, actor, actor.run.remote(self.max_steps), generation, ready)
        self._actors[index] = handle
        self.finished.pop(index, None)
        return handle

    def set_num_actors(self, num_actors: int) -> None:
        """Start or retire actors so that ``num_actors`` step envs (1 .. ``max_actors``)."""
        if not isinstance(num_actors, int) or not 1 <= num_actors <= self.max_actors:
            raise ValueError(
                f"num_actors must be an int in 1..{self.max_actors} (max_actors), "
                f"got {num_actors!r}"
            )
        if self._started:
            running = sorted(self._actors)
            for index in running[num_actors:]:
                handle = self._actors.pop(index)
                self._kill(handle)
                # Its late requests are refused.
                self.ray.get(self.server.restart.remote(self.slots_of(index)))
                self._event("stopped", index, "retired")
            self._start_actors([i for i in range(num_actors) if i not in self._actors])
        self.num_actors = num_actors

    def stop(self, timeout: float = 5.0) -> None:
        """Ask every actor to end its loop, wait up to ``timeout`` seconds, then free them all;
        on a private instance, return once their processes (and those of actors killed before)
        have ended (``cluster.end_killed_actors``)."""
        ray = self.ray
        handles = list(self._actors.values())
        for handle in handles:
            handle.actor.stop.remote()
        if handles:
            done, _ = ray.wait([h.run for h in handles], num_returns=len(handles), timeout=timeout)
            for handle in handles:
                if handle.run in done:
                    self._finish(handle, restart=False)
                else:
                    self._event("stopped", handle.index, f"killed: still running after {timeout} s")
        for handle in handles:
            self._kill(handle)
        self._actors.clear()
        end_killed_actors(self._killed_pids)
        self._killed_pids.clear()

    def _kill(self, handle: _Handle) -> None:
        """Free its actor; ``stop`` waits for its process, which ``ray.kill`` does not."""
        self.ray.kill(handle.actor)
        if handle.pid is not None:
            self._killed_pids.append(handle.pid)

    def __enter__(self) -> "RayActors":
        return self.start() if not self._started else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what the run reads ------------------------------------------------------------------------

    def check(self) -> None:
        """Restart actors that died, collect the server's progress; raise if serving failed."""
        ray = self.ray
        handles = {h.run: h for h in self._actors.values()}
        if handles:
            done, _ = ray.wait(list(handles), num_returns=len(handles), timeout=0)
            for ref in done:
                self._finish(handles[ref], restart=True)
        self._restart_due()
        self._read_ready()
        try:
            progress = ray.get(self.server.progress.remote(), timeout=60)
        except ray.exceptions.RayActorError as error:
            self.error = f"the inference server actor died: {str(error).splitlines()[0]}"
            raise RuntimeError(self.error) from None
        self.last_progress = progress
        self.steps = progress["steps"]
        self.episodes.extend(progress["episodes"])
        if progress["error"] is not None:
            self.error = progress["error"]
        if self.error is not None:
            raise RuntimeError(self.error)

    def _read_ready(self) -> None:
        """Restarted actors that are up since the last check: their pid, a ``started`` event."""
        ray = self.ray
        waiting = [h for h in self._actors.values() if h.pid is None and h.ready is not None]
        if not waiting:
            return
        done, _ = ray.wait([h.ready for h in waiting], num_returns=len(waiting), timeout=0)
        for handle in waiting:
            if handle.ready not in done:
                continue
            try:
                info = ray.get(handle.ready)
            except ray.exceptions.RayError:
                handle.ready = None  # it failed to start: its run() fails too, and is restarted
                continue
            handle.pid, handle.node_id = info["pid"], info["node_id"]
            self._event("started", handle.index, f"pid {info['pid']} node {info['node_id'][:8]}")

    def _finish(self, handle: _Handle, restart: bool) -> None:
        """Its run() ended: cleanly (record why), or by a death or an error (restart it)."""
        ray = self.ray
        try:
            result = ray.get(handle.run)
        except ray.exceptions.RayActorError as error:
            kind, detail = "died", str(error).splitlines()[0]
        except ray.exceptions.RayError as error:
            kind, detail = "error", str(error)
        else:
            self.finished[handle.index] = result
            self._event("stopped", handle.index, result["reason"] or "")
            self._actors.pop(handle.index, None)
            self._kill(handle)
            return
        self._event(kind, handle.index, detail)
        self._kill(handle)
        self._actors.pop(handle.index, None)
        if not restart:
            return
        try:
            self.actor_restarts.died(handle.index, f"{kind}: {detail}")
        except ActorKeepsDying as error:
            self.error = f"env {error}"
            raise RuntimeError(self.error) from None

    def _restart_due(self) -> None:
        """Start again the dead actors whose backoff has passed (``restarts.RestartSchedule``)."""
        for index, _, new in self.actor_restarts.restart_due(
            self._spawn,  # not if started or retired since
            wanted=lambda index: index not in self._actors and index < self.num_actors,
        ):
            self._event("restarted", index, f"generation {new.generation}")

    def _event(self, kind: str, actor: int, detail: str = "") -> None:
        self.events.append(ActorEvent(time.time(), kind, actor, detail))

    def advance(self) -> None:
        """Nothing to do: the env actors step on their own."""

    @property
    def pids(self) -> list[int]:
        """Process ids of the live actors (on this machine's nodes, or a cluster's)."""
        # list(): another thread (the run's loop) adds and removes actors while this one reads
        return [h.pid for h in list(self._actors.values()) if h.pid is not None]

    def slots_of(self, index: int) -> list[int]:
        """The server slots of actor ``index``'s envs."""
        first = index * self.envs_per_actor
        return list(range(first, first + self.envs_per_actor))

    def actor_nodes(self) -> dict[int, str]:
        """The node id of each live actor that has started (index -> node id)."""
        return {h.index: h.node_id for h in list(self._actors.values()) if h.node_id is not None}

    def actor_handles(self) -> dict[int, Any]:
        return {index: handle.actor for index, handle in list(self._actors.items())}

    def reset_round_trips(self, timeout: float = 30.0) -> None:
        """Each live actor starts its round-trip percentiles afresh: a window measured against the
        server's ``reset_stats`` then compares the same requests on both sides of the hop."""
        handles = list(self._actors.values())
        self.ray.get([h.actor.reset_round_trips.remote() for h in handles], timeout=timeout)

    def actor_stats(self, timeout: float = 30.0) -> dict[int, dict]:
        """Each live actor's ``RayEnvActor.stats()``."""
        handles = list(self._actors.values())
        stats = self.ray.get([h.actor.stats.remote() for h in handles], timeout=timeout)
        return {h.index: s for h, s in zip(handles, stats)}
