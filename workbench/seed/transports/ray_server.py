"""SEED's central inference server as a Ray async actor (the server half of the Ray transport).

``RayInferenceServer`` holds an ``server.InferenceServer``. ``infer`` is one actor's request: it is
validated (a malformed observation is that caller's error, nobody else's), appended to a pending
list, and awaits a future. A batching coroutine answers when ``max_batch_size`` requests wait, when
every active slot waits, or when ``timeout`` passed since the oldest arrived (the pattern of Ray
Serve's ``@serve.batch``), runs **one** ``InferenceServer.infer`` for the batch and resolves the
futures. Recurrent state stays on the server, one row per slot. It imports torch only inside the
actor: the module is also what env actors' processes load.
"""

from __future__ import annotations

import asyncio
import math
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.cluster import ensure_ray, node_strategy
from workbench.seed.env_actors import EPISODE_DONE, REJECTED, TRUNCATED, ServerStopped

__all__ = ["RayInferenceServer", "check_batching", "percentiles_ms"]


def check_batching(max_batch_size: Any, timeout: Any) -> None:
    if (
        not isinstance(max_batch_size, int)
        or isinstance(max_batch_size, bool)
        or max_batch_size < 1
    ):
        raise ValueError(f"max_batch_size must be a positive int, got {max_batch_size!r}")
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout >= 0):
        raise ValueError(f"timeout must be seconds >= 0, got {timeout!r}")


def percentiles_ms(values: Sequence[float], name: str) -> dict[str, float]:
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
    another process feeds them to its own listeners, e.g. ``assembler.TrajectoryAssembler``)."""

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
        policy: what to serve, picklable: a ``ServedPolicy`` (``server.SampledPolicy(model)``,
            ``server.RecurrentEpsilonGreedy``), an ``ActorCritic`` (served by ``SampledPolicy``), or
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

    def __init__(
        self,
        policy: Any,
        max_batch_size: int,
        timeout: float = 0.002,
        *,
        obs_shape: Sequence[int] | None = None,
        obs_dtype: Any = None,
        device: str = "cpu",
        torch_threads: int | None = 1,
        record_steps: int = 0,
    ) -> None:
        import torch

        from workbench.seed.server import InferenceServer, SampledPolicy

        check_batching(max_batch_size, timeout)
        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        if not hasattr(policy, "step") and not hasattr(policy, "act") and callable(policy):
            policy = policy()  # a factory
        if not hasattr(policy, "step") and hasattr(policy, "act"):
            policy = SampledPolicy(policy)
        if not (hasattr(policy, "step") and hasattr(policy, "initial_state")):
            raise TypeError(
                f"policy must be a ServedPolicy (step, initial_state), an ActorCritic or a "
                f"factory returning one, got {type(policy).__name__}"
            )
        self._recorder = _StepRecorder(record_steps) if record_steps else None
        self.server = InferenceServer(
            policy,
            max_batch_size,
            timeout,
            device=device,
            listeners=[self._recorder] if self._recorder else [],
        )
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
        self._transit: deque = deque(
            maxlen=100_000
        )  # request sent -> arrived, seconds (wall clocks)
        self._stopped: str | None = None  # the reason, once stopped
        self._error: str | None = None
        self._arrived: asyncio.Event | None = None
        self._batcher: asyncio.Task | None = None
        self._executor = None

    @classmethod
    def launch(
        cls,
        policy: Any,
        max_batch_size: int,
        timeout: float = 0.002,
        *,
        num_gpus: float = 0,
        node_id: str | None = None,
        max_concurrency: int = 10_000,
        **kwargs: Any,
    ) -> Any:
        """Start the server as a Ray actor and return its handle.

        It is pinned to ``node_id`` (default: this process's node, the learner's: SEED keeps
        inference and learning on one accelerator host) and asks for no CPU (placement, not CPU
        accounting, decides where it runs; a 2-core machine still fits the actors).
        ``max_concurrency`` bounds the ``infer`` calls it holds at once: at least one per env actor.
        """
        check_batching(max_batch_size, timeout)
        ray = ensure_ray()
        node_id = node_id or ray.get_runtime_context().get_node_id()
        return (
            ray.remote(cls)
            .options(
                num_cpus=0,
                num_gpus=num_gpus,
                max_concurrency=max_concurrency,
                max_restarts=0,
                scheduling_strategy=node_strategy(node_id),
            )
            .remote(policy, max_batch_size, timeout, **kwargs)
        )

    # -- slots -------------------------------------------------------------------------------------

    async def reset_slots(
        self, num_slots: int, obs_shape: Sequence[int] | None = None, obs_dtype: Any = None
    ) -> None:
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
        self._fail_pending(
            lambda r: r.slot in chosen, ServerStopped("this slot was given to a new actor")
        )
        if self._stopped is None:
            await self._run(self.server.restart, np.asarray(slots, dtype=np.int64))
        return [int(self._generation[s]) for s in slots]

    # -- requests ----------------------------------------------------------------------------------

    async def infer(
        self,
        slot: int,
        obs: np.ndarray,
        reward: float = 0.0,
        flags: int = 0,
        final_obs: np.ndarray | None = None,
        episode_return: float = 0.0,
        episode_length: int = 0,
        sent_at: float | None = None,
        generation: int | None = None,
    ) -> int:
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
            raise ServerStopped(
                f"slot {slot} belongs to generation {int(self._generation[slot])} now, not "
                f"{generation}: this actor was replaced"
            )
        obs = self._check_obs(obs, "observation")
        if final_obs is not None:
            final_obs = self._check_obs(final_obs, "final observation")
        if sent_at is not None:
            self._transit.append(max(time.time() - float(sent_at), 0.0))
        future = asyncio.get_running_loop().create_future()
        self._pending.append(
            _Request(
                slot,
                obs,
                float(reward),
                int(flags),
                final_obs,
                float(episode_return),
                int(episode_length),
                arrived,
                future,
            )
        )
        self._active.add(slot)
        self._arrived.set()
        return await future

    def _check_slot(self, slot: Any) -> int:
        if not isinstance(slot, (int, np.integer)) or not 0 <= int(slot) < len(self._generation):
            raise ValueError(
                f"slot {slot!r} is not served: slots are 0..{len(self._generation) - 1} "
                "(reset_slots(n) sets them; RayActors.start calls it)"
            )
        return int(slot)

    def _check_obs(self, obs: Any, what: str) -> np.ndarray:
        obs = np.asarray(obs)
        if self.obs_shape is None:
            return obs
        dtype = self.obs_dtype or obs.dtype
        if obs.shape != self.obs_shape or not np.can_cast(obs.dtype, dtype, casting="same_kind"):
            raise ValueError(
                f"malformed {what}: got {obs.dtype} {obs.shape}, the server serves {dtype} "
                f"{self.obs_shape} (one observation of one env); check the env id and its "
                "preprocessing options."
            )
        return obs.astype(dtype, copy=False)

    # -- batching ----------------------------------------------------------------------------------

    def _start_batcher(self) -> None:
        if self._batcher is None:  # here, not in __init__: the actor's event loop runs the calls
            from concurrent.futures import ThreadPoolExecutor

            self._arrived = asyncio.Event()
            self._executor = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="inference-forward"
            )
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
            batch = [r for r in self._pending[: self.server.max_batch_size] if not r.future.done()]
            del self._pending[: self.server.max_batch_size]
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
            np.array([r.slot for r in batch], dtype=np.int64),
            obs,
            np.array([r.reward for r in batch], dtype=np.float32),
            flags,
            final_obs=final_obs,
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
                    self._episodes.append(
                        (now, request.slot, request.episode_return, request.episode_length)
                    )
            if request.future.done():  # the caller went away
                continue
            if action == REJECTED:
                request.future.set_exception(
                    ValueError(
                        f"the inference server rejected the observation of slot {request.slot}: "
                        "it holds NaN or infinite values; check the environment's observations."
                    )
                )
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

    # -- what the run reads ------------------------------------------------------------------------

    async def stats(self) -> dict[str, float]:
        """``InferenceServer.stats()`` (queue wait from arrival here to the batch's start, forward
        time, batch sizes) with ``transit`` (request sent -> arrived) p50/p99, and counts."""
        out = self.server.stats()
        out.update(percentiles_ms(list(self._transit), "transit"))
        out.update(
            steps=float(self._steps),
            pending=float(len(self._pending)),
            active_slots=float(len(self._active)),
        )
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
        return {
            "steps": self._steps,
            "episodes": episodes,
            "error": self._error,
            "stopped": self._stopped,
        }

    async def take_steps(self) -> list[tuple[str, Any]]:
        """What the listeners saw since the last call, in order: ``("step", StepBatch)`` and
        ``("restart", slots)`` (needs ``record_steps``)."""
        if self._recorder is None:
            raise RuntimeError("this server keeps no steps; launch it with record_steps=N")
        items = self._recorder.items
        return [
            items.popleft() for _ in range(len(items))
        ]  # the forward thread may append meanwhile

    async def set_parameters(self, state: dict) -> None:
        """Load the learner's parameters into the served model, between forward passes."""
        model = getattr(self.server.policy, "model", None)
        if model is None:
            raise TypeError(
                f"{type(self.server.policy).__name__} has no .model to load parameters into"
            )

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
