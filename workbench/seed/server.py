"""The central inference server of SEED RL (Espeholt et al. 2020, https://arxiv.org/abs/1910.06591).

In IMPALA every actor runs its own copy of the policy on its own CPU. SEED moves inference to the
learner's accelerator: actors only step environments (``env_actors``), send each observation to one
server, and get an action back. The server gathers requests until its batch is full or a timeout
passes, runs **one forward pass** for all of them, and answers (Sec. 3, Fig. 2). Recurrent state
stays on the server, one row per env slot, reset when an episode starts, so actors never hold
parameters or state. What each step produced (observation, action, log-probability, the state
before it) goes to listeners that assemble trajectories for the learner (``assembler``).

``InferenceServer`` is the batching core: ``infer`` answers one gathered batch and records per
request the queue wait (request sent -> batch starts) and the forward time; ``stats`` gives their
p50/p99 and the batch sizes reached. The transports (``transports``: serial, local processes, Ray)
gather the requests and call it. Policies it can run follow ``ServedPolicy``: ``SampledPolicy``
serves an ``ActorCritic`` (V-trace), ``RecurrentEpsilonGreedy`` an R2D2 ``RecurrentQNetwork``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from workbench.checks import positive_int
from workbench.seed.env_actors import FIRST, REJECTED
from workbench.system import resolve_device

__all__ = [
    "Backpressure",
    "InferenceServer",
    "LatencyStats",
    "RecurrentEpsilonGreedy",
    "SampledPolicy",
    "ServedPolicy",
    "StepBatch",
    "StepListener",
]


State = "tuple[torch.Tensor, ...] | None"


class ServedPolicy(Protocol):
    """What the server runs: one batched step over the envs whose requests it gathered."""

    def initial_state(
        self, batch_size: int, device: torch.device
    ) -> "tuple[torch.Tensor, ...] | None":
        """Zero recurrent state for ``batch_size`` envs (each ``[N, ...]``), or None
        (feed-forward)."""

    def step(
        self,
        obs: torch.Tensor,
        state: "tuple[torch.Tensor, ...] | None",
        first: torch.Tensor,
        slots: torch.Tensor,
    ) -> "tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, dict[str, torch.Tensor]]":
        """``obs [N, *obs_shape]``, the state of those envs, ``first`` bool ``[N]`` (already applied
        to the state), their ``slots`` ``[N]`` -> (int actions ``[N]``, new state, extras
        ``[N, ...]``)."""


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
    """Per-request queue wait and forward time, and batch sizes, over the last ``window``
    requests."""

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
        for name, values in (
            ("queue_wait", wait),
            ("forward", forward),
            ("latency", wait + forward),
        ):
            p50, p99 = np.percentile(values, [50, 99]) * 1000.0
            out[f"{name}_p50_ms"], out[f"{name}_p99_ms"] = float(p50), float(p99)
        out["mean_batch_size"] = float(sizes.mean())
        out["max_batch_size_reached"] = float(sizes.max())
        return out


class Backpressure:
    """Actors wait for a learner that falls behind: the server asks before each forward pass.

    ``ready()`` says whether the learner keeps up (R2D2: its ``RateLimiter`` admits the sequences
    already queued). While it does not, ``wait`` holds the server (and so every actor waiting for
    an answer) *outside* the server's lock, so the learner trains meanwhile with the forward pass
    free to run the moment it catches up (``notify``), as Reverb's rate limiter blocks an insert
    without stopping the sampler. Two bounds keep a wait from becoming a hang: a call from the
    learner's own thread never waits (the serial transport steps the envs there, and the learner
    could not catch up while it waits), and no wait lasts more than ``max_wait`` seconds (a
    stopping run, or a learner writing a checkpoint, lets one batch through per ``max_wait``).
    """

    def __init__(self, ready: "Callable[[], bool]", max_wait: float = 1.0) -> None:
        self.ready = ready
        self.max_wait = float(max_wait)
        self.learner_thread: int | None = None
        """The thread that notifies (set by ``notify``): it never waits on itself."""
        self.waited_seconds = 0.0
        """Seconds the server spent waiting, since the run started."""
        self._changed = threading.Condition()

    def wait(self) -> None:
        """Return once ``ready()``, or after ``max_wait`` seconds."""
        if self.ready() or threading.get_ident() == self.learner_thread:
            return
        started = time.monotonic()
        deadline = started + self.max_wait
        with self._changed:
            while not self.ready():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
        self.waited_seconds += time.monotonic() - started

    def notify(self) -> None:
        """The learner moved on (trained a batch): a waiting server checks ``ready()`` again."""
        self.learner_thread = threading.get_ident()
        with self._changed:
            self._changed.notify_all()


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
        backpressure: asked before each forward pass, outside the lock: while the learner falls
            behind, the server (and the actors it answers) waits for it.
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
        backpressure: Backpressure | None = None,
    ) -> None:
        positive_int(max_batch_size, "max_batch_size")
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout >= 0):
            raise ValueError(f"timeout must be seconds >= 0, got {timeout!r}")
        self.policy = policy
        self.max_batch_size = max_batch_size
        self.timeout = float(timeout)
        self.device = resolve_device(device)
        model = getattr(policy, "model", None)
        served_on = next(iter(model.parameters()), None) if model is not None else None
        if served_on is not None and served_on.device.type != self.device.type:
            raise ValueError(
                f"the policy's model is on {served_on.device} and the server on {self.device}: "
                f"move the model first (model.to({str(self.device)!r})) or serve it on "
                f"device={str(served_on.device)!r}."
            )
        self.listeners = list(listeners)
        self.lock = lock or threading.Lock()
        self.backpressure = backpressure
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
        if self.backpressure is not None:
            self.backpressure.wait()  # before the clock: it counts in each request's queue wait
        started = time.perf_counter()
        slots = np.asarray(slots, dtype=np.int64)
        if self.num_slots == 0 or (len(slots) and slots.max() >= self.num_slots):
            raise ValueError(
                f"slot {int(slots.max()) if len(slots) else 0} is not served; call "
                f"reset_slots(n) with n > every slot first (now {self.num_slots})"
            )
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
                    state = tuple(
                        part[slots_t]
                        * (~first_t).view(-1, *([1] * (part.dim() - 1))).to(part.dtype)
                        for part in self._state
                    )
                chosen, new_state, extras = self.policy.step(obs_t, state, first_t, slots_t)
                if new_state is not None:
                    for part, new in zip(self._state, new_state):
                        part[slots_t] = new
            chosen = chosen.cpu().numpy()
            actions[good] = chosen
            if self.listeners:
                batch = StepBatch(
                    slots=slots,
                    obs=obs,
                    reward=np.asarray(reward, dtype=np.float32),
                    flags=flags,
                    final_obs=obs if final_obs is None else final_obs,
                    episode_return=or_zeros(episode_return, len(slots), np.float64),
                    episode_length=or_zeros(episode_length, len(slots), np.int64),
                    actions=chosen,
                    extras={k: v.cpu().numpy() for k, v in extras.items()},
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


def or_zeros(values: np.ndarray | None, n: int, dtype: type) -> np.ndarray:
    """``values``, or ``n`` zeros where a transport sent none."""
    return np.zeros(n, dtype) if values is None else values


class RecurrentEpsilonGreedy:
    """Serve an R2D2 ``RecurrentQNetwork``: epsilon-greedy on Q with a different epsilon per slot
    (``epsilons[slot]``, Ape-X's ``epsilon_i``; Kapturowski et al. 2019, Sec. 2)."""

    def __init__(self, model: torch.nn.Module, epsilons: np.ndarray) -> None:
        self.model = model
        self.epsilons = torch.as_tensor(np.asarray(epsilons, dtype=np.float32))

    def initial_state(self, batch_size: int, device: torch.device):
        return self.model.initial_state(batch_size, device)

    def step(self, obs, state, first, slots):
        epsilon = self.epsilons.to(obs.device)[slots]
        actions, new_state = self.model.act(obs, state, first, epsilon)
        return actions, new_state, {}
