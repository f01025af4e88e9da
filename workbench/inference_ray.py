"""SEED RL's multi-machine transport on Ray (``pip install "workbench[distributed]"``).

SEED (Espeholt et al. 2020, https://arxiv.org/abs/1910.06591, Sec. 3 and Fig. 2) puts env-only
actors on many CPU machines and one inference server on the accelerator's host, next to the
learner. Each actor streams (observation, reward, flags) to the server and waits for an action;
the server gathers the requests of all actors into batches and answers each batch with one
forward pass. The paper's transport is a gRPC streaming service; here it is Ray's RPC:

* :class:`RayInferenceServer` is a Ray **async actor** that holds an ``inference.InferenceServer``.
  ``infer`` is one actor's request: it is validated (a malformed observation is that caller's
  error, nobody else's), appended to a pending list, and awaits a future. A batching coroutine
  answers when ``max_batch_size`` requests wait, when every active slot waits, or when ``timeout``
  passed since the oldest arrived (the pattern of Ray Serve's ``@serve.batch``), runs **one**
  ``InferenceServer.infer`` for the batch and resolves the futures. Recurrent state stays on the
  server, one row per slot, as ``InferenceServer`` keeps it.
* :class:`RayEnvActor` is a Ray actor that only steps ``make_vector_env(env_id, 1)`` and asks the
  server for each action, with the flags protocol of ``env_actors`` (``request_flags``, ``FIRST``
  ...). It never imports torch. Its ``run`` loop ends cleanly when the server stops or goes away.
* :class:`RayActors` is the coordinator in the learner's process, with ``LocalActors``' calls
  (``start``, ``stop``, ``set_num_actors``, ``check``, ``events``, ``steps``, ``episodes``): it
  places env actors round-robin over the cluster's nodes and restarts one that dies.

Each env actor owns one slot; a restarted actor's slot gets a new *generation*, and the server
refuses requests of an older generation (a dead actor's request still in flight cannot reach the
new actor's trajectory). Statuses travel as exceptions: ``env_actors.ServerStopped`` (the server
stopped, or this actor's slot was handed on: exit cleanly) and ``ValueError`` (a malformed or
non-finite observation). Ray re-raises an actor's exception at the caller as a ``RayTaskError``
that is also an instance of the original class, so ``except ServerStopped`` works across machines.

Without a cluster, ``ray.init()`` starts a local one; on a cluster, ``ray.init(address=...)`` and
the same calls place env actors on every node and the server on this one (the learner's).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from workbench.env_actors import EPISODE_DONE, FIRST, REJECTED, REPLY_TIMEOUT, TRUNCATED, ServerStopped, request_flags
from workbench.envs import env_spaces, make_vector_env

__all__ = ["RayActors", "RayEnvActor", "RayInferenceServer", "ServerStopped"]

#: Seconds a new env actor may take to build its env (Ray starts a worker process for it).
ACTOR_START_TIMEOUT = 120.0


def import_ray() -> Any:
    """Ray, or an ImportError that names the install (this module must not import torch, so it does
    not borrow ``apex_backends.import_ray``)."""
    try:
        import ray
    except ImportError:
        raise ImportError('the Ray transport needs Ray: pip install "workbench[distributed]" (or use '
                          'inference.LocalActors on one machine).') from None
    return ray


def _check_batching(max_batch_size: Any, timeout: Any) -> None:
    if not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool) or max_batch_size < 1:
        raise ValueError(f"max_batch_size must be a positive int, got {max_batch_size!r}")
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout >= 0):
        raise ValueError(f"timeout must be seconds >= 0, got {timeout!r}")


def _node_strategy(node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def _percentiles_ms(values: Sequence[float], name: str) -> dict[str, float]:
    if not len(values):
        return {}
    p50, p99 = np.percentile(np.asarray(values, dtype=np.float64), [50, 99]) * 1000.0
    return {f"{name}_p50_ms": float(p50), f"{name}_p99_ms": float(p99)}


# --------------------------------------------------------------------------------------------------
# The server


@dataclass
class _Request:
    slot: int
    obs: np.ndarray
    reward: float
    flags: int
    final_obs: np.ndarray | None
    episode_return: float
    episode_length: int
    arrived: float  # time.perf_counter() on the server: queue wait is measured on one clock
    future: asyncio.Future


class _StepRecorder:
    """A listener inside the server actor that keeps what it saw for ``take_steps`` (a learner in
    another process feeds them to its own listeners, e.g. ``seed.TrajectoryAssembler``)."""

    def __init__(self, limit: int) -> None:
        self.items: deque = deque()
        self.limit = limit
        self.dropped = 0

    def _keep(self, item: tuple) -> None:
        if len(self.items) >= self.limit:
            self.items.popleft()
            self.dropped += 1
        self.items.append(item)

    def on_step(self, batch: Any) -> None:
        self._keep(("step", batch))

    def on_restart(self, slots: np.ndarray) -> None:
        self._keep(("restart", np.array(slots)))


class RayInferenceServer:
    """SEED's central inference server as a Ray async actor (start one with :meth:`launch`).

    Args:
        policy: what to serve, picklable: a ``ServedPolicy`` (``inference.SampledPolicy(model)``,
            ``seed.RecurrentEpsilonGreedy``), an ``ActorCritic`` (served by ``SampledPolicy``), or
            a zero-argument callable that builds one inside the actor (a factory: nothing large
            crosses the network).
        max_batch_size: the most requests answered by one forward pass.
        timeout: seconds the oldest pending request may wait for its batch to fill.
        obs_shape / obs_dtype: one observation's shape and dtype; requests that do not match get
            a ``ValueError``. ``RayActors.start`` sets them from the env (``reset_slots``).
        device: where the forward pass runs (``"auto"``: the actor's GPU when it has one).
        torch_threads: torch's intra-op threads in this actor (None: torch's default).
        record_steps: keep each answered batch (``StepBatch``) and each restart for ``take_steps``,
            at most this many (0: keep none).

    The batching coroutine runs each forward pass in a one-thread executor. The event loop is thus
    free while the network runs (milliseconds for a CNN batch on a GPU, more on a CPU): it keeps
    receiving and validating requests, so the next batch gathers while this one computes, and
    ``stats`` or ``stop`` are answered at once. One thread, not more: forward passes and slot
    restarts are serialised, so the per-slot recurrent state is never written by two at once. The
    cost is one thread hand-off per batch (tens of microseconds), shared by the whole batch.
    """

    def __init__(self, policy: Any, max_batch_size: int, timeout: float = 0.002, *,
                 obs_shape: Sequence[int] | None = None, obs_dtype: Any = None, device: str = "cpu",
                 torch_threads: int | None = 1, record_steps: int = 0) -> None:
        import torch

        from workbench.inference import InferenceServer, SampledPolicy

        _check_batching(max_batch_size, timeout)
        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        if not hasattr(policy, "step") and not hasattr(policy, "act") and callable(policy):
            policy = policy()  # a factory
        if not hasattr(policy, "step") and hasattr(policy, "act"):
            policy = SampledPolicy(policy)
        if not (hasattr(policy, "step") and hasattr(policy, "initial_state")):
            raise TypeError(f"policy must be a ServedPolicy (step, initial_state), an ActorCritic or a "
                            f"factory returning one, got {type(policy).__name__}")
        self._recorder = _StepRecorder(record_steps) if record_steps else None
        self.server = InferenceServer(policy, max_batch_size, timeout, device=device,
                                      listeners=[self._recorder] if self._recorder else [])
        model = getattr(policy, "model", None)
        if isinstance(model, torch.nn.Module):
            model.to(self.server.device)
        self.obs_shape = None if obs_shape is None else tuple(int(d) for d in obs_shape)
        self.obs_dtype = None if obs_dtype is None else np.dtype(obs_dtype)
        self._pending: list[_Request] = []
        self._generation = np.zeros(0, dtype=np.int64)
        self._active: set[int] = set()  # slots whose actor has sent a request since its (re)start
        self._steps = 0
        self._episodes: list[tuple[float, int, float, int]] = []
        self._transit: deque = deque(maxlen=100_000)  # request sent -> arrived, seconds (wall clocks)
        self._stopped: str | None = None  # the reason, once stopped
        self._error: str | None = None
        self._arrived: asyncio.Event | None = None
        self._batcher: asyncio.Task | None = None
        self._executor = None

    @classmethod
    def launch(cls, policy: Any, max_batch_size: int, timeout: float = 0.002, *, num_gpus: float = 0,
               node_id: str | None = None, max_concurrency: int = 10_000, **kwargs: Any) -> Any:
        """Start the server as a Ray actor and return its handle.

        It is pinned to ``node_id`` (default: this process's node, the learner's: SEED keeps
        inference and learning on one accelerator host) and asks for no CPU (placement, not CPU
        accounting, decides where it runs; a 2-core machine still fits the actors).
        ``max_concurrency`` bounds the ``infer`` calls it holds at once: at least one per env actor.
        """
        ray = import_ray()
        _check_batching(max_batch_size, timeout)
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        node_id = node_id or ray.get_runtime_context().get_node_id()
        return ray.remote(cls).options(
            num_cpus=0, num_gpus=num_gpus, max_concurrency=max_concurrency, max_restarts=0,
            scheduling_strategy=_node_strategy(node_id),
        ).remote(policy, max_batch_size, timeout, **kwargs)

    # -- slots ----------------------------------------------------------------------------------------

    async def reset_slots(self, num_slots: int, obs_shape: Sequence[int] | None = None, obs_dtype: Any = None) -> None:
        """Serve ``num_slots`` slots (one per env actor), all with zero recurrent state; set the
        observation spec that requests are checked against."""
        if not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"num_slots must be a positive int, got {num_slots!r}")
        if obs_shape is not None:
            self.obs_shape = tuple(int(d) for d in obs_shape)
        if obs_dtype is not None:
            self.obs_dtype = np.dtype(obs_dtype)
        self._fail_pending(lambda r: True, ServerStopped("the server's slots were reset"))
        await self._run(self.server.reset_slots, num_slots)
        self._generation = np.zeros(num_slots, dtype=np.int64)
        self._active.clear()

    async def restart(self, slots: Sequence[int]) -> list[int]:
        """These slots get a new actor (or none): a new generation each, their pending requests
        refused (``ServerStopped``), their recurrent state zeroed, the listeners told. Returns the
        new generations, which the new actors pass with each request."""
        slots = [self._check_slot(s) for s in slots]
        self._generation[slots] += 1
        self._active.difference_update(slots)
        chosen = set(slots)
        self._fail_pending(lambda r: r.slot in chosen, ServerStopped("this slot was given to a new actor"))
        if self._stopped is None:
            await self._run(self.server.restart, np.asarray(slots, dtype=np.int64))
        return [int(self._generation[s]) for s in slots]

    # -- requests -------------------------------------------------------------------------------------

    async def infer(self, slot: int, obs: np.ndarray, reward: float = 0.0, flags: int = 0,
                    final_obs: np.ndarray | None = None, episode_return: float = 0.0, episode_length: int = 0,
                    sent_at: float | None = None, generation: int | None = None) -> int:
        """One env's request -> its action (int).

        ``obs``: one observation ``[*obs_shape]``; ``reward`` and ``flags`` (``env_actors``): the
        outcome of this env's previous action; ``final_obs``: the episode's last observation when
        ``flags & TRUNCATED``; ``episode_return`` / ``episode_length``: the finished episode's when
        ``flags & EPISODE_DONE``; ``sent_at``: the caller's ``time.time()`` (the transit time is
        kept as a statistic: across machines it is only as good as their clocks' agreement);
        ``generation``: the caller's, from ``restart`` (None: not checked).

        Raises ``ValueError`` for an observation of the wrong shape or dtype, or one holding NaN or
        infinite values (only this caller's request fails), and ``ServerStopped`` when the server
        stopped or this slot was given to a newer actor.
        """
        arrived = time.perf_counter()
        self._start_batcher()
        if self._stopped is not None:
            raise ServerStopped(self._stopped)
        slot = self._check_slot(slot)
        if generation is not None and generation != self._generation[slot]:
            raise ServerStopped(f"slot {slot} belongs to generation {int(self._generation[slot])} now, not "
                                f"{generation}: this actor was replaced")
        obs = self._check_obs(obs, "observation")
        if final_obs is not None:
            final_obs = self._check_obs(final_obs, "final observation")
        if sent_at is not None:
            self._transit.append(max(time.time() - float(sent_at), 0.0))
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(slot, obs, float(reward), int(flags), final_obs, float(episode_return),
                                      int(episode_length), arrived, future))
        self._active.add(slot)
        self._arrived.set()
        return await future

    def _check_slot(self, slot: Any) -> int:
        if not isinstance(slot, (int, np.integer)) or not 0 <= int(slot) < len(self._generation):
            raise ValueError(f"slot {slot!r} is not served: slots are 0..{len(self._generation) - 1} "
                             "(reset_slots(n) sets them; RayActors.start calls it)")
        return int(slot)

    def _check_obs(self, obs: Any, what: str) -> np.ndarray:
        obs = np.asarray(obs)
        if self.obs_shape is None:
            return obs
        dtype = self.obs_dtype or obs.dtype
        if obs.shape != self.obs_shape or not np.can_cast(obs.dtype, dtype, casting="same_kind"):
            raise ValueError(f"malformed {what}: got {obs.dtype} {obs.shape}, the server serves {dtype} "
                             f"{self.obs_shape} (one observation of one env); check the env id and its "
                             "preprocessing options.")
        return obs.astype(dtype, copy=False)

    # -- batching -------------------------------------------------------------------------------------

    def _start_batcher(self) -> None:
        if self._batcher is None:  # here, not in __init__: the actor's event loop runs the calls
            from concurrent.futures import ThreadPoolExecutor

            self._arrived = asyncio.Event()
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inference-forward")
            self._batcher = asyncio.get_running_loop().create_task(self._batch_loop())

    async def _run(self, function: Callable, *args: Any) -> Any:
        """``function(*args)`` on the forward thread, after the batch in flight."""
        if self._stopped is not None:
            raise ServerStopped(self._stopped)
        self._start_batcher()
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    def _full_size(self) -> int:
        # Every active env waits: nothing more can come, answer now (as LocalActors does).
        return max(1, min(self.server.max_batch_size, len(self._active)))

    async def _batch_loop(self) -> None:
        timeout = self.server.timeout
        while self._stopped is None:
            if not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            oldest = self._pending[0].arrived
            while self._stopped is None and len(self._pending) < self._full_size():
                remaining = oldest + timeout - time.perf_counter()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except asyncio.TimeoutError:
                    break
            if self._stopped is not None:
                break
            batch = [r for r in self._pending[:self.server.max_batch_size] if not r.future.done()]
            del self._pending[:self.server.max_batch_size]
            if not batch:
                continue
            try:
                actions = await self._run(self._forward, batch)
            except Exception as error:  # a policy bug: every caller learns it, serving ends
                self._error = f"the inference server failed: {error!r}\n{traceback.format_exc()}"
                self._stop(self._error)
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(ServerStopped(self._error))
                break
            self._answer(batch, actions)

    def _forward(self, batch: list[_Request]) -> np.ndarray:
        """One ``InferenceServer.infer`` for the batch (on the forward thread)."""
        flags = np.array([r.flags for r in batch], dtype=np.uint8)
        obs = np.stack([r.obs for r in batch])
        final_obs = None
        if (flags & TRUNCATED).any():
            final_obs = np.stack([r.obs if r.final_obs is None else r.final_obs for r in batch])
        return self.server.infer(
            np.array([r.slot for r in batch], dtype=np.int64), obs,
            np.array([r.reward for r in batch], dtype=np.float32), flags, final_obs=final_obs,
            episode_return=np.array([r.episode_return for r in batch], dtype=np.float64),
            episode_length=np.array([r.episode_length for r in batch], dtype=np.int64),
            sent_at=np.array([r.arrived for r in batch], dtype=np.float64),
        )

    def _answer(self, batch: list[_Request], actions: np.ndarray) -> None:
        now = time.time()
        for request, action in zip(batch, actions.tolist()):
            if action != REJECTED:
                self._steps += 1
                if request.flags & EPISODE_DONE:
                    self._episodes.append((now, request.slot, request.episode_return, request.episode_length))
            if request.future.done():  # the caller went away
                continue
            if action == REJECTED:
                request.future.set_exception(ValueError(
                    f"the inference server rejected the observation of slot {request.slot}: it holds NaN "
                    "or infinite values; check the environment's observations."))
            else:
                request.future.set_result(int(action))

    def _fail_pending(self, which: Callable[[_Request], bool], error: Exception) -> None:
        keep = []
        for request in self._pending:
            if which(request):
                if not request.future.done():
                    request.future.set_exception(error)
            else:
                keep.append(request)
        self._pending = keep

    # -- what the run reads ---------------------------------------------------------------------------

    async def stats(self) -> dict[str, float]:
        """``InferenceServer.stats()`` (queue wait from arrival here to the batch's start, forward
        time, batch sizes) with ``transit`` (request sent -> arrived) p50/p99, and counts."""
        out = self.server.stats()
        out.update(_percentiles_ms(list(self._transit), "transit"))
        out.update(steps=float(self._steps), pending=float(len(self._pending)), active_slots=float(len(self._active)))
        if self._recorder is not None:
            out["recorded_dropped"] = float(self._recorder.dropped)  # record_steps was too small
        return out

    async def steps(self) -> int:
        """Env steps answered so far (rejected requests do not count)."""
        return self._steps

    async def progress(self) -> dict[str, Any]:
        """What the coordinator polls: ``steps``, the ``episodes`` finished since the last call
        ``(time, slot, return, length)``, and ``error`` (why serving failed, or None)."""
        episodes, self._episodes = self._episodes, []
        return {"steps": self._steps, "episodes": episodes, "error": self._error, "stopped": self._stopped}

    async def take_steps(self) -> list[tuple[str, Any]]:
        """What the listeners saw since the last call, in order: ``("step", StepBatch)`` and
        ``("restart", slots)`` (needs ``record_steps``)."""
        if self._recorder is None:
            raise RuntimeError("this server keeps no steps; launch it with record_steps=N")
        items = self._recorder.items
        return [items.popleft() for _ in range(len(items))]  # the forward thread may append meanwhile

    async def set_parameters(self, state: dict) -> None:
        """Load the learner's parameters into the served model, between forward passes."""
        model = getattr(self.server.policy, "model", None)
        if model is None:
            raise TypeError(f"{type(self.server.policy).__name__} has no .model to load parameters into")

        def load() -> None:
            with self.server.lock:
                model.load_state_dict(state)

        await self._run(load)

    async def stop(self, reason: str = "the inference server stopped") -> None:
        """Refuse every waiting and every later request with ``ServerStopped`` (actors exit their
        loops cleanly); a batch in flight is still answered."""
        self._stop(reason)

    def _stop(self, reason: str) -> None:
        if self._stopped is not None:
            return
        self._stopped = reason
        self._fail_pending(lambda r: True, ServerStopped(reason))
        if self._arrived is not None:
            self._arrived.set()
        if self._executor is not None:
            self._executor.shutdown(wait=False)


# --------------------------------------------------------------------------------------------------
# The env actors


class RayEnvActor:
    """An env-only SEED actor as a Ray actor: one env, one slot, an action per step from the server.

    Args:
        server: the :class:`RayInferenceServer`'s handle.
        env_id: the env to step (``make_vector_env(env_id, 1)``, same-step autoreset).
        slot: this actor's slot on the server; ``generation``: from ``server.restart``.
        seed: the env's seed.
        env_options: ``make_vector_env``'s options (Atari preprocessing).
        nice: niceness added to this actor's process (so actors cannot starve a learner on the
            same machine).
    """

    def __init__(self, server: Any, env_id: str, slot: int, *, generation: int = 0, seed: int = 0,
                 env_options: dict | None = None, nice: int = 0) -> None:
        if nice:
            os.nice(nice)
        self.server = server
        self.slot = slot
        self.generation = generation
        self.envs = make_vector_env(env_id, 1, num_threads=1, **(env_options or {}))
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
        """Step until ``max_steps``, ``stop()``, or the server stops or goes away (a clean return:
        ``reason`` says which). A malformed observation raises (the coordinator restarts us)."""
        import ray

        reward, flags = 0.0, FIRST
        final_obs, episode_return, episode_length = None, 0.0, 0
        self.reason = None
        while self.reason is None:
            if self._stop:
                self.reason = "stopped"
                break
            if max_steps is not None and self.steps >= max_steps:
                self.reason = "max_steps"
                break
            started = time.perf_counter()
            request = self.server.infer.remote(self.slot, self.obs[0], reward, flags, final_obs, episode_return,
                                               episode_length, time.time(), self.generation)
            try:
                action = await asyncio.wait_for(request, REPLY_TIMEOUT)
            except ServerStopped as error:
                self.reason = f"server stopped: {error.args[0] if error.args else error}".splitlines()[0]
                break
            except ray.exceptions.RayActorError:
                self.reason = "server died"
                break
            except asyncio.TimeoutError:
                self.reason = f"no reply from the inference server in {REPLY_TIMEOUT:.0f} s"
                break
            self.round_trip.append(time.perf_counter() - started)
            self.obs, rewards, terminated, truncated, info = self.envs.step(np.array([action]))
            self.steps += 1
            reward = float(rewards[0])
            flags = int(request_flags(terminated, truncated, info["episode_done"])[0])
            final_obs = info["final_obs"][0] if truncated[0] else None
            if info["episode_done"][0]:
                episode_return, episode_length = float(info["episode_return"][0]), int(info["episode_length"][0])
                self.returns.append(episode_return)
            else:
                episode_return, episode_length = 0.0, 0
        return await self.stats()

    async def stop(self) -> None:
        """End ``run`` after the step in progress."""
        self._stop = True

    async def stats(self) -> dict[str, Any]:
        """``steps``, ``episodes``, ``returns`` (the last 100), ``round_trip`` p50/p99 (request ->
        action, as this actor saw it), and ``reason`` (why ``run`` ended, or None)."""
        return {"slot": self.slot, "steps": self.steps, "episodes": len(self.returns),
                "returns": self.returns[-100:], "reason": self.reason,
                **_percentiles_ms(list(self.round_trip), "round_trip")}

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


class RayActors:
    """Env actors on the Ray cluster, served by a :class:`RayInferenceServer`: the Ray counterpart
    of ``inference.LocalActors`` (the same calls), for the learner's process.

    ``start()`` sets the server's slots and starts ``num_actors`` env actors, placed round-robin on
    the cluster's live nodes; ``set_num_actors(n)`` adds or retires actors (up to ``max_actors``);
    ``check()`` restarts an actor that died (``events`` records it) and reads the server's steps and
    finished episodes; ``stop()`` ends the actors' loops and frees them. The server is not stopped
    here: it belongs to whoever launched it (``ray.get(server.stop.remote())``).

    Args:
        server: a :class:`RayInferenceServer` handle (``RayInferenceServer.launch``).
        env_id: the environments' id (validated here, before any actor starts).
        num_actors: env actors to start (one env, one slot each).
        max_actors: the most ``set_num_actors`` may reach (the server's slots are allocated once).
        seed: actor i's env is seeded ``seed + 1000 * i + generation - 1``.
        env_options: ``make_vector_env`` options.
        nice: niceness added to actor processes.
        max_steps: each actor's ``run(max_steps)`` (None: until stopped).
    """

    def __init__(self, server: Any, env_id: str, num_actors: int, *, max_actors: int | None = None, seed: int = 0,
                 env_options: dict | None = None, nice: int = 0, max_steps: int | None = None) -> None:
        if not isinstance(num_actors, int) or isinstance(num_actors, bool) or num_actors < 1:
            raise ValueError(f"num_actors must be a positive int, got {num_actors!r}")
        self.ray = import_ray()
        observation_space, action_space = env_spaces(env_id, **(env_options or {}))  # validates the id
        if not hasattr(action_space, "n"):
            raise ValueError(f"{env_id} has a continuous action space {action_space}; the inference "
                             "server answers discrete actions. Pick a discrete-action env.")
        self.server = server
        self.env_id = env_id
        self.num_actors = num_actors
        self.max_actors = max(num_actors, max_actors or num_actors)
        self.seed = seed
        self.env_options = dict(env_options or {})
        self.nice = nice
        self.max_steps = max_steps
        self.observation_space, self.action_space = observation_space, action_space
        self.events: list = []  # inference.ActorEvent
        self.error: str | None = None
        self.steps = 0
        self.episodes: deque = deque(maxlen=10_000)  # (time, slot, return, length)
        self.finished: dict[int, dict] = {}  # actor -> its run()'s result, once it ended cleanly
        self._actors: dict[int, _Handle] = {}
        self._remote = None
        self._started = False

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> "RayActors":
        if self._started:
            raise RuntimeError("these actors already started; make a new RayActors to start again")
        ray = self.ray
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
        self._remote = ray.remote(num_cpus=0, max_restarts=0, max_concurrency=8)(RayEnvActor)
        space = self.observation_space
        ray.get(self.server.reset_slots.remote(self.max_actors, tuple(space.shape), space.dtype.str),
                timeout=ACTOR_START_TIMEOUT)
        self._started = True
        self._start_actors(range(self.num_actors))
        return self

    def _start_actors(self, indices: Sequence[int]) -> None:
        handles = [self._spawn(index) for index in indices]
        try:
            ready = self.ray.get([h.ready for h in handles], timeout=ACTOR_START_TIMEOUT)
        except self.ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"env actors did not start in {ACTOR_START_TIMEOUT:.0f} s; the cluster "
                               "may be overloaded: use fewer actors.") from None
        except self.ray.exceptions.RayError as error:
            raise RuntimeError(f"an env actor failed to start: {error}") from None
        for handle, info in zip(handles, ready):
            self._event("started", handle.index, f"pid {info['pid']} node {info['node_id'][:8]}")

    def _spawn(self, index: int) -> Any:
        ray = self.ray
        (generation,) = ray.get(self.server.restart.remote([index]), timeout=ACTOR_START_TIMEOUT)
        nodes = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
        actor = self._remote.options(scheduling_strategy=_node_strategy(nodes[index % len(nodes)])).remote(
            self.server, self.env_id, index, generation=generation, seed=self.seed + 1000 * index + generation - 1,
            env_options=self.env_options, nice=self.nice)
        ready = actor.ready.remote()  # submitted before run: answered first
        handle = _Handle(index, actor, actor.run.remote(self.max_steps), generation, ready)
        self._actors[index] = handle
        self.finished.pop(index, None)
        return handle

    def set_num_actors(self, num_actors: int) -> None:
        """Start or retire actors so that ``num_actors`` step envs (1 .. ``max_actors``)."""
        if not isinstance(num_actors, int) or not 1 <= num_actors <= self.max_actors:
            raise ValueError(f"num_actors must be an int in 1..{self.max_actors} (max_actors), got {num_actors!r}")
        if self._started:
            running = sorted(self._actors)
            for index in running[num_actors:]:
                handle = self._actors.pop(index)
                self.ray.kill(handle.actor)
                self.ray.get(self.server.restart.remote([index]))  # its late requests are refused
                self._event("stopped", index, "retired")
            self._start_actors([i for i in range(num_actors) if i not in self._actors])
        self.num_actors = num_actors

    def stop(self, timeout: float = 5.0) -> None:
        """Ask every actor to end its loop, wait up to ``timeout`` seconds, then free them all."""
        ray = self.ray
        handles = list(self._actors.values())
        for handle in handles:
            handle.actor.stop.remote()
        if handles:
            done, _ = ray.wait([h.run for h in handles], num_returns=len(handles), timeout=timeout)
            for handle in handles:
                if handle.run in done:
                    self._finish(handle, restart=False)
        for handle in handles:
            ray.kill(handle.actor)
        self._actors.clear()

    def __enter__(self) -> "RayActors":
        return self.start() if not self._started else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what the run reads ---------------------------------------------------------------------------

    def check(self) -> None:
        """Restart actors that died, collect the server's progress; raise if serving failed."""
        ray = self.ray
        handles = {h.run: h for h in self._actors.values()}
        if handles:
            done, _ = ray.wait(list(handles), num_returns=len(handles), timeout=0)
            for ref in done:
                self._finish(handles[ref], restart=True)
        try:
            progress = ray.get(self.server.progress.remote(), timeout=60)
        except ray.exceptions.RayActorError as error:
            self.error = f"the inference server actor died: {str(error).splitlines()[0]}"
            raise RuntimeError(self.error) from None
        self.steps = progress["steps"]
        self.episodes.extend(progress["episodes"])
        if progress["error"] is not None:
            self.error = progress["error"]
        if self.error is not None:
            raise RuntimeError(self.error)

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
            ray.kill(handle.actor)
            return
        self._event(kind, handle.index, detail)
        ray.kill(handle.actor)
        self._actors.pop(handle.index, None)
        if not restart:
            return
        recent = [e for e in self.events if e.kind == "restarted" and e.actor == handle.index
                  and e.time > time.time() - 60]
        if len(recent) >= 3:
            self.error = (f"env actor {handle.index} failed 4 times within a minute; last: {kind}: "
                          f"{detail}\n(see the run's events)")
            raise RuntimeError(self.error)
        new = self._spawn(handle.index)
        self._event("restarted", handle.index, f"generation {new.generation}")

    def _event(self, kind: str, actor: int, detail: str = "") -> None:
        from workbench.inference import ActorEvent

        self.events.append(ActorEvent(time.time(), kind, actor, detail))

    def actor_handles(self) -> dict[int, Any]:
        return {index: handle.actor for index, handle in self._actors.items()}

    def actor_stats(self, timeout: float = 30.0) -> dict[int, dict]:
        """Each live actor's ``RayEnvActor.stats()``."""
        handles = list(self._actors.values())
        stats = self.ray.get([h.actor.stats.remote() for h in handles], timeout=timeout)
        return {h.index: s for h, s in zip(handles, stats)}
