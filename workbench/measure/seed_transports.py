"""SEED's transports side by side: what it costs to reach the inference server in-machine and
through Ray, with actors that step several envs each.

SEED (Espeholt et al. 2020, Sec. 3) streams every env step to the server and waits for the action,
so the cost of one request bounds how fast an actor steps. Two transports carry the same requests
to the same ``InferenceServer``:

* ``local``: env-only actor processes on this machine (``seed.transports.LocalActors``):
  observations in shared memory, one pipe write each way per request;
* ``ray``: env-only Ray actors (``seed.transports.ray.RayActors``) calling a ``RayInferenceServer``
  actor through Ray's RPC, what SEED across machines pays (here on loopback: the RPC without the
  wire).

An actor with ``envs_per_actor`` envs sends them all in one request and steps them while other
actors' requests are served: more envs per actor amortise a request over more env steps, and fewer
actors mean fewer processes on the cores. :func:`measure_transport` counts env steps per second in
a window after a warm-up, with the server's batch and latency (queue wait + forward), the CPU time
every process of the transport spent per step, and, for Ray, each actor's own round trip: its
excess over the server's latency is the per-request overhead of the hop
(``request_overhead_ms``).
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import psutil

from workbench.measure.central_inference import (
    SeedSettings,
    check_args,
    make_model,
    measure_window,
)
from workbench.measure.throughput import torch_threads
from workbench.seed.server import InferenceServer, SampledPolicy
from workbench.seed.transports.local import LocalActors

__all__ = ["TRANSPORT_KINDS", "TransportResult", "machine_limit", "measure_transport"]

TRANSPORT_KINDS = ("local", "ray")


@dataclass
class TransportResult:
    """One transport at one layout (actors x envs per actor)."""

    transport: str
    num_actors: int
    envs_per_actor: int
    steps_per_second: float
    """Env steps answered per second, all envs together, inside the measured window."""
    steps: int
    seconds: float
    cpu_ms_per_step: float
    """CPU time (user + system) per env step of every process of the transport: the actors and
    the server (Ray: every process of the private Ray instance, raylet and GCS included)."""
    mean_batch_size: float
    latency_p50_ms: float
    """The server's latency per env step: queue wait + forward pass."""
    latency_p99_ms: float
    round_trip_p50_ms: float | None = None
    """Ray: request sent -> action back, as the actors saw it (mean of their p50s)."""
    request_overhead_ms: float | None = None
    """Ray: ``round_trip_p50_ms - latency_p50_ms``, what one request's hop costs beyond serving."""
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def layout(self) -> str:
        """``ACTORSxENVS``, with ``/BATCH`` when an actor's envs step asynchronously in batches."""
        batch = self.settings.get("actor_batch")
        suffix = "" if batch in (None, self.envs_per_actor) else f"/{batch}"
        return f"{self.num_actors}x{self.envs_per_actor}{suffix}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "layout": self.layout}


def measure_transport(
    transport: str,
    env_id: str,
    num_actors: int,
    envs_per_actor: int,
    seconds: float,
    *,
    settings: SeedSettings | None = None,
    warmup: float = 1.0,
    seed: int = 0,
    env_options: dict | None = None,
    model: Any = None,
) -> TransportResult:
    """Env steps per second of ``num_actors`` env-only actors with ``envs_per_actor`` envs each,
    served by one server over ``transport`` (``"local"`` or ``"ray"``; Ray is the instance this
    process uses, else a private local one: ``workbench.cluster``).

    ``settings``: the server's threads, batch and timeout (:class:`SeedSettings`; a batch may hold
    every env, the timeout is chosen by the actor count), and for the local transport the envs an
    actor sends per request (``actor_batch``: fewer than its envs step them asynchronously). The
    same model (``make_model``, NatureCNN for Atari) and the same envs on both transports."""
    if transport not in TRANSPORT_KINDS:
        raise ValueError(f"transport must be one of {TRANSPORT_KINDS}, got {transport!r}")
    check_args(env_id, num_actors, seconds, warmup)
    if (
        isinstance(envs_per_actor, bool)
        or not isinstance(envs_per_actor, int)
        or envs_per_actor < 1
    ):
        raise ValueError(f"envs_per_actor must be a positive int, got {envs_per_actor!r}")
    settings = settings or SeedSettings()
    if transport == "ray" and settings.actor_batch not in (None, envs_per_actor):
        raise ValueError(
            "Ray env actors step all their envs in one request; actor_batch is for the local "
            "transport (leave it None with transport='ray')"
        )
    model = model if model is not None else make_model(env_id, seed=seed, env_options=env_options)
    envs = num_actors * envs_per_actor
    batch, timeout = settings.batch_size_for(envs), settings.timeout_for(num_actors)
    measure = _measure_ray if transport == "ray" else _measure_local
    result = measure(
        env_id,
        num_actors,
        envs_per_actor,
        seconds,
        warmup,
        seed,
        env_options,
        model,
        batch,
        timeout,
        settings,
    )
    result.settings = {**asdict(settings), "max_batch_size": batch, "timeout": timeout}
    return result


def _measure_local(
    env_id,
    num_actors,
    envs_per_actor,
    seconds,
    warmup,
    seed,
    env_options,
    model,
    batch,
    timeout,
    settings,
) -> TransportResult:
    started = time.perf_counter()
    with torch_threads(settings.server_threads):
        # The server serves a copy on its device; the caller's model stays where it is.
        served = copy.deepcopy(model).to(settings.device)
        server = InferenceServer(SampledPolicy(served), batch, timeout, device=settings.device)
        actors = LocalActors(
            server,
            env_id,
            num_actors,
            envs_per_actor=envs_per_actor,
            seed=seed,
            env_options=env_options,
            nice=settings.actor_nice,
            actor_batch=settings.actor_batch,
        )
        try:
            actors.start()
            processes = [psutil.Process()] + [psutil.Process(pid) for pid in actors.pids]
            steps, window, _, cpu = measure_window(
                lambda: actors.steps,
                actors.check,
                num_actors * envs_per_actor,
                seconds,
                warmup,
                started,
                processes,
                on_open=server.latency.reset,
            )
            stats = server.stats()
        finally:
            actors.stop()
    return TransportResult(
        "local",
        num_actors,
        envs_per_actor,
        steps / window,
        steps,
        window,
        1000.0 * cpu / max(steps, 1),
        stats.get("mean_batch_size", float("nan")),
        stats.get("latency_p50_ms", float("nan")),
        stats.get("latency_p99_ms", float("nan")),
    )


def _measure_ray(
    env_id,
    num_actors,
    envs_per_actor,
    seconds,
    warmup,
    seed,
    env_options,
    model,
    batch,
    timeout,
    settings,
) -> TransportResult:
    from workbench.cluster import end_killed_actors, ensure_ray, private_ray
    from workbench.seed.transports.ray import ACTOR_START_TIMEOUT, RayActors
    from workbench.seed.transports.ray_server import RayInferenceServer

    ray = ensure_ray()
    started = time.perf_counter()
    server = RayInferenceServer.launch(
        model, batch, timeout, torch_threads=settings.server_threads, device=settings.device
    )
    actors = RayActors(
        server,
        env_id,
        num_actors,
        envs_per_actor=envs_per_actor,
        seed=seed,
        env_options=env_options,
        nice=settings.actor_nice,
    )
    instance = private_ray()
    server_pid = None
    try:
        server_pid = ray.get(server.pid.remote(), timeout=ACTOR_START_TIMEOUT)
        actors.start()

        def reset_latency() -> None:
            # Both sides of the hop from the same moment: the actors' round trips since their start
            # (the warm-up, a slow spell) against the server's latency in the window alone made
            # the overhead negative on a loaded machine.
            ray.get(server.reset_stats.remote(), timeout=60)
            actors.reset_round_trips()

        processes = [psutil.Process(), *(instance.processes() if instance else [])]
        steps, window, _, cpu = measure_window(
            lambda: actors.steps,
            actors.check,
            num_actors * envs_per_actor,
            seconds,
            warmup,
            started,
            processes,
            on_open=reset_latency,
        )
        stats = ray.get(server.stats.remote(), timeout=60)
        round_trips = [s.get("round_trip_p50_ms") for s in actors.actor_stats().values()]
    finally:
        actors.stop()
        ray.kill(server)
        end_killed_actors([server_pid] if server_pid is not None else [])
    round_trip = float(np.mean([r for r in round_trips if r is not None])) if round_trips else None
    latency = stats.get("latency_p50_ms", float("nan"))
    return TransportResult(
        "ray",
        num_actors,
        envs_per_actor,
        steps / window,
        steps,
        window,
        1000.0 * cpu / max(steps, 1) if instance else float("nan"),
        stats.get("mean_batch_size", float("nan")),
        latency,
        stats.get("latency_p99_ms", float("nan")),
        round_trip,
        None if round_trip is None else round_trip - latency,
    )


def machine_limit(env_id: str, model: Any, seconds: float) -> dict[str, Any]:
    """The most env steps per second any SEED layout can reach here: env stepping alone (ale_py's
    C++ envs, 16 envs, every core) and inference alone (batches of 32 and 128, every core), each at
    its best, combined by ``throughput.limit_steps_per_second`` (``sampler_throughput.py``'s limit
    row, measured the same way)."""
    from workbench.envs import env_spaces
    from workbench.measure import throughput
    from workbench.system import usable_cores

    cores = usable_cores()
    obs_shape = env_spaces(env_id)[0].shape
    env = max(
        (
            throughput.measure_vector_env(env_id, 16, seconds, batch_size=b, num_threads=cores)
            for b in (8, 16)
        ),
        key=lambda m: m.steps_per_second,
    )
    inference = max(
        (
            throughput.measure_inference(model, obs_shape, b, seconds, num_threads=cores)
            for b in (32, 128)
        ),
        key=lambda m: m.steps_per_second,
    )
    return {
        "limit_steps_per_second": throughput.limit_steps_per_second(env, inference, cores),
        "env_only": env.to_dict(),
        "inference_only": inference.to_dict(),
    }
