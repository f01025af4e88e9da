"""The CPU-dependent levers a recipe chooses at start, by measuring the machine it runs on.

The same ``ppo-pong-fast`` recipe ran at about 1,550 env steps/s on the AMD EPYC with AVX-512
bfloat16 that most records come from and at 530 on an AMD EPYC with AVX2 only, where bfloat16 is
emulated (ten times slower than float32) and the learner, not the envs, bounds the run. What buys
speed differs between the two, so nothing here is fixed for one CPU (``benchmarks/pong_levers.py``
measures each lever end to end; run it with ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``
to see an AVX2-only CPU's kernels on any machine):

* **precision, memory layout and compiling** (``learners.choose_precision``): the fastest of
  float32 and bfloat16 autocast, contiguous and channels-last, for one minibatch step of the
  recipe's own network; then that step under ``torch.compile``, kept when it is 10% faster;
* **the learner's torch threads**: an async run collects on one core while the learner learns on
  the other, so one thread each is right while the learner keeps up (on the bf16 EPYC a second
  thread made the run 0.69-0.92x as fast in 30 s runs). Where the learner is much the slower
  half, its second thread uses the time the collector leaves idle (under the AVX2 cap the recipe
  went from 638 to 915 env steps/s with compiling and the second thread together). The halves
  are measured, not guessed: the learner's samples/s divided by the times each sample is trained
  (its epochs), against the collector's env steps/s (the envs on one thread and the policy's
  forward pass at the batch they make, one after the other).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from workbench.envs import make_vector_env
from workbench.learners import choose_precision

__all__ = [
    "DOUBLE_DQN_PASSES",
    "LEARNER_BOUND",
    "Levers",
    "choose_levers",
    "choose_threads",
    "collector_rate",
    "learner_work",
]

LEARNER_BOUND = 0.6
"""A second learner thread pays when the learner's env steps/s are under this fraction of the
collector's (a clear learner bound: the collector's core is then idle for 40% of the time)."""


DOUBLE_DQN_PASSES = 5 / 3
"""A double-DQN sample's cost in forward-and-backward passes: the gradient pass on ``obs`` (1) and
two no-grad forward passes on ``next_obs``, the online network's argmax and the target's value
(about a third of a forward-and-backward pass each). Without double, one such pass: 4/3."""


def learner_work(
    config: Any, num_envs: int, horizon: int, *, replay_ratio: float | None = None
) -> tuple[int, float]:
    """What a recipe's learner does per env step, for ``choose_levers``: the minibatch one gradient
    step trains on, and how many times each env step is trained, in forward-and-backward passes.
    PPO and A2C: ``num_envs * horizon / num_minibatches`` and their epochs (one rollout, each
    sample once an epoch). A replay learner (its agent's ``replay_ratio``: samples trained per env
    step): its ``batch_size`` and ``replay_ratio`` samples, each ``DOUBLE_DQN_PASSES`` (or 4/3)."""
    if replay_ratio is not None:
        passes = DOUBLE_DQN_PASSES if getattr(config, "double", False) else 4 / 3
        return int(config.batch_size), float(replay_ratio) * passes
    minibatch = num_envs * horizon // getattr(config, "num_minibatches", 1)
    return minibatch, float(getattr(config, "num_epochs", 1))


@dataclass(frozen=True)
class Levers:
    """What a recipe chose on this machine, and the rates it chose from."""

    autocast: str | None
    channels_last: bool
    compile: bool
    torch_threads: int
    rates: dict[str, float] = field(default_factory=dict)
    """The learner's samples/s per precision combination (``PrecisionChoice.rates``)."""
    learner_steps_per_second: float | None = None
    """The chosen learner's samples/s over the times it trains each sample: env steps/s it keeps
    up with (None: not measured)."""
    collector_steps_per_second: float | None = None
    """The envs and the policy's forward pass on one core (None: not measured)."""

    def describe(self) -> str:
        rates = ", ".join(f"{k} {v:,.0f}" for k, v in self.rates.items())
        text = (
            f"measured {rates} samples/s; chose {self.autocast or 'float32'}, "
            f"channels_last={self.channels_last}, compile={self.compile}"
        )
        if self.collector_steps_per_second is not None:
            text += (
                f"; learner {self.learner_steps_per_second:,.0f} against collector "
                f"{self.collector_steps_per_second:,.0f} env steps/s: "
                f"{self.torch_threads} torch thread(s)"
            )
        return text


def collector_rate(
    env_id: str,
    env_options: dict[str, Any],
    num_envs: int,
    model: torch.nn.Module,
    *,
    seconds: float = 1.0,
) -> float:
    """Env steps/s of one core collecting: ``num_envs`` envs stepped on one C++ thread, then the
    model's ``act`` on their observations (one torch thread), one after the other, as an async
    run's collector does on its core. Random actions; about ``2 * seconds`` plus env start-up."""
    env = make_vector_env(env_id, num_envs, seed=0, num_threads=1, **env_options)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        obs, _ = env.reset(seed=0)
        rng = np.random.default_rng(0)
        actions = rng.integers(env.single_action_space.n, size=num_envs)
        for _ in range(5):  # untimed: the first steps finish the resets
            obs, *_ = env.step(actions)
        steps, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            obs, *_ = env.step(actions)
            steps += num_envs
        env_seconds = (time.perf_counter() - started) / steps
        batch = torch.as_tensor(obs)
        with torch.no_grad():
            model.act(batch)
            acted, started = 0, time.perf_counter()
            while time.perf_counter() - started < seconds:
                model.act(batch)
                acted += num_envs
        act_seconds = (time.perf_counter() - started) / acted
    finally:
        torch.set_num_threads(threads)
        env.close()
    return 1.0 / (env_seconds + act_seconds)


def choose_threads(
    learner_steps_per_second: float, collector_steps_per_second: float, cores: int
) -> int:
    """2 torch threads where the learner is clearly the slower half of an async run (under
    ``LEARNER_BOUND`` of the collector's rate) and a second core exists, else 1."""
    learner_bound = learner_steps_per_second < LEARNER_BOUND * collector_steps_per_second
    return 2 if learner_bound and cores >= 2 else 1


def choose_levers(
    model: torch.nn.Module,
    obs_shape: tuple[int, ...],
    minibatch_size: int,
    *,
    try_compile: bool = False,
    threads_for: tuple[str, dict[str, Any], int, float] | None = None,
    cores: int = 1,
) -> Levers:
    """Measure and choose (on one torch thread, whatever this process had):

    * precision, layout and, with ``try_compile``, compiling (``choose_precision``);
    * with ``threads_for = (env_id, env_options, num_envs, samples_per_step)``, the torch threads:
      the chosen learner's rate over ``samples_per_step`` (``learner_work``) against
      ``collector_rate`` (``choose_threads``). Without it, 1.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        choice = choose_precision(model, obs_shape, minibatch_size, try_compile=try_compile)
    finally:
        torch.set_num_threads(threads)
    learner = collector = None
    torch_threads = 1
    if threads_for is not None:
        env_id, env_options, num_envs, samples_per_step = threads_for
        learner = choice.rate / samples_per_step
        collector = collector_rate(env_id, env_options, num_envs, model)
        torch_threads = choose_threads(learner, collector, cores)
    return Levers(
        autocast=choice.autocast,
        channels_last=choice.channels_last,
        compile=choice.compile,
        torch_threads=torch_threads,
        rates=dict(choice.rates),
        learner_steps_per_second=learner,
        collector_steps_per_second=collector,
    )
