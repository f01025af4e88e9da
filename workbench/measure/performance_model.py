"""A performance model of the three architectures: env steps per second from what each part costs.

Why a model: every speed-up the papers report lives where a 2-core machine cannot go (Stooke &
Abbeel on a DGX-1, Ape-X with 360 actors, SEED with hundreds of cores and a TPU). The costs of the
parts can be measured here (``measure.costs``, ``benchmarks/component_costs.py``); how the parts
compose is the architecture. This module composes them.

The method is operational analysis (Lazowska et al. 1984, *Quantitative System Performance*,
ch. 5): a system's throughput X is bounded by each resource it uses,

    X <= capacity_k / demand_k        for every resource k (cores, an accelerator, a serial loop)
    X <= N / R0                       for a closed loop of N actors whose step takes R0 alone

and the model predicts the least of the bounds; the bound that binds names the bottleneck. A
batching server adds one unknown, its batch b, which Little's law fixes: the requests that arrive
while the server serves one batch form the next, ``b = X * S(b)`` (at least 1, at most the
actors' envs and the server's cap), solved by iteration. Processes share the cores (a process
that waits uses none; more runnable threads than cores share them), so a role's demand is in
CPU-seconds per env step, and a role that is one thread can use at most one core.

Why bounds and not a simulation: each architecture's prediction is a few lines that a reader can
check by hand against a measurement, the sliders of the course redraw instantly at 500 actors,
and the cases with one actor and no contention are exact. The price: near a knee, where two
bounds are close, queueing makes a real system slower than both (the validation table says by
how much). Time-major rollouts do not appear here: the model counts env steps, not tensors.

Systems (each a function returning a :class:`Prediction`):

* :func:`serial_sampler`, :func:`parallel_sampler`, :func:`batched_sampler`,
  :func:`alternating_sampler`: Stooke & Abbeel 2018, Sec. 3 (one process steps and infers;
  workers with their own policy; env-only workers and one batched forward pass; two groups whose
  stepping overlaps the other's inference), inference on the CPU or an accelerator.
* :func:`impala_actors`: every actor a model and a batch-1 forward pass (Espeholt et al. 2018).
* :func:`seed`: env-only actors and one central inference server (Espeholt et al. 2020, Sec. 3).
* :func:`apex`: actors that act with their own network and feed one replay, a learner that samples
  it (Horgan et al. 2018, Sec. 3), at a replay ratio or free-running.
* :func:`apex_local`: Ape-X's local layout on one machine's shared cores, actors at a lower CPU
  priority than the learner and the replay (Linux's CFS weights).
* :func:`data_parallel_learners`: k learners that split a batch and all-reduce their gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from workbench.checks import positive_int
from workbench.measure.costs import DeviceCosts, MachineCosts

__all__ = [
    "Prediction",
    "serial_sampler",
    "parallel_sampler",
    "batched_sampler",
    "alternating_sampler",
    "impala_actors",
    "seed",
    "apex",
    "apex_local",
    "cfs_weight",
    "data_parallel_learners",
    "cpu_update_seconds",
    "server_batch",
]


@dataclass(frozen=True)
class Prediction:
    """What the model predicts for one system on one machine.

    ``bounds``: env steps/s each resource allows (``cores``, ``server``, ``actors``, ...); the
    prediction is the least, ``bottleneck`` its name. ``cpu_seconds_per_step``: all the CPU work
    one env step costs (the paper's argument for SEED is about this). ``server_batch`` and
    ``latency_ms``: a batching server's mean batch and one request's time in it (queue + forward).
    """

    system: str
    env_steps_per_second: float
    bottleneck: str
    bounds: Mapping[str, float]
    cpu_seconds_per_step: float
    updates_per_second: float | None = None
    server_batch: float | None = None
    latency_ms: float | None = None
    details: Mapping[str, float] = field(default_factory=dict)


def _least(system: str, bounds: dict[str, float], **fields) -> Prediction:
    bottleneck = min(bounds, key=bounds.__getitem__)
    return Prediction(system, bounds[bottleneck], bottleneck, bounds, **fields)


def _inference(costs: MachineCosts, on_accelerator: bool, threads: int) -> DeviceCosts:
    if on_accelerator:
        if not costs.accelerators:
            raise ValueError(
                f"{costs.name} has no accelerator: give costs with a GPU record "
                "(measure.costs.machine_costs(..., gpu_record=...)) or infer on the CPU"
            )
        return costs.accelerator
    return costs.cpu_threads(threads)


# --------------------------------------------------------------------------------------------------
# Stooke & Abbeel's samplers


def serial_sampler(
    costs: MachineCosts, envs: int, *, on_accelerator: bool = False, torch_threads: int = 1
) -> Prediction:
    """One process: step all ``envs`` (one vector env, its C++ threads on every core), then one
    forward pass for them all. Nothing overlaps, so a step's time is the sum:
    ``X = B / (B * t_env_all + t_inf(B))``."""
    positive_int(envs, "envs")
    device = _inference(costs, on_accelerator, torch_threads)
    stepping = envs * (costs.env_all_seconds + costs.sampler_seconds.get("serial", 0.0))
    forward = device.inference(envs) + device.copy(envs * costs.obs_bytes)
    cpu = costs.env_seconds + (0.0 if on_accelerator else forward * torch_threads / envs)
    return _least("serial", {"cycle": envs / (stepping + forward)}, cpu_seconds_per_step=cpu)


def parallel_sampler(costs: MachineCosts, envs: int, workers: int) -> Prediction:
    """``workers`` processes, each stepping ``envs / workers`` envs and running its own copy of
    the policy on one torch thread (no batched forward across workers). Each worker's loop is
    serial; the workers share the cores: ``X = min(W, cores) * b / (b * t_env + t_inf1(b))`` with
    ``b = B / W``."""
    positive_int(envs, "envs")
    positive_int(workers, "workers")
    per_worker = envs / workers
    own = costs.sampler_seconds.get("parallel", 0.0)
    step = per_worker * (costs.env_seconds + own) + costs.cpu_one.inference(per_worker)
    cpu = step / per_worker
    bounds = {
        "workers": workers * per_worker / step,
        "cores": costs.cores / cpu,
    }
    return _least("parallel", bounds, cpu_seconds_per_step=cpu)


def batched_sampler(
    costs: MachineCosts,
    envs: int,
    workers: int,
    *,
    on_accelerator: bool = False,
    torch_threads: int = 1,
) -> Prediction:
    """Env-only workers step ``envs / workers`` envs each (one thread), then the main process runs
    one forward pass for all of them (Stooke & Abbeel 2018, Fig. 1b: the GPU sampler). Stepping
    and inference take turns, and every step the main process and the workers exchange actions
    and observations (``o``: the layout's own work per env step, calibrated on CartPole):
    ``X = B / (t_env * B / min(W, cores) + o * B + t_inf(B))``."""
    positive_int(envs, "envs")
    positive_int(workers, "workers")
    device = _inference(costs, on_accelerator, torch_threads)
    stepping = envs * costs.env_seconds / min(workers, costs.cores, envs)
    stepping += envs * costs.sampler_seconds.get("batched", 0.0)
    forward = device.inference(envs) + device.copy(envs * costs.obs_bytes)
    cpu = costs.env_seconds + (0.0 if on_accelerator else forward * torch_threads / envs)
    return _least("batched", {"cycle": envs / (stepping + forward)}, cpu_seconds_per_step=cpu)


def alternating_sampler(
    costs: MachineCosts, envs: int, workers: int, *, on_accelerator: bool = False
) -> Prediction:
    """Two groups of ``envs / 2``: while the workers step one, the main process infers for the
    other (Stooke & Abbeel 2018, Fig. 1c). A half-cycle takes the longer of the two, so
    ``X = (B / 2) / max(t_step(B / 2), t_inf(B / 2))`` while cores last; on the CPU stepping and
    inference also share the cores."""
    positive_int(envs, "envs")
    positive_int(workers, "workers")
    half = envs / 2
    device = _inference(costs, on_accelerator, 1)
    stepping = half * costs.env_seconds / min(workers, costs.cores, half)
    stepping += half * costs.sampler_seconds.get("alternating", 0.0)
    forward = device.inference(half) + device.copy(half * costs.obs_bytes)
    cpu = costs.env_seconds + (0.0 if on_accelerator else forward / half)
    bounds = {
        "stepping": half / stepping,
        "inference": half / forward,
        "cores": costs.cores / cpu,
    }
    return _least("alternating", bounds, cpu_seconds_per_step=cpu)


# --------------------------------------------------------------------------------------------------
# IMPALA-style actors and SEED's central inference


def impala_actors(costs: MachineCosts, actors: int) -> Prediction:
    """Each actor steps its one env and runs a batch-1 forward pass on one thread; actors never
    wait for anyone, so they fill the cores: ``X = min(N, cores) / (t_env1 + t_inf1(1))``."""
    positive_int(actors, "actors")
    cpu = costs.env_one_seconds + costs.cpu_one.inference(1)
    bounds = {"actors": actors / cpu, "cores": costs.cores / cpu}
    return _least("impala", bounds, cpu_seconds_per_step=cpu)


def server_batch(
    rate: float, serve: Callable[[float], float], most: float, *, iterations: int = 100
) -> float:
    """The batch ``b`` with ``b = rate * serve(b)`` (Little's law: the requests that arrive
    while one batch is served form the next), at least 1 and at most ``most``."""
    batch = 1.0
    for _ in range(iterations):
        new = min(max(rate * serve(batch), 1.0), most)
        if abs(new - batch) < 1e-6:
            break
        batch = new
    return batch


def seed(
    costs: MachineCosts,
    actors: int,
    *,
    envs_per_actor: int = 1,
    max_batch: int | None = None,
    server_threads: int = 1,
    on_accelerator: bool = False,
    full_batches: bool = False,
) -> Prediction:
    """Env-only actors and one inference server (Espeholt et al. 2020, Sec. 3, Fig. 2).

    A request adds ``request_seconds`` at each end (a link's latency included) and costs
    ``request_cpu_seconds`` of CPU at each; the server's loop is serial and serves a batch of b in
    ``S(b) = t_inf(b) + b * request_cpu_seconds``.
    An actor's step alone takes ``R0 = e * t_env1 + 2 * request_seconds + t_inf(b)``. Bounds: the
    cores (every process's CPU per step), the server (``b / S(b)``) and the actors
    (``N * e / R0``). Greedy batching (the
    server answers whatever waits) makes ``b = X * S(b)``; ``full_batches`` (a timeout long
    enough that every actor's request is in) makes ``b`` every env."""
    positive_int(actors, "actors")
    positive_int(envs_per_actor, "envs_per_actor")
    device = _inference(costs, on_accelerator, server_threads)
    most = actors * envs_per_actor if max_batch is None else min(max_batch, actors * envs_per_actor)
    request = costs.request_seconds

    def serve(b: float) -> float:
        return (
            device.inference(b) + device.copy(b * costs.obs_bytes) + b * costs.request_cpu_seconds
        )

    env = costs.env_one_seconds if envs_per_actor == 1 else costs.env_seconds

    def cpu_per_step(b: float) -> float:
        forward = 0.0 if on_accelerator else device.inference(b) * server_threads / b
        return env + 2 * costs.request_cpu_seconds + forward

    def bounds_at(b: float) -> dict[str, float]:
        alone = envs_per_actor * env + 2 * request + device.inference(b)
        usable = min(costs.cores, actors + server_threads)
        return {
            "cores": usable / cpu_per_step(b),
            "server": b / serve(b),
            "actors": actors * envs_per_actor / alone,
        }

    own = envs_per_actor * env + 2 * request  # an actor's time per request
    batch = float(most)
    for _ in range(200):
        rate = min(bounds_at(batch).values())
        # Requests not in an actor's hands wait at the server (Little's law on the actors:
        # ``rate / e * own`` of the N are stepping); greedy batching serves them all at once,
        # and at least the ones that arrived during the last batch.
        waiting = envs_per_actor * (actors - rate / envs_per_actor * own)
        new = float(most) if full_batches else min(max(waiting, rate * serve(batch), 1.0), most)
        if abs(new - batch) < 1e-4:
            break
        batch = (batch + new) / 2
    bounds = bounds_at(batch)
    rate = min(bounds.values())
    busy = min(rate * serve(batch) / batch, 1.0)  # the server's utilisation
    latency = device.inference(batch) + busy * serve(batch) / 2  # its forward + half a batch's wait
    return _least(
        "seed",
        bounds,
        cpu_seconds_per_step=cpu_per_step(batch),
        server_batch=batch,
        latency_ms=1000 * latency,
        details={"server_utilisation": busy},
    )


# --------------------------------------------------------------------------------------------------
# Ape-X and data-parallel learners


def cpu_update_seconds(costs: MachineCosts, minibatch: float, threads: float) -> float:
    """One gradient step on ``threads`` cores' worth of torch threads: the measured one-thread
    and all-thread costs, the speed-up between them linear in the threads; below one core
    (more learners than cores) the learners take turns on it."""
    one = costs.cpu_one.update(minibatch)
    if threads < 1:
        return one / threads
    speedup_all = one / costs.cpu_all.update(minibatch)
    if costs.threads_all == 1 or threads >= costs.threads_all:
        return one / speedup_all
    return one / (1 + (speedup_all - 1) * (threads - 1) / (costs.threads_all - 1))


def apex(
    costs: MachineCosts,
    actors: int,
    *,
    envs_per_actor: int = 1,
    minibatch: int = 512,
    replay_ratio: float | None = None,
    actor_step_seconds: float | None = None,
    learner_on_accelerator: bool = False,
    learner_threads: int = 1,
    replay_seconds_per_sample: float = 0.0,
) -> Prediction:
    """Actors that act with their own network and feed one prioritized replay; one learner that
    samples it (Horgan et al. 2018, Sec. 3).

    An actor's env step costs ``t_env + t_inf1(e) / e`` of one core (``actor_step_seconds``
    instead, where an actor's loop was measured alone); a gradient step ``t_upd(m)`` plus
    ``m * replay_seconds_per_sample`` (sampling and priority updates), on ``learner_threads``
    cores or the accelerator.

    With ``replay_ratio`` (samples trained per env step) a rate limiter couples the two,
    ``U * m = ratio * X``, and a side that waits frees its cores: the bounds are the cores
    (``X * (step + ratio / m * u_cpu) <= cores``), the actors (one core each: ``N / step``) and
    the learner (``m / (ratio * u)``). Without it the learner runs free: every thread is always
    runnable and each gets ``min(1, cores / (N + T))`` of a core."""
    positive_int(actors, "actors")
    positive_int(minibatch, "minibatch")
    positive_int(learner_threads, "learner_threads")
    if replay_ratio is not None and not replay_ratio > 0:
        raise ValueError(
            f"replay_ratio must be positive or None (free-running), got {replay_ratio}"
        )
    step = (
        actor_step_seconds
        if actor_step_seconds is not None
        else costs.env_seconds + costs.cpu_one.inference(envs_per_actor) / envs_per_actor
    )
    replay = minibatch * replay_seconds_per_sample  # on the learner's thread, on the CPU

    def update_seconds(threads: float) -> float:
        if learner_on_accelerator:
            return _inference(costs, True, 1).update(minibatch) + replay
        return cpu_update_seconds(costs, minibatch, threads) + replay

    cpu_threads = 0 if learner_on_accelerator else learner_threads
    if replay_ratio is None:
        share = min(1.0, costs.cores / (actors + cpu_threads))
        bounds = {"actors": actors * share / step}
        updates = 1 / update_seconds(max(cpu_threads * share, share))
    else:
        full = update_seconds(learner_threads)
        update_cpu = replay if learner_on_accelerator else full * learner_threads
        bounds = {
            "cores": costs.cores / (step + replay_ratio / minibatch * update_cpu),
            "actors": actors / step,
            "learner": minibatch / (replay_ratio * full),
        }
        updates = None
    bottleneck = min(bounds, key=bounds.__getitem__)
    rate = bounds[bottleneck]
    if updates is None:
        updates = rate * replay_ratio / minibatch
    learner_cpu = 0.0 if learner_on_accelerator else updates * update_seconds(learner_threads)
    return Prediction(
        "apex",
        rate,
        bottleneck,
        bounds,
        cpu_seconds_per_step=step + learner_cpu * max(cpu_threads, 1) / rate,
        updates_per_second=updates,
        details={"replay_ratio": updates * minibatch / rate},
    )


def cfs_weight(nice: int) -> float:
    """Linux CFS's weight of a thread at ``nice`` (the kernel's ``sched_prio_to_weight``: 1024 at
    nice 0, 1.25x less a step, 110 at nice 10): the runnable threads on a core share it so."""
    return 1024 / 1.25**nice


def apex_local(costs: MachineCosts, actors: int, *, actor_nice: int = 10) -> Prediction:
    """Ape-X's local layout (``apex.transports.local``; Horgan et al. 2018, Sec. 3) on the
    machine's ``C`` shared cores: ``N`` actor processes at ``actor_nice``, one replay process
    and the learner at nice 0, the learner free-running (no rate limiter).

    The roles' CPU costs are measured alone (``costs.apex_roles``): ``a`` per env step of an actor,
    ``r`` per transition the replay adds, ``s`` the replay's and ``l`` the learner's per update.
    While more processes are runnable than cores, CFS shares each core by weight; with the actors
    spread evenly (``N / C`` to a core) the learner and the replay each get
    ``f = w0 / (w0 + w_a N / C)`` of a core (``f = 1`` when ``N + 2 <= C``). Then

        U = min(f / l, (f - X r) / s)                updates/s: the learner's share, or the replay's
        X = min(N / a, (C - U (l + s)) / (a + r))    env steps/s: the cores the others leave

    solved by iterating from ``U = f / l``."""
    positive_int(actors, "actors")
    roles = costs.apex_roles
    missing = {
        "actor_step_seconds",
        "replay_add_seconds",
        "replay_sample_seconds",
        "learner_update_seconds",
    } - set(roles)
    if missing:
        raise ValueError(
            f"the costs have no Ape-X role costs {sorted(missing)}: calibrate with "
            "benchmarks/performance_model.py (measure.process_costs.apex_role_costs)"
        )
    a, r = roles["actor_step_seconds"], roles["replay_add_seconds"]
    s, learn = roles["replay_sample_seconds"], roles["learner_update_seconds"]
    cores = costs.cores
    share = 1.0
    if actors + 2 > cores:
        share = min(1.0, cfs_weight(0) / (cfs_weight(0) + cfs_weight(actor_nice) * actors / cores))
    updates = share / learn
    for _ in range(50):
        bounds = {"actors": actors / a, "cores": (cores - updates * (learn + s)) / (a + r)}
        rate = max(min(bounds.values()), 0.0)
        updates = max(min(share / learn, (share - rate * r) / s), 0.0)
    bottleneck = min(bounds, key=bounds.__getitem__)
    return Prediction(
        "apex",
        rate,
        bottleneck,
        bounds,
        cpu_seconds_per_step=a + r + updates * (learn + s) / max(rate, 1e-12),
        updates_per_second=updates,
        details={
            "learner_share": share,
            "replay_ratio": updates * roles.get("batch_size", 1) / max(rate, 1e-12),
            "updates_bound": "learner" if updates >= share / learn * (1 - 1e-9) else "replay",
        },
    )


def data_parallel_learners(
    costs: MachineCosts,
    learners: int,
    minibatch: int,
    *,
    parameters: int,
    all_reduce_seconds_per_byte: float,
    all_reduce_latency: float = 0.0,
    gradient_steps: int = 1,
    samples_per_update: int | None = None,
    small_collectives: int = 0,
    update_seconds: Callable[[float, float], float] | None = None,
    on_accelerator: bool = False,
) -> Prediction:
    """``learners`` processes split each minibatch of ``minibatch`` samples and average their
    gradients with a ring all-reduce (Stooke & Abbeel 2018, Sec. 4): a gradient step takes one
    learner's step on ``minibatch / k`` plus ``2 (k - 1) / k`` of the gradient's float32 bytes
    through the link (and ``2 (k - 1)`` hops' latency), and ``small_collectives`` all-reduces of a
    few floats (a loss's mean over the joined batch: latency alone). An update is
    ``gradient_steps`` of them (PPO: epochs x minibatches) over ``samples_per_update`` samples
    (default ``minibatch``). On the CPU the learners share the cores (each gets ``cores / k``
    threads). ``update_seconds(samples, threads)``, where the learner's own update was timed on a
    replica's share (``measure.process_costs.learner_update_costs``), replaces the network's
    gradient steps: the update is then that, plus ``gradient_steps`` all-reduces. Returns
    samples/s as ``env_steps_per_second`` (an on-policy learner uses each env step once per
    update)."""
    positive_int(learners, "learners")
    positive_int(minibatch, "minibatch")
    positive_int(gradient_steps, "gradient_steps")
    samples = minibatch if samples_per_update is None else samples_per_update
    share = minibatch / learners
    if on_accelerator:
        if learners > costs.accelerators:
            raise ValueError(
                f"{learners} learners on {costs.accelerators} accelerator(s): one each at most"
            )
        compute = costs.accelerator.update(share)
    else:
        compute = cpu_update_seconds(costs, share, costs.cores / learners)
    ring = 0.0
    if learners > 1:
        ring = 2 * (learners - 1) / learners * 4 * parameters * all_reduce_seconds_per_byte
        ring += 2 * (learners - 1) * all_reduce_latency * (1 + small_collectives)
    if update_seconds is not None and not on_accelerator:
        compute = update_seconds(samples / learners, costs.cores / learners) / gradient_steps
    seconds = gradient_steps * (compute + ring)
    return _least(
        "data-parallel",
        {"update": samples / seconds},
        cpu_seconds_per_step=0.0 if on_accelerator else costs.cores * seconds / samples,
        updates_per_second=1 / seconds,
        details={"compute_seconds": compute, "all_reduce_seconds": ring},
    )
