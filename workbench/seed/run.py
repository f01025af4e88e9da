"""A SEED RL run (Espeholt et al. 2020, https://arxiv.org/abs/1910.06591): env-only actors, one
central inference server, and a learner that trains the very model the server acts with.

The pieces, in the order data flows:

1. actors step environments and send observations (``transports``: serial, local processes, Ray
   actors over a cluster's nodes);
2. the ``server.InferenceServer`` answers batches of them with one forward pass and keeps
   recurrent state;
3. its listeners: an ``assembler.TrajectoryAssembler`` cuts each env's stream into the learner's
   windows, an ``assembler.EpisodeLog`` keeps returns;
4. the learner: ``learners.IMPALA`` (V-trace) uses each unroll once, in order of arrival;
   ``learners.R2D2`` puts sequences into a prioritized ``replay.SequenceReplay`` with initial
   priorities, samples it as a ``replay.RateLimiter`` allows, and writes back new priorities.

Steps 2-4 are one host's (``learning.SeedLearning``): this process's for the serial and local
transports, one Ray actor's for the Ray transport (``transports.ray_learner``: the server and the
learner together, so parameters never travel to the actors). ``placement`` chooses the host and
the actors from ``SeedConfig.transport``; the run talks to them only through ``LearnerHost`` and
``SeedTransport``. ``Seed`` runs the whole system from a
``SeedConfig`` on the shared life cycle (``runs.lifecycle``): ``start`` / ``run`` with the four
limits, ``stop``, a row every ``log_interval`` seconds (``charts/...``, ``losses/...``,
``seed/...``: the server's batch and latency), events when actors are added, retired or
restarted, a checkpoint (model, optimizer, counters; not the replay, which refills) that
``Seed.from_checkpoint`` continues.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from workbench.runs.checkpoints import CHECKPOINT_SECONDS
from workbench.runs.lifecycle import Limits, RunLifecycle
from workbench.runs.records import config_to_dict, resume_point
from workbench.runs.settings import ActorSettings, actor_settings
from workbench.seed.algorithms import ALGORITHMS
from workbench.seed.config import DEFAULT_MAX_ACTORS, TRANSPORTS, SeedConfig
from workbench.seed.learning import SeedLearning
from workbench.seed.placement import LearnerHost, make_actors, make_host
from workbench.seed.transports import SeedTransport

__all__ = ["ALGORITHMS", "DEFAULT_MAX_ACTORS", "TRANSPORTS", "Seed", "SeedConfig"]


class Seed(RunLifecycle):
    """A SEED RL run: server + actors + learner, from a ``SeedConfig`` (module docstring).

    Args:
        config: the run (``config.transport`` says where actors and learner run).
        device: where the model lives: the server's forward passes and the learner's updates
            (``"auto"``: the GPU when there is one; with Ray, the learner actor's).
        name, runs_dir: the run's folder. limits: the default limits of ``start()`` / ``run()``.
        log_interval: seconds between rows. checkpoint_every, checkpoint_seconds: rows and wall
            seconds between checkpoints (``runs.checkpoints``; 0 and None: never).

    The ``target_metric`` of a target return: V-trace, the last 20 episodes of every env
    (``charts/mean_return``); R2D2, the last 10 games of the actor exploring least
    (``seed/return_least_exploring``).
    """

    kind = "seed"

    def __init__(
        self,
        config: SeedConfig,
        *,
        device: str = "cpu",
        name: str | None = None,
        runs_dir: str | None = None,
        limits: Limits | None = None,
        log_interval: float = 1.0,
        checkpoint_every: int = 0,
        checkpoint_seconds: float | None = CHECKPOINT_SECONDS,
    ) -> None:
        self.config = config
        self.host: LearnerHost = make_host(config, device)
        """Where the learner and its server run (``placement``)."""
        self.learning: SeedLearning | None = self.host.learning
        """Model, server, listeners and learner, in this process (None with Ray: they live in the
        learner's Ray actor)."""
        self.device = self.host.device
        self.target_metric = config.algorithm_class.target_metric
        self.log_interval = float(log_interval)
        super().__init__(
            name=name,
            runs_dir=runs_dir,
            label=f"seed_{config.env_id}",
            settings=actor_settings(config.num_actors, config.actor_limit),
            limits=limits or Limits(),
            checkpoint_every=checkpoint_every,
            checkpoint_seconds=checkpoint_seconds,
        )
        self.num_actors = config.num_actors
        self.transport: SeedTransport | None = None
        self._steps_before = 0
        self._events_seen = 0

    # --- what lives in this process (serial and local transports) ---------------------------------

    def _local(self, what: str) -> SeedLearning:
        if self.learning is None:
            raise AttributeError(
                f"a transport='ray' run keeps its {what} in the learner's Ray actor; read its "
                "state with run.learner_state() (or run a local transport)"
            )
        return self.learning

    @property
    def model(self) -> torch.nn.Module:
        """The model the server acts with and the learner trains."""
        return self._local("model").model

    @property
    def learner(self) -> Any:
        return self._local("learner").learner

    @property
    def server(self) -> Any:
        """The ``InferenceServer``."""
        return self._local("server").server

    @property
    def max_batch_size(self) -> int:
        """Requests per forward pass of the server."""
        return self.host.max_batch_size

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Requests per forward pass, from the server's next batch on (a live knob)."""
        self.host.set_max_batch_size(max_batch_size)

    def learner_state(self) -> dict[str, Any]:
        """The learner's state (model, optimizer, counters) wherever it lives."""
        return self.host.state_dict()

    # --- control ----------------------------------------------------------------------------------

    def set_num_actors(self, num_actors: int) -> None:
        """Ask for ``num_actors`` actors; the learner loop applies it at its next step."""
        self.update_settings(num_actors=num_actors)

    def update_settings(self, **values: Any) -> ActorSettings:
        """``settings.update(**values)`` (``ActorSettings`` bounds ``num_actors`` by the run's
        actor limit) on a transport that can change the count, applied by the learner loop at its
        next step (a panel's slider writes here)."""
        if "num_actors" in values:
            if self.config.transport == "serial":
                raise ValueError(
                    "the serial transport steps a fixed set of envs; use transport='local' or "
                    "'ray' to add or remove actors while the run goes."
                )
        return self.settings.update(**values)

    def actor_pids(self) -> list[int]:
        transport = self.transport  # read once: the loop's thread sets it to None when it ends
        return [] if transport is None else list(transport.pids)

    # --- the loop's steps -------------------------------------------------------------------------

    def open_loop(self) -> None:
        self._threads = torch.get_num_threads()
        torch.set_num_threads(self.config.learner_threads)
        self._steps_before = self.env_steps
        self._next_row = time.monotonic() + self.log_interval
        self._events_seen = 0
        try:
            endpoint = self.host.open(self.num_actors)
            self.transport = make_actors(self.config, endpoint, self.num_actors)
            self.transport.start()
            self.host.begin()
        except BaseException:
            self.close_loop()
            raise

    def close_loop(self) -> None:
        try:
            if self.transport is not None:
                self.env_steps = self._steps_before + self.transport.steps
                self.transport.stop()  # the actors first: then the learner's host ends
            updates = self.host.close()
            if updates is not None:  # the learner ran on while the run stopped: its last count
                self.updates = updates
        finally:
            self.transport = None
            torch.set_num_threads(self._threads)

    def apply_settings(self, new: ActorSettings, old: ActorSettings) -> None:
        if new.num_actors == self.num_actors:
            return
        self.transport.set_num_actors(new.num_actors)
        self.num_actors = new.num_actors
        self.host.set_num_actors(new.num_actors)

    def step(self) -> dict[str, Any] | None:
        transport = self.transport
        try:
            transport.check()
        except RuntimeError:
            self.host.check_lost()  # the server gone: a RoleLost if its host went too
            raise
        self._report_actor_events()
        self.updates = self.host.step(transport, self._next_row)
        self.env_steps = self._steps_before + transport.steps
        if time.monotonic() < self._next_row:
            return None
        self._next_row = time.monotonic() + self.log_interval
        return self._row()

    def final_row(self) -> dict[str, Any] | None:
        return self._row() if self.transport is not None else None

    def _report_actor_events(self) -> None:
        """Actor deaths, restarts and errors since the last step, as event rows."""
        events = self.transport.events
        for event in events[self._events_seen :]:
            if event.kind in ("died", "restarted", "error"):
                self.event(f"actor_{event.kind}", actor=event.actor, detail=event.detail)
        self._events_seen = len(events)

    def _row(self) -> dict[str, Any]:
        report = self.host.report()
        self.record_episodes(report["returns"])
        return report["row"]

    def actor_nodes(self) -> dict[int, str]:
        """Ray: the node id of each running actor (index -> node id); other transports: {}."""
        nodes = getattr(self.transport, "actor_nodes", None)
        return nodes() if nodes is not None else {}

    # --- checkpoints ------------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        learner = self.config.algorithm_class.learner_class
        return {
            "env_id": self.config.env_id,
            "config": config_to_dict(self.config),
            "device": str(self.device),
            "transport": self.config.transport,
            "algo": f"{learner.__module__}.{learner.__qualname__}",
        }

    def run_state(self) -> dict[str, Any]:
        return {"config": config_to_dict(self.config), **self.learner_state()}

    def load_run_state(self, state: dict[str, Any]) -> None:
        self.host.load_state_dict(state)

    @classmethod
    def from_checkpoint(
        cls,
        path: Any,
        *,
        config: SeedConfig | None = None,
        seed: int | None = None,
        name: str | None = None,
        device: str = "cpu",
        runs_dir: str | None = None,
        **options: Any,
    ) -> "Seed":
        """A SEED run that continues a checkpoint (a file, or a run's folder): the learner's
        weights, optimizer and counters, the env steps, the wall clock, the RNG states. The config
        defaults to the saved one (pass ``config`` to continue on another transport); the run
        keeps its name, so its metrics file grows. With ``seed``, a continuation of its own
        (``runs.records.resume_point``): that seed's envs and sampling, a name (``name``, else a
        fresh one) and metrics file of its own. Not started."""
        saved, config, runs_dir, saved_name = resume_point(path, config, runs_dir, seed)
        run = cls(config, device=device, name=name or saved_name, runs_dir=runs_dir, **options)
        return run.load_checkpoint(saved, str(path), seed=seed)
