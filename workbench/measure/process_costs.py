"""What the roles of Ape-X's processes and a data-parallel learner's all-reduce cost, one at a time.

The performance model (``measure.performance_model``) predicts a system from what its parts cost
alone. Two systems have parts that are whole roles rather than a network or an env:

* **Ape-X's local layout** (Horgan et al. 2018, Sec. 3; ``apex.transports.local``): each actor
  steps its env, acts with its network, computes initial priorities and sends a block; the replay
  process adds blocks, draws prioritized batches and takes new priorities; the learner trains on
  each batch and sends the priorities back. :func:`apex_role_costs` runs each role's own code
  (``ApexActor``, ``ReplayServer``, the learner of ``apex.make_learner``) in this process on one
  torch thread, with what crossing a pipe costs at each end (pickling the message), and returns
  CPU-seconds per env step, per transition added, and per update. The replay's work per update
  is mostly messages (a request, a batch, the priorities: each wakes its process), so
  :func:`replay_costs_through_pipe` also measures it with the real replay process and pipe,
  driven from this process with no actor and no training.
* **A data-parallel learner** (Stooke & Abbeel 2018, Sec. 3.2): each replica makes the learner's
  own update on its shard of the batch; :func:`learner_update_costs` times that update alone in
  this process on each shard size and thread count. The replicas then sum their gradients: two
  processes in a gloo group sum a tensor of the network's gradient size, and a tensor of one
  float, and :func:`all_reduce_costs` returns seconds per byte and per hop, the two terms of a
  ring all-reduce's time.
"""

from __future__ import annotations

import datetime
import os
import pickle
import queue
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from workbench.processes import die_with_parent
from workbench.system import free_port

__all__ = [
    "all_reduce_costs",
    "apex_role_costs",
    "learner_update_costs",
    "replay_costs_through_pipe",
    "time_per_call",
]


def time_per_call(call: Callable[[], Any], seconds: float, minimum: int = 3) -> float:
    """Mean CPU-seconds of this process per ``call()``, calling it for at least ``seconds`` of
    wall time (and ``minimum`` times), after one untimed call."""
    call()
    calls, wall_start, cpu_start = 0, time.perf_counter(), time.process_time()
    while calls < minimum or time.perf_counter() - wall_start < seconds:
        call()
        calls += 1
    return (time.process_time() - cpu_start) / calls


def apex_role_costs(config: Any, seconds: float = 0.5) -> dict[str, float]:
    """Each role of Ape-X's local layout timed alone, for ``config`` (an ``apex.ApexConfig``).

    Returns ``actor_step_seconds`` (an actor's CPU per env step: acting, stepping, the n-step
    window and initial priorities, pickling its block), ``replay_add_seconds`` (the replay's CPU
    per transition added, the block unpickled), ``replay_sample_seconds`` (the replay process's
    CPU per update through the real pipe at the learner's pace: :func:`replay_costs_through_pipe`;
    in this process alone, a batch drawn and pickled and the priorities applied cost
    ``replay_sample_in_process_seconds``, about half: each message wakes the process),
    ``learner_update_seconds`` (per update: the batch unpickled, a gradient step with its
    priorities, the priorities pickled, and a share of publishing the parameters every
    ``publish_interval`` updates), and ``batch_size``."""
    from workbench.apex import make_learner
    from workbench.apex.actor import ApexActor
    from workbench.apex.replay_server import ReplayServer

    if config.frame_storage:
        raise ValueError("apex_role_costs times transition blocks: a config without frame_storage")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        actor = ApexActor(config, 0, 0.1)
        replay = ReplayServer(config)
        learner = make_learner(config, torch.device("cpu"))
        batch_size = config.learner.batch_size
        steps_per_block = config.block_steps * config.envs_per_actor
        blocks: list[bytes] = []

        def act() -> None:
            blocks.append(pickle.dumps(actor.collect(), protocol=pickle.HIGHEST_PROTOCOL))

        actor_block = time_per_call(act, seconds)
        while replay.added < max(config.learning_starts, 4 * batch_size):
            act()
            replay.add_block(pickle.loads(blocks[-1]))
        recent = blocks[-8:]
        per_block = float(np.mean([len(pickle.loads(b)["transitions"]["actions"]) for b in recent]))
        pending = iter(recent * 10_000)
        add_block = time_per_call(lambda: replay.add_block(pickle.loads(next(pending))), seconds)
        sample = replay.sample(batch_size)
        assert sample is not None, "the replay holds a batch by now"
        sent = pickle.dumps(sample, protocol=pickle.HIGHEST_PROTOCOL)

        def draw() -> None:
            drawn = replay.sample(batch_size)
            pickle.dumps(drawn, protocol=pickle.HIGHEST_PROTOCOL)
            indices = drawn[1]
            message = pickle.dumps(("priorities", indices, np.ones(len(indices))))
            replay.update_priorities(*pickle.loads(message)[1:])

        replay_sample = time_per_call(draw, seconds)
        publish_every = max(int(config.publish_interval), 1)

        def learn() -> None:
            batch, indices, weights = pickle.loads(sent)
            learner.update({**batch, "weights": weights})
            pickle.dumps(("priorities", indices, learner.priorities))

        def publish() -> None:
            pickle.dumps(learner.actor_state(), protocol=pickle.HIGHEST_PROTOCOL)

        learner_update = (
            time_per_call(learn, seconds) + time_per_call(publish, 0.05) / publish_every
        )
        actor.close()
    finally:
        torch.set_num_threads(threads)
    through_pipe = replay_costs_through_pipe(config, max(2 * seconds, 1.0))
    return {
        "actor_step_seconds": actor_block / steps_per_block,
        "replay_add_seconds": add_block / per_block,
        "replay_sample_seconds": through_pipe["replay_seconds_per_update"],
        "replay_sample_in_process_seconds": replay_sample,
        "learner_update_seconds": learner_update,
        "batch_size": batch_size,
    }


def replay_costs_through_pipe(config: Any, seconds: float = 1.0) -> dict[str, float]:
    """Ape-X's replay process serving a learner through ``apex.transports.local``'s pipe, alone:
    one actor fills it past ``learning_starts`` and is stopped, then this process is the learner
    (two batches in flight, an update on each, its priorities sent back), with no actor running.
    Returns ``replay_seconds_per_update`` (the replay process's CPU per batch served: its messages
    and the wake-ups between them included) and ``update_seconds`` (this side's wall time per
    update)."""
    import psutil

    from workbench.apex import make_learner
    from workbench.apex.transports.local import LocalTransport

    learner = make_learner(config, torch.device("cpu"))
    transport = LocalTransport(config, learner.actor_state())
    try:
        transport.set_explorations([0.1])
        transport.start_actor(0)
        batch_size = config.learner.batch_size
        deadline = time.monotonic() + 120
        while transport.stats()["added"] < max(config.learning_starts, 4 * batch_size):
            if time.monotonic() > deadline or transport.dead_actors():
                raise RuntimeError("the Ape-X actor did not fill the replay within 120 s")
            time.sleep(0.05)
        transport.stop_actor(0)
        replay = psutil.Process(transport.replay.pid)

        def serve(count: int) -> None:
            for _ in range(count):
                while transport.pending_batches < 2:
                    transport.request_sample(batch_size)
                sample = transport.take_batch(timeout=30.0)
                if sample is None:
                    raise RuntimeError("the Ape-X replay process sent no batch in 30 s")
                batch, indices, weights = sample
                learner.update({**batch, "weights": weights})  # the pace of the real learner
                transport.update_priorities(indices, learner.priorities)

        serve(20)  # untimed
        cpu_start, wall_start, served = replay.cpu_times(), time.perf_counter(), 0
        while served < 20 or time.perf_counter() - wall_start < seconds:
            serve(10)
            served += 10
        cpu_end, wall = replay.cpu_times(), time.perf_counter() - wall_start
    finally:
        transport.close()
    cpu = (cpu_end.user + cpu_end.system) - (cpu_start.user + cpu_start.system)
    return {"replay_seconds_per_update": cpu / served, "update_seconds": wall / served}


# --------------------------------------------------------------------------------------------------
# A data-parallel learner: its update on a shard, and its all-reduce


def env_shard(rollout: Any, num_envs: int) -> Any:
    """The first ``num_envs`` envs of a time-major ``[T, B, ...]`` rollout: one replica's shard."""
    from workbench.rollout import Rollout

    return Rollout(
        obs=rollout.obs[:, :num_envs],
        actions=rollout.actions[:, :num_envs],
        rewards=rollout.rewards[:, :num_envs],
        terminated=rollout.terminated[:, :num_envs],
        truncated=rollout.truncated[:, :num_envs],
        truncation_values=rollout.truncation_values[:, :num_envs],
        policy_outputs={k: v[:, :num_envs] for k, v in rollout.policy_outputs.items()},
        next_obs=rollout.next_obs[:num_envs],
    )


def learner_update_costs(
    learner: Any, rollout: Any, layouts: Sequence[tuple[int, int]], updates: int = 1
) -> list[dict[str, float]]:
    """Wall seconds of ``learner.update`` on one replica's shard of ``rollout`` for each
    ``(replicas, threads)`` of ``layouts``: the rollout's envs cut into ``replicas`` equal shards,
    the update timed on the first at ``threads`` torch threads (after one untimed update). Rows
    of ``replicas``, ``samples``, ``threads``, ``seconds``; the learner's parameters are restored
    after."""
    from workbench.measure.throughput import torch_threads

    start = pickle.dumps(learner.state_dict())
    rows = []
    for replicas, threads in layouts:
        if rollout.num_envs % replicas:
            raise ValueError(f"{rollout.num_envs} envs do not split into {replicas} equal shards")
        shard = env_shard(rollout, rollout.num_envs // replicas)
        with torch_threads(threads):
            learner.update(shard)
            started = time.perf_counter()
            for _ in range(updates):
                learner.update(shard)
            seconds = (time.perf_counter() - started) / updates
        rows.append(
            {
                "replicas": replicas,
                "samples": shard.num_steps,
                "threads": threads,
                "seconds": seconds,
            }
        )
    learner.load_state_dict(pickle.loads(start))
    return rows


# --------------------------------------------------------------------------------------------------
# The all-reduce


def _all_reduce_worker(
    parent: int, rank: int, port: int, numel: int, seconds: float, out: Any
) -> None:
    die_with_parent(parent)
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # both processes are on this machine
    torch.distributed.init_process_group(
        "gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60)
    )
    try:
        times = []
        for tensor in (torch.zeros(numel), torch.zeros(1)):
            torch.distributed.all_reduce(tensor)  # untimed: the connection's first use
            calls = torch.zeros(1)
            start = time.perf_counter()
            done = 0
            while True:  # rank 0 decides when to stop, so both call the collective as often
                torch.distributed.all_reduce(tensor)
                done += 1
                calls.fill_(float(rank == 0 and time.perf_counter() - start >= seconds))
                torch.distributed.all_reduce(calls)
                if calls.item() > 0:
                    break
            times.append((time.perf_counter() - start) / done)
        if rank == 0:
            out.put(times)
    finally:
        torch.distributed.destroy_process_group()


def all_reduce_costs(parameters: int, seconds: float = 0.5) -> dict[str, float]:
    """A gloo all-reduce between two processes on this machine: ``seconds_per_byte`` (the time
    of summing ``parameters`` float32 values, less one float's, over their ``2 (k - 1) / k``
    bytes each way with ``k = 2``: the ring's bandwidth term) and ``latency_seconds`` (one float's
    sum over its ``2 (k - 1)`` hops), with ``parameters``."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    port = free_port()
    workers = [
        context.Process(
            target=_all_reduce_worker, args=(os.getpid(), rank, port, parameters, seconds, out)
        )
        for rank in range(2)
    ]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 120 + 4 * seconds
    try:
        while True:
            try:
                large, small = out.get(timeout=0.5)
                break
            except queue.Empty:
                failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the all-reduce timing did not finish (exit codes {failed}): torch's gloo "
                        "backend needs the loopback interface; see the workers' errors above"
                    ) from None
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    nbytes = 4 * parameters
    return {
        "parameters": parameters,
        "seconds_per_byte": max(large - small, 0.0) / nbytes,  # 2 (k-1)/k = 1 with k = 2
        "latency_seconds": small / 2,  # 2 (k - 1) hops
        "seconds_large": large,
        "seconds_small": small,
    }
