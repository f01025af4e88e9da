"""The central inference server of SEED RL (Espeholt et al. 2020, https://arxiv.org/abs/1910.06591).

In IMPALA every actor runs its own copy of the policy on its own CPU. SEED moves inference to the
learner's accelerator: actors only step environments (``workbench.env_actors``), send each
observation to one server, and get an action back. The server gathers requests until its batch is
full or a timeout passes, runs **one forward pass** for all of them, and answers (Sec. 3, Fig. 2).
Recurrent state stays on the server, one row per env slot, reset when an episode starts, so actors
never hold parameters or state. What each step produced (observation, action, log-probability,
the state before it) goes to listeners that assemble trajectories for the learner (``seed.py``).

* :class:`InferenceServer` is the batching core: ``infer`` answers one gathered batch and records
  per request the queue wait (request sent -> batch starts) and the forward time; ``stats`` gives
  their p50/p99 and the batch sizes reached.
* :class:`LocalActors` is the local transport: env-only actor processes, observations in shared
  memory, one system call each way per step (see ``env_actors``), and the serving thread that
  gathers requests, calls ``infer`` and restarts actors that die.
* :class:`SerialActors` steps the envs in the caller's thread through the same ``infer``:
  deterministic, for notebooks and tests.
* The multi-machine transport (a Ray async actor) is ``workbench.inference_ray``.

Policies the server can run follow :class:`ServedPolicy`; :class:`SampledPolicy` serves an
``ActorCritic`` (V-trace), ``seed.RecurrentEpsilonGreedy`` an R2D2 ``RecurrentQNetwork``.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import select
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np
import torch

from workbench.env_actors import (
    FIRST,
    REJECTED,
    REPLY,
    REQUEST,
    STOPPED,
    TRUNCATED,
    EnvActorSpec,
    SharedSlots,
    env_actor_main,
    request_flags,
)
from workbench.envs import env_spaces, make_vector_env
from workbench.system import resolve_device
from workbench.workers import WORKER_TIMEOUT

State = "tuple[torch.Tensor, ...] | None"


class ServedPolicy(Protocol):
    """What the server runs: one batched step over the envs whose requests it gathered."""

    def initial_state(self, batch_size: int, device: torch.device) -> "tuple[torch.Tensor, ...] | None":
        """Zero recurrent state for ``batch_size`` envs (each ``[N, ...]``), or None (feed-forward)."""

    def step(self, obs: torch.Tensor, state: "tuple[torch.Tensor, ...] | None", first: torch.Tensor,
             slots: torch.Tensor) -> "tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, dict[str, torch.Tensor]]":
        """``obs [N, *obs_shape]``, the state of those envs, ``first`` bool ``[N]`` (already applied
        to the state), their ``slots`` ``[N]`` -> (int actions ``[N]``, new state, extras ``[N, ...]``)."""


class SampledPolicy:
    """Serve an ``ActorCritic``: sample from its policy; the extras keep ``logp``, the behaviour
    log-probability ``log mu(a|x)`` that V-trace needs (IMPALA Sec. 4)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def initial_state(self, batch_size: int, device: torch.device) -> None:
        return None

    def step(self, obs, state, first, slots):
        out = self.model.act(obs)
        return out["action"], None, {"logp": out["logp"]}


@dataclass
class StepBatch:
    """One answered batch, in numpy, as listeners see it (one row per request).

    ``reward``, ``flags`` and ``final_obs`` are the outcome of each env's *previous* action
    (``env_actors`` states the flags); ``state`` is each env's recurrent state before this step,
    after the resets that ``FIRST`` asked for (None for feed-forward policies)."""

    slots: np.ndarray
    obs: np.ndarray
    reward: np.ndarray
    flags: np.ndarray
    final_obs: np.ndarray
    episode_return: np.ndarray
    episode_length: np.ndarray
    actions: np.ndarray
    extras: dict[str, np.ndarray]
    state: "tuple[np.ndarray, ...] | None"


class StepListener(Protocol):
    def on_step(self, batch: StepBatch) -> None: ...

    def on_restart(self, slots: np.ndarray) -> None:
        """These slots' actor was restarted: drop what was half-assembled for them."""


class LatencyStats:
    """Per-request queue wait and forward time, and batch sizes, over the last ``window`` requests."""

    def __init__(self, window: int = 100_000) -> None:
        self.queue_wait = deque(maxlen=window)
        self.forward = deque(maxlen=window)
        self.batch_sizes = deque(maxlen=window)
        self.requests = 0
        self.batches = 0
        self._lock = threading.Lock()

    def record(self, waits: np.ndarray, forward_seconds: float) -> None:
        with self._lock:
            self.queue_wait.extend(waits.tolist())
            self.forward.extend([forward_seconds] * len(waits))
            self.batch_sizes.append(len(waits))
            self.requests += len(waits)
            self.batches += 1

    def reset(self) -> None:
        with self._lock:
            self.queue_wait.clear()
            self.forward.clear()
            self.batch_sizes.clear()
            self.requests = self.batches = 0

    def summary(self) -> dict[str, float]:
        """p50/p99 in milliseconds of ``queue_wait``, ``forward`` and ``latency`` (their sum: a
        request's time from sent to answered), the mean and largest batch, and the counts."""
        with self._lock:
            wait = np.asarray(self.queue_wait, dtype=np.float64)
            forward = np.asarray(self.forward, dtype=np.float64)
            sizes = np.asarray(self.batch_sizes, dtype=np.float64)
            out = {"requests": float(self.requests), "batches": float(self.batches)}
        if len(wait) == 0:
            return out
        for name, values in (("queue_wait", wait), ("forward", forward), ("latency", wait + forward)):
            p50, p99 = np.percentile(values, [50, 99]) * 1000.0
            out[f"{name}_p50_ms"], out[f"{name}_p99_ms"] = float(p50), float(p99)
        out["mean_batch_size"] = float(sizes.mean())
        out["max_batch_size_reached"] = float(sizes.max())
        return out


class InferenceServer:
    """One forward pass per gathered batch of requests, recurrent state kept per env slot.

    Args:
        policy: a :class:`ServedPolicy` (e.g. ``SampledPolicy(actor_critic)``); its model is the
            learner's own (SEED: actors never hold parameters).
        max_batch_size: the most requests answered by one forward pass. A transport answers when
            this many wait, or when ``timeout`` passed since the oldest one arrived.
        timeout: seconds the oldest request may wait for the batch to fill.
        device: where the forward pass runs (``"auto"``: the GPU when there is one).
        listeners: objects with ``on_step(StepBatch)`` and ``on_restart(slots)`` (trajectory
            assemblers).
        lock: held around each forward pass; the learner holds it while it writes parameters, so
            a forward pass never sees a half-applied update.
    """

    def __init__(
        self,
        policy: ServedPolicy,
        max_batch_size: int,
        timeout: float = 0.002,
        *,
        device: "str | torch.device" = "cpu",
        listeners: Sequence[StepListener] = (),
        lock: "threading.Lock | None" = None,
    ) -> None:
        if not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool) or max_batch_size < 1:
            raise ValueError(f"max_batch_size must be a positive int, got {max_batch_size!r}")
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout >= 0):
            raise ValueError(f"timeout must be seconds >= 0, got {timeout!r}")
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.timeout = float(timeout)
        self.device = resolve_device(device)
        self.listeners = list(listeners)
        self.lock = lock or threading.Lock()
        self.latency = LatencyStats()
        self.num_slots = 0
        self._state: "tuple[torch.Tensor, ...] | None" = None

    def reset_slots(self, num_slots: int) -> None:
        """Serve ``num_slots`` env slots, all starting with zero recurrent state."""
        self.num_slots = int(num_slots)
        self._state = self.policy.initial_state(self.num_slots, self.device)

    def restart(self, slots: np.ndarray) -> None:
        """These slots' actor restarted: zero their state, tell the listeners."""
        slots = np.asarray(slots, dtype=np.int64)
        if self._state is not None:
            index = torch.as_tensor(slots, device=self.device)
            for part in self._state:
                part[index] = 0
        for listener in self.listeners:
            listener.on_restart(slots)

    def infer(
        self,
        slots: np.ndarray,
        obs: np.ndarray,
        reward: np.ndarray,
        flags: np.ndarray,
        *,
        final_obs: np.ndarray | None = None,
        episode_return: np.ndarray | None = None,
        episode_length: np.ndarray | None = None,
        sent_at: np.ndarray | None = None,
    ) -> np.ndarray:
        """Answer one batch: int64 actions ``[N]``, ``REJECTED`` for rows whose float observation
        is not finite (they are left out of the forward pass and of the listeners)."""
        started = time.perf_counter()
        slots = np.asarray(slots, dtype=np.int64)
        if self.num_slots == 0 or (len(slots) and slots.max() >= self.num_slots):
            raise ValueError(f"slot {int(slots.max()) if len(slots) else 0} is not served; call "
                             f"reset_slots(n) with n > every slot first (now {self.num_slots})")
        actions = np.full(len(slots), REJECTED, dtype=np.int64)
        good = np.ones(len(slots), dtype=bool)
        if np.issubdtype(obs.dtype, np.floating):
            good = np.isfinite(obs.reshape(len(slots), -1)).all(axis=1)
        if not good.all():
            slots, obs, reward, flags = slots[good], obs[good], reward[good], flags[good]
            final_obs = None if final_obs is None else final_obs[good]
            episode_return = None if episode_return is None else episode_return[good]
            episode_length = None if episode_length is None else episode_length[good]
        if len(slots):
            first = (flags & FIRST) != 0
            obs_t = torch.as_tensor(obs, device=self.device)
            first_t = torch.as_tensor(first, device=self.device)
            slots_t = torch.as_tensor(slots, device=self.device)
            with self.lock, torch.no_grad():
                state = None
                if self._state is not None:
                    state = tuple(part[slots_t] * (~first_t).view(-1, *([1] * (part.dim() - 1))).to(part.dtype)
                                  for part in self._state)
                chosen, new_state, extras = self.policy.step(obs_t, state, first_t, slots_t)
                if new_state is not None:
                    for part, new in zip(self._state, new_state):
                        part[slots_t] = new
            chosen = chosen.cpu().numpy()
            actions[good] = chosen
            if self.listeners:
                batch = StepBatch(
                    slots=slots, obs=obs, reward=np.asarray(reward, dtype=np.float32), flags=flags,
                    final_obs=obs if final_obs is None else final_obs,
                    episode_return=np.zeros(len(slots)) if episode_return is None else episode_return,
                    episode_length=np.zeros(len(slots), np.int64) if episode_length is None else episode_length,
                    actions=chosen, extras={k: v.cpu().numpy() for k, v in extras.items()},
                    state=None if state is None else tuple(s.cpu().numpy() for s in state),
                )
                for listener in self.listeners:
                    listener.on_step(batch)
        forward = time.perf_counter() - started
        if sent_at is not None and len(sent_at):
            self.latency.record(np.maximum(started - np.asarray(sent_at), 0.0), forward)
        else:
            self.latency.record(np.zeros(len(actions)), forward)
        return actions

    def stats(self) -> dict[str, float]:
        """``LatencyStats.summary()`` of the requests answered so far."""
        return self.latency.summary()


# --------------------------------------------------------------------------------------------------
# Transports


class SerialActors:
    """Envs stepped in the caller's thread, each step one ``server.infer`` over all of them.

    The same protocol as the actor processes without processes: deterministic for a given seed,
    which notebooks and tests compare against. ``step()`` advances every env one step."""

    def __init__(self, server: InferenceServer, env_id: str, num_envs: int, *, seed: int = 0,
                 env_options: dict | None = None) -> None:
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

    def step(self) -> dict:
        """One step of every env; returns the env's ``info`` (episode statistics)."""
        info = self._info
        actions = self.server.infer(
            self.slots, self._obs, self._reward, self._flags, final_obs=self._final_obs,
            episode_return=info.get("episode_return"), episode_length=info.get("episode_length"),
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


@dataclass
class ActorEvent:
    time: float
    kind: str  # "started", "stopped", "died", "restarted", "error"
    actor: int
    detail: str = ""


class LocalActors:
    """Env-only actor processes on this machine, served by ``server`` from a thread of this one.

    Each actor steps ``envs_per_actor`` envs of ``env_id`` (one slot each). ``start()`` spawns
    ``num_actors`` of them and the serving thread; ``set_num_actors(n)`` adds or retires actors
    while it runs (up to ``max_actors``); an actor that dies is restarted into the same slots
    (``events`` records it). ``stop()`` answers every waiting actor ``STOPPED`` (they exit cleanly),
    then joins them; actors die with this process however it ends.

    Args:
        server: the :class:`InferenceServer` (its ``max_batch_size`` and ``timeout`` decide batching;
            a batch is also full when every live env waits).
        env_id: the environments' id (validated here, before any process starts).
        num_actors: actor processes to start.
        envs_per_actor: envs (slots) per actor; each actor sends all of them in one request.
        max_actors: the most actors ``set_num_actors`` may reach (slots are allocated once).
        seed: actor i's envs are seeded ``seed + 1000 * i + j``.
        nice: niceness added to actor processes (on a small machine, so they cannot starve the
            server and learner in this process).
    """

    def __init__(self, server: InferenceServer, env_id: str, num_actors: int, *, envs_per_actor: int = 1,
                 max_actors: int | None = None, seed: int = 0, env_options: dict | None = None,
                 nice: int = 0) -> None:
        for name, value in (("num_actors", num_actors), ("envs_per_actor", envs_per_actor)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.max_actors = max(num_actors, max_actors or num_actors)
        observation_space, action_space = env_spaces(env_id, **(env_options or {}))  # validates the id
        if not hasattr(action_space, "n"):
            raise ValueError(f"{env_id} has a continuous action space {action_space}; the inference "
                             "server answers discrete actions. Pick a discrete-action env.")
        self.server = server
        self.env_id = env_id
        self.num_actors = num_actors
        self.envs_per_actor = envs_per_actor
        self.seed = seed
        self.env_options = dict(env_options or {})
        self.nice = nice
        self.observation_space, self.action_space = observation_space, action_space
        self.events: list[ActorEvent] = []
        self.error: str | None = None
        self.steps = 0
        self.episodes: deque = deque(maxlen=10_000)  # (time, slot, return, length)
        self._context = multiprocessing.get_context("spawn")
        self._actors: dict[int, _Actor] = {}
        self._generation = np.zeros(self.max_actors * envs_per_actor, dtype=np.int64)
        self._live_slots = np.zeros(self.max_actors * envs_per_actor, dtype=bool)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._slots: SharedSlots | None = None
        self._finalizer = None

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> "LocalActors":
        if self._thread is not None:
            raise RuntimeError("these actors already started; make a new LocalActors to start again")
        num_slots = self.max_actors * self.envs_per_actor
        space = self.observation_space
        self._slots = SharedSlots.allocate(self._context, num_slots, tuple(space.shape), space.dtype)
        self._arrays = self._slots.arrays()
        self.server.reset_slots(num_slots)
        self._request_reader, self._request_writer = self._context.Pipe(duplex=False)
        os.set_blocking(self._request_reader.fileno(), False)
        self._finalizer = weakref.finalize(self, LocalActors._kill, self._actors)
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
        spec = EnvActorSpec(self.env_id, slot_ids.tolist(), generation, self.seed + 1000 * index + generation - 1,
                            os.getpid(), self.env_options, index, self.nice)
        process = self._context.Process(
            target=env_actor_main, name=f"workbench-env-actor-{index}", daemon=True,
            args=(spec, self._slots, self._request_writer, reply_reader, control_writer),
        )
        process.start()
        reply_reader.close()  # the actor's death must read as a broken pipe here
        control_writer.close()
        actor = _Actor(index, slot_ids, generation, process, reply_writer, control_reader, time.monotonic())
        self._actors[index] = actor
        return actor

    def _await_ready(self, actor: _Actor) -> None:
        if not actor.control.poll(WORKER_TIMEOUT):
            raise TimeoutError(f"env actor {actor.index} did not start in {WORKER_TIMEOUT:.0f} s; "
                               "the machine may be overloaded: use fewer actors.")
        self._ready(actor)

    def _ready(self, actor: _Actor) -> None:
        try:
            kind, detail = actor.control.recv()
        except (EOFError, OSError):
            actor.process.join(timeout=5.0)
            raise RuntimeError(
                f"env actor {actor.index} exited (code {actor.process.exitcode}) before it was ready. "
                "In a script, start actors under `if __name__ == \"__main__\":` (multiprocessing's "
                "spawn re-imports the main module)."
            ) from None
        if kind == "error":
            raise RuntimeError(f"env actor {actor.index} failed to start:\n{detail}")
        actor.starting = False
        with self._lock:
            self._live_slots[actor.slot_ids] = True
        self.events.append(ActorEvent(time.time(), "started", actor.index, f"pid {detail}"))

    def set_num_actors(self, num_actors: int) -> None:
        """Start or retire actors so that ``num_actors`` step envs (1 .. ``max_actors``)."""
        if not isinstance(num_actors, int) or not 1 <= num_actors <= self.max_actors:
            raise ValueError(f"num_actors must be an int in 1..{self.max_actors} (max_actors), got {num_actors!r}")
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
        """Answer ``STOPPED`` to every actor (those mid-request included), join them, end the thread."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)
        if self._finalizer is not None:
            for actor in list(self._actors.values()):
                self._tell_stopped(actor)
            deadline = time.monotonic() + 3.0
            for actor in list(self._actors.values()):
                actor.process.join(timeout=max(0.0, deadline - time.monotonic()))
            self._finalizer()

    @staticmethod
    def _kill(actors: dict) -> None:
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

    def _tell_stopped(self, actor: _Actor) -> None:
        try:
            os.write(actor.reply_writer.fileno(), b"".join(REPLY.pack(int(s), STOPPED) for s in actor.slot_ids))
        except (BrokenPipeError, OSError):
            pass

    def __enter__(self) -> "LocalActors":
        return self.start() if self._thread is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the serving thread -------------------------------------------------------------------------

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
                full = min(self.server.max_batch_size, max(live, 1))
                while pending and (len(pending) >= full or now - oldest >= self.server.timeout):
                    batch, pending = pending[:self.server.max_batch_size], pending[self.server.max_batch_size:]
                    self._answer(np.asarray(batch, dtype=np.int64))
                    oldest = time.perf_counter()
                    now = oldest
                if now >= next_check:
                    self._check_actors()
                    next_check = now + 0.2
        except BaseException as error:  # the run must learn why serving ended, not hang
            import traceback

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
            if generation == self._generation[slot] and self._live_slots[slot]:
                slots.append(slot)
        return slots

    def _answer(self, slots: np.ndarray) -> None:
        a = self._arrays
        flags = a["flags"][slots]
        actions = self.server.infer(
            slots, a["obs"][slots], a["reward"][slots], flags,
            final_obs=a["final_obs"][slots] if (flags & TRUNCATED).any() else None,
            episode_return=a["episode_return"][slots], episode_length=a["episode_length"][slots],
            sent_at=a["sent_at"][slots],
        )
        self.steps += len(slots)
        done = np.flatnonzero(flags & 8)
        if len(done):
            now = time.time()
            for i in done:
                self.episodes.append((now, int(slots[i]), float(a["episode_return"][slots[i]]),
                                      int(a["episode_length"][slots[i]])))
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
        for index, actor in list(self._actors.items()):
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
            self.events.append(ActorEvent(time.time(), "died", index, f"exit code {actor.process.exitcode}"))
            recent = [e for e in self.events if e.kind == "restarted" and e.actor == index
                      and e.time > time.time() - 60]
            if len(recent) >= 3:
                raise RuntimeError(f"env actor {index} died 4 times within a minute (last exit code "
                                   f"{actor.process.exitcode}); see the run's events for its errors")
            restarted = self._spawn(index, restart=True)
            self.events.append(ActorEvent(time.time(), "restarted", index, f"pid {restarted.process.pid}"))

    # -- what the run reads -------------------------------------------------------------------------

    @property
    def pids(self) -> list[int]:
        return [a.process.pid for a in self._actors.values() if a.process.is_alive()]

    def check(self) -> None:
        """Raise the serving thread's failure, if it failed."""
        if self.error is not None:
            raise RuntimeError(self.error)
