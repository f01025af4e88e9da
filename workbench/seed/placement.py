"""Where SEED's roles run: the learner's host (the learner with its inference server) and the
env-only actors, chosen once per run from ``SeedConfig.transport``.

SEED (Espeholt et al. 2020, Sec. 3) keeps learning and inference together on the accelerator's
host; the actors only step environments. A transport names both places:

=========  ===========================================  ==========================================
transport  the learner's host (``LearnerHost``)           the actors (``transports.SeedTransport``)
=========  ===========================================  ==========================================
serial     this process (``InProcessHost``)             every env in the learner's thread
local      this process (``InProcessHost``)             processes on this machine
ray        one Ray actor (``ray_learner.RayHost``)      Ray actors over the cluster's nodes
=========  ===========================================  ==========================================

``Seed`` (``run``) talks to either host only through ``LearnerHost``, and to the actors only
through ``SeedTransport``: it never asks which transport it has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from workbench.seed.algorithms import make_learning
from workbench.seed.learning import SeedLearning
from workbench.seed.transports import SeedTransport

if TYPE_CHECKING:
    from workbench.seed.config import SeedConfig

__all__ = ["InProcessHost", "LearnerHost", "make_actors", "make_host"]


@runtime_checkable
class LearnerHost(Protocol):
    """The learner and the inference server it trains for, wherever they run."""

    learning: SeedLearning | None
    """The host's state when it lives in this process; None where it lives elsewhere."""
    device: Any
    """Where the model lives."""
    max_batch_size: int
    """Requests per forward pass of the server."""

    def open(self, num_actors: int) -> Any:
        """Start serving for ``num_actors`` actors; returns what the actors send requests to
        (an ``InferenceServer``, or the Ray actor that holds one)."""

    def begin(self) -> None:
        """Start learning, once the actors are up."""

    def step(self, transport: SeedTransport, until: float) -> int:
        """Learn from what came (in this process), or wait for the remote learner at most until
        ``until`` (``time.monotonic()``); returns the learner's updates so far."""

    def report(self) -> dict[str, Any]:
        """``SeedLearning.report()`` with the last update's metrics."""

    def set_num_actors(self, num_actors: int) -> None:
        """The actor count changed (R2D2: each slot's epsilon)."""

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Requests per forward pass, from the server's next batch on."""

    def state_dict(self) -> dict[str, Any]:
        """The learner's state (``SeedLearning.state_dict``)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (now, or when the host opens)."""

    def check_lost(self) -> None:
        """After the actors' transport failed: raise ``restarts.RoleLost`` if the host is gone."""

    def close(self) -> int | None:
        """Stop learning and serving; returns the learner's last update count where it ran on
        after the run's last step (None: the run's count holds)."""


class InProcessHost:
    """The learner and its server in this process (``SeedLearning``): the serial and local
    transports' host, whose model and learner a notebook reads directly."""

    def __init__(self, config: SeedConfig, device: Any = "cpu") -> None:
        self.learning = make_learning(config, device)
        self.device = self.learning.device
        self.metrics: dict[str, float] = {}
        """The last update's metrics, for the next row."""

    @property
    def max_batch_size(self) -> int:
        return self.learning.server.max_batch_size

    def open(self, num_actors: int) -> Any:
        return self.learning.server

    def begin(self) -> None:
        """Nothing to start: the run's loop calls ``step``, which learns."""

    def step(self, transport: SeedTransport, until: float) -> int:
        metrics = self.learning.learn(transport.wait_seconds)
        if metrics is None:  # nothing to learn from yet: the envs move on
            transport.advance()
        self.metrics = metrics or self.metrics
        return self.learning.updates

    def report(self) -> dict[str, Any]:
        report = self.learning.report()
        report["row"] = {**self.metrics, **report["row"]}
        return report

    def set_num_actors(self, num_actors: int) -> None:
        self.learning.set_num_actors(num_actors)

    def set_max_batch_size(self, max_batch_size: int) -> None:
        self.learning.set_max_batch_size(max_batch_size)

    def state_dict(self) -> dict[str, Any]:
        return self.learning.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learning.load_state_dict(state)

    def check_lost(self) -> None:
        """This process is the host: it is not lost while the run runs."""

    def close(self) -> int | None:
        return None


def serial_actors(config: SeedConfig, server: Any, num_actors: int) -> SeedTransport:
    """Every env of every actor stepped in the learner's thread (deterministic)."""
    from workbench.seed.transports.serial import SerialActors

    num_envs = num_actors * config.envs_per_actor
    return SerialActors(server, config.env_id, num_envs, seed=config.seed, **env(config))


def local_actors(config: SeedConfig, server: Any, num_actors: int) -> SeedTransport:
    """Env-only actor processes on this machine (shared memory and two pipes each)."""
    from workbench.seed.transports.local import LocalActors

    return LocalActors(
        server, config.env_id, num_actors, actor_batch=config.actor_batch, **actors(config)
    )


def ray_actors(config: SeedConfig, server: Any, num_actors: int) -> SeedTransport:
    """Env-only Ray actors over the cluster's nodes."""
    from workbench.seed.transports.ray import RayActors

    return RayActors(server, config.env_id, num_actors, **actors(config))


def ray_host(config: SeedConfig, device: Any) -> LearnerHost:
    """The learner and its server in one Ray actor."""
    from workbench.seed.transports.ray_learner import RayHost

    return RayHost(config, device)


def env(config: SeedConfig) -> dict[str, Any]:
    return {"env_options": config.env_options}


def actors(config: SeedConfig) -> dict[str, Any]:
    """What every actor process takes from the config, whatever carries it."""
    return {
        "envs_per_actor": config.envs_per_actor,
        "max_actors": config.actor_limit,
        "seed": config.seed,
        "nice": config.actor_nice,
        **env(config),
    }


PLACES: dict[str, tuple[Callable[..., LearnerHost], Callable[..., SeedTransport]]] = {
    "serial": (InProcessHost, serial_actors),
    "local": (InProcessHost, local_actors),
    "ray": (ray_host, ray_actors),
}
"""Per transport (``SeedConfig.transport``): its learner's host and its actors (Ray's modules are
imported only when chosen)."""


def make_host(config: SeedConfig, device: Any = "cpu") -> LearnerHost:
    """The learner's host of ``config.transport``."""
    return PLACES[config.transport][0](config, device)


def make_actors(config: SeedConfig, endpoint: Any, num_actors: int) -> SeedTransport:
    """``config.transport``'s actors, serving through ``endpoint`` (``LearnerHost.open``), not
    started."""
    return PLACES[config.transport][1](config, endpoint, num_actors)
