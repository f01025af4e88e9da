"""Where Ape-X's roles run and how data moves between them: one interface, two transports.

* ``"local"`` (``local.LocalTransport``): actor processes and a replay process on this machine;
* ``"ray"`` (``ray.RayTransport``): the replay and the actors as Ray actors, over a cluster.

The learner (``apex.Apex``) drives either through ``ApexTransport``; one contract test,
parametrised over both, holds them to it (``tests/test_apex_transports.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from workbench.apex.config import TRANSPORTS, ApexConfig

__all__ = ["PLACES", "TRANSPORTS", "ApexTransport", "make_transport"]


@runtime_checkable
class ApexTransport(Protocol):
    """Actors, the central replay, and the learner's side of their messages."""

    name: str
    pending_batches: int
    """Sample requests the learner made whose batches it has not taken yet."""

    def set_explorations(self, values: list[float]) -> None:
        """Each actor's exploration (epsilon or noise scale), by index; takes effect at its next
        block."""

    def start_actor(self, index: int) -> None:
        """Start actor ``index`` (it acts with ``explorations[index]``)."""

    def stop_actor(self, index: int) -> None:
        """Retire actor ``index``; what it sent stays in the replay."""

    def restart_actor(self, index: int) -> None:
        """A fresh actor ``index`` in place of a dead one."""

    def dead_actors(self) -> list[int]:
        """Indices of the started actors that died."""

    def actor_pids(self) -> dict[int, int]:
        """Process ids of the live actors, by index."""

    def publish(self, state: dict[str, torch.Tensor]) -> None:
        """New parameters for the actors (each loads them at its next refresh)."""

    def request_sample(self, batch_size: int) -> None:
        """Ask the replay for a prioritized batch (answered once it is ready to give one)."""

    def take_batch(
        self, timeout: float
    ) -> "tuple[dict[str, np.ndarray], np.ndarray, np.ndarray] | None":
        """The oldest requested batch ``(batch, indices, weights)``, or None within ``timeout``."""

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """The learner's new priorities of a batch it trained on."""

    def stats(self) -> dict[str, Any]:
        """The replay's counters (``replay_size``, ``added``, ``sampled``), per-actor statistics
        and the episodes ``(actor, return)`` that ended since the last call."""

    def close(self) -> None:
        """End every actor and the replay."""


def local_transport(config: ApexConfig, actor_state: dict[str, torch.Tensor]) -> ApexTransport:
    """Actor processes and a replay process on this machine."""
    from workbench.apex.transports.local import LocalTransport

    return LocalTransport(config, actor_state)


def ray_transport(config: ApexConfig, actor_state: dict[str, torch.Tensor]) -> ApexTransport:
    """The replay and the actors as Ray actors over the cluster's nodes."""
    from workbench.apex.transports.ray import RayTransport

    return RayTransport(config, actor_state)


PLACES: dict[str, Callable[[ApexConfig, dict], ApexTransport]] = {
    "local": local_transport,
    "ray": ray_transport,
}
"""Per transport (``ApexConfig.transport``): what starts it (Ray's module imported only when
chosen), as ``seed.placement.PLACES`` does for SEED."""


def make_transport(config: ApexConfig, actor_state: dict[str, torch.Tensor]) -> ApexTransport:
    """``config.transport``'s actors and replay, started with the learner's first parameters."""
    return PLACES[config.transport](config, actor_state)
