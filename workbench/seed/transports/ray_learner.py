"""SEED's learner and its inference server in one Ray actor: the Ray transport's accelerator host.

SEED (Espeholt et al. 2020, Sec. 3, Fig. 2) puts inference next to learning: the learner trains the
very model the server acts with, so parameters never travel to the actors, which only step
environments on other machines. ``RaySeedLearner`` is that host as one Ray actor. It holds a
``learning.SeedLearning`` (the model, the ``InferenceServer`` with its trajectory assembler and
episode log, the V-trace or R2D2 learner, R2D2's replay and rate limiter) and serves env actors
through the batching of :class:`ray_server.RayInferenceServer`; a learner thread in the same
process trains on what the assembler cuts, as the learner loop of a local run does.

The run (``Seed`` with ``transport="ray"``) drives it from the driver's process: ``start_learning``
and ``stop_learning``, ``report`` for each metrics row, ``state_dict`` / ``load_state_dict`` for
checkpoints, ``set_num_actors`` (R2D2's per-slot epsilons) and ``set_max_batch_size``. Env actors
call ``infer`` as they call any ``RayInferenceServer``. The module imports torch only inside the
actor.
"""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from typing import Any

from workbench.cluster import (
    acquire_ray,
    ensure_ray,
    import_ray,
    node_left,
    node_strategy,
    pinned_node,
    release_ray,
)
from workbench.restarts import RoleLost
from workbench.seed.env_actors import served_spaces
from workbench.seed.transports import SeedTransport
from workbench.seed.transports.batching import check_max_batch_size
from workbench.seed.transports.ray_server import RayInferenceServer

__all__ = ["RayHost", "RaySeedLearner", "RemoteLearning"]

#: Seconds the learner thread waits for data before it looks at its stop flag again.
LEARN_WAIT = 0.05
#: Seconds a call of the run to the learner's actor may take before the run fails with the reason.
CALL_TIMEOUT = 120.0
#: How to continue when the learner's node dies (``RoleLost``).
LEARNER_LOST = (
    "Seed.from_checkpoint({checkpoint}, config=dataclasses.replace(config, learner_node=None)) "
    "starts its learner and server on this process's node."
)


class RaySeedLearner(RayInferenceServer):
    """A SEED run's learner and inference server in one Ray actor (launch with :meth:`launch`).

    Args:
        config: the run's ``SeedConfig``.
        device: where the model lives (``"auto"``: this actor's GPU when it has one).
        state: a ``SeedLearning.state_dict()`` to continue from (a resumed run), or None.
    """

    def __init__(self, config: Any, device: str = "cpu", state: dict | None = None) -> None:
        import torch

        from workbench.seed.algorithms import make_learning

        torch.set_num_threads(config.learner_threads)
        self.learning = make_learning(config, device)
        if state is not None:
            self.learning.load_state_dict(state)
        super().__init__(None, server=self.learning.server, torch_threads=None)
        self._metrics: dict[str, float] = {}
        self._learn_stop = threading.Event()
        self._learn_thread: threading.Thread | None = None

    @classmethod
    def launch(
        cls,
        config: Any,
        *,
        device: str = "cpu",
        node_id: str | None = None,
        state: dict | None = None,
        max_concurrency: int = 10_000,
    ) -> Any:
        """Start the learner's actor and return its handle: on ``node_id`` (default: this
        process's node), with a GPU when ``device`` asks for one and the cluster has one."""
        ray = ensure_ray()
        node_id = node_id or ray.get_runtime_context().get_node_id()
        wants_gpu = device != "cpu" and ray.cluster_resources().get("GPU", 0) > 0
        return (
            ray.remote(cls)
            .options(
                num_cpus=0,
                num_gpus=1 if wants_gpu else 0,
                max_concurrency=max_concurrency,
                max_restarts=0,
                scheduling_strategy=node_strategy(node_id),
            )
            .remote(config, device, state)
        )

    # -- the learner thread ------------------------------------------------------------------------

    async def start_learning(self) -> None:
        """Train in a thread of this actor until ``stop_learning`` (or a failure, which stops the
        server: every env actor ends, and the run's ``check`` raises the reason)."""
        if self._learn_thread is not None:
            return
        self._learn_stop.clear()
        self._learn_thread = threading.Thread(
            target=self._learn_loop, name="seed-learner", daemon=True
        )
        self._learn_thread.start()

    def _learn_loop(self) -> None:
        try:
            while not self._learn_stop.is_set() and self.stopped is None:
                metrics = self.learning.learn(LEARN_WAIT)
                if metrics:
                    self._metrics = metrics
        except BaseException as error:  # the run must learn why, not hang
            self.fail(f"the learner failed: {error!r}\n{traceback.format_exc()}")

    async def stop_learning(self, timeout: float = 30.0) -> None:
        """End the learner thread after its update in progress."""
        thread, self._learn_thread = self._learn_thread, None
        if thread is None:
            return
        self._learn_stop.set()
        await asyncio.get_running_loop().run_in_executor(None, thread.join, timeout)

    # -- what the run reads and sets ---------------------------------------------------------------

    async def progress(self) -> dict[str, Any]:
        """``RayInferenceServer.progress`` with the learner's ``updates``."""
        return {**(await super().progress()), "updates": self.learning.updates}

    async def report(self) -> dict[str, Any]:
        """``SeedLearning.report()`` with the last update's metrics (``losses/...``)."""
        report = self.learning.report()
        report["row"] = {**self._metrics, **report["row"]}
        return report

    async def state_dict(self) -> dict[str, Any]:
        """The learner's state (``SeedLearning.state_dict``), its tensors on the CPU."""
        with self.learning.lock:
            return cpu(self.learning.state_dict())

    async def load_state_dict(self, state: dict[str, Any]) -> None:
        with self.learning.lock:
            self.learning.load_state_dict(state)

    async def set_num_actors(self, num_actors: int) -> None:
        self.learning.set_num_actors(num_actors)

    async def set_max_batch_size(self, max_batch_size: int) -> None:
        self.learning.set_max_batch_size(max_batch_size)


def cpu(value: Any) -> Any:
    """``value`` with every tensor in it moved to the CPU (what crosses to the driver)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(cpu(item) for item in value)
    return value


class RemoteLearning:
    """The run's handle on its learner's Ray actor (``Seed`` with ``transport="ray"``): blocking
    calls with a time limit, the actor's death as a ``RoleLost`` naming it, its node, and how to
    continue.

    Args:
        config, device, state: the ``RaySeedLearner``'s (``state``: to continue from, or None).
        node_id: the node it runs on (None: this process's; one not live is refused).
    """

    def __init__(
        self, config: Any, *, device: str = "cpu", node_id: str | None = None, state: Any = None
    ) -> None:
        self.ray = ensure_ray()
        self.node_id = pinned_node(node_id, "SeedConfig.learner_node")
        self.actor = RaySeedLearner.launch(config, device=device, node_id=self.node_id, state=state)

    def call(self, method: str, *args: Any) -> Any:
        """``method(*args)`` on the actor, waited for."""
        ray = self.ray
        try:
            return ray.get(getattr(self.actor, method).remote(*args), timeout=CALL_TIMEOUT)
        except ray.exceptions.RayActorError as error:
            raise RoleLost(
                "SEED's learner and inference server",
                self.node_id,
                node_left(self.node_id),
                error,
                LEARNER_LOST,
            ) from None

    def close(self) -> dict[str, Any] | None:
        """Stop learning and end the actor; returns the learner's last state (None if the actor
        died first: then the run's error says why)."""
        ray, state = self.ray, None
        try:
            ray.get(self.actor.stop_learning.remote(), timeout=CALL_TIMEOUT)
            state = ray.get(self.actor.state_dict.remote(), timeout=CALL_TIMEOUT)
        except ray.exceptions.RayError:
            pass
        finally:
            ray.kill(self.actor)
        return state


class RayHost:
    """SEED's learner host in one Ray actor, as the run sees it (``placement.LearnerHost``): the
    Ray instance held while the loop runs, the learner's actor launched with the saved state at
    ``open`` and its last state kept at ``close``, so a run continues across segments.

    Args:
        config: the run's ``SeedConfig`` (``learner_node``: where the actor runs).
        device: the model's device in the actor (``"auto"``: its GPU when it has one).
    """

    learning = None  # the learner's state lives in the actor; read it with state_dict()

    def __init__(self, config: Any, device: Any = "cpu") -> None:
        import_ray()  # a clear ImportError now, not when the loop starts
        served_spaces(config.env_id, config.env_options)  # a bad id fails here, not remotely
        self.config, self.device = config, device
        self.remote: RemoteLearning | None = None
        self.state: dict[str, Any] | None = None
        """The learner's state between segments (sent to the actor when the loop opens)."""
        self.max_batch_size = config.max_batch_size or config.slots
        self.num_actors = config.num_actors
        self.updates = 0
        self.held = False

    def open(self, num_actors: int) -> Any:
        acquire_ray()
        self.held = True
        self.remote = RemoteLearning(
            self.config, device=self.device, node_id=self.config.learner_node, state=self.state
        )
        self.num_actors = num_actors
        self.remote.call("set_num_actors", num_actors)
        self.remote.call("set_max_batch_size", self.max_batch_size)
        return self.remote.actor

    def begin(self) -> None:
        self.remote.call("start_learning")

    def step(self, transport: SeedTransport, until: float) -> int:
        """The learner's actor trains on its own: wait, then read its count from the server's
        last progress (``SeedTransport.last_progress``)."""
        time.sleep(min(transport.wait_seconds, max(0.0, until - time.monotonic())))
        self.updates = int(transport.last_progress.get("updates", self.updates))
        return self.updates

    def report(self) -> dict[str, Any]:
        return self.remote.call("report")

    def set_num_actors(self, num_actors: int) -> None:
        self.num_actors = num_actors
        if self.remote is not None:
            self.remote.call("set_num_actors", num_actors)

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Checked now; the actor gets it now, or when the loop opens."""
        check_max_batch_size(max_batch_size, self.config.slots)
        if self.remote is not None:
            self.remote.call("set_max_batch_size", max_batch_size)
        self.max_batch_size = max_batch_size

    def state_dict(self) -> dict[str, Any]:
        if self.remote is not None:
            return self.remote.call("state_dict")
        if self.state is None:
            raise RuntimeError("this Ray run has not started: its learner has no state yet")
        return self.state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = state

    def check_lost(self) -> None:
        """Its server gone with the actors' transport: a ``RoleLost`` if the learner went too."""
        if self.remote is not None:
            self.remote.call("progress")

    def close(self) -> int | None:
        try:
            if self.remote is None:
                return None
            remote, self.remote = self.remote, None
            state = remote.close()
            if state is None:  # the actor died first: the run's error says why
                return None
            self.state = state  # the learner ran on while the run stopped: its last count
            return int(state["learner"]["num_updates"])
        finally:
            if self.held:  # a private Ray instance this run started ends with it
                self.held = False
                release_ray()
