"""What the server's steps become: windows for the learner, and the returns of finished games.

``TrajectoryAssembler`` cuts each env slot's stream of steps into the learner's unit: V-trace
*unrolls* of ``T + 1`` rows (IMPALA), R2D2 *sequences* of ``burn_in + sequence_length + 1`` rows
with the recurrent state stored at their start (Kapturowski et al. 2019, Sec. 3). ``EpisodeLog``
keeps the raw returns of finished games per slot. Both are listeners of the ``InferenceServer``.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

import numpy as np

from workbench.seed.env_actors import EPISODE_DONE, FIRST, TERMINATED, TRUNCATED
from workbench.seed.server import StepBatch

__all__ = ["EpisodeLog", "TrajectoryAssembler", "stack_windows"]


class TrajectoryAssembler:
    """Cut each env slot's steps into windows of ``length`` consecutive rows, one every ``period``.

    Row t of a window holds ``obs``, ``actions``, ``first`` (t starts an episode), the policy's
    extras (``logp``) at step t, then what followed the action: ``rewards``, ``terminated``,
    ``truncated`` and ``final_obs`` (the last observation of a truncated episode; the next row is
    already the next episode's first). The outcome of a window's last row is not known when it is
    emitted; that row only serves as the observation to bootstrap from. Windows overlap by
    ``length - period`` rows: V-trace unrolls by 1 (``length = T + 1``, ``period = T``), R2D2
    sequences by ``burn_in + overlap``. The recurrent state before row 0 is kept per window as
    ``state_names`` (R2D2's stored state). ``final_obs=False`` keeps no final observations, for a
    learner that masks truncated steps instead of bootstrapping from them (R2D2): its windows
    are then half the size.

    Windows wait in a thread-safe queue for ``take``; an env whose actor restarted starts over.
    """

    def __init__(
        self,
        num_slots: int,
        length: int,
        period: int,
        *,
        state_names: tuple[str, ...] = ("state_h", "state_c"),
        max_queued: int = 100_000,
        final_obs: bool = True,
    ) -> None:
        if not 1 <= period <= length - 1:
            raise ValueError(
                f"windows need 1 <= period <= length - 1, got length {length}, period {period}"
            )
        self.num_slots, self.length, self.period = num_slots, length, period
        self.state_names = state_names
        self.keeps_final_obs = final_obs
        self._count = np.zeros(num_slots, dtype=np.int64)
        self._rows: dict[str, np.ndarray] = {}
        self._queue: deque = deque(maxlen=max_queued)
        self._ready = threading.Condition()
        self.windows_made = 0

    def _allocate(self, batch: StepBatch) -> None:
        def rows(example: np.ndarray, dtype: Any = None) -> np.ndarray:
            return np.zeros(
                (self.num_slots, self.length, *example.shape[1:]), dtype=dtype or example.dtype
            )

        self._rows = {
            "obs": rows(batch.obs),
            **({"final_obs": rows(batch.obs)} if self.keeps_final_obs else {}),
            "actions": rows(batch.actions),
            "rewards": rows(batch.reward, np.float32),
            "terminated": rows(batch.flags, bool),
            "truncated": rows(batch.flags, bool),
            "first": rows(batch.flags, bool),
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
            if truncated.any() and self.keeps_final_obs:
                rows["final_obs"][previous_slots[truncated], previous_rows[truncated]] = (
                    batch.final_obs[has_previous][truncated]
                )
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
                window = {
                    key: value[slot].copy()
                    for key, value in rows.items()
                    if key not in self.state_names
                }
                for name in self.state_names:
                    if name in rows:
                        window[name] = rows[name][slot, 0].copy()
                window["slot"] = slot
                windows.append(window)
                keep = self.length - self.period
                for value in rows.values():
                    value[slot, :keep] = value[slot, self.period :]
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
        """``count`` windows, oldest first; None if they are not there within ``timeout``
        seconds."""
        with self._ready:
            if not self._ready.wait_for(lambda: len(self._queue) >= count, timeout=timeout):
                return None
            return [self._queue.popleft() for _ in range(count)]


def stack_windows(
    windows: list[dict[str, np.ndarray]], time_major: bool = True
) -> dict[str, np.ndarray]:
    """Windows -> one batch: per-row keys ``[L, B, ...]`` (time-major) or ``[B, L, ...]``; the
    stored state and ``slot`` ``[B, ...]``."""
    batch = {}
    for key in windows[0]:
        stacked = np.stack([w[key] for w in windows])
        per_row = stacked.ndim >= 2 and key not in ("state_h", "state_c", "slot")
        batch[key] = np.swapaxes(stacked, 0, 1) if (time_major and per_row) else stacked
    return batch


class EpisodeLog:
    """The raw returns of finished games, per env slot and per actor (its ``envs_per_actor``
    consecutive slots), from the requests' ``EPISODE_DONE``."""

    def __init__(self, maxlen: int = 100, envs_per_actor: int = 1) -> None:
        self.maxlen, self.envs_per_actor = maxlen, envs_per_actor
        self.per_slot: dict[int, deque] = {}
        self.per_actor: dict[int, deque] = {}
        self.recent: deque = deque(maxlen=maxlen)
        self.episodes = 0
        self._new: list[float] = []  # returns since the last take_new()
        self._lock = threading.Lock()

    def on_step(self, batch: StepBatch) -> None:
        done = np.flatnonzero(batch.flags & EPISODE_DONE)
        if len(done) == 0:
            return
        with self._lock:
            for i in done.tolist():
                slot, value = int(batch.slots[i]), float(batch.episode_return[i])
                self.per_slot.setdefault(slot, deque(maxlen=self.maxlen)).append(value)
                actor = slot // self.envs_per_actor
                self.per_actor.setdefault(actor, deque(maxlen=self.maxlen)).append(value)
                self.recent.append(value)
                self._new.append(value)
                self.episodes += 1

    def take_new(self) -> list[float]:
        """The returns of the games that ended since the last call."""
        with self._lock:
            new, self._new = self._new, []
        return new

    def on_restart(self, slots: np.ndarray) -> None:
        pass

    def mean(
        self,
        last: int = 20,
        slot: int | None = None,
        minimum: int = 1,
        *,
        actor: int | None = None,
    ) -> float | None:
        """Mean of the last ``last`` returns (of ``slot``, of ``actor``'s envs, or of every
        slot); None below ``minimum``."""
        if slot is not None and actor is not None:
            raise ValueError("EpisodeLog.mean: pass slot or actor, not both")
        with self._lock:
            if slot is not None:
                values = list(self.per_slot.get(slot, ()))
            elif actor is not None:
                values = list(self.per_actor.get(actor, ()))
            else:
                values = list(self.recent)
        values = values[-last:]
        return float(np.mean(values)) if len(values) >= minimum else None
