"""Live settings: what a running loop reads at each iteration boundary.

Widgets (or code in another cell) write a :class:`RunSettings` while a run goes; the run's loop
calls :meth:`RunSettings.take_changes` between iterations and applies what changed (resize the
sampler, reallocate buffers, move the learner). Every applied change becomes an event in the run's
metrics, so plots can mark where it happened.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields, replace
from typing import Any


@dataclass(frozen=True)
class Settings:
    """One consistent set of values (an immutable snapshot)."""

    num_actors: int = 2
    """Worker processes (actors) stepping environments."""
    num_envs: int = 8
    """B: environments stepped per iteration, across all actors."""
    horizon: int = 128
    """T: steps per environment per iteration. The batch is ``num_envs * horizon``."""
    minibatch_size: int = 256
    """Samples per gradient step inside one iteration's optimisation."""
    learner_devices: tuple[str, ...] = ("cpu",)
    """Devices of the learner: one, or several for data-parallel learners (DDP)."""

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.horizon

    def check(self) -> None:
        """Raise ValueError, naming the fix, when the values cannot work together."""
        for name in ("num_actors", "num_envs", "horizon", "minibatch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        if self.num_actors > self.num_envs:
            raise ValueError(
                f"num_actors={self.num_actors} > num_envs={self.num_envs}: each actor needs at "
                f"least one env. Use num_actors <= {self.num_envs} or more envs."
            )
        if self.batch_size % self.minibatch_size:
            raise ValueError(
                f"minibatch_size={self.minibatch_size} does not divide the batch "
                f"num_envs * horizon = {self.batch_size}; use a divisor of {self.batch_size}."
            )
        if not self.learner_devices or len(set(self.learner_devices)) != len(self.learner_devices):
            raise ValueError(
                f"learner_devices={self.learner_devices!r} must name one or more distinct devices; "
                "for two CPU learners (gloo) use ('cpu:0', 'cpu:1')."
            )


@dataclass(frozen=True)
class Change:
    """One applied change: which fields, from what to what, at which iteration."""

    iteration: int
    old: dict[str, Any]
    new: dict[str, Any]


class RunSettings:
    """Thread-safe holder of :class:`Settings`: widgets write, the run's loop reads.

    ``update(**values)`` validates the whole new set at once and raises (changing nothing) when it
    does not hold together. The loop calls ``take_changes()`` between iterations: it returns the
    new settings and what changed since the last call, or None when nothing did.
    """

    def __init__(self, settings: Settings | None = None, **values: Any) -> None:
        settings = replace(settings or Settings(), **values)
        settings.check()
        self._lock = threading.Lock()
        self._current = settings
        self._applied = settings

    @property
    def current(self) -> Settings:
        """The newest requested settings (maybe not applied yet)."""
        with self._lock:
            return self._current

    @property
    def applied(self) -> Settings:
        """The settings the loop is running with."""
        with self._lock:
            return self._applied

    def update(self, **values: Any) -> Settings:
        unknown = set(values) - {f.name for f in fields(Settings)}
        if unknown:
            raise ValueError(
                f"Unknown setting(s) {sorted(unknown)}; the settings are "
                f"{[f.name for f in fields(Settings)]}."
            )
        if "learner_devices" in values:
            values["learner_devices"] = tuple(values["learner_devices"])
        with self._lock:
            candidate = replace(self._current, **values)
            candidate.check()
            self._current = candidate
            return candidate

    def take_changes(self, iteration: int) -> tuple[Settings, Change] | None:
        """The settings to apply now and the change they make, or None if nothing changed."""
        with self._lock:
            new, old = self._current, self._applied
            if new == old:
                return None
            self._applied = new
        differing = [f.name for f in fields(Settings) if getattr(new, f.name) != getattr(old, f.name)]
        return new, Change(
            iteration=iteration,
            old={name: getattr(old, name) for name in differing},
            new={name: getattr(new, name) for name in differing},
        )

    def __repr__(self) -> str:
        return f"RunSettings({self.current})"


class BackgroundTraining:
    """``start`` / ``stop`` / ``wait`` for a run whose ``train(**limits)`` loop checks ``_stop``:
    the loop goes in a background thread so that a notebook stays live (Ape-X and SEED runs).

    A subclass sets ``_thread = None``, ``_stop = threading.Event()`` and ``error = None`` and
    names itself in ``run_name`` (for messages)."""

    run_name = "run"
    _thread: "threading.Thread | None"
    _stop: threading.Event
    error: "BaseException | None"

    def start(self, **limits: Any):
        """Run ``train(**limits)`` in a background thread and return at once."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError(f"this {self.run_name} run is already going; stop() it first.")
        self._thread = threading.Thread(target=self._train_quietly, kwargs=limits,
                                        name=f"workbench-{self.run_name.lower()}", daemon=True)
        self._thread.start()
        return self

    def _train_quietly(self, **limits: Any) -> None:
        try:
            self.train(**limits)
        except BaseException as error:  # noqa: BLE001 - shown through status/error in the notebook
            self.error = error

    def stop(self, timeout: float = 30.0) -> None:
        """End the run (from any thread) and wait for its processes to go."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the background run to end; raise its failure, if it failed."""
        if self._thread is not None:
            self._thread.join(timeout)
        if self.error is not None:
            raise RuntimeError(f"the {self.run_name} run failed: {self.error!r}") from self.error

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
