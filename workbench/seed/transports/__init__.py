"""How SEED's env-only actors reach the inference server: one interface, three transports.

* ``serial.SerialActors``: every env stepped in the caller's thread (deterministic; tests,
  notebooks);
* ``local.LocalActors``: actor processes on this machine, shared memory and two pipes;
* ``ray.RayActors``: Ray actors over a cluster, served by ``ray_server.RayInferenceServer``.

A run drives any of them through ``SeedTransport``; one contract test, parametrised over the three,
holds them to it (``tests/test_seed_transports.py``). This package never imports torch: env actor
processes load it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["TRANSPORTS", "ActorEvent", "SeedTransport"]

TRANSPORTS = ("serial", "local", "ray")


@dataclass
class ActorEvent:
    time: float
    kind: str  # "started", "stopped", "died", "restarted", "error"
    actor: int
    detail: str = ""


@runtime_checkable
class SeedTransport(Protocol):
    """Env-only actors stepping environments with actions from an inference server."""

    steps: int
    """Env steps served so far (rejected requests do not count)."""
    events: list[ActorEvent]
    """Actors started, stopped, died, restarted, and their errors, in order."""
    wait_seconds: float
    """How long a learner waiting for data blocks before it does its other work (0: it advances the
    envs itself)."""
    last_progress: dict
    """The server's last answer to a progress call where it runs apart from the run (Ray: env
    steps, episodes, and the learner's ``updates`` when the learner runs beside it); {} where the
    server is in this process."""

    def start(self) -> "SeedTransport":
        """Start the actors (and whatever serves them); returns the transport."""

    def stop(self) -> None:
        """End every actor; none is left behind."""

    def set_num_actors(self, num_actors: int) -> None:
        """Start or retire actors so that ``num_actors`` step envs."""

    def check(self) -> None:
        """Restart actors that died; raise if serving failed."""

    def advance(self) -> None:
        """Let the envs move on while the learner waits (the serial transport steps them here)."""

    @property
    def pids(self) -> list[int]:
        """Process ids of the live actors."""
