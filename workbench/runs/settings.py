"""Live settings: what a running loop reads at each iteration boundary; and the limits that end it.

Widgets (or code in another cell) write a :class:`RunSettings` while a run goes; the run's loop
calls :meth:`RunSettings.take_changes` between iterations and applies what changed (resize the
sampler, reallocate buffers, move the learner). Every applied change becomes an event in the run's
metrics, so plots can mark where it happened.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

from workbench.checks import positive_int

__all__ = [
    "ActorSettings",
    "Change",
    "Limits",
    "RunSettings",
    "Settings",
    "actor_settings",
    "check_num_actors",
]


@dataclass(frozen=True)
class Settings:
    """One consistent set of values (an immutable snapshot)."""

    num_workers: int = 2
    """Worker processes stepping environments (the parallel sampler's; a recipe's
    ``num_workers``). Ape-X's and SEED's actors are :class:`ActorSettings`' ``num_actors``."""
    num_envs: int = 8
    """B: environments stepped per iteration, across all actors."""
    horizon: int = 128
    """T: steps per environment per iteration. The batch is ``num_envs * horizon``."""
    num_minibatches: int | None = None
    """Minibatches per epoch of an on-policy learner's update (PPO's, A2C's): each gradient step
    sees ``minibatch_size = batch_size // num_minibatches`` samples. While a run lives this is the
    one owner of the batch's shape: the run writes it to its learner at each change. None leaves it
    to the learner: a run fills in its config's count (1 for a learner that takes a batch whole)."""
    learner_devices: tuple[str, ...] = ("cpu",)
    """Devices of the learner: one, or several for data-parallel learners (DDP)."""

    renamed: ClassVar[dict[str, str]] = {"num_actors": "num_workers"}
    """Settings named otherwise before, and their names now (for the error that says so)."""

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.horizon

    @property
    def minibatch_size(self) -> int | None:
        """Samples per gradient step (None until the minibatch count is known)."""
        return None if self.num_minibatches is None else self.batch_size // self.num_minibatches

    @classmethod
    def from_saved(cls, saved: dict[str, Any]) -> "Settings":
        """The settings a checkpoint saved. One written while the settings held the minibatch's
        size (``minibatch_size``, before its count) is read as the count that size made, and one
        that called the workers ``num_actors`` as ``num_workers``."""
        saved = dict(saved)
        if "num_actors" in saved:  # the worker count's name until the runs of actors took it
            saved["num_workers"] = saved.pop("num_actors")
        size = saved.pop("minibatch_size", None)
        if size is not None and saved.get("num_minibatches") is None:
            saved["num_minibatches"] = saved["num_envs"] * saved["horizon"] // size
        if "learner_devices" in saved:
            saved["learner_devices"] = tuple(saved["learner_devices"])
        return cls(**saved)

    def check(self) -> None:
        """Raise ValueError, naming the fix, when the values cannot work together."""
        for name in ("num_workers", "num_envs", "horizon", "num_minibatches"):
            value = getattr(self, name)
            if name == "num_minibatches" and value is None:
                continue
            positive_int(value, name)
        if self.num_workers > self.num_envs:
            raise ValueError(
                f"num_workers={self.num_workers} > num_envs={self.num_envs}: each worker needs at "
                f"least one env. Use num_workers <= {self.num_envs} or more envs."
            )
        if self.num_minibatches is not None and self.batch_size % self.num_minibatches:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} does not divide the batch "
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


@dataclass(frozen=True)
class ActorSettings:
    """The live settings of a run of actors (Ape-X, SEED): how many actors step envs. Their envs,
    the learner's batch and its device are the run's config, fixed while it lives."""

    num_actors: int = 1
    """Actors stepping environments (processes or Ray actors), 1 .. ``max_actors``."""
    max_actors: int = 1
    """The most the run allows (its config's; slots and buffers are sized for them). Fixed."""

    fixed = ("max_actors",)

    def check(self) -> None:
        """Raise ValueError, naming the fix, unless ``num_actors`` is in ``[1, max_actors]``."""
        check_num_actors(self.num_actors, self.max_actors, "raise the config's max_actors.")


class RunSettings:
    """Thread-safe holder of :class:`Settings` (or a run of actors' :class:`ActorSettings`):
    widgets write, the run's loop reads.

    ``update(**values)`` validates the whole new set at once and raises (changing nothing) when it
    does not hold together. The loop calls ``take_changes()`` between iterations: it returns the
    new settings and what changed since the last call, or None when nothing did.
    """

    def __init__(self, settings: Settings | ActorSettings | None = None, **values: Any) -> None:
        settings = settings or Settings()
        check_names(type(settings), values)
        settings = replace(settings, **values)
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
        kind = type(self._current)
        fixed = set(getattr(kind, "fixed", ()))
        if set(values) & fixed:
            raise ValueError(
                f"{sorted(set(values) & fixed)} cannot change while a run lives; make the run "
                "with the value in its config."
            )
        check_names(kind, values)
        if "num_minibatches" in values and values["num_minibatches"] is None:
            raise ValueError(
                "num_minibatches=None is left to the learner only when a run is made; give a count"
            )
        if "learner_devices" in values:
            values["learner_devices"] = tuple(values["learner_devices"])
        with self._lock:
            candidate = replace(self._current, **values)
            candidate.check()
            self._current = candidate
            return candidate

    def settle(self, **values: Any) -> Settings:
        """Fill in what the settings left open (``num_minibatches=None``), as a run does at
        construction: requested and applied at once, so no change is recorded. Raises, changing
        nothing, when the values do not hold together."""
        with self._lock:
            candidate = replace(self._current, **values)
            candidate.check()
            self._current = candidate
            self._applied = replace(self._applied, **values)
            return candidate

    def take_changes(self, iteration: int) -> tuple[Settings, Change] | None:
        """The settings to apply now and the change they make, or None if nothing changed."""
        with self._lock:
            new, old = self._current, self._applied
            if new == old:
                return None
            self._applied = new
        differing = [
            f.name for f in fields(type(new)) if getattr(new, f.name) != getattr(old, f.name)
        ]
        return new, Change(
            iteration=iteration,
            old={name: getattr(old, name) for name in differing},
            new={name: getattr(new, name) for name in differing},
        )

    def apply_changes(
        self, iteration: int, apply: Callable[[Settings, Settings], None]
    ) -> tuple[str, dict[str, Any]] | None:
        """Take the changes at this boundary and ``apply(new, old)`` them, or refuse them whole:
        when ``apply`` raises, the settings go back to what the loop runs with. Returns the event
        to record, ``("settings", details)`` or ``("settings_refused", details)``; None when
        nothing changed."""
        taken = self.take_changes(iteration)
        if taken is None:
            return None
        new, change = taken
        old = replace(new, **change.old)
        try:
            apply(new, old)
        except Exception as error:
            # Back to what the loop runs with, requested and applied (a write landing since the
            # change was taken is lost: a narrow race with a widget, whose next write is seen).
            with self._lock:
                self._current = self._applied = old
            error_text = f"{type(error).__name__}: {error}"
            return "settings_refused", {"old": change.old, "new": change.new, "error": error_text}
        return "settings", {"old": change.old, "new": change.new}

    def __repr__(self) -> str:
        return f"RunSettings({self.current})"


def actor_settings(num_actors: int, max_actors: int) -> RunSettings:
    """The live settings of a run of actors (Ape-X, SEED): its one live knob, the actor count."""
    return RunSettings(ActorSettings(num_actors=num_actors, max_actors=max_actors))


def check_names(kind: type, values: dict[str, Any]) -> None:
    """Raise ValueError, naming the settings ``kind`` has (and a renamed one's new name), when
    ``values`` names one it does not."""
    names = [f.name for f in fields(kind) if f.name not in getattr(kind, "fixed", ())]
    unknown = sorted(set(values) - {f.name for f in fields(kind)})
    if unknown:
        renamed = getattr(kind, "renamed", {})
        hints = "".join(f" {old} is {renamed[old]} now." for old in unknown if old in renamed)
        raise ValueError(f"Unknown setting(s) {unknown}; the settings are {names}.{hints}")


def check_num_actors(num_actors: Any, max_actors: int, fix: str) -> None:
    """Raise ValueError unless ``num_actors`` is an int in ``[1, max_actors]``; ``fix`` says how
    to allow more (which config field to raise)."""
    if (
        isinstance(num_actors, bool)
        or not isinstance(num_actors, int)
        or not 1 <= num_actors <= max_actors
    ):
        raise ValueError(
            f"num_actors must be an int in [1, max_actors={max_actors}], got {num_actors!r}; {fix}"
        )


@dataclass(frozen=True)
class Limits:
    """When a run's loop ends by itself (None: no such limit); the loop also ends at ``stop()``."""

    env_steps: int | None = None
    """Environment (agent) steps, over every segment of the run."""
    updates: int | None = None
    """Learner updates."""
    seconds: float | None = None
    """Wall-clock seconds of the run, over its segments."""
    target_return: float | None = None
    """The row key ``target_metric`` of the run kind reaches this (e.g. the mean return of the
    last 20 episodes, or Ape-X's actor exploring least)."""

    def replace(self, **changes: Any) -> "Limits":
        names = {f.name for f in fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise ValueError(f"unknown limit(s) {sorted(unknown)}; the limits are {sorted(names)}")
        for name, value in changes.items():
            if value is not None and not (
                isinstance(value, (int, float)) and not isinstance(value, bool)
            ):
                raise ValueError(f"limit {name}={value!r} must be a number or None")
            if value is not None and name != "target_return" and value < 0:
                raise ValueError(f"limit {name}={value!r} must be >= 0")
        return replace(self, **changes)

    def any(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def refuse_passed(
        self, named: dict[str, Any], run: str, env_steps: int, updates: int, seconds: float
    ) -> None:
        """Raise ValueError, naming the fix, when a limit in ``named`` (those a call to start or
        run gives) is one a run that has gone before (a resumed one) has already passed: it would
        end at once without a word. Limits count over all of a run's segments."""
        done = {"env_steps": env_steps, "updates": updates, "seconds": seconds}
        for name, spent in done.items():
            limit = named.get(name)
            if limit is not None and spent > 0 and spent >= limit:
                shown = f"{spent:.0f}" if name == "seconds" else f"{spent:,}"
                raise ValueError(
                    f"run {run!r} has already run {shown} {name.replace('_', ' ')}, past the "
                    f"limit {name}={limit} (limits count from the run's start, over all its "
                    f"segments). For {limit} more, give {name}={spent + limit:.0f}."
                )

    def reached(self, env_steps: int, updates: int, seconds: float) -> str | None:
        """The name of the first of the counting limits these counters reached, or None."""
        for name, value in (("env_steps", env_steps), ("updates", updates), ("seconds", seconds)):
            limit = getattr(self, name)
            if limit is not None and value >= limit:
                return name
        return None
