"""How often a process that keeps dying is started again: restarts bounded, with a backoff.

An actor that crashes on its first step (a bad env option, a library that will not load) would
otherwise be restarted forever, each restart costing a process start and hiding the cause. So a
run restarts a dead actor at most ``max_restarts`` times within ``window`` seconds, waiting
``backoff * 2**k`` seconds before the k-th of those (at most ``max_backoff``), and fails with an
error that names the actor and its last exit when it dies once more (Ray's ``max_restarts`` and
Kubernetes' crash-loop backoff have the same two parts). ``RestartSchedule`` is the one place that
restarts a dead actor, in Ape-X's run and in SEED's local and Ray transports alike: each reports
a death, and the schedule starts the actor again, through the caller's own ``start``, once its wait
has passed (unless it was retired meanwhile), and counts it.

A role that holds the run's state is not restarted: SEED's learner with its inference server,
Ape-X's central replay. When its Ray actor dies (most often with its node) the run stops with
``RoleLost``, which names the role, its node and how to continue from the last checkpoint on the
nodes left (the run's life cycle fills in the checkpoint: ``RoleLost.keep``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

__all__ = ["ActorKeepsDying", "RestartBudget", "RestartSchedule", "RoleLost"]


class ActorKeepsDying(RuntimeError):
    """An actor died more often than its ``RestartBudget`` allows."""


class RoleLost(RuntimeError):
    """A role the run cannot restart, because it held the run's state, is gone with its Ray actor.

    Args:
        role: what it was (``"SEED's learner and inference server"``).
        node_id: the node it ran on, None when not known.
        node_left: whether that node has left the cluster (else the actor alone died).
        error: Ray's error (its first line goes in the message).
        resume: how to continue, with ``{checkpoint}`` where the run's folder goes.
    """

    def __init__(
        self, role: str, node_id: str | None, node_left: bool, error: BaseException, resume: str
    ) -> None:
        self.role, self.node_id, self.node_left = role, node_id, node_left
        self.cause = str(error).splitlines()[0] if str(error) else type(error).__name__
        self.resume = resume
        self.checkpoint: str | None = None
        super().__init__(self.describe())

    def describe(self) -> str:
        where = f" on node {self.node_id}" if self.node_id else ""
        how = "its node left the cluster" if self.node_left else "its Ray actor died"
        folder = repr(self.checkpoint) if self.checkpoint else "<the run's folder>"
        return (
            f"{self.role}{where} is gone: {how} ({self.cause}). The run stopped, as it cannot go "
            f"on without it. Continue from its last checkpoint on the nodes left: "
            + self.resume.format(checkpoint=folder)
        )

    def keep(self, folder: object, checkpoint: object) -> None:
        """Name the run's ``folder`` in the message when its ``checkpoint`` file is there."""
        from pathlib import Path

        if Path(str(checkpoint)).exists():
            self.checkpoint = str(folder)
        self.args = (self.describe(),)


class RestartBudget:
    """Per actor (or sampler worker): at most ``max_restarts`` restarts within ``window`` seconds,
    each after a wait that doubles from ``backoff`` up to ``max_backoff`` seconds."""

    def __init__(
        self,
        max_restarts: int = 3,
        window: float = 60.0,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        clock=time.monotonic,
        noun: str = "actor",
    ) -> None:
        if max_restarts < 0 or window <= 0 or backoff < 0 or max_backoff < backoff:
            raise ValueError(
                "RestartBudget needs max_restarts >= 0, window > 0 and 0 <= backoff <= "
                f"max_backoff; got {max_restarts}, {window}, {backoff}, {max_backoff}"
            )
        self.max_restarts, self.window = max_restarts, window
        self.backoff, self.max_backoff = backoff, max_backoff
        self.clock = clock
        self.noun = noun
        """What restarts (``"actor"``, a sampler's ``"worker"``), for the message."""
        self.restarts: dict[int, list[float]] = defaultdict(list)
        """Per actor, when it was restarted (the clock's seconds)."""

    def recent(self, actor: int) -> int:
        """Restarts of ``actor`` within the window."""
        now = self.clock()
        self.restarts[actor] = [t for t in self.restarts[actor] if now - t < self.window]
        return len(self.restarts[actor])

    def delay(self, actor: int, detail: str = "") -> float:
        """``actor`` died: the seconds to wait before its restart, or ``ActorKeepsDying`` when it
        has used its restarts within the window (``detail``: its last exit, for the message)."""
        recent = self.recent(actor)
        if recent >= self.max_restarts:
            raise ActorKeepsDying(
                f"{self.noun} {actor} died {recent + 1} times within {self.window:g} s"
                + (f" (last: {detail})" if detail else "")
                + "; it is not restarted again. Its errors are in the run's events: fix what "
                "kills it (its env, its options, memory), then continue from the checkpoint."
            )
        return min(self.backoff * 2**recent, self.max_backoff)

    def restarted(self, actor: int) -> None:
        """``actor`` was started again now."""
        self.restarts[actor].append(self.clock())


class RestartSchedule:
    """Dead actors waiting out their backoff, and their restart when it is due.

    ``died(index)`` queues an actor after its ``budget``'s wait (``ActorKeepsDying`` when it has
    spent its restarts); ``restart_due(start, wanted)``, called from the caller's own loop, starts
    each queued actor whose wait has passed with ``start(index)``, and forgets those no longer
    ``wanted`` (retired, or started again by other means, since they died). ``count`` is every
    restart so far (a run's checkpoint keeps it).
    """

    def __init__(self, budget: RestartBudget | None = None, clock=time.monotonic) -> None:
        self.budget = budget if budget is not None else RestartBudget(clock=clock)
        self.clock = clock
        self.waiting: dict[int, tuple[float, float]] = {}
        """Per dead actor: when its restart is due, and the wait it was given (seconds)."""
        self.count = 0

    def __contains__(self, index: int) -> bool:
        return index in self.waiting

    def died(self, index: int, detail: str = "") -> float:
        """``index`` died (``detail``: its last exit, for the message): queue its restart and return
        the wait. A death reported again while it waits changes nothing."""
        if index not in self.waiting:
            delay = self.budget.delay(index, detail)
            self.waiting[index] = (self.clock() + delay, delay)
        return self.waiting[index][1]

    def restart_due(
        self, start: Callable[[int], Any], wanted: Callable[[int], bool]
    ) -> list[tuple[int, float, Any]]:
        """Start every queued actor whose wait has passed and that is still ``wanted``; return
        ``(index, its wait, what start returned)`` for each, in the order they died."""
        now = self.clock()
        started = []
        for index, (due, delay) in list(self.waiting.items()):
            if not wanted(index):
                del self.waiting[index]
            elif now >= due:
                del self.waiting[index]
                started.append((index, delay, start(index)))
                self.budget.restarted(index)
                self.count += 1
        return started
