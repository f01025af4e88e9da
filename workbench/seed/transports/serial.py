"""The serial SEED transport: every env stepped in the caller's thread through the server."""

from __future__ import annotations

import time

import numpy as np

from workbench.envs import make_vector_env
from workbench.seed.env_actors import FIRST, request_flags
from workbench.seed.server import InferenceServer
from workbench.seed.transports import ActorEvent

__all__ = ["SerialActors"]


class SerialActors:
    """Envs stepped in the caller's thread, each step one ``server.infer`` over all of them.

    The same protocol as the actor processes without processes: deterministic for a given seed,
    which notebooks and tests compare against. ``step()`` (or ``advance()``, the transport's name
    for it) advances every env one step; the learner calls it when it waits for data.

    As a ``SeedTransport`` it serves a fixed set of envs: ``set_num_actors`` refuses another count
    (use the local transport to add or retire actors while a run goes)."""

    wait_seconds = 0.0  # the learner never waits: it steps the envs itself (advance)

    def __init__(
        self,
        server: InferenceServer,
        env_id: str,
        num_envs: int,
        *,
        seed: int = 0,
        env_options: dict | None = None,
    ) -> None:
        self.server = server
        self.envs = make_vector_env(env_id, num_envs, **(env_options or {}))
        self.num_envs = num_envs
        self.slots = np.arange(num_envs)
        server.reset_slots(num_envs)
        self._obs, _ = self.envs.reset(seed=seed)
        self._reward = np.zeros(num_envs, dtype=np.float32)
        self._flags = np.full(num_envs, FIRST, dtype=np.uint8)
        self._final_obs = self._obs
        self._info: dict = {}
        self.steps = 0
        self.num_actors = num_envs
        self.events: list[ActorEvent] = []
        self.last_progress: dict = {}  # the server is in this process: nothing to poll
        self.pids: list[int] = []
        self._started = self._stopped = False

    def start(self) -> "SerialActors":
        """Nothing to start (the envs exist); each env, the actor of its slot, is recorded as
        started, as the other transports record theirs."""
        if not self._started:
            self._started = True
            now = time.time()
            self.events.extend(
                ActorEvent(now, "started", i, "an env stepped in this thread")
                for i in range(self.num_envs)
            )
        return self

    def stop(self) -> None:
        """Close the envs; each started one is recorded as stopped (once)."""
        if self._started and not self._stopped:
            self._stopped = True
            now = time.time()
            self.events.extend(ActorEvent(now, "stopped", i) for i in range(self.num_envs))
        self.close()

    def check(self) -> None:
        """Nothing runs on its own here: nothing can have failed."""

    def set_num_actors(self, num_actors: int) -> None:
        if num_actors != self.num_actors:
            raise ValueError(
                "the serial transport steps a fixed set of envs; use transport='local' to add or "
                "retire actors while the run goes."
            )

    def advance(self) -> None:
        """One step of every env (what a learner waiting for data does here)."""
        self.step()

    def step(self) -> dict:
        """One step of every env; returns the env's ``info`` (episode statistics)."""
        info = self._info
        actions = self.server.infer(
            self.slots,
            self._obs,
            self._reward,
            self._flags,
            final_obs=self._final_obs,
            episode_return=info.get("episode_return"),
            episode_length=info.get("episode_length"),
            sent_at=np.full(self.num_envs, time.perf_counter()),
        )
        obs, reward, terminated, truncated, info = self.envs.step(actions)
        self._obs, self._reward, self._info = obs, reward, info
        self._flags = request_flags(terminated, truncated, info["episode_done"])
        self._final_obs = info["final_obs"]
        self.steps += self.num_envs
        return info

    def close(self) -> None:
        self.envs.close()

    def __enter__(self) -> "SerialActors":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
