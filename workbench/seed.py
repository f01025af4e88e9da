"""SEED RL (Espeholt et al. 2020, https://arxiv.org/abs/1910.06591): env-only actors, one central
inference server, and a learner that trains the very model the server acts with.

The pieces, in the order data flows:

1. actors step environments and send observations (``env_actors``; processes with
   ``inference.LocalActors``, in-process with ``inference.SerialActors``, Ray actors with
   ``inference_ray``);
2. the ``InferenceServer`` answers batches of them with one forward pass and keeps recurrent state;
3. its listeners: a :class:`TrajectoryAssembler` cuts each env's stream of steps into windows (the
   learner's unit: V-trace *unrolls* of ``T + 1`` rows, R2D2 *sequences* of ``burn_in +
   sequence_length`` rows with the recurrent state stored at their start), and an
   :class:`EpisodeLog` keeps returns;
4. the learner: ``algos.impala.IMPALA`` (V-trace) uses each unroll once, in order of arrival;
   ``algos.r2d2.R2D2`` puts sequences into a prioritized ``SequenceReplay`` with initial
   priorities, samples it, and writes back new priorities (Kapturowski et al. 2019).

:class:`Seed` runs the whole system from a :class:`SeedConfig`, in the calling thread (``train``) or
in the background (``start`` / ``stop``, for a live notebook panel), with actors added or removed
while it goes (``set_num_actors``). Each env slot of R2D2 gets its own epsilon, as Ape-X's actors
do (``apex.actor_epsilons``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import torch

from workbench.algos.impala import IMPALA, IMPALAConfig
from workbench.algos.r2d2 import R2D2, SEQUENCE_KEYS, STATE_KEYS, R2D2Config
from workbench.control import BackgroundTraining, RunSettings, Settings
from workbench.env_actors import EPISODE_DONE, FIRST, TERMINATED, TRUNCATED
from workbench.envs import env_spaces
from workbench.models import ActorCritic, RecurrentQNetwork
from workbench.inference import InferenceServer, LocalActors, SampledPolicy, SerialActors, StepBatch
from workbench.system import resolve_device

ALGORITHMS = ("vtrace", "r2d2")
TRANSPORTS = ("local", "serial")


# --------------------------------------------------------------------------------------------------
# Listeners: what the server's steps become


class TrajectoryAssembler:
    """Cut each env slot's steps into windows of ``length`` consecutive rows, one every ``period``.

    Row t of a window holds ``obs``, ``actions``, ``first`` (t starts an episode), the policy's
    extras (``logp``) at step t, then what followed the action: ``rewards``, ``terminated``,
    ``truncated`` and ``final_obs`` (the last observation of a truncated episode; the next row is
    already the next episode's first). The outcome of a window's last row is not known when it is
    emitted; that row only serves as the observation to bootstrap from. Windows overlap by
    ``length - period`` rows: V-trace unrolls by 1 (``length = T + 1``, ``period = T``), R2D2
    sequences by ``burn_in + overlap``. The recurrent state before row 0 is kept per window as
    ``state_names`` (R2D2's stored state).

    Windows wait in a thread-safe queue for ``take``; an env whose actor restarted starts over.
    """

    def __init__(self, num_slots: int, length: int, period: int, *,
                 state_names: tuple[str, ...] = ("state_h", "state_c"), max_queued: int = 100_000) -> None:
        if not 1 <= period <= length - 1:
            raise ValueError(f"windows need 1 <= period <= length - 1, got length {length}, period {period}")
        self.num_slots, self.length, self.period = num_slots, length, period
        self.state_names = state_names
        self._count = np.zeros(num_slots, dtype=np.int64)
        self._rows: dict[str, np.ndarray] = {}
        self._queue: deque = deque(maxlen=max_queued)
        self._ready = threading.Condition()
        self.windows_made = 0

    def _allocate(self, batch: StepBatch) -> None:
        def rows(example: np.ndarray, dtype: Any = None) -> np.ndarray:
            return np.zeros((self.num_slots, self.length, *example.shape[1:]), dtype=dtype or example.dtype)

        self._rows = {
            "obs": rows(batch.obs), "final_obs": rows(batch.obs), "actions": rows(batch.actions),
            "rewards": rows(batch.reward, np.float32), "terminated": rows(batch.flags, bool),
            "truncated": rows(batch.flags, bool), "first": rows(batch.flags, bool),
            **{key: rows(value) for key, value in batch.extras.items()},
        }
        if batch.state is not None:
            for name, part in zip(self.state_names, batch.state):
                self._rows[name] = rows(part)

    def on_step(self, batch: StepBatch) -> None:
        if not self._rows:
            self._allocate(batch)
        rows, slots = self._rows, batch.slots
        count = self._count[slots]
        # The request's reward and flags are the outcome of each env's previous row.
        has_previous = count > 0
        if has_previous.any():
            previous_slots, previous_rows = slots[has_previous], count[has_previous] - 1
            flags = batch.flags[has_previous]
            rows["rewards"][previous_slots, previous_rows] = batch.reward[has_previous]
            rows["terminated"][previous_slots, previous_rows] = (flags & TERMINATED) != 0
            truncated = (flags & TRUNCATED) != 0
            rows["truncated"][previous_slots, previous_rows] = truncated
            if truncated.any():
                rows["final_obs"][previous_slots[truncated], previous_rows[truncated]] = batch.final_obs[has_previous][truncated]
        rows["obs"][slots, count] = batch.obs
        rows["actions"][slots, count] = batch.actions
        rows["first"][slots, count] = (batch.flags & FIRST) != 0
        for key, value in batch.extras.items():
            rows[key][slots, count] = value
        if batch.state is not None:
            for name, part in zip(self.state_names, batch.state):
                rows[name][slots, count] = part
        count += 1
        self._count[slots] = count
        full = slots[count == self.length]
        if len(full):
            windows = []
            for slot in full.tolist():
                window = {key: value[slot].copy() for key, value in rows.items() if key not in self.state_names}
                for name in self.state_names:
                    if name in rows:
                        window[name] = rows[name][slot, 0].copy()
                window["slot"] = slot
                windows.append(window)
                keep = self.length - self.period
                for value in rows.values():
                    value[slot, :keep] = value[slot, self.period:]
                self._count[slot] = keep
            with self._ready:
                self._queue.extend(windows)
                self.windows_made += len(windows)
                self._ready.notify_all()

    def on_restart(self, slots: np.ndarray) -> None:
        self._count[np.asarray(slots, dtype=np.int64)] = 0

    @property
    def queued(self) -> int:
        return len(self._queue)

    def take(self, count: int, timeout: float | None = None) -> list[dict[str, np.ndarray]] | None:
        """``count`` windows, oldest first; None if they are not there within ``timeout`` seconds."""
        with self._ready:
            if not self._ready.wait_for(lambda: len(self._queue) >= count, timeout=timeout):
                return None
            return [self._queue.popleft() for _ in range(count)]


def stack_windows(windows: list[dict[str, np.ndarray]], time_major: bool = True) -> dict[str, np.ndarray]:
    """Windows -> one batch: per-row keys ``[L, B, ...]`` (time-major) or ``[B, L, ...]``; the
    stored state and ``slot`` ``[B, ...]``."""
    batch = {}
    for key in windows[0]:
        stacked = np.stack([w[key] for w in windows])
        per_row = stacked.ndim >= 2 and key not in ("state_h", "state_c", "slot")
        batch[key] = np.swapaxes(stacked, 0, 1) if (time_major and per_row) else stacked
    return batch


class EpisodeLog:
    """The raw returns of finished games, per env slot (from the requests' ``EPISODE_DONE``)."""

    def __init__(self, maxlen: int = 100) -> None:
        self.maxlen = maxlen
        self.per_slot: dict[int, deque] = {}
        self.recent: deque = deque(maxlen=maxlen)
        self.episodes = 0
        self._lock = threading.Lock()

    def on_step(self, batch: StepBatch) -> None:
        done = np.flatnonzero(batch.flags & EPISODE_DONE)
        if len(done) == 0:
            return
        with self._lock:
            for i in done.tolist():
                slot, value = int(batch.slots[i]), float(batch.episode_return[i])
                self.per_slot.setdefault(slot, deque(maxlen=self.maxlen)).append(value)
                self.recent.append(value)
                self.episodes += 1

    def on_restart(self, slots: np.ndarray) -> None:
        pass

    def mean(self, last: int = 20, slot: int | None = None, minimum: int = 1) -> float | None:
        """Mean of the last ``last`` returns (of ``slot``, or of every slot); None below ``minimum``."""
        with self._lock:
            values = list(self.recent if slot is None else self.per_slot.get(slot, ()))[-last:]
        return float(np.mean(values)) if len(values) >= minimum else None


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


# --------------------------------------------------------------------------------------------------
# The system


@dataclass
class SeedConfig:
    """One SEED run: environments, actors, the server's batching, the learner.

    ``learner`` is an ``IMPALAConfig`` (``algorithm="vtrace"``) or an ``R2D2Config``
    (``"r2d2"``); None takes its defaults."""

    env_id: str = "CartPole-v1"
    algorithm: str = "vtrace"
    num_actors: int = 4
    envs_per_actor: int = 1
    max_actors: int | None = None
    """The most actors ``set_num_actors`` may reach (default ``num_actors``)."""
    transport: str = "local"
    """``"local"``: env-only actor processes; ``"serial"``: the envs stepped in this thread
    (deterministic; the same server, listeners and learner)."""
    max_batch_size: int | None = None
    """Requests per forward pass (default: every env)."""
    timeout: float = 0.002
    """Seconds the oldest request waits for its batch to fill."""
    learner: Any = None
    model_options: dict = field(default_factory=dict)
    """Keyword arguments of the model (``ActorCritic`` or ``RecurrentQNetwork``)."""
    replay_ratio: float = 1.0
    """R2D2: sequences trained per sequence assembled, held from both sides: never more, and when
    the learner falls more than ``Seed.MAX_UPDATES_BEHIND`` updates behind, the actors wait for it
    (so env steps per update do not depend on the machine; SEED's learner runs free on its
    accelerator)."""
    min_replay_sequences: int = 64
    """R2D2: sequences in replay before the first update."""
    seed: int = 0
    learner_threads: int = 1
    actor_nice: int = 5
    """Niceness of actor processes, so that they cannot starve the server and the learner."""
    env_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS} (Ray: workbench.inference_ray), "
                             f"got {self.transport!r}")
        for name in ("num_actors", "envs_per_actor"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.max_actors is not None and self.max_actors < self.num_actors:
            raise ValueError(f"max_actors ({self.max_actors}) must be at least num_actors ({self.num_actors})")

    @property
    def slots(self) -> int:
        return (self.max_actors or self.num_actors) * self.envs_per_actor


def _learner_config(config: SeedConfig) -> Any:
    if config.algorithm == "vtrace":
        return config.learner or IMPALAConfig()
    return config.learner or R2D2Config()


class Seed(BackgroundTraining):
    """A SEED RL run: server + actors + learner, from a :class:`SeedConfig`.

    ``train(...)`` runs until a limit; ``start(...)``/``stop()`` run it in a background thread.
    ``metrics`` holds one row per ``log_interval``: env steps, learner updates, returns, steps/s,
    the server's batch size and latency percentiles; ``events`` the actors added, removed,
    restarted.

    Args:
        config: the run.
        device: where the model lives: the server's forward passes and the learner's updates
            (``"auto"``: the GPU when there is one).
    """

    run_name = "SEED"

    def __init__(self, config: SeedConfig, *, device: str = "cpu") -> None:
        self.config = config
        self.device = resolve_device(device)
        torch.manual_seed(config.seed)
        observation_space, action_space = env_spaces(config.env_id, **config.env_options)
        if not hasattr(action_space, "n"):
            raise ValueError(f"{config.env_id} has a continuous action space; SEED's V-trace and "
                             "R2D2 learners here act in discrete ones. Pick a discrete-action env.")
        self.obs_shape, self.num_actions = tuple(observation_space.shape), int(action_space.n)
        self.learner_config = _learner_config(config)
        self.lock = threading.Lock()
        self.episodes = EpisodeLog()
        if config.algorithm == "vtrace":
            self.model = ActorCritic(self.obs_shape, self.num_actions, **config.model_options).to(self.device)
            self.learner = IMPALA(self.model, self.learner_config, device=self.device, lock=self.lock)
            policy = SampledPolicy(self.model)
            length = self.learner_config.unroll_length + 1
            self.assembler = TrajectoryAssembler(config.slots, length, length - 1)
            self.replay = None
        else:
            # Reentrant: a learner that fell behind the replay ratio holds it through a whole
            # update (_learn_step), and R2D2.learn takes it again around the optimizer's step.
            self.lock = threading.RLock()
            self.model = RecurrentQNetwork(self.obs_shape, self.num_actions, **config.model_options).to(self.device)
            self.learner = R2D2(self.model, self.learner_config, device=self.device, seed=config.seed,
                                lock=self.lock)
            c = self.learner_config
            policy = RecurrentEpsilonGreedy(self.model, self._epsilons(config.num_actors))
            self.assembler = TrajectoryAssembler(config.slots, c.stored_length, c.stride)
            self.replay = self.learner.make_replay()
        self.policy = policy
        self.server = InferenceServer(policy, config.max_batch_size or config.slots, config.timeout,
                                      device=self.device, listeners=[self.assembler, self.episodes], lock=self.lock)
        self.settings = RunSettings(Settings(num_actors=config.num_actors, num_envs=config.slots,
                                             horizon=1, minibatch_size=1))
        self.metrics: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.status = "created"
        self.error: BaseException | None = None
        self.updates = 0
        self.sequences_added = 0
        self.num_actors = config.num_actors
        self._actors: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def _epsilons(self, num_actors: int) -> np.ndarray:
        """Per slot: actor i's envs share epsilon_i of ``apex.actor_epsilons(num_actors)``."""
        from workbench.apex import actor_epsilons

        per_actor = np.asarray(actor_epsilons(num_actors) + [1.0] * (self.config.slots // self.config.envs_per_actor - num_actors))
        return np.repeat(per_actor, self.config.envs_per_actor).astype(np.float32)

    @property
    def least_exploring_slot(self) -> int:
        """R2D2: the first env of the actor with the smallest epsilon."""
        return (self.num_actors - 1) * self.config.envs_per_actor

    # --- control ----------------------------------------------------------------------------------

    def set_num_actors(self, num_actors: int) -> None:
        """Ask for ``num_actors`` actors; the learner loop applies it at its next step."""
        limit = self.config.max_actors or self.config.num_actors
        if isinstance(num_actors, bool) or not isinstance(num_actors, int) or not 1 <= num_actors <= limit:
            raise ValueError(f"num_actors must be an int in [1, max_actors={limit}], got {num_actors!r}; "
                             "raise SeedConfig.max_actors for more.")
        if self.config.transport == "serial":
            raise ValueError("the serial transport steps a fixed set of envs; use transport='local' "
                             "to add or remove actors while the run goes.")
        self.settings.update(num_actors=num_actors)

    def actor_pids(self) -> list[int]:
        return self._actors.pids if isinstance(self._actors, LocalActors) else []

    # --- the learner loop -------------------------------------------------------------------------

    def train(self, *, max_env_steps: int | None = None, max_seconds: float | None = None,
              max_updates: int | None = None, target_return: float | None = None,
              log_interval: float = 1.0, on_row: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
        """Learn until ``max_env_steps``, ``max_seconds``, ``max_updates``, ``target_return`` (the
        row's ``target_metric``: V-trace, the last 20 episodes of every env; R2D2, the last 10 of
        the env exploring least), or ``stop()``. Returns the metric rows."""
        if max_env_steps is None and max_seconds is None and max_updates is None and target_return is None:
            raise ValueError("give train() a limit: max_env_steps, max_seconds, max_updates or "
                             "target_return (or use start() and stop()).")
        threads = torch.get_num_threads()
        torch.set_num_threads(self.config.learner_threads)
        self._stop.clear()
        self.status = "running"
        self._start_time = time.monotonic()
        self._last_row = {"time": 0.0, "env_steps": 0, "updates": 0}
        metrics: dict[str, float] = {}
        try:
            self._open()
            next_row = self._start_time + log_interval
            while not self._stop.is_set():
                self._apply_settings()
                metrics = self._learn_step() or metrics
                now = time.monotonic()
                done = ((max_updates is not None and self.updates >= max_updates)
                        or (max_seconds is not None and now - self._start_time >= max_seconds)
                        or (max_env_steps is not None and self.env_steps >= max_env_steps))
                if now >= next_row or done:
                    row = self._row(metrics)
                    next_row = now + log_interval
                    if on_row is not None:
                        on_row(row)
                    if target_return is not None and (row["target_metric"] or -np.inf) >= target_return:
                        done = True
                if done:
                    break
            self.status = "stopped" if self._stop.is_set() else "finished"
        except BaseException:
            self.status = "failed"
            raise
        finally:
            self._close()
            torch.set_num_threads(threads)
        return self.metrics

    @property
    def env_steps(self) -> int:
        return 0 if self._actors is None else self._actors.steps + self._steps_before

    def _open(self) -> None:
        c = self.config
        self._steps_before = getattr(self, "_steps_total", 0)
        if c.transport == "serial":
            self._actors = SerialActors(self.server, c.env_id, c.num_actors * c.envs_per_actor, seed=c.seed,
                                        env_options=c.env_options)
        else:
            self._actors = LocalActors(self.server, c.env_id, self.num_actors, envs_per_actor=c.envs_per_actor,
                                       max_actors=c.max_actors, seed=c.seed, env_options=c.env_options,
                                       nice=c.actor_nice).start()

    def _close(self) -> None:
        if self._actors is not None:
            self._steps_total = self.env_steps
            if isinstance(self._actors, LocalActors):
                self._actors.stop()
            else:
                self._actors.close()

    def _apply_settings(self) -> None:
        change = self.settings.take_changes(self.updates)
        if change is None:
            return
        settings, _ = change
        old = self.num_actors
        if isinstance(self._actors, LocalActors):
            self._actors.set_num_actors(settings.num_actors)
        self.num_actors = settings.num_actors
        if isinstance(self.policy, RecurrentEpsilonGreedy):
            self.policy.epsilons = torch.as_tensor(self._epsilons(self.num_actors))
        self.events.append({"event": "actors", "time": time.monotonic() - self._start_time,
                            "updates": self.updates, "old": old, "new": self.num_actors})

    def _windows(self, count: int) -> list[dict[str, np.ndarray]] | None:
        if isinstance(self._actors, SerialActors):
            while self.assembler.queued < count:
                self._actors.step()
            return self.assembler.take(count)
        self._actors.check()
        return self.assembler.take(count, timeout=0.05)

    def _learn_step(self) -> dict[str, float] | None:
        if self.config.algorithm == "vtrace":
            windows = self._windows(self.learner_config.batch_size)
            if windows is None:
                return None
            return self.learner.learn(stack_windows(windows))
        # R2D2: new sequences go to replay with initial priorities; learn as the replay ratio allows.
        c = self.learner_config
        serial = isinstance(self._actors, SerialActors)
        if not serial:
            self._actors.check()
        owed = self._updates_owed()
        queued = self.assembler.queued
        fresh = (self.assembler.take(queued) if queued else None) if (serial or owed) \
            else self.assembler.take(max(1, queued), timeout=0.05)
        if fresh:
            priorities = self.learner.sequence_priorities(stack_windows(fresh))
            stored = stack_windows(fresh, time_major=False)
            self.replay.add({k: v for k, v in stored.items() if k in SEQUENCE_KEYS + STATE_KEYS}, priorities)
            self.sequences_added += len(fresh)
        owed = self._updates_owed()
        if not owed:
            if serial:
                self._actors.step()
            return None
        sample, indices, weights = self.replay.sample(c.batch_size)
        # The ratio from below too (a rate limiter, as Reverb's SampleToInsertRatio): a learner more
        # than MAX_UPDATES_BEHIND updates behind holds the server's lock through its update, so the
        # actors wait for it. Env steps per update then stay near 1 / replay_ratio on any machine,
        # as with the serial transport, instead of growing as the learner's share of the CPU shrinks.
        with self.lock if owed > self.MAX_UPDATES_BEHIND else contextlib.nullcontext():
            metrics, priorities = self.learner.learn(sample, weights)
        self.replay.update_priorities(indices, priorities)
        self.updates += 1
        return metrics

    MAX_UPDATES_BEHIND = 2
    """R2D2: updates the learner may owe (by ``replay_ratio``) before the actors wait for it."""

    def _updates_owed(self) -> int:
        """R2D2: updates the replay ratio allows that the learner has not made (0 until the replay
        holds ``min_replay_sequences``)."""
        batch_size = self.learner_config.batch_size
        if len(self.replay) < max(self.config.min_replay_sequences, batch_size):
            return 0
        return max(0, int(self.config.replay_ratio * self.sequences_added) // batch_size - self.updates)

    def _row(self, learner_metrics: dict[str, float]) -> dict[str, Any]:
        if self.config.algorithm == "vtrace":
            self.updates = self.learner.updates
        now = time.monotonic()
        elapsed = max(now - self._start_time - self._last_row["time"], 1e-9)
        env_steps = self.env_steps
        stats = self.server.stats()
        least = self.episodes.mean(10, slot=self.least_exploring_slot, minimum=5)
        everyone = self.episodes.mean(20)
        row = {
            "time": now - self._start_time,
            "env_steps": env_steps,
            "updates": self.updates,
            "num_actors": self.num_actors,
            "episodes": self.episodes.episodes,
            "return": everyone,
            "return_least_exploring": least,
            "target_metric": everyone if self.config.algorithm == "vtrace" else least,
            "steps_per_second": (env_steps - self._last_row["env_steps"]) / elapsed,
            "updates_per_second": (self.updates - self._last_row["updates"]) / elapsed,
            "mean_batch_size": stats.get("mean_batch_size"),
            "latency_p50_ms": stats.get("latency_p50_ms"),
            "latency_p99_ms": stats.get("latency_p99_ms"),
            "windows": self.assembler.windows_made,
            "replay_size": len(self.replay) if self.replay is not None else None,
            **learner_metrics,
        }
        self.server.latency.reset()  # each row's percentiles are its own interval's
        self._last_row = row
        self.metrics.append(row)
        return row


# --------------------------------------------------------------------------------------------------
# Recipes: SEED runs with a stated target, for tests and benchmarks/learning.py


@dataclass
class SeedRecipe:
    """A SEED run with its target, in the shape of ``recipes.Recipe`` (``benchmarks/learning.py``
    runs both). ``total_steps`` is the env-step budget; the target is met by the rows'
    ``target_metric`` (V-trace: the last 20 episodes of every env; R2D2: the last 10 of the env
    exploring least)."""

    name: str
    config: SeedConfig
    target_return: float
    total_steps: int
    note: str = ""
    torch_threads: int = 1
    device: str = "cpu"
    sampler = "seed"

    @property
    def algorithm(self) -> type:
        return Seed

    @property
    def env_id(self) -> str:
        return self.config.env_id

    @property
    def num_workers(self) -> int:
        return self.config.num_actors

    @property
    def num_envs(self) -> int:
        return self.config.num_actors * self.config.envs_per_actor

    @property
    def horizon(self) -> int:
        learner = _learner_config(self.config)
        return learner.unroll_length if self.config.algorithm == "vtrace" else learner.stored_length

    def run(self, seed: int, *, max_seconds: float | None = None,
            on_update: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Train until the target, the env-step budget or ``max_seconds``; returns
        ``steps_to_target`` (None if not reached), ``stopped`` and the run's metric rows."""
        run = Seed(replace(self.config, seed=seed), device=self.device)
        curve: list[dict[str, Any]] = []

        def row(r: dict[str, Any]) -> None:
            point = {"env_steps": r["env_steps"], "seconds": r["time"], "mean_return": r["target_metric"],
                     "episodes": r["episodes"], "learner_updates": r["updates"]}
            curve.append(point)
            if on_update is not None:
                on_update(point)

        rows = run.train(max_env_steps=self.total_steps, max_seconds=max_seconds,
                         target_return=self.target_return, on_row=row)
        reached = next((r["env_steps"] for r in rows
                        if r["target_metric"] is not None and r["target_metric"] >= self.target_return), None)
        stopped = ("target" if reached is not None else
                   "budget" if run.env_steps >= self.total_steps else "time")
        return {"steps_to_target": reached, "stopped": stopped, "rows": rows, "curve": curve,
                "final_return": rows[-1]["target_metric"] if rows else None}


def _vtrace_cartpole() -> SeedConfig:
    return SeedConfig(
        env_id="CartPole-v1", algorithm="vtrace", num_actors=4,
        # Short unrolls and small batches: many updates per env step, which CartPole needs.
        learner=IMPALAConfig(learning_rate=1e-3, batch_size=8, unroll_length=5, baseline_cost=0.25,
                             entropy_cost=0.0),
    )


def _r2d2_cartpole_no_velocity() -> SeedConfig:
    return SeedConfig(
        env_id="workbench/CartPoleNoVelocity-v1", algorithm="r2d2", num_actors=4,
        # Short sequences: the hidden velocities are differences of consecutive observations, so a
        # 5-step burn-in rebuilds a useful state and 20 trained rows (a new sequence every 10 steps)
        # hold far more memory than the task needs; R2D2's 40/80/40 suit Atari, and would cost 4x
        # per update here. Adam's eps at 1e-6, not R2D2's 1e-3: with the rescaled values' small
        # gradients, 1e-3 damps lr 1e-3 and learning takes about twice the updates.
        learner=R2D2Config(burn_in=5, sequence_length=20, overlap=10, n_step=5, gamma=0.99, batch_size=32,
                           learning_rate=1e-3, adam_eps=1e-6, target_update_interval=100,
                           replay_capacity=5000),
        # 16 sequences trained per sequence assembled: 32 trained rows per env step (DQN's CartPole
        # recipe: 32 transitions per step); fewer reach 300 in as many updates but twice the steps.
        min_replay_sequences=64, replay_ratio=16.0,
    )


def _vtrace_pong() -> SeedConfig:
    return SeedConfig(
        env_id="ALE/Pong-v5", algorithm="vtrace", num_actors=16, max_batch_size=16, timeout=0.005,
        learner=IMPALAConfig(learning_rate=6e-4, batch_size=16, unroll_length=20, entropy_cost=0.01),
    )


SEED_RECIPES: dict[str, SeedRecipe] = {
    recipe.name: recipe
    for recipe in (
        SeedRecipe("seed-vtrace-cartpole", _vtrace_cartpole(), target_return=475.0, total_steps=300_000,
                   note="4 env-only actors through the central server; IMPALA learner (V-trace)"),
        SeedRecipe("seed-r2d2-cartpole-novelocity", _r2d2_cartpole_no_velocity(), target_return=300.0,
                   total_steps=80_000,
                   note="velocities hidden: a feed-forward DQN cannot tell where the pole goes; "
                        "seen: 30k-40k steps, serial seeds 0-4 (1500-2000 updates)"),
        SeedRecipe("seed-vtrace-pong", _vtrace_pong(), target_return=18.0, total_steps=50_000_000,
                   note="needs a GPU to finish in hours; 16 env-only actors", device="auto"),
    )
}
