"""SEED against IMPALA: env steps per second with central inference or with a model in every actor.

SEED RL (Espeholt et al. 2020, https://arxiv.org/abs/1910.06591, Sec. 3 and Fig. 1-2) moves
inference out of the actors: an actor only steps its environment and asks one central server for
each action; the server answers many actors with one batched forward pass. IMPALA (Espeholt et al.
2018) keeps a copy of the policy in every actor, which runs a batch-1 forward pass on its own CPU
each step. The paper's argument is about cost: batch-1 inference on many CPUs wastes them, and a
model in every actor costs memory and parameter traffic. This module measures the claim on the
machine at hand, both systems side by side in one run:

* :func:`measure_seed`: ``num_actors`` env-only actor processes (``workbench.seed.env_actors``:
  they never import torch) served by a ``seed.server.InferenceServer`` in this process
  (``LocalActors``: observations in shared memory, one pipe write each way per step).
* :func:`measure_impala`: ``num_actors`` processes running ``impala_actors.impala_actor_main``,
  each with its own ``ActorCritic`` (one torch thread) and one batch-1 forward pass per step.
* :func:`central_inference_study`: both at each actor count, interleaved so that noise from other
  jobs hits both; :func:`ratio` reads the SEED / IMPALA speed-up off its rows.

Both sides step ``make_vector_env(env_id, 1, num_threads=1)`` per actor (the same preprocessing:
``make_vector_env``'s defaults) and run the same ``models.ActorCritic`` (NatureCNN trunk for Atari)
with the same parameters, sampling actions with ``ActorCritic.act``. A **step** is one env step
answered with an action. Steps are counted only inside the measured window, which opens after a
warm-up: every actor started, has stepped, and ``warmup`` more seconds passed. Beside steps/s each
result gives the CPU time all its processes spent per step (``cpu_ms_per_step``: the cost the
paper's argument is about, steadier than steps/s on a shared machine), the actors' memory, and
action latency: for SEED the server's queue wait + forward time per request (p50/p99), for IMPALA
the actor's own forward time per step.

Server settings (:class:`SeedSettings`), chosen by interleaved measurements on the 2-core machine
of the project (AMD EPYC, 2 cores) while other jobs ran (Pong, 2-16 actors, 4-6 s windows, 2-3
passes each):

* ``server_threads=1``: one torch thread for the forward pass. A second intra-op thread only
  competes with the actor processes for the same two cores: at 8 actors it was 10-20% slower.
* ``max_batch_size=None`` -> ``num_actors``: a batch may hold every actor. Capping it at half the
  actors (two groups whose stepping overlaps the other's forward pass) was no faster at 8 or 16
  and cost more CPU per step (batch-1 to batch-4 forward passes cost 1.0 to 0.45 ms per
  observation on one thread, batch 16 0.38 ms).
* ``timeout=None`` -> 2 ms below 8 actors, 0 from 8 on. With few actors the transport closes a
  batch when every actor waits, and they all arrive within about a millisecond: waiting up to
  2 ms for them gave full batches and the best rate at 2-4 actors. With 8-16 actors on two cores
  the last requests come from actors descheduled behind the others; waiting for them leaves the
  server idle (about one core in use in all). Greedy batching (answer whatever waits as soon as
  the server is free; the batch grows with the load by itself, 4-5 at 8 actors, 11 at 16) was
  15-25% faster at 8 actors and as fast at 16.
* ``actor_nice=0``: the actors run at the server's priority, as the IMPALA actors do. A lower
  priority for them (+5, which ``LocalActors`` offers so that actors cannot starve a learner in
  the server's process) made no consistent difference here, and beside other jobs at nice 3-5
  it put the SEED actors behind them while the IMPALA actors were not.

On a machine that other jobs keep busy both systems get less than two cores and the ratio of
steps/s approaches the ratio of CPU per step (about 2x here: ~1.1-1.3 ms per step for SEED, env
step plus its share of a batched forward pass, against ~2.2-2.5 ms for IMPALA, env step plus a
batch-1 forward pass); on an idle machine IMPALA's always-runnable actors fill both cores while
SEED's actors wait for their answers, which narrows it.

Every process started here is daemonic and dies with this one (``processes.die_with_parent``), and
each measurement ends its processes in a ``finally`` (Ctrl-C and errors included).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import psutil
import torch

from workbench.envs import env_spaces
from workbench.measure.impala_actors import ImpalaActors
from workbench.measure.throughput import torch_threads
from workbench.models import ActorCritic
from workbench.processes import WORKER_TIMEOUT
from workbench.progress import each
from workbench.seed.server import InferenceServer, SampledPolicy
from workbench.seed.transports.local import LocalActors
from workbench.system import resolve_device

__all__ = [
    "SeedSettings",
    "check_args",
    "cpu_seconds",
    "make_model",
    "measure_window",
    "rss_mb",
    "ThroughputResult",
    "StudyRow",
    "measure_seed",
    "measure_impala",
    "central_inference_study",
    "ratio",
]

#: Forward times each IMPALA actor keeps (a ring buffer in shared memory) for the percentiles.
LATENCY_WINDOW = 4096


@dataclass
class SeedSettings:
    """How the SEED side serves its actors (the module docstring says why these defaults)."""

    server_threads: int = 1
    """torch threads of the serving process's forward pass."""
    max_batch_size: int | None = None
    """The most requests per forward pass; None: ``num_actors`` (every actor in one batch)."""
    timeout: float | None = None
    """Seconds the oldest request may wait for its batch to fill; None: 2 ms below 8 actors, 0
    (greedy: answer what waits as soon as the server is free) from 8 on."""
    actor_nice: int = 0
    """Niceness added to the env-only actors (the IMPALA actors run at 0)."""
    device: str = "cpu"
    """Where the server's forward pass runs (``"auto"``: the GPU when there is one)."""
    actor_batch: int | None = None
    """Envs per request of an actor with several envs (``LocalActors``): None, all of them; fewer
    steps them asynchronously."""

    def batch_size_for(self, num_actors: int) -> int:
        return num_actors if self.max_batch_size is None else min(self.max_batch_size, num_actors)

    def timeout_for(self, num_actors: int) -> float:
        if self.timeout is not None:
            return self.timeout
        return 0.002 if num_actors < 8 else 0.0


@dataclass
class ThroughputResult:
    """One measurement of one system at one actor count."""

    system: str
    """``"seed"`` or ``"impala"``."""
    num_actors: int
    steps_per_second: float
    """Env steps answered per second, all actors together, inside the measured window."""
    steps: int
    seconds: float
    """Length of the measured window."""
    warmup_seconds: float
    """From the call to the window's start (process start-up, env construction, warm-up)."""
    cpu_ms_per_step: float
    """CPU time (user + system) of every process of the system per step, in ms: for SEED the
    actors and the serving process, for IMPALA the actors."""
    actor_rss_mb: float
    """Mean resident memory of one actor process, MB."""
    latency: dict[str, float] = field(default_factory=dict)
    """Milliseconds from request to action: SEED, the server's ``stats()`` over the window
    (``latency_p50_ms``, ``latency_p99_ms``, ``queue_wait_*``, ``forward_*``, ``mean_batch_size``);
    IMPALA, the actors' own forward pass (``latency_p50_ms``, ``latency_p99_ms``)."""
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class StudyRow:
    """SEED and IMPALA at one actor count (with ``repeats`` > 1, each side's best pass)."""

    num_actors: int
    seed: ThroughputResult
    impala: ThroughputResult
    seed_passes: list[float] = field(default_factory=list)
    """SEED's steps/s in every pass."""
    impala_passes: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """SEED's env steps/s over IMPALA's."""
        return self.seed.steps_per_second / max(self.impala.steps_per_second, 1e-9)

    def as_dict(self) -> dict:
        return {
            "num_actors": self.num_actors,
            "seed_vs_impala": self.ratio,
            "seed": asdict(self.seed),
            "impala": asdict(self.impala),
            "seed_passes": self.seed_passes,
            "impala_passes": self.impala_passes,
        }


def ratio(rows: Sequence[StudyRow], num_actors: int | None = None) -> float:
    """SEED / IMPALA env steps/s at ``num_actors`` (default: the largest count in ``rows``)."""
    if not rows:
        raise ValueError("no rows: run central_inference_study first")
    if num_actors is None:
        return max(rows, key=lambda r: r.num_actors).ratio
    for row in rows:
        if row.num_actors == num_actors:
            return row.ratio
    raise ValueError(
        f"no row for {num_actors} actors; the rows have {[r.num_actors for r in rows]}"
    )


# --------------------------------------------------------------------------------------------------
# The model both sides run


def make_model(env_id: str, *, seed: int = 0, env_options: dict | None = None) -> ActorCritic:
    """The ``ActorCritic`` for ``env_id`` (NatureCNN trunk for image observations), seeded."""
    observation_space, action_space = env_spaces(env_id, **(env_options or {}))
    if not hasattr(action_space, "n"):
        raise ValueError(
            f"{env_id} has a continuous action space {action_space}; the study serves "
            "discrete actions. Pick a discrete-action env (ALE/Pong-v5, CartPole-v1)."
        )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = ActorCritic(observation_space.shape, int(action_space.n))
    return model.eval()


def cpu_seconds(processes: Sequence[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def rss_mb(pids: Sequence[int]) -> float:
    sizes = []
    for pid in pids:
        try:
            sizes.append(psutil.Process(pid).memory_info().rss / 2**20)
        except psutil.NoSuchProcess:
            pass
    return float(np.mean(sizes)) if sizes else float("nan")


def check_args(env_id: str, num_actors: int, seconds: float, warmup: float) -> None:
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env_id must be a gymnasium id such as 'ALE/Pong-v5', got {env_id!r}")
    if not isinstance(num_actors, int) or isinstance(num_actors, bool) or num_actors < 1:
        raise ValueError(f"num_actors must be a positive int, got {num_actors!r}")
    if not seconds > 0 or not warmup >= 0:
        raise ValueError(f"seconds must be > 0 and warmup >= 0, got {seconds!r} and {warmup!r}")


def measure_window(
    read_steps: Callable[[], int],
    check: Callable[[], None],
    num_actors: int,
    seconds: float,
    warmup: float,
    started: float,
    processes: Sequence[psutil.Process],
    on_open: Callable[[], None] = lambda: None,
) -> tuple[int, float, float, float]:
    """Warm up (every actor stepped, then ``warmup`` s), then count steps for ``seconds``, and on
    until the window holds a step per actor: a short window on a loaded machine can otherwise
    end before a starved actor steps once and measure a rate of 0.

    Returns (steps, window seconds, warm-up seconds, CPU seconds of ``processes`` in the window)."""
    deadline = time.monotonic() + WORKER_TIMEOUT
    while read_steps() < 5 * num_actors:
        check()
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{num_actors} actors made {read_steps()} steps in {WORKER_TIMEOUT:.0f} s"
            )
        time.sleep(0.02)
    time.sleep(warmup)
    check()
    on_open()
    cpu0, steps0, t0 = cpu_seconds(processes), read_steps(), time.perf_counter()
    end = t0 + seconds
    deadline = time.monotonic() + seconds + WORKER_TIMEOUT
    while (now := time.perf_counter()) < end or read_steps() - steps0 < num_actors:
        time.sleep(min(0.1, max(end - now, 0.01)))
        check()
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{num_actors} actors made {read_steps() - steps0} steps in a window of "
                f"{seconds + WORKER_TIMEOUT:.0f} s: the machine is overloaded"
            )
    steps1, t1, cpu1 = read_steps(), time.perf_counter(), cpu_seconds(processes)
    return steps1 - steps0, t1 - t0, t0 - started, cpu1 - cpu0


def measure_seed(
    env_id: str,
    num_actors: int,
    seconds: float,
    *,
    settings: SeedSettings | None = None,
    warmup: float = 1.0,
    seed: int = 0,
    env_options: dict | None = None,
    model: ActorCritic | None = None,
) -> ThroughputResult:
    """SEED: ``num_actors`` env-only actors (one env each) served by one ``InferenceServer``.

    Args:
        env_id: the envs' id (``"ALE/Pong-v5"``, ``"CartPole-v1"``).
        num_actors: actor processes, one env each.
        seconds: length of the measured window.
        settings: the server's settings (:class:`SeedSettings`; the defaults are measured choices).
        warmup: seconds between every actor having stepped and the window's start.
        seed: seeds the model's initial parameters (when ``model`` is None) and the envs.
        model: the ``ActorCritic`` to serve (default :func:`make_model`).
    """
    check_args(env_id, num_actors, seconds, warmup)
    settings = settings or SeedSettings()
    started = time.perf_counter()
    model = model if model is not None else make_model(env_id, seed=seed, env_options=env_options)
    device = resolve_device(settings.device)
    if device.type != "cpu":  # the server serves the model where it lives: a copy goes there
        model = copy.deepcopy(model).to(device)
    with torch_threads(settings.server_threads):
        server = InferenceServer(
            SampledPolicy(model),
            settings.batch_size_for(num_actors),
            settings.timeout_for(num_actors),
            device=device,
        )
        actors = LocalActors(
            server, env_id, num_actors, seed=seed, env_options=env_options, nice=settings.actor_nice
        )
        try:
            actors.start()
            processes = [psutil.Process()] + [psutil.Process(pid) for pid in actors.pids]
            steps, window, warmup_seconds, cpu = measure_window(
                lambda: actors.steps,
                actors.check,
                num_actors,
                seconds,
                warmup,
                started,
                processes,
                on_open=server.latency.reset,
            )
            rss = rss_mb(actors.pids)
            stats = server.stats()
        finally:
            actors.stop()
    return ThroughputResult(
        "seed",
        num_actors,
        steps / window,
        steps,
        window,
        warmup_seconds,
        1000.0 * cpu / max(steps, 1),
        rss,
        stats,
        {
            **asdict(settings),
            "max_batch_size": server.max_batch_size,
            "timeout": server.timeout,
            "device": str(server.device),
        },
    )


def measure_impala(
    env_id: str,
    num_actors: int,
    seconds: float,
    *,
    warmup: float = 1.0,
    seed: int = 0,
    env_options: dict | None = None,
    model: ActorCritic | None = None,
    nice: int = 0,
) -> ThroughputResult:
    """IMPALA-style: ``num_actors`` processes, each with its own copy of ``model`` on one torch
    thread and one env, one batch-1 forward pass per step (:func:`impala_actor_main`).

    Args as :func:`measure_seed`; ``nice`` is added to the actors' niceness (0: they are the only
    workers, nothing to yield to)."""
    check_args(env_id, num_actors, seconds, warmup)
    started = time.perf_counter()
    model = model if model is not None else make_model(env_id, seed=seed, env_options=env_options)
    actors = ImpalaActors(env_id, num_actors, model, seed=seed, env_options=env_options, nice=nice)
    try:
        actors.start()
        processes = [psutil.Process(pid) for pid in actors.pids]
        forward_before = actors.arrays["forward"].copy()
        steps, window, warmup_seconds, cpu = measure_window(
            lambda: actors.steps,
            actors.check,
            num_actors,
            seconds,
            warmup,
            started,
            processes,
            on_open=lambda: forward_before.__setitem__(Ellipsis, actors.arrays["forward"]),
        )
        forward = actors.arrays["forward"]
        fresh = forward[
            (forward != forward_before) & np.isfinite(forward)
        ]  # written inside the window
        rss = rss_mb(actors.pids)
    finally:
        actors.stop()
    latency = {}
    if len(fresh):
        p50, p99 = np.percentile(fresh, [50, 99]) * 1000.0
        latency = {
            "latency_p50_ms": float(p50),
            "latency_p99_ms": float(p99),
            "mean_batch_size": 1.0,
        }
    return ThroughputResult(
        "impala",
        num_actors,
        steps / window,
        steps,
        window,
        warmup_seconds,
        1000.0 * cpu / max(steps, 1),
        rss,
        latency,
        {"torch_threads": 1, "nice": nice},
    )


def central_inference_study(
    actor_counts: Sequence[int] = (1, 2, 4, 8, 16),
    seconds: float = 10.0,
    env_id: str = "ALE/Pong-v5",
    repeats: int = 1,
    *,
    settings: SeedSettings | None = None,
    warmup: float = 1.0,
    seed: int = 0,
    env_options: dict | None = None,
    progress: Callable[[ThroughputResult], None] | None = None,
) -> list[StudyRow]:
    """SEED and IMPALA env steps/s at each count of ``actor_counts``, side by side.

    The two systems are measured one after the other at each count, the first of the pair
    alternating from count to count and pass to pass, so that load from other jobs falls on both.
    With ``repeats`` > 1 the counts are measured in interleaved passes and each side keeps its
    best pass (a busy machine only ever slows a pass); every pass's figure stays in the row.
    Both run the same ``ActorCritic`` parameters (:func:`make_model` with ``seed``).
    ``progress`` is called with each result as it comes (a table printer, a notebook's plot).

    Returns one :class:`StudyRow` per count, in the order given.
    """
    counts = list(actor_counts)
    if not counts or any(not isinstance(c, int) or isinstance(c, bool) or c < 1 for c in counts):
        raise ValueError(f"actor_counts must be positive ints, got {actor_counts!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    model = make_model(env_id, seed=seed, env_options=env_options)
    runs: dict[int, dict[str, list[ThroughputResult]]] = {
        c: {"seed": [], "impala": []} for c in counts
    }
    passes = [count for _ in range(repeats) for count in counts]  # interleaved passes
    for turn, count in enumerate(each(passes, "SEED and IMPALA, actor counts", unit="count")):
        order = ("seed", "impala") if turn % 2 == 0 else ("impala", "seed")
        for system in order:
            if system == "seed":
                result = measure_seed(
                    env_id,
                    count,
                    seconds,
                    settings=settings,
                    warmup=warmup,
                    seed=seed,
                    env_options=env_options,
                    model=model,
                )
            else:
                result = measure_impala(
                    env_id,
                    count,
                    seconds,
                    warmup=warmup,
                    seed=seed,
                    env_options=env_options,
                    model=model,
                )
            runs[count][system].append(result)
            if progress is not None:
                progress(result)
    rows = []
    for count in counts:
        seed_runs, impala_runs = runs[count]["seed"], runs[count]["impala"]
        rows.append(
            StudyRow(
                count,
                max(seed_runs, key=lambda r: r.steps_per_second),
                max(impala_runs, key=lambda r: r.steps_per_second),
                [r.steps_per_second for r in seed_runs],
                [r.steps_per_second for r in impala_runs],
            )
        )
    return rows
