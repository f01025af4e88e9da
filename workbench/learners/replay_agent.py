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

The learner is a ``DQN`` (all its variants) or a ``DDPG``; their configs carry the replay's
settings (``replay_capacity``, ``prioritized``, ``priority_alpha``, ``priority_beta_start``,
``priority_eps``, ``replay_ratio``, ``learning_starts``, ``batch_size``, ``n_step``, ``gamma``).
"""

from __future__ import annotations

from typing import Any

import torch

from workbench.kernels import linear_schedule
from workbench.replay import (
    FrameStorage,
    NStepTransitions,
    PrioritizedReplay,
    RateLimiter,
    UniformReplay,
)
from workbench.rollout import Rollout

__all__ = ["ReplayAgent", "make_replay"]


def make_replay(
    config: Any, seed: int | None, *, frame_streams: int | None = None
) -> UniformReplay | PrioritizedReplay:
    """The replay a config asks for (``prioritized``, ``replay_capacity``, ``priority_*``).
    ``frame_streams``: Atari, each frame stored once in a ``FrameStorage`` with that many env
    streams (the sampler's envs), which rebuilds stacks and n-step windows by index: about 1.8 KB a
    step at 42x42 against 14 KB for ``obs`` and ``next_obs`` stacks; its capacity is rounded down to
    a multiple of the streams."""
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
            n_step=config.n_step,
            gamma=config.gamma,
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
    """A ``DQN`` or ``DDPG`` learner with its replay, n-step windows and rate limiter.

    Args:
        learner: the learner (``update(batch) -> metrics``, ``priorities``, ``config``).
        replay: the replay to add to and sample from (default: ``make_replay(learner.config)``).
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
        *,
        replay: Any = None,
        seed: int | None = None,
        frame_streams: int | None = None,
    ) -> None:
        self.learner = learner
        self.config = c = learner.config
        if replay is None:
            replay = make_replay(c, seed, frame_streams=frame_streams)
        self.replay = replay
        self.frames = isinstance(getattr(replay, "storage", None), FrameStorage)
        self.nstep = NStepTransitions(c.n_step, c.gamma)
        # The warm-up is kept here, not in the limiter: it ends only when the replay also holds a
        # batch, and the steps that end it count (rlpyt's ``min_itr_learn``).
        self.limiter = RateLimiter(max_ratio=c.replay_ratio)
        self.env_steps = 0

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
        """Fraction of the run done: the learner's schedules (epsilon), and the prioritized
        replay's beta rising linearly to 1 over the run (Schaul et al. 2016, Sec. 3.4)."""
        self.learner.set_progress(progress)
        if isinstance(self.replay, PrioritizedReplay):
            start = self.config.priority_beta_start
            self.replay.beta = linear_schedule(start, 1.0, self.learner.progress)

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
        if self.env_steps >= c.learning_starts and len(self.replay) >= c.batch_size:
            self.limiter.insert(rollout.num_steps)
            for _ in range(self.limiter.batches_allowed(c.batch_size)):
                batch, indices, weights = self.replay.sample(c.batch_size)
                self.limiter.sample(c.batch_size)
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
        """The learner's state, the env steps and the limiter's counters (not the replay: it is
        refilled on resume)."""
        return {
            "learner": self.learner.state_dict(),
            "env_steps": self.env_steps,
            "limiter": self.limiter.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state["learner"])
        self.env_steps = int(state["env_steps"])
        self.limiter.load_state_dict(state["limiter"])
        self.nstep.reset()

    def to(self, device: "str | torch.device") -> None:
        self.learner.to(device)

    def __repr__(self) -> str:
        return f"ReplayAgent({self.learner!r}, replay={type(self.replay).__name__})"
