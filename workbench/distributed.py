"""Data-parallel learners: one process per device, DistributedDataParallel, one update per rollout.

Stooke & Abbeel 2018, *Accelerated Methods for Deep Reinforcement Learning*,
https://arxiv.org/abs/1803.02811, Section 3.2 ("Multi-GPU optimization", synchronous variant) and
Section 4: the learner runs on several devices at once. Each holds a replica of the model and its
own optimizer; at every gradient step each computes the gradient of its share of the batch, the
gradients are all-reduced (averaged), and every replica applies the same step, so the replicas stay
identical without ever sending parameters. Here the all-reduce is torch.distributed's
``DistributedDataParallel`` (DDP): ``gloo`` between CPU processes, ``NCCL`` between GPUs.

``DataParallelLearner(algo_factory, devices)`` behaves like the ``PPO`` or ``A2C`` it wraps
(``update(rollout) -> metrics``, ``model``, ``set_progress``, ``state_dict``), so ``pg.train`` and
the runner drive it unchanged. What one update does, for ``n`` learners and a ``[T, B]`` rollout:

1. The caller copies the rollout into shared memory, shard-major ``[n, T, B / n, ...]``: learner
   ``r`` owns environments ``[r B/n, (r+1) B/n)``. Only a small command crosses each pipe.
2. Every learner computes GAE on its shard. GAE runs along T within each environment, so the
   advantages of the shards are exactly those of the joined batch.
3. Quantities over the joined batch use ``all_reduce``: the advantage-normalisation mean and
   standard deviation, the metrics, the explained variance; and the learning rate is the one for
   the joined batch size ``T * B``.
4. A2C: one DDP step on the shards (equal sizes, so DDP's average of the shard means is the mean
   over the batch). PPO: every learner draws the *same* permutation of the joined ``T * B``
   samples (the same seeded generator as the single learner), splits it into the same
   minibatches, and takes the samples of each minibatch that fall in its shard. Those shares
   differ in size between learners, so each weights its loss by
   ``world_size * n_local / n_minibatch`` and DDP's average is the minibatch mean.

So an update equals the single learner's update on the joined batch, up to float rounding
(``tests/test_distributed.py``). Learning-rate scaling is the caller's business: the update is
the single-learner update on ``T * B`` samples whatever the number of learners, so pick the rate
for ``T * B`` (``PPOConfig.scale_learning_rate`` / ``pg.scaled_learning_rate``); adding learners
without growing the batch only spreads the same work over more devices.

Processes: every learner, rank 0 included, is a spawned process; the caller only coordinates.
That keeps torch.distributed's process-global state (one default group per process) out of the
Jupyter kernel, lets the learner group be closed and re-formed on other devices at any time, and
means a crashed learner can never wedge the kernel in a collective: the caller only ever waits on
pipes and process sentinels, with a timeout. The cost is one copy of rank 0's parameters into
the caller's model after each update (through shared memory; measured here: 0.07 ms for
CartPole's MLP, 16 ms for NatureCNN, whose update takes seconds). Learners die with their parent
(``workers.die_with_parent``), are ended by ``close()``, by garbage collection and at exit.
"""

from __future__ import annotations

import datetime
import math
import os
import pickle
import signal
import socket
import sys
import time
import functools
import traceback
import weakref
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_connections
from typing import Any, Callable, Sequence

import torch
import torch.multiprocessing
from torch import nn

from workbench.algos.pg import (
    A2C,
    PPO,
    clipped_policy_loss,
    value_loss,
)
from workbench.algos.returns import gae_from_rollout
from workbench.rollout import Rollout
from workbench.system import resolve_device, usable_cores
from workbench import workers
from workbench.workers import die_with_parent

__all__ = ["DataParallelLearner", "LEARNER_TIMEOUT"]

#: Seconds the caller waits for a learner to start or to answer one command.
LEARNER_TIMEOUT = 300.0

# Rollout fields copied to the learners (policy outputs: only what A2C and PPO read).
_TB_FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "truncation_values")
_OUTPUT_FIELDS = ("logp", "value")


# --------------------------------------------------------------------------------------------------
# Devices


def _check_devices(devices: Sequence[str], backend: str | None) -> tuple[list[torch.device], str]:
    """The devices to compute on (cpu indices are only labels) and the backend, checked."""
    if isinstance(devices, (str, torch.device)):
        raise ValueError(
            f"devices={devices!r} is a single device; DataParallelLearner takes a sequence of at "
            "least 2, e.g. ('cpu:0', 'cpu:1') or ('cuda:0', 'cuda:1'). With a single device "
            "use the algorithm directly: PPO(model, config, device=...) or A2C(...)."
        )
    devices = list(devices)
    if len(devices) < 2:
        raise ValueError(
            f"DataParallelLearner needs at least 2 devices, got {devices!r}. With a single device "
            "use the algorithm directly: PPO(model, config, device=...) or A2C(...)."
        )
    resolved = [resolve_device(str(d)) for d in devices]  # ValueError naming the fix (no GPU...)
    kinds = {d.type for d in resolved}
    if len(kinds) > 1:
        raise ValueError(
            f"devices {devices!r} mix cpu and cuda: one learner group runs on one kind, all "
            "'cpu:N' (gloo) or all 'cuda:N' (NCCL). Use ('cpu:0', 'cpu:1') or ('cuda:0', 'cuda:1')."
        )
    kind = kinds.pop()
    if kind == "cuda":
        indices = [d.index for d in resolved]
        if len(set(indices)) != len(indices):
            raise ValueError(
                f"devices {devices!r} name a GPU twice; NCCL runs one learner per GPU. Use "
                f"distinct GPUs (this machine has {torch.cuda.device_count()})."
            )
    if backend is None:
        backend = "nccl" if kind == "cuda" else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be None, 'gloo' or 'nccl', got {backend!r}")
    if backend == "nccl" and kind == "cpu":
        raise ValueError("backend='nccl' needs cuda devices; CPU learners use backend='gloo'")
    if not torch.distributed.is_available():
        raise ValueError("this torch build has no torch.distributed; install the standard wheel")
    available = {
        "gloo": torch.distributed.is_gloo_available(),
        "nccl": torch.distributed.is_nccl_available(),
    }
    if not available[backend]:
        raise ValueError(
            f"backend {backend!r} is not available in this torch build ({torch.__version__}); "
            "use backend='gloo', or a CUDA build of torch for NCCL"
        )
    compute = [torch.device("cpu") if d.type == "cpu" else d for d in resolved]
    return compute, backend


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_clone(obj: Any) -> Any:
    """A copy of a (nested) state dict with every tensor cloned onto the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu_clone(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cpu_clone(v) for v in obj)
    return obj


# --------------------------------------------------------------------------------------------------
# The learner process


@dataclass
class _LearnerSpec:
    rank: int
    world_size: int
    device: str
    backend: str
    master_port: int
    parent_pid: int
    threads: int
    timeout: float


class _Rank:
    """One learner's side: its algorithm, the DDP wrapper, and the update on its shard."""

    def __init__(self, spec: _LearnerSpec, algo: PPO | A2C) -> None:
        self.spec = spec
        self.rank, self.world_size = spec.rank, spec.world_size
        self.algo = algo
        self.device = algo.device
        self.ddp = nn.parallel.DistributedDataParallel(
            _Evaluate(algo.model),
            device_ids=[self.device.index] if self.device.type == "cuda" else None,
        )
        self.buffers: dict[str, torch.Tensor] = {}

    # --- collectives ----------------------------------------------------------------------------

    def sum(self, values: Sequence[float | torch.Tensor]) -> torch.Tensor:
        """Element-wise sum over the learners, in float64, on this learner's device."""
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(t)
        return t

    def global_normalize(self, advantages: torch.Tensor, count: int) -> torch.Tensor:
        """``pg.normalize_advantages`` over the union of every learner's ``advantages``:
        ``(A - mean) / (std + 1e-8)`` with the mean and the unbiased std of the joined tensor.

        ``count`` is the global number of samples. Two passes (mean, then the centred squares),
        summed in float64; a single sample is only centred, as there.
        """
        x = advantages.double()
        mean = self.sum([x.sum()])[0] / count
        centred = x - mean
        if count < 2:
            return centred.to(advantages.dtype)
        var = self.sum([(centred**2).sum()])[0] / (count - 1)
        return (centred / (var.sqrt() + 1e-8)).to(advantages.dtype)

    def explained_variance(self, values: torch.Tensor, returns: torch.Tensor) -> float:
        """``pg.explained_variance`` over the joined batch (``1 - Var(R - V) / Var(R)``)."""
        r, d = returns.double().reshape(-1), (returns.double() - values.double()).reshape(-1)
        n, sum_r, sum_d = self.sum([r.numel(), r.sum(), d.sum()]).tolist()
        sq = self.sum([((r - sum_r / n) ** 2).sum(), ((d - sum_d / n) ** 2).sum()])
        if n < 2 or sq[0] == 0:
            return float("nan")
        return float(1 - sq[1] / sq[0])

    # --- pieces of an update --------------------------------------------------------------------

    def shard(self) -> Rollout:
        b, r = self.buffers, self.rank
        return Rollout(
            **{name: b[name][r] for name in _TB_FIELDS},
            policy_outputs={name: b["out_" + name][r] for name in _OUTPUT_FIELDS},
            next_obs=b["next_obs"][r],
        ).to(self.device)

    def prepare(self, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Behaviour values, advantages and returns ``[T, B/n]`` of this shard (``pg._prepare``)."""
        behaviour_values = rollout.policy_outputs["value"].float()
        with torch.no_grad():
            _, bootstrap_value = self.algo.model(rollout.next_obs)
            advantages, returns = gae_from_rollout(
                rollout,
                behaviour_values,
                bootstrap_value.float(),
                self.algo.config.gamma,
                self.algo.config.gae_lambda,
            )
        return behaviour_values, advantages, returns

    def apply_learning_rate(self, batch_size: int) -> None:
        self.algo.learning_rate = self.algo.learning_rate_for(batch_size)
        for group in self.algo.optimizer.param_groups:
            group["lr"] = self.algo.learning_rate

    def step(self, loss: torch.Tensor) -> float:
        """``pg._PolicyGradient._step`` (float16 loss scaling included): its backward goes through
        DDP, which averages the gradients over the learners, so they and their norm are the same
        on every learner."""
        return self.algo._step(loss)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        """``model.evaluate`` through DDP, under the algorithm's autocast; float32 outputs."""
        return self.algo._evaluate(obs, actions, self.ddp)

    # --- updates --------------------------------------------------------------------------------

    def update(self) -> dict[str, float]:
        rollout = self.shard()
        if isinstance(self.algo, PPO):
            return self.update_ppo(rollout)
        return self.update_a2c(rollout)

    def update_a2c(self, rollout: Rollout) -> dict[str, float]:
        """``A2C.update`` on the joined batch; the shards are equal, so DDP's mean is exact."""
        c = self.algo.config
        behaviour_values, advantages, returns = self.prepare(rollout)
        N = rollout.num_steps * self.world_size
        self.apply_learning_rate(N)
        out = self.evaluate(self.algo._forward_obs(rollout.obs), rollout.actions)  # each [T, B/n]
        if c.normalize_advantages:
            advantages = self.global_normalize(advantages, N)
        pg_loss = -(out["logp"] * advantages).mean()
        v_loss = value_loss(out["value"], returns)
        entropy = out["entropy"].mean()
        loss = pg_loss + c.value_coef * v_loss - c.entropy_coef * entropy
        grad_norm = self.step(loss)
        with torch.no_grad():
            log_ratio = out["logp"] - rollout.policy_outputs["logp"].float()
            kl_sum = (torch.expm1(log_ratio) - log_ratio).double().sum()
            n = rollout.num_steps
            sums = self.sum([pg_loss * n, v_loss * n, entropy * n, kl_sum])
        self.algo.num_updates += 1
        means = (sums / N).tolist()
        return {
            "losses/policy": means[0],
            "losses/value": means[1],
            "losses/entropy": means[2],
            "losses/approx_kl": means[3],
            "losses/explained_variance": self.explained_variance(behaviour_values, returns),
            "charts/learning_rate": self.algo.learning_rate,
            "charts/grad_norm": grad_norm,
        }

    def update_ppo(self, rollout: Rollout) -> dict[str, float]:
        """``PPO.update`` on the joined batch: the single learner's minibatches, shared out."""
        c = self.algo.config
        behaviour_values, advantages, returns = self.prepare(rollout)
        T, B_local = rollout.horizon, rollout.num_envs
        B = B_local * self.world_size
        N = T * B
        self.apply_learning_rate(N)

        obs = self.algo._forward_obs(rollout.obs.flatten(0, 1))  # scaled once under autocast
        actions = rollout.actions.flatten(0, 1)
        b_logp = rollout.policy_outputs["logp"].flatten(0, 1).float()
        b_values = behaviour_values.flatten(0, 1)
        b_advantages = advantages.flatten(0, 1)
        b_returns = returns.flatten(0, 1)
        lo = self.rank * B_local

        keys = (
            "losses/policy",
            "losses/value",
            "losses/entropy",
            "losses/approx_kl",
            "losses/clip_fraction",
        )
        sums = dict.fromkeys(keys, 0.0)
        grad_norm_sum = 0.0
        steps = epochs = 0
        for _ in range(c.num_epochs):
            epochs += 1
            # The single learner's permutation of the joined [T * B] samples (index t * B + b).
            order = torch.randperm(N, generator=self.algo.generator)
            stop = False
            for idx in torch.tensor_split(order, c.num_minibatches):
                t, b = idx // B, idx % B
                mine = (b >= lo) & (b < lo + B_local)
                local = (t[mine] * B_local + (b[mine] - lo)).to(self.device)
                n_global, n_local = idx.numel(), local.numel()
                # With no sample of this minibatch here, evaluate one (weighted 0 below): every
                # learner must take part in each DDP step.
                evaluated = local if n_local > 0 else local.new_zeros(1)
                out = self.evaluate(obs[evaluated], actions[evaluated])
                mb_advantages = b_advantages[local]
                if c.normalize_advantages:
                    mb_advantages = self.global_normalize(mb_advantages, n_global)
                if n_local > 0:
                    pg_loss, ratio = clipped_policy_loss(
                        b_logp[local], out["logp"], mb_advantages, c.clip_coef
                    )
                    v_loss = value_loss(
                        out["value"],
                        b_returns[local],
                        behaviour_values=b_values[local],
                        clip_coef=c.clip_coef if c.clip_value_loss else None,
                    )
                    entropy = out["entropy"].mean()
                    loss = pg_loss + c.value_coef * v_loss - c.entropy_coef * entropy
                    # DDP averages over learners: weight the shard's mean by its share.
                    loss = loss * (self.world_size * n_local / n_global)
                    with torch.no_grad():
                        log_ratio = out["logp"] - b_logp[local]
                        local_sums = [
                            pg_loss * n_local,
                            v_loss * n_local,
                            entropy * n_local,
                            ((ratio - 1) - log_ratio).double().sum(),
                            ((ratio - 1).abs() > c.clip_coef).double().sum(),
                        ]
                else:  # join the gradient all-reduce with a zero gradient
                    loss = sum(v.sum() for v in out.values()) * 0.0
                    local_sums = [0.0] * len(keys)
                grad_norm = self.step(loss)
                totals = self.sum([float(s) for s in local_sums]) / n_global
                for key, value in zip(keys, totals.tolist()):
                    sums[key] += value
                grad_norm_sum += grad_norm
                steps += 1
                approx_kl = totals[3].item()
                if c.target_kl is not None and approx_kl > c.target_kl:
                    stop = True  # the same decision on every learner: approx_kl is global
                    break
            if stop:
                break
        self.algo.num_updates += 1
        metrics = {key: sums[key] / steps for key in keys}
        metrics["charts/grad_norm"] = grad_norm_sum / steps
        metrics["losses/explained_variance"] = self.explained_variance(b_values, b_returns)
        metrics["charts/learning_rate"] = self.algo.learning_rate
        metrics["charts/epochs"] = float(epochs)
        return metrics


class _Evaluate(nn.Module):
    """``model.evaluate`` as ``forward``: DDP synchronises the gradients of what its forward ran."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.model.evaluate(obs, actions)


def _learner_main(
    conn, spec: _LearnerSpec, factory_bytes: bytes, initial_state: bytes, model_out
) -> None:
    """A learner process: join the group, build the algorithm, then serve commands until CLOSE.

    Commands (caller -> learner) are ``(name, seq, payload)``; every one gets one reply
    ``("ok", seq, result)`` or ``("error", seq, traceback)``. Model and optimizer states travel
    pickled by value (bytes), never as shared tensors: a replica must own its parameters.
    """
    die_with_parent(spec.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a kernel interrupt is the caller's to handle
    try:
        torch.set_num_threads(spec.threads)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(spec.master_port)
        if spec.backend == "gloo" and os.path.exists("/sys/class/net/lo"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all learners are on this machine
        device = torch.device(spec.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        torch.distributed.init_process_group(
            spec.backend,
            init_method="env://",
            rank=spec.rank,
            world_size=spec.world_size,
            timeout=datetime.timedelta(seconds=spec.timeout),
        )
        algo = pickle.loads(factory_bytes)(device=device)
        algo.load_state_dict(pickle.loads(initial_state))
        rank = _Rank(spec, algo)
        conn.send(("ok", 0, None))
    except BaseException:
        _send_quietly(conn, ("error", 0, traceback.format_exc()))
        return
    while True:
        try:
            command, seq, payload = conn.recv()
        except (EOFError, OSError):  # the caller is gone
            break
        if command == "close":
            break
        try:
            result = _handle(rank, model_out, command, payload)
            conn.send(("ok", seq, result))
        except BaseException:
            if not _send_quietly(conn, ("error", seq, traceback.format_exc())):
                break
    try:
        torch.distributed.destroy_process_group()
    except Exception:
        pass
    # Skip the interpreter's teardown of torch (about a second): nothing is left to flush.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _send_quietly(conn, message) -> bool:
    try:
        conn.send(message)
        return True
    except (BrokenPipeError, OSError):
        return False


def _handle(rank: _Rank, model_out: dict[str, torch.Tensor], command: str, payload: Any) -> Any:
    algo = rank.algo
    if command == "buffers":
        rank.buffers = payload
        return None
    if command == "update":
        algo.base_learning_rate = payload["base_learning_rate"]
        algo.progress = payload["progress"]
        metrics = rank.update()
        if rank.rank == 0:
            with torch.no_grad():
                for name, tensor in algo.model.state_dict().items():
                    model_out[name].copy_(tensor)
        return metrics
    if command == "state_dict":
        return pickle.dumps(_cpu_clone(algo.state_dict()))
    if command == "load_state_dict":
        algo.load_state_dict(pickle.loads(payload))
        return None
    raise ValueError(f"learner: unknown command {command!r}")


# --------------------------------------------------------------------------------------------------
# The caller's side


class DataParallelLearner:
    """A ``PPO`` or ``A2C`` whose updates run data-parallel on several devices (DDP).

    Stooke & Abbeel 2018, https://arxiv.org/abs/1803.02811, Section 3.2 (synchronous multi-GPU
    learning): one learner process per device, each with a replica of the model and its own
    optimizer; gradients are all-reduced at every step. ``update(rollout)`` splits the ``[T, B]``
    rollout along B into ``len(devices)`` equal shards and returns the same parameters and metrics
    as the single learner's ``update`` on the whole rollout (module docstring: how).

    Learning-rate scaling with the number of learners is the caller's business: the update is the
    one of a ``T * B`` batch whatever ``len(devices)``, so choose the rate for ``T * B``
    (``config.scale_learning_rate`` with ``reference_batch_size``, or ``pg.scaled_learning_rate``
    and ``set_learning_rate``), exactly as for one learner.

    Args:
        algo_factory: ``algo_factory(device=torch.device) -> PPO | A2C``, called once in this
            process (on the CPU: the model you read and sample with, ``learner.model``) and once
            in each learner process. It must be picklable: a module-level function or
            ``functools.partial(PPO, model, config)``, not a lambda. Every learner starts from
            this process's copy (``load_state_dict``), so the factory need not be deterministic.
        devices: one device per learner, at least two, all of one kind: ``("cpu:0", "cpu:1")``
            (the index only names the learner; gloo) or ``("cuda:0", "cuda:1")`` (NCCL).
        backend: ``None`` (gloo for cpu, nccl for cuda), ``"gloo"`` or ``"nccl"``.
        threads_per_learner: torch threads in each learner; default: this process's usable cores
            divided among the CPU learners (1 per GPU learner).
        timeout: seconds to wait for the learners to start and for each answer; a learner that
            dies is reported at once, one that hangs after this.

    Attributes:
        model: the caller's ``ActorCritic`` (on the CPU). After every update it holds rank 0's
            parameters (copied in place, so a sampler holding it sees them).
        devices: the device names, one per learner (rank ``r`` on ``devices[r]``).
        pids: the learner processes' ids.
    """

    def __init__(
        self,
        algo_factory: Callable[..., PPO | A2C],
        devices: Sequence[str],
        *,
        backend: str | None = None,
        threads_per_learner: int | None = None,
        timeout: float = LEARNER_TIMEOUT,
    ) -> None:
        compute, self.backend = _check_devices(devices, backend)
        self.devices = [str(d) for d in devices]
        self.world_size = len(compute)
        if not timeout > 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout}")
        self.timeout = float(timeout)
        try:
            # By value: the standard pickler copies tensors (ForkingPickler would move them into
            # shared memory that every learner maps, and the replicas would step one another).
            factory_bytes = pickle.dumps(algo_factory)
        except Exception as error:
            raise TypeError(
                "algo_factory must be picklable to reach the learner processes: use a module-level "
                "function or functools.partial(PPO, model, config), not a lambda or a closure "
                f"({type(error).__name__}: {error})"
            ) from error
        self._algo = algo_factory(device=torch.device("cpu"))
        if not isinstance(self._algo, (PPO, A2C)):
            raise TypeError(
                "algo_factory must return a workbench.algos.PPO or A2C, got "
                f"{type(self._algo).__name__}"
            )
        if threads_per_learner is None:
            threads_per_learner = (
                max(1, usable_cores() // self.world_size) if compute[0].type == "cpu" else 1
            )
        self._closed = False
        self._failed: str | None = None
        self._seq = 0
        self._awaiting: set[int] = set()  # ranks that owe a reply to an interrupted command
        self._layout: tuple | None = None
        self._buffers: dict[str, torch.Tensor] = {}
        # Rank 0 writes its parameters here after each update; update() copies them into .model.
        self._model_out = {
            name: t.detach().to("cpu", copy=True).share_memory_()
            for name, t in self._algo.model.state_dict().items()
        }
        initial_state = pickle.dumps(_cpu_clone(self._algo.state_dict()))
        context = torch.multiprocessing.get_context("spawn")
        for attempt in range(3):  # a new port when another program took ours meanwhile
            self.processes: list[Any] = []
            self.connections: list[Any] = []
            self._awaiting.clear()
            self._failed, self._closed = None, False
            self._finalizer = weakref.finalize(
                self, DataParallelLearner._terminate, self.processes, self.connections
            )
            try:
                self._start(context, compute, factory_bytes, initial_state, threads_per_learner)
                break
            except BaseException as error:  # _fail stopped them, or an interrupt: stop them now
                self._finalizer.detach()
                self._terminate(self.processes, self.connections, grace=0.0)
                self._closed = True
                retry = isinstance(error, RuntimeError) and "address already in use" in str(error)
                if attempt == 2 or not retry:
                    raise

    def _start(self, context, compute, factory_bytes, initial_state, threads: int) -> None:
        port = _free_port()
        for rank, device in enumerate(compute):
            spec = _LearnerSpec(
                rank=rank,
                world_size=self.world_size,
                device=str(device),
                backend=self.backend,
                master_port=port,
                parent_pid=os.getpid(),
                threads=threads,
                timeout=self.timeout,
            )
            parent_end, child_end = context.Pipe(duplex=True)
            process = context.Process(
                target=_learner_main,
                args=(child_end, spec, factory_bytes, initial_state, self._model_out),
                name=f"workbench-learner-{rank}",
                daemon=True,
            )
            process.start()
            child_end.close()  # so that the learner's death reads as end-of-file here
            self.processes.append(process)
            self.connections.append(parent_end)
            self._awaiting.add(rank)
        self._gather(0, range(self.world_size), what="start")

    # --- the algorithm's interface --------------------------------------------------------------

    @property
    def model(self) -> nn.Module:
        return self._algo.model

    @property
    def config(self) -> Any:
        return self._algo.config

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    @property
    def num_updates(self) -> int:
        return self._algo.num_updates

    @property
    def learning_rate(self) -> float:
        """The rate applied at the last update."""
        return self._algo.learning_rate

    def set_learning_rate(self, learning_rate: float) -> None:
        """Replace the base learning rate (sent to the learners with the next update)."""
        self._algo.set_learning_rate(learning_rate)

    def set_progress(self, progress: float) -> None:
        """Fraction of training done, for ``anneal_lr`` (sent with the next update)."""
        self._algo.set_progress(progress)

    def learning_rate_for(self, batch_size: int) -> float:
        return self._algo.learning_rate_for(batch_size)

    def update(self, rollout: Rollout) -> dict[str, float]:
        """One update on a ``[T, B]`` rollout, ``B`` divisible by the number of learners.

        Returns the single learner's metrics (``PPO.update`` / ``A2C.update``: the same keys and,
        up to rounding, the same values), computed over the joined batch.
        """
        self._check_usable()
        self._check_rollout(rollout)
        self._drain()
        self._write(rollout)
        payload = {
            "base_learning_rate": self._algo.base_learning_rate,
            "progress": self._algo.progress,
        }
        replies = self._command("update", payload)
        metrics = replies[0]
        with torch.no_grad():
            for name, tensor in self._algo.model.state_dict().items():
                tensor.copy_(self._model_out[name])
        self._algo.learning_rate = metrics["charts/learning_rate"]
        self._algo.num_updates += 1
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """Rank 0's ``state_dict`` (model, optimizer, learning-rate state, counters), on the CPU;
        the replicas are identical, so it is the state of every learner."""
        self._check_usable()
        self._drain()
        return pickle.loads(self._command("state_dict", None, ranks=[0])[0])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a ``state_dict`` (of this learner or of a single ``PPO``/``A2C`` of the same
        model) into every learner and into ``model``."""
        self._check_usable()
        self._drain()
        state = _cpu_clone(state)
        self._command("load_state_dict", pickle.dumps(state))
        self._algo.load_state_dict(state)

    # --- processes ------------------------------------------------------------------------------

    def close(self) -> None:
        """End the learner processes (idempotent). Also runs on garbage collection and at exit."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> "DataParallelLearner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running"
        if self._failed is not None:
            state = f"failed: {self._failed}"
        elif self._closed:
            state = "closed"
        return (
            f"DataParallelLearner({type(self._algo).__name__}, devices={self.devices}, "
            f"backend={self.backend!r}, {state})"
        )

    @staticmethod
    def _terminate(processes, connections, grace: float = 3.0) -> None:
        workers.end_processes(processes, connections, lambda c: c.send(("close", 0, None)), grace)

    def _fail(self, message: str) -> RuntimeError:
        """End every learner (the group cannot go on without one of them) and say why."""
        self._failed = message.splitlines()[0]
        self._closed = True
        self._finalizer.detach()
        self._terminate(self.processes, self.connections, grace=0.0)
        return RuntimeError(message)

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise RuntimeError(
                f"this DataParallelLearner failed ({self._failed}); make a new one "
                "(learner.state_dict() of a failed learner is gone: restore from a checkpoint)"
            )
        if self._closed:
            raise RuntimeError("this DataParallelLearner is closed; make a new one")
        for rank, process in enumerate(self.processes):
            if not process.is_alive():
                raise self._died(rank)

    def _died(self, rank: int) -> RuntimeError:
        process = self.processes[rank]
        process.join(timeout=1.0)
        return self._fail(
            f"learner {rank} on {self.devices[rank]} (pid {process.pid}) died (exit code "
            f"{process.exitcode}); the others were stopped. Make a new DataParallelLearner."
        )

    # --- commands -------------------------------------------------------------------------------

    def _command(
        self, name: str, payload: Any, ranks: Sequence[int] | None = None
    ) -> dict[int, Any]:
        ranks = range(self.world_size) if ranks is None else ranks
        self._seq += 1
        for rank in ranks:
            try:
                self.connections[rank].send((name, self._seq, payload))
            except (BrokenPipeError, OSError):
                raise self._died(rank) from None
            self._awaiting.add(rank)
        return self._gather(self._seq, ranks, what=name)

    def _gather(self, seq: int, ranks: Sequence[int], *, what: str) -> dict[int, Any]:
        """Each rank's reply to command ``seq``; a death, an error or a time-out raises."""
        pending = set(ranks)
        results: dict[int, Any] = {}
        deadline = time.monotonic() + self.timeout
        while pending:
            waitables = {}
            for rank in pending:
                waitables[self.connections[rank]] = rank
                waitables[self.processes[rank].sentinel] = rank
            ready = wait_connections(list(waitables), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                names = ", ".join(f"{r} ({self.devices[r]})" for r in sorted(pending))
                self._fail(f"learner(s) {names} did not answer {what!r} in {self.timeout:.0f} s")
                raise TimeoutError(
                    f"learner(s) {names} did not answer {what!r} in {self.timeout:.0f} s; they "
                    "were stopped. Raise timeout= for slow updates, or use fewer learners."
                )
            for rank in sorted({waitables[obj] for obj in ready}):
                connection = self.connections[rank]
                if not connection.poll():
                    raise self._died(rank)
                try:
                    status, reply_seq, result = connection.recv()
                except (EOFError, OSError):
                    raise self._died(rank) from None
                if reply_seq != seq:
                    continue  # the answer to an interrupted command
                if status == "error":
                    raise self._fail(
                        f"learner {rank} on {self.devices[rank]} failed during {what!r}; the "
                        f"learners were stopped:\n{result}"
                    )
                results[rank] = result
                pending.discard(rank)
                self._awaiting.discard(rank)
        return results

    def _drain(self) -> None:
        """Wait for the answers to a command interrupted in this process (KeyboardInterrupt), so
        that no learner still reads the shared rollout when it is overwritten."""
        if self._awaiting:
            self._gather(self._seq, sorted(self._awaiting), what="the interrupted command")

    # --- the rollout in shared memory -----------------------------------------------------------

    def _check_rollout(self, rollout: Rollout) -> None:
        if not isinstance(rollout, Rollout):
            raise TypeError(
                f"update takes a workbench.rollout.Rollout, got {type(rollout).__name__}"
            )
        missing = [k for k in _OUTPUT_FIELDS if k not in rollout.policy_outputs]
        if missing:
            raise ValueError(
                f"DataParallelLearner.update: rollout.policy_outputs lacks {missing}; collect with "
                "a policy whose act() returns 'logp' and 'value' (ActorCritic.act does)"
            )
        T, B = rollout.horizon, rollout.num_envs
        for name in _OUTPUT_FIELDS:
            shape = tuple(rollout.policy_outputs[name].shape)
            if shape != (T, B):
                raise ValueError(
                    f"DataParallelLearner.update: policy_outputs[{name!r}] must be [T, B] = "
                    f"{[T, B]}, got {list(shape)}"
                )
        n = self.world_size
        if B % n:
            lower, upper = (B // n) * n, (B // n + 1) * n
            hint = f"{lower} or {upper}" if lower else f"{upper}"
            raise ValueError(
                f"DataParallelLearner.update: the rollout has B = {B} environments, which do not "
                f"split into {n} equal shards (one per learner): collect with a multiple of {n} "
                f"environments (e.g. {hint}), or use {math.gcd(B, n)} learner(s)"
            )
        if isinstance(self._algo, PPO) and rollout.num_steps < self._algo.config.num_minibatches:
            raise ValueError(
                f"DataParallelLearner.update: the rollout has T * B = {rollout.num_steps} samples, "
                f"fewer than num_minibatches={self._algo.config.num_minibatches}; collect more "
                "steps or lower num_minibatches"
            )

    def _write(self, rollout: Rollout) -> None:
        """Copy the rollout into the shared buffers, shard-major ``[n, T, B/n, ...]``."""
        n = self.world_size
        T, B = rollout.horizon, rollout.num_envs
        fields = {name: getattr(rollout, name) for name in _TB_FIELDS}
        fields.update({"out_" + k: rollout.policy_outputs[k] for k in _OUTPUT_FIELDS})
        layout = tuple((k, tuple(v.shape), v.dtype) for k, v in fields.items())
        layout += (("next_obs", tuple(rollout.next_obs.shape), rollout.next_obs.dtype),)
        if layout != self._layout:
            # Allocated once per shape; the learners receive the handles (not the data) once.
            buffers = {
                k: torch.empty((n, T, B // n, *v.shape[2:]), dtype=v.dtype).share_memory_()
                for k, v in fields.items()
            }
            next_obs = rollout.next_obs
            buffers["next_obs"] = torch.empty(
                (n, B // n, *next_obs.shape[1:]), dtype=next_obs.dtype
            ).share_memory_()
            self._command("buffers", buffers)
            self._buffers, self._layout = buffers, layout
        for k, v in fields.items():
            self._buffers[k].copy_(v.reshape(T, n, B // n, *v.shape[2:]).transpose(0, 1))
        next_obs = rollout.next_obs
        self._buffers["next_obs"].copy_(next_obs.reshape(n, B // n, *next_obs.shape[1:]))


class RunLearner(DataParallelLearner):
    """``Run``'s ``learner_factory``: DDP learners that start from ``algo`` and hand it back.

    ``Run(..., learner_factory=RunLearner)`` forms the data-parallel group when the learner devices
    become several, starting from the algorithm's whole state (parameters, optimizer moments,
    counters); when they become one again, ``close()`` loads the group's state back into the
    algorithm, so the run continues on one learner where the group left off. The model object is
    shared: the caller's ``algo.model`` holds rank 0's parameters after every update.
    """

    def __init__(self, algo: Any, devices: Sequence[str]) -> None:
        super().__init__(functools.partial(type(algo), algo.model, algo.config), devices)
        self.load_state_dict(algo.state_dict())
        self._algo_to_return = algo

    def close(self) -> None:
        algo, self._algo_to_return = getattr(self, "_algo_to_return", None), None
        if algo is not None:
            try:
                algo.load_state_dict(self.state_dict())
            except RuntimeError:  # a learner died: the algorithm keeps its last parameters
                pass
        super().close()
