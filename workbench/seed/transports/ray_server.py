"""SEED's central inference server as a Ray async actor (the server half of the Ray transport).

``RayInferenceServer`` holds an ``server.InferenceServer``. ``infer`` is one actor's request for its
block of envs (one slot each): it is validated (a malformed observation is that caller's error,
nobody else's), appended to a pending list, and awaits a future. A batching coroutine answers when
``max_batch_size`` env steps wait, when every active slot waits, or when ``timeout`` passed since
the oldest arrived (the pattern of Ray Serve's ``@serve.batch``), runs **one**
``InferenceServer.infer`` for the batch and resolves the futures. Recurrent state stays on the
server, one row per slot. It imports torch only inside the actor: the module is also what env
actors' processes load. ``transports.ray_learner`` adds SEED's learner to the same actor.
"""

from __future__ import annotations

import asyncio
import os
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from workbench.checks import positive_int
from workbench.cluster import ensure_ray, node_strategy
from workbench.seed.env_actors import EPISODE_DONE, REJECTED, TRUNCATED, ServerStopped
from workbench.seed.transports.batching import (
    Request,
    StepRecorder,
    check_batching,
    percentiles_ms,
)

__all__ = ["RayInferenceServer"]


class RayInferenceServer:
    """SEED's central inference server as a Ray async actor (start one with :meth:`launch`).

    Args:
        policy: what to serve, picklable: a ``ServedPolicy`` (``server.SampledPolicy(model)``,
            ``server.RecurrentEpsilonGreedy``), an ``ActorCritic`` (served by ``SampledPolicy``), or
            a zero-argument callable that builds one inside the actor (a factory: nothing large
            crosses the network). None when ``server`` is given.
        max_batch_size: the most env steps answered by one forward pass.
        timeout: seconds the oldest pending request may wait for its batch to fill.
        obs_shape / obs_dtype: one observation's shape and dtype; requests that do not match get
            a ``ValueError``. ``RayActors.start`` sets them from the env (``reset_slots``).
        device: where the forward pass runs (``"auto"``: the actor's GPU when it has one).
        torch_threads: torch's intra-op threads in this actor (None: torch's default).
        record_steps: keep each answered batch (``StepBatch``) and each restart for ``take_steps``,
            at most this many (0: keep none).
        server: an ``InferenceServer`` built inside the actor to serve instead (the learner's
            actor passes its own: ``ray_learner``); its batching settings win.

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
        max_batch_size: int | None = None,
        timeout: float = 0.002,
        *,
        obs_shape: Sequence[int] | None = None,
        obs_dtype: Any = None,
        device: str = "cpu",
        torch_threads: int | None = 1,
        record_steps: int = 0,
        server: Any = None,
    ) -> None:
        import torch

        from workbench.seed.server import InferenceServer, SampledPolicy

        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        self._recorder = StepRecorder(record_steps) if record_steps else None
        if server is None:
            check_batching(max_batch_size, timeout)
            if not hasattr(policy, "step") and not hasattr(policy, "act") and callable(policy):
                policy = policy()  # a factory
            if not hasattr(policy, "step") and hasattr(policy, "act"):
                policy = SampledPolicy(policy)
            if not (hasattr(policy, "step") and hasattr(policy, "initial_state")):
                raise TypeError(
                    f"policy must be a ServedPolicy (step, initial_state), an ActorCritic or a "
                    f"factory returning one, got {type(policy).__name__}"
                )
            server = InferenceServer(policy, max_batch_size, timeout, device=device)
            model = getattr(policy, "model", None)
            if isinstance(model, torch.nn.Module):
                model.to(server.device)
        if self._recorder is not None:
            server.listeners.append(self._recorder)
        self.server = server
        self.obs_shape = None if obs_shape is None else tuple(int(d) for d in obs_shape)
        self.obs_dtype = None if obs_dtype is None else np.dtype(obs_dtype)
        self._pending: list[Request] = []
        self._generation = np.zeros(0, dtype=np.int64)
        self._active = np.zeros(0, dtype=bool)  # slots whose actor sent a request since its start
        self._steps = 0
        self._episodes: list[tuple[float, int, float, int]] = []
        self._transit: deque = deque(maxlen=100_000)  # request sent -> arrived (wall clocks)
        self._stopped: str | None = None  # the reason, once stopped
        self._error: str | None = None
        self._arrived: asyncio.Event | None = None
        self._batcher: asyncio.Task | None = None
        self._executor = None

    @classmethod
    def launch(
        cls,
        policy: Any,
        max_batch_size: int | None = None,
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
        if kwargs.get("server") is None and policy is not None:
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
        """Serve ``num_slots`` slots (one per env), all with zero recurrent state; set the
        observation spec that requests are checked against."""
        positive_int(num_slots, "num_slots")
        if obs_shape is not None:
            self.obs_shape = tuple(int(d) for d in obs_shape)
        if obs_dtype is not None:
            self.obs_dtype = np.dtype(obs_dtype)
        self._fail_pending(lambda r: True, ServerStopped("the server's slots were reset"))
        await self._run(self.server.reset_slots, num_slots)
        self._generation = np.zeros(num_slots, dtype=np.int64)
        self._active = np.zeros(num_slots, dtype=bool)

    async def restart(self, slots: Sequence[int]) -> list[int]:
        """These slots get a new actor (or none): a new generation each, their pending requests
        refused (``ServerStopped``), their recurrent state zeroed, the listeners told. Returns the
        new generations, which the new actor passes with each request."""
        slots = [self._check_slot(s) for s in slots]
        self._generation[slots] += 1
        self._active[slots] = False
        chosen = set(slots)
        self._fail_pending(
            lambda r: bool(chosen.intersection(r.slots.tolist())),
            ServerStopped("this slot was given to a new actor"),
        )
        if self._stopped is None:
            await self._run(self.server.restart, np.asarray(slots, dtype=np.int64))
        return [int(self._generation[s]) for s in slots]

    # -- requests ----------------------------------------------------------------------------------

    async def infer(
        self,
        slot: int,
        obs: np.ndarray,
        reward: Any = 0.0,
        flags: Any = 0,
        final_obs: np.ndarray | None = None,
        episode_return: Any = 0.0,
        episode_length: Any = 0,
        sent_at: float | None = None,
        generation: int | None = None,
    ) -> np.ndarray:
        """One actor's request for its ``n`` envs in slots ``slot .. slot + n - 1`` -> their
        actions (int64 ``[n]``).

        ``obs``: ``[n, *obs_shape]``; ``reward`` and ``flags`` (``env_actors``) ``[n]``: the
        outcome of each env's previous action; ``final_obs``: ``[n, *obs_shape]``, read for rows
        with ``flags & TRUNCATED`` (the episode's last observation), or None; ``episode_return`` /
        ``episode_length`` ``[n]``: the finished episodes' for rows with ``flags & EPISODE_DONE``;
        ``sent_at``: the caller's ``time.time()`` (the transit time is kept as a statistic: across
        machines it is only as good as their clocks' agreement); ``generation``: the caller's, from
        ``restart`` (None: not checked).

        Raises ``ValueError`` for observations of the wrong shape or dtype, or holding NaN or
        infinite values (only this caller's request fails), and ``ServerStopped`` when the server
        stopped or these slots were given to a newer actor.
        """
        arrived = time.perf_counter()
        self._start_batcher()
        if self._stopped is not None:
            raise ServerStopped(self._stopped)
        obs = self._check_obs(obs, "observations")
        n = len(obs)
        first = self._check_slot(slot)
        slots = np.arange(first, first + n, dtype=np.int64)
        self._check_slot(first + n - 1)
        if generation is not None and (self._generation[slots] != generation).any():
            raise ServerStopped(
                f"slot {first} belongs to generation {int(self._generation[first])} now, not "
                f"{generation}: this actor was replaced"
            )
        if final_obs is not None:
            final_obs = self._check_obs(final_obs, "final observations", rows=n)
        if sent_at is not None:
            self._transit.append(max(time.time() - float(sent_at), 0.0))
        future = asyncio.get_running_loop().create_future()
        self._pending.append(
            Request(
                slots,
                obs,
                np.broadcast_to(np.asarray(reward, dtype=np.float32), n),
                np.broadcast_to(np.asarray(flags, dtype=np.uint8), n),
                final_obs,
                np.broadcast_to(np.asarray(episode_return, dtype=np.float64), n),
                np.broadcast_to(np.asarray(episode_length, dtype=np.int64), n),
                arrived,
                future,
            )
        )
        self._active[slots] = True
        self._arrived.set()
        return await future

    def _check_slot(self, slot: Any) -> int:
        if not isinstance(slot, (int, np.integer)) or not 0 <= int(slot) < len(self._generation):
            raise ValueError(
                f"slot {slot!r} is not served: slots are 0..{len(self._generation) - 1} "
                "(reset_slots(n) sets them; RayActors.start calls it)"
            )
        return int(slot)

    def _check_obs(self, obs: Any, what: str, rows: int | None = None) -> np.ndarray:
        obs = np.asarray(obs)
        if self.obs_shape is None:
            return obs
        dtype = self.obs_dtype or obs.dtype
        shape_ok = obs.ndim == len(self.obs_shape) + 1 and obs.shape[1:] == self.obs_shape
        if (
            not shape_ok
            or len(obs) == 0
            or (rows is not None and len(obs) != rows)
            or not np.can_cast(obs.dtype, dtype, casting="same_kind")
        ):
            raise ValueError(
                f"malformed {what}: got {obs.dtype} {obs.shape}, the server serves {dtype} "
                f"[n, *{self.obs_shape}] (one row per env of the calling actor); check the env "
                "id and its preprocessing options."
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
        return max(1, min(self.server.max_batch_size, int(self._active.sum())))

    def _take_batch(self) -> list[Request]:
        """Whole requests from the oldest on, up to ``max_batch_size`` env steps (at least one
        request, even when it alone is larger)."""
        rows, count = 0, 0
        for request in self._pending:
            if count and rows + len(request.slots) > self.server.max_batch_size:
                break
            rows, count = rows + len(request.slots), count + 1
        batch, self._pending = self._pending[:count], self._pending[count:]
        return [r for r in batch if not r.future.done()]

    async def _batch_loop(self) -> None:
        timeout = self.server.timeout
        while self._stopped is None:
            if not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
                continue
            oldest = self._pending[0].arrived
            while (
                self._stopped is None
                and sum(len(r.slots) for r in self._pending) < self._full_size()
            ):
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
            batch = self._take_batch()
            if not batch:
                continue
            try:
                actions = await self._run(self._forward, batch)
            except Exception as error:  # a policy bug: every caller learns it, serving ends
                self.fail(f"the inference server failed: {error!r}\n{traceback.format_exc()}")
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(ServerStopped(self._error))
                break
            self._answer(batch, actions)

    def _forward(self, batch: list[Request]) -> np.ndarray:
        """One ``InferenceServer.infer`` for the batch (on the forward thread)."""
        flags = np.concatenate([r.flags for r in batch])
        obs = np.concatenate([r.obs for r in batch])
        final_obs = None
        if (flags & TRUNCATED).any():
            final_obs = np.concatenate(
                [r.obs if r.final_obs is None else r.final_obs for r in batch]
            )
        return self.server.infer(
            np.concatenate([r.slots for r in batch]),
            obs,
            np.concatenate([r.reward for r in batch]),
            flags,
            final_obs=final_obs,
            episode_return=np.concatenate([r.episode_return for r in batch]),
            episode_length=np.concatenate([r.episode_length for r in batch]),
            sent_at=np.concatenate([np.full(len(r.slots), r.arrived) for r in batch]),
        )

    def _answer(self, batch: list[Request], actions: np.ndarray) -> None:
        now, start = time.time(), 0
        for request in batch:
            n = len(request.slots)
            answer, start = actions[start : start + n], start + n
            served = answer != REJECTED
            self._steps += int(served.sum())
            for i in np.flatnonzero(served & (request.flags & EPISODE_DONE != 0)):
                self._episodes.append(
                    (
                        now,
                        int(request.slots[i]),
                        float(request.episode_return[i]),
                        int(request.episode_length[i]),
                    )
                )
            if request.future.done():  # the caller went away
                continue
            if not served.all():
                bad = int(request.slots[np.flatnonzero(~served)[0]])
                request.future.set_exception(
                    ValueError(
                        f"the inference server rejected the observation of slot {bad}: it holds "
                        "NaN or infinite values; check the environment's observations."
                    )
                )
            else:
                request.future.set_result(answer)

    def _fail_pending(self, which: Callable[[Request], bool], error: Exception) -> None:
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
            pending=float(sum(len(r.slots) for r in self._pending)),
            active_slots=float(self._active.sum()),
        )
        if self._recorder is not None:
            out["recorded_dropped"] = float(self._recorder.dropped)  # record_steps was too small
        return out

    async def pid(self) -> int:
        """This server's process id (``cluster.end_killed_actors`` waits for it to end)."""
        return os.getpid()

    async def reset_stats(self) -> None:
        """Start the latency percentiles and batch sizes of ``stats`` afresh (a measured window)."""
        self.server.latency.reset()
        self._transit.clear()

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
        """What the server answered since the last call, in order: ``("step", StepBatch)`` and
        ``("restart", slots)`` (needs ``record_steps``)."""
        if self._recorder is None:
            raise RuntimeError("this server keeps no steps; launch it with record_steps=N")
        items = self._recorder.items
        # The forward thread may append meanwhile: take only what is there now.
        return [items.popleft() for _ in range(len(items))]

    async def stop(self, reason: str = "the inference server stopped") -> None:
        """Refuse every waiting and every later request with ``ServerStopped`` (actors exit their
        loops cleanly); a batch in flight is still answered."""
        self._stop(reason)

    @property
    def stopped(self) -> str | None:
        """Why serving stopped, or None while it serves."""
        return self._stopped

    def fail(self, reason: str) -> None:
        """Serving failed for ``reason``: stop, and report it (``progress()["error"]``)."""
        self._error = reason
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
