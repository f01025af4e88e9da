"""Actors that only step environments (SEED RL, Espeholt et al. 2020, Sec. 3): the client side of
the central inference server.

A SEED actor holds no parameters and runs no network. Each step it hands its observation (with the
reward and the episode flags of its previous action) to the server and waits for an action. This
module is that half, and it never imports torch: an env-only actor process stays small and starts
fast (about 40 MB against about 320 MB with torch).

The local transport, one system call each way per step:

* every env of every actor owns a **slot** in shared memory (``SharedSlots``): its observation, its
  final observation (when an episode was cut by a time limit), its reward, flags, episode
  statistics and the time the request was sent;
* the actor writes its slots, then the slots' ``(slot, generation)`` pairs to the **request pipe**
  that all actors share (one ``os.write`` of at most ``PIPE_BUF`` bytes, so requests of different
  actors never interleave);
* the server answers ``(slot, action)`` pairs on the actor's own **reply pipe**; a negative action
  is a status (``STOPPED``: the server is going away, the actor exits cleanly; ``REJECTED``: the
  observation was malformed).

``generation`` tells a restarted actor's requests from those its dead predecessor left in the pipe.

An actor steps its envs synchronously (all of them, then one request for all) or, with a
``batch_size`` below its env count on Atari, asynchronously: ale_py's C++ thread steps one batch of
its envs while the actor waits for the actions of another, and each request carries one batch.
The env stepping then overlaps the round trip to the server inside one process.

Flags of a request (the episode bits are about the *previous* action's outcome; with same-step
autoreset the observation is then already the next episode's first):
``FIRST`` the observation starts an episode (the server resets recurrent state), ``TERMINATED`` /
``TRUNCATED`` the previous step ended the episode, ``EPISODE_DONE`` a whole game ended there (its
raw return and length are in the slot's statistics).
"""

from __future__ import annotations

import os
import select
import signal
import struct
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.envs import env_spaces, make_vector_env
from workbench.processes import SharedArray, die_with_parent

FIRST, TERMINATED, TRUNCATED, EPISODE_DONE = 1, 2, 4, 8
STOPPED, REJECTED = -1, -2

REQUEST = struct.Struct("<ii")  # (slot, generation)
REPLY = struct.Struct("<ii")  # (slot, action or status)

#: Seconds an actor waits for one reply before it decides the server is gone.
REPLY_TIMEOUT = 300.0


class ServerStopped(Exception):
    """The inference server stopped (or went away) while this actor waited for an action."""


def served_spaces(env_id: str, env_options: dict | None = None) -> tuple[Any, Any]:
    """``env_id``'s observation and action spaces, checked before any actor starts: the id
    exists, and its actions are discrete (the inference server answers action indices)."""
    observation_space, action_space = env_spaces(env_id, **(env_options or {}))
    if not hasattr(action_space, "n"):
        raise ValueError(
            f"{env_id} has a continuous action space {action_space}; the inference "
            "server answers discrete actions. Pick a discrete-action env."
        )
    return observation_space, action_space


@dataclass
class SharedSlots:
    """The shared-memory request slots of every environment served (one row per slot).

    Arrays: ``obs`` and ``final_obs`` ``[S, *obs_shape]``, ``reward`` float32 ``[S]``, ``flags``
    uint8 ``[S]``, ``episode_return`` float64 ``[S]``, ``episode_length`` int64 ``[S]``,
    ``sent_at`` float64 ``[S]`` (``time.perf_counter()`` of the request: CLOCK_MONOTONIC, the same
    clock in every process of this machine, so the server can measure the queue wait).
    """

    num_slots: int
    obs_shape: tuple[int, ...]
    obs_dtype: str
    shared: dict[str, SharedArray] = field(default_factory=dict)

    @classmethod
    def allocate(
        cls, context: Any, num_slots: int, obs_shape: tuple[int, ...], obs_dtype: Any
    ) -> "SharedSlots":
        obs_dtype = np.dtype(obs_dtype)
        shapes = {
            "obs": ((num_slots, *obs_shape), obs_dtype),
            "final_obs": ((num_slots, *obs_shape), obs_dtype),
            "reward": ((num_slots,), np.float32),
            "flags": ((num_slots,), np.uint8),
            "episode_return": ((num_slots,), np.float64),
            "episode_length": ((num_slots,), np.int64),
            "sent_at": ((num_slots,), np.float64),
        }
        shared = {
            key: SharedArray.allocate(context, shape, dtype)
            for key, (shape, dtype) in shapes.items()
        }
        return cls(num_slots, tuple(obs_shape), obs_dtype.str, shared)

    def arrays(self) -> dict[str, np.ndarray]:
        return {key: value.array() for key, value in self.shared.items()}


def request_flags(
    terminated: np.ndarray, truncated: np.ndarray, episode_done: np.ndarray
) -> np.ndarray:
    """The flags of the next request after a step with these outcomes (same-step autoreset)."""
    terminated = np.asarray(terminated, dtype=bool)
    truncated = np.asarray(truncated, dtype=bool)
    ended = terminated | truncated
    return (
        ended * FIRST
        | terminated * TERMINATED
        | truncated * TRUNCATED
        | np.asarray(episode_done, dtype=bool) * EPISODE_DONE
    ).astype(np.uint8)


class InferenceClient:
    """One actor's side of the local transport: write the slots, send the indices, read actions.

    Args:
        slots: the shared slots (the server's ``SharedSlots``).
        slot_ids: the slots of this actor's envs, one per env, in env order.
        generation: this actor's generation (the server ignores requests of older ones).
        request_fd / reply_fd: the write end of the shared request pipe, the read end of the
            actor's reply pipe.
    """

    def __init__(
        self,
        slots: SharedSlots,
        slot_ids: np.ndarray,
        generation: int,
        request_fd: int,
        reply_fd: int,
    ) -> None:
        self.slot_ids = np.asarray(slot_ids, dtype=np.int64)
        self.arrays = slots.arrays()
        self.obs_shape = slots.obs_shape
        self.obs_dtype = np.dtype(slots.obs_dtype)
        self.request_fd = request_fd
        self.reply_fd = reply_fd
        # Packed once: an asynchronous actor's request is the join of its batch's envs.
        self._env_requests = [REQUEST.pack(int(s), generation) for s in self.slot_ids]
        self._request = b"".join(self._env_requests)
        self._position = {int(s): i for i, s in enumerate(self.slot_ids)}
        self._actions = np.empty(len(self.slot_ids), dtype=np.int64)
        if len(self._request) > select.PIPE_BUF:
            raise ValueError(
                f"{len(self.slot_ids)} envs in one actor exceed one atomic pipe write "
                f"({select.PIPE_BUF // REQUEST.size} envs); use more actors with fewer envs each."
            )
        self._poll = select.poll()
        self._poll.register(reply_fd, select.POLLIN)

    def step(
        self,
        obs: np.ndarray,
        reward: np.ndarray,
        flags: np.ndarray,
        *,
        final_obs: np.ndarray | None = None,
        episode_return: np.ndarray | None = None,
        episode_length: np.ndarray | None = None,
        envs: np.ndarray | None = None,
    ) -> np.ndarray:
        """Send observations of this actor's envs and return one action per env (int64).

        ``envs``: which of the actor's envs (indices into its slots) the rows are, for an
        asynchronous actor's batch; None: all of them, in order.

        Raises ``ValueError`` for an observation of the wrong shape or dtype (nothing is sent), and
        ``ServerStopped`` when the server stops or goes away."""
        obs = np.asarray(obs)
        envs = None if envs is None else np.asarray(envs)
        ids = self.slot_ids if envs is None else self.slot_ids[envs]
        expected = (len(ids), *self.obs_shape)
        if obs.shape != expected or not np.can_cast(obs.dtype, self.obs_dtype, casting="same_kind"):
            raise ValueError(
                f"malformed observation: got {obs.dtype} {obs.shape}, "
                f"the server serves {self.obs_dtype} {expected} "
                f"(one {self.obs_shape} observation per env of this actor); "
                "check the env id and its preprocessing options."
            )
        a = self.arrays
        a["obs"][ids] = obs
        a["reward"][ids] = reward
        a["flags"][ids] = flags
        if final_obs is not None:
            a["final_obs"][ids] = final_obs
        if episode_return is not None:
            a["episode_return"][ids] = episode_return
            a["episode_length"][ids] = episode_length
        a["sent_at"][ids] = time.perf_counter()
        if envs is None:
            request = self._request
        else:
            request = b"".join([self._env_requests[i] for i in envs])
        try:
            os.write(self.request_fd, request)
        except (BrokenPipeError, OSError) as error:
            raise ServerStopped("the inference server closed its request pipe") from error
        self._receive(len(ids))
        return self._actions.copy() if envs is None else self._actions[envs]

    def _receive(self, missing: int) -> None:
        """Read ``missing`` replies into ``self._actions`` (indexed like ``slot_ids``)."""
        actions, position = self._actions, self._position
        buffer = b""
        while missing:
            if not self._poll.poll(REPLY_TIMEOUT * 1000):
                raise ServerStopped(f"no reply from the inference server in {REPLY_TIMEOUT:.0f} s")
            chunk = os.read(self.reply_fd, REPLY.size * missing - len(buffer))
            if not chunk:
                raise ServerStopped("the inference server closed this actor's reply pipe")
            buffer += chunk
            usable = len(buffer) - len(buffer) % REPLY.size
            for slot, action in REPLY.iter_unpack(buffer[:usable]):
                if action == STOPPED:
                    raise ServerStopped("the inference server stopped")
                if action == REJECTED:
                    raise ValueError(
                        f"the inference server rejected the observation of slot {slot}: it holds "
                        "NaN or infinite values; check the environment's observations."
                    )
                actions[position[slot]] = action
                missing -= 1
            buffer = buffer[usable:]


@dataclass
class EnvActorSpec:
    """What an env-only actor process needs: its envs, its slots and its place in the pipes."""

    env_id: str
    slot_ids: list[int]
    generation: int
    seed: int
    parent_pid: int
    env_options: dict = field(default_factory=dict)
    actor_index: int = 0
    nice: int = 0
    """Added to the process's niceness, so that on a small machine actors cannot starve the
    server."""
    batch_size: int | None = None
    """Envs per request; below the env count the envs step asynchronously (module docstring)."""


def env_actor_main(
    spec: EnvActorSpec, slots: SharedSlots, request_writer: Any, reply_reader: Any, control: Any
) -> None:
    """An env-only actor process: step ``len(spec.slot_ids)`` envs with actions from the server.

    It reports ``("ready", pid)`` or ``("error", traceback)`` on ``control`` once its envs exist,
    then loops until the server says it stopped; any other failure goes to ``control`` as an error.
    """
    die_with_parent(spec.parent_pid)
    signal.signal(
        signal.SIGINT, signal.SIG_IGN
    )  # Ctrl-C in a terminal is the parent's; it stops us
    try:
        if spec.nice:
            os.nice(spec.nice)
        envs = make_vector_env(
            spec.env_id,
            len(spec.slot_ids),
            batch_size=spec.batch_size,
            num_threads=1,
            **spec.env_options,
        )
        obs, info = envs.reset(seed=spec.seed)
        client = InferenceClient(
            slots,
            np.asarray(spec.slot_ids),
            spec.generation,
            request_writer.fileno(),
            reply_reader.fileno(),
        )
        control.send(("ready", os.getpid()))
    except BaseException:
        control.send(("error", traceback.format_exc()))
        return
    try:
        count = len(obs)
        reward = np.zeros(count, dtype=np.float32)
        flags = np.full(count, FIRST, dtype=np.uint8)
        final_obs = episode_return = episode_length = None
        while True:
            actions = client.step(
                obs,
                reward,
                flags,
                final_obs=final_obs,
                episode_return=episode_return,
                episode_length=episode_length,
                envs=info["env_id"] if envs.is_async else None,
            )
            # Asynchronous: these envs step in the C++ thread while the next batch is served.
            envs.send(actions)
            obs, reward, terminated, truncated, info = envs.recv()
            flags = request_flags(terminated, truncated, info["episode_done"])
            final_obs = info["final_obs"] if truncated.any() else None
            if info["episode_done"].any():
                episode_return, episode_length = info["episode_return"], info["episode_length"]
            else:
                episode_return = episode_length = None
    except ServerStopped:
        pass
    except BaseException:
        try:
            control.send(("error", traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass
    finally:
        envs.close()
