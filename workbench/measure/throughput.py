"""How fast can we collect experience? Steps per second of samplers, of their parts, and of
baselines.

What is measured (Stooke & Abbeel 2018, Sec. 3 and Table 1, count the same way):

* a **step** is one agent step of one environment (one observation in, one action out);
* a **frame** is one emulator frame: ``frames = steps * frameskip`` (4 for Atari ids, 1 otherwise);
* **stages** are the seconds spent per part of the loop, summed over the measurement:
  ``env`` (stepping environments), ``inference`` (forward passes), ``wait`` (the measuring
  process blocked on workers) and ``total`` (wall clock), as in ``Rollout.timings``.

The functions, from the slowest way to collect to the fastest the machine allows:

* :func:`naive_loop`: one gymnasium env with ``AtariPreprocessing`` and one forward pass per step
  at batch 1: what a first DQN script does.
* :func:`gym_vector_loop`: gymnasium's ``AsyncVectorEnv`` of those envs and one batched forward
  pass per step: the usual "vectorised" baseline.
* :func:`measure_sampler`: any workbench sampler (``workbench.sampling``) collecting rollouts.
* :func:`measure_vector_env` and :func:`measure_inference`: each half alone, at full speed;
  :func:`limit_steps_per_second` combines them into the most any sampler can reach on these cores.

Torch's thread count changes the figures a lot on a small machine, so it is always set explicitly
(:func:`torch_threads`) and recorded in ``Throughput.details``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from workbench.envs import AtariOptions, is_atari, make_vector_env
from workbench.system import resolve_device, usable_cores

__all__ = [
    "Throughput",
    "RandomPolicy",
    "torch_threads",
    "measure_sampler",
    "measure_vector_env",
    "measure_inference",
    "check_seconds",
    "frameskip_of",
    "throughput_result",
    "limit_steps_per_second",
]

STAGES = ("env", "inference", "wait", "total")


@dataclass
class Throughput:
    """One measurement.

    Attributes:
        label: what was measured, e.g. ``"serial B=16 torch=1"``.
        steps_per_second: agent steps (or observations, for inference) per wall-clock second.
        frames_per_second: ``steps_per_second * frameskip`` (emulator frames).
        seconds: wall-clock seconds measured (warm-up excluded).
        steps: agent steps (or observations) counted in ``seconds``.
        stages: seconds per stage, summed over the measurement: ``env``, ``inference``, ``wait``,
            ``total``.
        details: settings and counts (num_envs, threads, ``cores_used``, ...), JSON-friendly.
    """

    label: str
    steps_per_second: float
    frames_per_second: float
    seconds: float
    steps: int
    stages: dict[str, float] = field(default_factory=dict)
    details: dict = field(default_factory=dict)

    def stage_fractions(self) -> dict[str, float]:
        """``env``, ``inference`` and ``wait`` as fractions of ``total`` (0 where total is 0)."""
        total = self.stages.get("total", 0.0)
        return {
            stage: (self.stages.get(stage, 0.0) / total if total > 0 else 0.0)
            for stage in STAGES
            if stage != "total"
        }

    def to_dict(self) -> dict:
        return asdict(self)


def throughput_result(
    label: str, steps: int, seconds: float, frameskip: int, stages: dict[str, float], details: dict
) -> Throughput:
    rate = steps / seconds if seconds > 0 else 0.0
    return Throughput(
        label=label,
        steps_per_second=rate,
        frames_per_second=rate * frameskip,
        seconds=seconds,
        steps=int(steps),
        stages={stage: float(stages.get(stage, 0.0)) for stage in STAGES},
        details=details,
    )


def check_seconds(seconds: float) -> None:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds > 0:
        raise ValueError(
            f"seconds must be a positive number of seconds to measure, got {seconds!r}."
        )


def frameskip_of(env_id: str, env_options: dict | None = None) -> int:
    """Emulator frames per agent step: the Atari option (4 by default), 1 for other envs."""
    if not is_atari(env_id):
        return 1
    return int((env_options or {}).get("frameskip", AtariOptions.frameskip))


@contextlib.contextmanager
def torch_threads(num_threads: int | None) -> Iterator[int]:
    """Run the block with ``torch.set_num_threads(num_threads)``, then restore the old count.

    ``None`` leaves the count as it is. Yields the count in effect inside the block.
    """
    previous = torch.get_num_threads()
    if num_threads is not None:
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
            raise ValueError(f"num_threads must be a positive int (or None), got {num_threads!r}.")
        torch.set_num_threads(num_threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)


def _inference_cores(device: torch.device) -> int:
    """CPU cores a forward pass keeps busy: torch's threads on the CPU, the feeding thread on a
    GPU."""
    if device.type == "cpu":
        return min(torch.get_num_threads(), usable_cores())
    return 1


class RandomPolicy(nn.Module):
    """Uniformly random discrete actions: a policy with no inference cost.

    ``act(obs [B, ...]) -> {"action": int64 [B]}`` in ``[0, num_actions)``. It is an ``nn.Module``
    without parameters, so every sampler (ParallelSampler included) accepts it.
    """

    def __init__(self, num_actions: int) -> None:
        super().__init__()
        if isinstance(num_actions, bool) or int(num_actions) != num_actions or num_actions < 1:
            raise ValueError(
                f"num_actions must be a positive int (action_space.n), got {num_actions!r}."
            )
        self.num_actions = int(num_actions)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"action": torch.randint(self.num_actions, (obs.shape[0],), device=obs.device)}

    def __repr__(self) -> str:
        return f"RandomPolicy({self.num_actions})"


# --- workbench samplers and their parts ---------------------------------------------------------


def measure_sampler(
    sampler: Any,
    policy: Any,
    seconds: float,
    warmup_collects: int = 2,
    *,
    label: str | None = None,
    num_threads: int | None = None,
) -> Throughput:
    """Steps per second of ``sampler.collect(policy)``, repeated for ``seconds`` after a warm-up.

    Args:
        sampler: any workbench sampler (it is not closed here).
        policy: what ``collect`` is called with.
        seconds: collects run until this much wall-clock time has passed (at least one collect).
        warmup_collects: untimed collects first (workers start, buffers and the rollout pool are
            allocated).
        label: the row's name (default: the sampler's repr).
        num_threads: torch threads in this process during the measurement (None: unchanged).
            ParallelSampler's workers always use one thread each.

    Steps are ``sum(rollout.num_steps)``; stages sum ``rollout.timings`` over the timed collects.
    """
    check_seconds(seconds)
    frameskip = frameskip_of(sampler.env_id, getattr(sampler, "env_options", None))
    stages = dict.fromkeys(STAGES, 0.0)
    steps = collects = 0
    with torch_threads(num_threads) as threads:
        for _ in range(warmup_collects):
            sampler.collect(policy)
        start = time.perf_counter()
        while True:
            rollout = sampler.collect(policy)
            steps += rollout.num_steps
            collects += 1
            for stage in STAGES:
                stages[stage] += float(rollout.timings.get(stage, 0.0))
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
    details = {
        "sampler": type(sampler).__name__,
        "env_id": sampler.env_id,
        "num_envs": sampler.num_envs,
        "horizon": sampler.horizon,
        "num_workers": getattr(sampler, "num_workers", None),
        "device": str(getattr(sampler, "device", "cpu")),
        "torch_threads": threads,
        "collects": collects,
    }
    return throughput_result(label or repr(sampler), steps, elapsed, frameskip, stages, details)


def _random_actions(rng: np.random.Generator, action_space: gym.Space, size: int) -> np.ndarray:
    if isinstance(action_space, gym.spaces.Discrete):
        return rng.integers(int(action_space.n), size=size) + int(action_space.start)
    return np.stack([action_space.sample() for _ in range(size)])


def measure_vector_env(
    env_id: str,
    num_envs: int,
    seconds: float,
    batch_size: int | None = None,
    num_threads: int | None = None,
    *,
    label: str | None = None,
    seed: int = 0,
    env_options: dict | None = None,
) -> Throughput:
    """The environments alone: ``make_vector_env`` stepped with random actions, no policy.

    This is the env half of the limit: nothing a sampler adds (inference, buffers, processes)
    can make stepping faster than this.

    Args:
        env_id, num_envs, batch_size, num_threads: as for ``make_vector_env``; with
            ``batch_size < num_envs`` (asynchronous Atari) each step returns ``batch_size`` envs,
            and that is what is counted.
        seconds: wall-clock seconds to step for (after at least 10 untimed steps).
        env_options: ``make_vector_env``'s Atari options (``screen_size=42``, ...).

    ``details["cores_used"]``: cores the stepping keeps busy, ``min(num_threads, usable cores)``
    for Atari (C++ threads), 1 for gymnasium's SyncVectorEnv.
    """
    check_seconds(seconds)
    rng = np.random.default_rng(seed)
    env = make_vector_env(
        env_id, num_envs, batch_size=batch_size, num_threads=num_threads, **(env_options or {})
    )
    try:
        env.reset(seed=seed)
        batch = env.batch_size
        # Untimed: asynchronous ALE finishes the other envs' resets during the first recvs
        # (about 2 s for 32 envs on 2 cores), which would otherwise count as stepping time.
        for _ in range(max(10, 4 * num_envs // batch)):
            env.step(_random_actions(rng, env.single_action_space, batch))
        steps = 0
        start = time.perf_counter()
        while True:
            env.step(_random_actions(rng, env.single_action_space, batch))
            steps += batch
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
    finally:
        env.close()
    atari = is_atari(env_id)
    threads = (num_threads or min(num_envs, usable_cores())) if atari else 1
    details = {
        "env_id": env_id,
        "num_envs": num_envs,
        "batch_size": batch,
        "num_threads": threads,
        "cores_used": min(threads, usable_cores()),
    }
    label = label or f"env only B={num_envs} batch={batch} threads={threads}"
    stages = {"env": elapsed, "total": elapsed}
    return throughput_result(label, steps, elapsed, frameskip_of(env_id), stages, details)


def measure_inference(
    model: nn.Module,
    obs_shape: Sequence[int],
    batch_size: int,
    seconds: float,
    device: "str | torch.device" = "cpu",
    *,
    num_threads: int | None = None,
    label: str | None = None,
) -> Throughput:
    """The policy alone: ``model.act`` on random uint8 observations ``[batch_size, *obs_shape]``.

    Steps are observations (one per env step), so ``frames_per_second == steps_per_second``.
    The model is moved to ``device`` (``nn.Module.to``, in place).
    Runs under ``torch.no_grad`` with ``num_threads`` torch threads (None: unchanged);
    ``details["cores_used"]`` is ``min(threads, usable cores)`` on the CPU, 1 on a GPU.
    """
    check_seconds(seconds)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}.")
    device = resolve_device(device)
    model = model.to(device)
    obs = torch.randint(0, 256, (batch_size, *obs_shape), dtype=torch.uint8, device=device)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    steps = 0
    with torch_threads(num_threads) as threads, torch.no_grad():
        for _ in range(3):
            model.act(obs)
        synchronize()
        start = time.perf_counter()
        while True:
            model.act(obs)
            synchronize()
            steps += batch_size
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        cores = _inference_cores(device)
    details = {
        "batch_size": batch_size,
        "obs_shape": list(obs_shape),
        "device": str(device),
        "threads": threads,
        "cores_used": cores,
    }
    label = label or f"inference batch={batch_size} threads={threads}"
    stages = {"inference": elapsed, "total": elapsed}
    return throughput_result(label, steps, elapsed, 1, stages, details)


def limit_steps_per_second(
    env_throughput: Throughput, inference_throughput: Throughput, cores: int
) -> float:
    """The most steps per second any sampler can reach on ``cores`` cores, from its two halves.

    Each measurement saturates the cores it used, so its CPU cost per unit is cores used / rate:

        cpu_s_per_env_step = env cores_used / env steps_per_second
        cpu_s_per_obs      = inference cores_used / inference steps_per_second (obs/s)
        limit              = cores / (cpu_s_per_env_step + cpu_s_per_obs)

    A sampler pays both for every step; the best it can do is keep every core busy with one or the
    other (the alternating sampler's aim). Example: env 6,000 steps/s on 2 cores and inference
    8,000 obs/s on 2 threads give 2 / (2/6000 + 2/8000) ~= 3,429 steps/s.

    ``cores_used`` is read from each measurement's ``details`` (set by :func:`measure_vector_env`
    and :func:`measure_inference`).
    """
    if not cores or cores < 1:
        raise ValueError(f"cores must be a positive int, got {cores!r}.")
    costs = []
    for name, measured in (("env", env_throughput), ("inference", inference_throughput)):
        used = measured.details.get("cores_used")
        if used is None:
            raise ValueError(
                f"the {name} measurement {measured.label!r} has no details['cores_used']; measure "
                "it with measure_vector_env / measure_inference, or set it by hand."
            )
        if measured.steps_per_second <= 0:
            raise ValueError(
                f"the {name} measurement {measured.label!r} has no steps; measure longer."
            )
        costs.append(used / measured.steps_per_second)
    return cores / sum(costs)


# --- baselines: gymnasium's own wrappers --------------------------------------------------------
