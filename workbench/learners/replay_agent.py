"""An off-policy learner in a sampler loop: rollouts into a replay, updates as the ratio allows.

rlpyt's DQN ``optimize_agent`` in one small class. Each ``update(rollout)``:

1. turns the ``[T, B]`` rollout into n-step transitions (``replay.NStepTransitions``; windows that
   run past the rollout wait for the next one) and adds them to the replay;
2. once ``learning_starts`` env steps are collected and the replay holds a batch, counts the
   rollout's env steps into a ``replay.RateLimiter`` whose upper bound is the config's
   ``replay_ratio`` (samples trained per env step collected; Stooke & Abbeel 2018, Sec. 4: the
   quantity to hold fixed when the batch grows);
3. takes the gradient steps the limiter allows, each ``learner.update`` on a sampled batch with its
   importance weights, and writes the learner's new priorities back to a prioritized replay.

The learner is a ``DQN`` (all its variants) or a ``DDPG``: its config holds what one gradient step
needs (``batch_size``, ``n_step``, ``gamma`` ...). What the loop around it does is the agent's own
``ReplayAgentConfig``: the replay (capacity, prioritized or uniform), the ratio, the warm-up and how
the acting policy explores over the run (DQN's epsilon, DDPG's noise scale). Ape-X's learner takes
the same learner config; its replay and its actors' exploration are ``ApexConfig``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from workbench.checks import positive_int
from workbench.kernels import linear_schedule
from workbench.replay import (
    FrameStorage,
    NStepTransitions,
    PrioritizedReplay,
    RateLimiter,
    UniformReplay,
)
from workbench.rollout import Rollout

__all__ = ["DDPG_REPLAY", "ReplayAgent", "ReplayAgentConfig", "make_replay"]


@dataclass
class ReplayAgentConfig:
    """A learner's loop in one process: its replay, its replay ratio and warm-up, and how its acting
    policy explores over the run. Defaults: DQN's (Rainbow's where it states them, Hessel et al.
    2018, Table 1, else CleanRL's ``dqn.py``); ``DDPG_REPLAY`` is DDPG's."""

    replay_ratio: float = 8.0
    """Samples trained per env step collected: ``updates = steps * replay_ratio / batch_size``
    (DQN's one batch of 32 every 4 steps is 8)."""
    replay_capacity: int = 100_000
    learning_starts: int = 1_000
    """Env steps collected before the first gradient step (the replay fills first)."""
    prioritized: bool = False
    """Prioritized replay (proportional, Schaul et al. 2016); otherwise uniform."""
    priority_alpha: float = 0.5
    priority_beta_start: float = 0.4
    """Importance-sampling exponent at the start; annealed linearly to 1 over the run."""
    priority_eps: float = 1e-6
    exploration_start: float = 1.0
    """The acting policy's exploration at the start: DQN's epsilon, DDPG's noise scale (a fraction
    of the half action range)."""
    exploration_end: float = 0.05
    exploration_fraction: float = 0.1
    """Fraction of the run over which exploration falls linearly from start to end
    (``set_progress``); 0: at its end from the start."""

    def __post_init__(self) -> None:
        positive_int(self.replay_capacity, "ReplayAgentConfig.replay_capacity")
        if isinstance(self.learning_starts, bool) or not isinstance(self.learning_starts, int):
            raise ValueError(
                f"ReplayAgentConfig.learning_starts must be an int, got {self.learning_starts!r}"
            )
        if not self.replay_ratio > 0:
            raise ValueError(
                f"ReplayAgentConfig.replay_ratio must be positive, got {self.replay_ratio}"
            )
        for name in ("exploration_start", "exploration_end", "exploration_fraction"):
            if not getattr(self, name) >= 0:
                raise ValueError(
                    f"ReplayAgentConfig.{name} must be >= 0, got {getattr(self, name)!r}"
                )

    def exploration(self, progress: float) -> float:
        """The exploration after ``progress`` (0..1) of the run."""
        done = progress / self.exploration_fraction if self.exploration_fraction > 0 else 1.0
        return linear_schedule(self.exploration_start, self.exploration_end, done)


DDPG_REPLAY = ReplayAgentConfig(
    replay_ratio=256.0, priority_alpha=0.6, exploration_start=0.1, exploration_end=0.1
)
"""DDPG's loop: TD3's one batch of 256 per env step (Fujimoto et al. 2018, Sec. 6.1) and constant
Gaussian noise of 0.1 of the half action range."""


def make_replay(
    config: ReplayAgentConfig,
    seed: int | None,
    *,
    frame_streams: int | None = None,
    n_step: int = 1,
    gamma: float = 0.99,
) -> UniformReplay | PrioritizedReplay:
    """The replay a config asks for (``prioritized``, ``replay_capacity``, ``priority_*``).
    ``frame_streams``: Atari, each frame stored once in a ``FrameStorage`` with that many env
    streams (the sampler's envs), which rebuilds stacks and the learner's ``n_step`` windows
    (discounted by ``gamma``) by index: about 1.8 KB a step at 42x42 against 14 KB for ``obs`` and
    ``next_obs`` stacks; its capacity is rounded down to a multiple of the streams."""
    storage, capacity = None, config.replay_capacity
    if frame_streams is not None:
        streams = int(frame_streams)
        if streams < 1 or capacity < streams:
            raise ValueError(
                f"make_replay: frame_streams={frame_streams} needs 1 <= streams <= "
                f"replay_capacity ({capacity}); pass the sampler's number of envs."
            )
        storage = FrameStorage(
            capacity // streams * streams,
            num_envs=streams,
            n_step=n_step,
            gamma=gamma,
        )
        capacity = storage.capacity
    if config.prioritized:
        return PrioritizedReplay(
            capacity,
            alpha=config.priority_alpha,
            beta=config.priority_beta_start,
            eps=config.priority_eps,
            storage=storage,
            seed=seed,
        )
    return UniformReplay(capacity, storage=storage, seed=seed)


class ReplayAgent:
    """A ``DQN`` or ``DDPG`` learner with its replay, n-step windows, rate limiter and exploration
    schedule.

    Args:
        learner: the learner (``update(batch) -> metrics``, ``priorities``, ``config``,
            ``set_exploration``).
        config: the loop's ``ReplayAgentConfig`` (``ReplayAgentConfig()``: DQN's defaults;
            ``DDPG_REPLAY``: DDPG's).
        replay: the replay to add to and sample from (default: ``make_replay(config)``).
        seed: seeds the default replay's sampling.
        frame_streams: Atari: the default replay stores each frame once, one stream per env
            (``make_replay``); rollouts then go in as steps, not n-step transitions.

    Attributes:
        model: the learner's acting policy (what the sampler collects with).
        env_steps: env steps added so far. limiter: the ``RateLimiter`` holding ``replay_ratio``.
    """

    def __init__(
        self,
        learner: Any,
        config: ReplayAgentConfig,
        *,
        replay: Any = None,
        seed: int | None = None,
        frame_streams: int | None = None,
    ) -> None:
        self.learner = learner
        self.config = c = config
        batch_size, n_step, gamma = (
            learner.config.batch_size,
            learner.config.n_step,
            learner.config.gamma,
        )
        if c.replay_capacity < batch_size:
            raise ValueError(
                f"ReplayAgentConfig.replay_capacity {c.replay_capacity} < the learner's batch_size "
                f"{batch_size}: the replay must hold at least one batch."
            )
        if replay is None:
            replay = make_replay(c, seed, frame_streams=frame_streams, n_step=n_step, gamma=gamma)
        self.replay = replay
        self.frames = isinstance(getattr(replay, "storage", None), FrameStorage)
        self.nstep = NStepTransitions(n_step, gamma)
        # The warm-up is kept here, not in the limiter: it ends only when the replay also holds a
        # batch, and the steps that end it count (rlpyt's ``min_itr_learn``).
        self.limiter = RateLimiter(max_ratio=c.replay_ratio)
        self.env_steps = 0
        self.progress = 0.0
        self.learner.set_exploration(c.exploration(0.0))

    batch_axis = 1  # what it takes from its sampler: time-major rollouts [T, B, ...]

    @property
    def model(self) -> torch.nn.Module:
        return self.learner.model

    @property
    def reduction(self) -> Any:
        return self.learner.reduction

    @property
    def device(self) -> torch.device:
        return self.learner.device

    @property
    def num_updates(self) -> int:
        return self.learner.num_updates

    def set_progress(self, progress: float) -> None:
        """Fraction of the run done: the acting policy's exploration (``exploration_*``), the
        learner's own schedules, and the prioritized replay's beta rising linearly to 1 over the
        run (Schaul et al. 2016, Sec. 3.4)."""
        self.progress = min(max(float(progress), 0.0), 1.0)
        self.learner.set_progress(self.progress)
        self.learner.set_exploration(self.config.exploration(self.progress))
        if isinstance(self.replay, PrioritizedReplay):
            start = self.config.priority_beta_start
            self.replay.beta = linear_schedule(start, 1.0, self.progress)

    def update(self, rollout: Rollout) -> dict[str, float]:
        """Add the rollout's n-step transitions, then take the updates the replay ratio allows
        (none before ``learning_starts``). Returns the last update's metrics, the learner's
        schedules (``charts/epsilon`` ...), ``charts/replay_size`` and ``charts/gradient_steps``."""
        c = self.config
        if self.frames:  # the storage builds the n-step windows; new steps get the top priority
            streams = self.replay.storage.num_envs
            if rollout.rewards.shape[1] != streams:
                raise ValueError(
                    f"ReplayAgent: this DQN stores each env's frames in a stream of its own "
                    f"({streams} streams), so its number of envs is fixed for the run; the "
                    f"rollout has {rollout.rewards.shape[1]}. Keep num_envs at {streams}, or start "
                    "a new run with the new number."
                )
            self.replay.add(
                {
                    "obs": rollout.obs,
                    "actions": rollout.actions,
                    "rewards": rollout.rewards,
                    "terminated": rollout.terminated,
                    "truncated": rollout.truncated,
                }
            )
        else:
            transitions = self.nstep.add(rollout)
            if len(transitions["actions"]):
                self.replay.add(transitions)
        self.env_steps += rollout.num_steps
        metrics: dict[str, float] = {}
        batch_size = self.learner.config.batch_size
        if self.env_steps >= c.learning_starts and len(self.replay) >= batch_size:
            self.limiter.insert(rollout.num_steps)
            for _ in range(self.limiter.batches_allowed(batch_size)):
                batch, indices, weights = self.replay.sample(batch_size)
                self.limiter.sample(batch_size)
                metrics = self.learner.update({**batch, "weights": weights})
                if c.prioritized:
                    self.replay.update_priorities(indices, self.learner.priorities)
        return {
            **metrics,
            **self.learner.schedule_metrics(),
            "charts/replay_size": float(len(self.replay)),
            "charts/gradient_steps": float(self.learner.num_updates),
        }

    def state_dict(self) -> dict[str, Any]:
        """The learner's state, the env steps, the progress and the limiter's counters (not the
        replay: it is refilled on resume)."""
        return {
            "learner": self.learner.state_dict(),
            "env_steps": self.env_steps,
            "progress": self.progress,
            "limiter": self.limiter.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["learner"])
        self.env_steps = int(state["env_steps"])
        self.limiter.load_state_dict(state["limiter"])
        self.nstep.reset()
        # a checkpoint from before the agent kept the progress: its learner's
        self.set_progress(state.get("progress", state["learner"].get("progress", 0.0)))

    def to(self, device: "str | torch.device") -> None:
        self.learner.to(device)

    def __repr__(self) -> str:
        # the learner's own description with the replay's kind: DQN(n_step=3, double, prioritized)
        kind = "prioritized" if self.config.prioritized else "uniform"
        return f"{repr(self.learner)[:-1]}, {kind})"
