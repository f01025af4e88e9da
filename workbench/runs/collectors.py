"""Where a run's batches come from: this thread (sync), or a thread one batch ahead (async).

Stooke & Abbeel 2018 (Sec. 3.3 and 4): the sampler and the optimiser can run at the same time, the
collector gathering batch k+1 with a behaviour copy of the model while the learner optimises on
batch k; each batch is then one update old (``charts/policy_lag`` = 1). ``SyncCollector`` collects
in the loop's own thread with the learner's model (no lag).
"""

from __future__ import annotations

import copy
import queue
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from workbench.processes import WORKER_TIMEOUT
from workbench.rollout import Rollout
from workbench.runs.lifecycle import POLL

__all__ = ["AsyncCollector", "Batch", "SyncCollector"]


@dataclass
class Batch:
    rollout: Rollout
    version: int
    """Updates applied to the parameters that collected it (the run's iteration then)."""
    wait_seconds: float
    """How long the learner waited for it."""


class SyncCollector:
    """Collects in the loop's own thread with the learner's model: no policy lag."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.lock = threading.Lock()  # held by collects and resizes (uncontended here)

    def next(self, model: torch.nn.Module, version: int, stop: threading.Event) -> Batch | None:
        start = time.perf_counter()
        with self.lock:
            rollout = self.sampler.collect(model)
        return Batch(rollout, version, time.perf_counter() - start)

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """The sampler acts with the learner's own model: nothing to copy."""

    def close(self) -> None:
        pass


class AsyncCollector:
    """A thread that collects the next batch with a behaviour copy of the model while the learner
    optimises the current one (Stooke & Abbeel 2018, Sec. 3.3: sampler and optimiser run at the
    same time; Sec. 4: the batch is one update old).

    The handshake keeps the collector exactly one batch ahead: it starts batch k+1 when the learner
    takes batch k (``_go``). After update k the learner copies its parameters into the behaviour
    copy under ``lock``, which the collector holds for a whole collect, so parameters never change
    mid-collect (the sampler is resized under the same lock); and it does so only once batch k+1's
    collect has begun. Batch k+1 is therefore always collected with the parameters of update k-1
    and consumed by update k+1: a lag of one update (zero for the first batch), and which parameters
    collect which batch does not depend on thread scheduling. The learner loses nothing by waiting:
    it needs batch k+1 next. Every wait polls a flag, so ``close()`` ends the thread
    within one collect.
    """

    def __init__(self, sampler: Any, model: torch.nn.Module, version: int) -> None:
        self.sampler = sampler
        self.behaviour = copy.deepcopy(model).requires_grad_(False)
        self.lock = threading.Lock()
        self.error: BaseException | None = None
        self._version = version
        self._batches: queue.Queue = queue.Queue(maxsize=1)
        self._go = threading.Semaphore(1)
        self._started = 0  # collects begun
        self._taken = 0  # batches the learner took
        self._progress = threading.Condition()
        self._closing = threading.Event()
        self._thread = threading.Thread(
            target=self._collect_loop, name="run-collector", daemon=True
        )
        self._thread.start()

    def _collect_loop(self) -> None:
        try:
            while not self._closing.is_set():
                if not self._go.acquire(timeout=POLL):
                    continue
                with self.lock:
                    if self._closing.is_set():
                        break
                    with self._progress:
                        self._started += 1
                        self._progress.notify_all()
                    version = self._version
                    rollout = self.sampler.collect(self.behaviour)
                self._batches.put_nowait((rollout, version))  # the learner took the last one
        except BaseException as error:  # reported to the learner, which fails the run with it
            self.error = error

    def next(self, model: torch.nn.Module, version: int, stop: threading.Event) -> Batch | None:
        start = time.perf_counter()
        while True:
            try:
                rollout, behaviour_version = self._batches.get(timeout=POLL)
                break
            except queue.Empty:
                if self.error is not None:
                    raise self.error from None
                if stop.is_set():
                    return None
        self._taken += 1
        self._go.release()  # the collector starts the next batch, with the parameters published
        return Batch(rollout, behaviour_version, time.perf_counter() - start)

    def publish(self, model: torch.nn.Module, version: int) -> None:
        with self._progress:  # not before the collect the last next() allowed has begun
            while self._started <= self._taken:
                if self.error is not None:
                    raise self.error
                self._progress.wait(POLL)
        with self.lock, torch.no_grad():  # between collects
            for target, source in zip(
                self.behaviour.state_dict().values(), model.state_dict().values()
            ):
                target.copy_(source)
            self._version = version

    def close(self) -> None:
        self._closing.set()
        self._thread.join(timeout=WORKER_TIMEOUT + 10)
        if self._thread.is_alive():
            warnings.warn(
                "the run's collector thread did not end; closing its sampler anyway", stacklevel=2
            )
