"""Ape-X: distributed prioritized experience replay (Horgan et al. 2018, https://arxiv.org/abs/1803.00933).

The paper's Fig. 1, one role per class:

* ``ApexActor``: steps its own envs with its own exploration (Sec. 4.1: ``epsilon_i = 0.4 **
  (1 + 7 i / (N - 1))``; Ape-X DPG: Gaussian noise of a different scale per actor), keeps a local
  buffer of ``block_steps`` steps, turns it into n-step transitions and computes their initial
  priorities (|TD error|) with its own copy of the network (Alg. 1, lines 5-10), then sends the
  block to the replay. Between blocks it refreshes its parameters once ``parameter_sync_frames``
  frames have passed (the paper's 400).
* ``ReplayServer``: the one central ``replay.PrioritizedReplay``. It adds the actors' blocks,
  samples prioritized batches for the learner, applies the learner's new priorities, and trims
  the oldest data at capacity (a ring).
* The learner (``Apex.train``): samples, takes a gradient step (``DQN.learn`` or ``DDPG.learn``:
  double Q, dueling, 3-step returns by default, as in the paper), sends the new priorities back
  and publishes its parameters every ``publish_interval`` updates (Alg. 2).

Two back ends run the same roles (``apex_backends``):

* ``"local"``: processes from ``torch.multiprocessing`` (spawn). Each actor has its own pipe to
  the replay process (an actor killed mid-message breaks only its own pipe); blocks and sampled
  batches cross as numpy arrays. Parameters are published into shared-memory tensors that actors
  copy under a sequence lock. Actors run at a lower CPU priority than the learner and the
  replay. Every process dies with its parent.
* ``"ray"``: the replay and the actors are Ray actors (``pip install "workbench[distributed]"``);
  ``ray.init()`` on this machine, or ``ray.init(address=...)`` first to use a cluster. Actors
  send their blocks straight to the replay actor; the learner runs in this process.

The number of actors changes while a run goes (``Apex.settings.update(num_actors=...)``, or the
notebook's slider), and an actor that dies is restarted; the replay keeps its data through both.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import torch

from workbench.control import BackgroundTraining, RunSettings, Settings

__all__ = [
    "APEX_RECIPES", "Apex", "ApexActor", "ApexConfig", "ApexRecipe", "ReplayServer", "actor_epsilons",
    "actor_noise_scales", "make_agent",
]

BACKENDS = ("local", "ray")


def actor_epsilons(num_actors: int, base: float = 0.4, alpha: float = 7.0) -> list[float]:
    """Ape-X's per-actor epsilons (Horgan et al. 2018, Sec. 4.1): ``base ** (1 + alpha i / (N - 1))``.

    With ``N = 1`` the single actor gets ``base``. Actor 0 explores most (0.4), actor N-1 least
    (``0.4 ** 8`` ~ 0.00066): a spread of behaviours feeding one replay.
    """
    _check_count(num_actors, "num_actors")
    if num_actors == 1:
        return [base]
    return [base ** (1 + alpha * i / (num_actors - 1)) for i in range(num_actors)]


def actor_noise_scales(num_actors: int, high: float = 0.5, low: float = 0.05) -> list[float]:
    """Ape-X DPG's per-actor Gaussian noise scales (in half action ranges), spread geometrically
    from ``high`` (actor 0) to ``low`` (actor N-1), as the epsilons are for Ape-X DQN."""
    _check_count(num_actors, "num_actors")
    if num_actors == 1:
        return [math.sqrt(high * low)]
    return [high * (low / high) ** (i / (num_actors - 1)) for i in range(num_actors)]


def _check_count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


@dataclass
class ApexConfig:
    """An Ape-X run. Defaults are the paper's (Horgan et al. 2018, Appendix C) where they apply to a
    single machine; the agent's own hyperparameters live in ``agent`` (``DQNConfig`` or
    ``DDPGConfig``: n_step, gamma, double, learning rate, batch_size, target updates)."""

    env_id: str = "CartPole-v1"
    algo: str = "dqn"
    """``"dqn"`` (Ape-X DQN) or ``"ddpg"`` (Ape-X DPG, Sec. 3.2)."""
    agent: Any = None
    """``algos.dqn.DQNConfig`` or ``algos.ddpg.DDPGConfig`` (None: the defaults)."""
    model_options: dict = field(default_factory=dict)
    """Keyword arguments of the networks (``QNetwork``: dueling, hidden, num_atoms ...)."""
    num_actors: int = 4
    max_actors: int = 16
    """Most actors the run may grow to while it goes."""
    envs_per_actor: int = 1
    block_steps: int = 50
    """Steps per env in an actor's local buffer before it sends them (the paper's B = 50)."""
    parameter_sync_frames: int = 400
    """Frames between an actor's parameter refreshes (the paper's 400; 100 agent steps on Atari)."""
    publish_interval: int = 10
    """Learner updates between parameter publications."""
    replay_capacity: int = 100_000
    """Transitions the central replay holds (the paper's 2M on a large machine)."""
    priority_alpha: float = 0.6
    priority_beta: float = 0.4
    """The paper's alpha and beta (fixed in Ape-X; no annealing)."""
    learning_starts: int = 1_000
    """Transitions in the replay before the learner starts (the paper's 50k)."""
    max_replay_ratio: float | None = None
    """Cap on samples trained per transition added (None: the learner runs freely, as in the
    paper). A cap makes a run's learner updates per env step the same on a fast and a slow machine."""
    min_replay_ratio: float | None = None
    """Floor on the same ratio: the replay stops taking actors' blocks (they wait) while the
    learner lags behind it (None: actors run freely, as in the paper). Not the paper's; on a
    machine with fewer cores than actors it keeps the learner from falling behind (rlpyt's
    asynchronous runner throttles its sampler the same way)."""
    exploration_base: float = 0.4
    exploration_alpha: float = 7.0
    seed: int = 0
    learner_threads: int = 1
    """torch threads of the learner (each actor uses one)."""

    def __post_init__(self) -> None:
        if self.algo not in ("dqn", "ddpg"):
            raise ValueError(f"ApexConfig.algo must be 'dqn' or 'ddpg', got {self.algo!r}")
        if self.agent is None:
            self.agent = _default_agent_config(self.algo)
        for name in ("num_actors", "max_actors", "envs_per_actor", "block_steps", "parameter_sync_frames",
                     "publish_interval", "replay_capacity", "learning_starts", "learner_threads"):
            _check_count(getattr(self, name), f"ApexConfig.{name}")
        if self.num_actors > self.max_actors:
            raise ValueError(f"ApexConfig.num_actors={self.num_actors} > max_actors={self.max_actors}; "
                             "raise max_actors.")
        if self.replay_capacity < self.agent.batch_size:
            raise ValueError(f"ApexConfig.replay_capacity {self.replay_capacity} < the learner's batch_size "
                             f"{self.agent.batch_size}: the replay must hold at least one batch.")
        low, high = self.min_replay_ratio, self.max_replay_ratio
        if low is not None and (not low > 0 or low * self.learning_starts < self.agent.batch_size):
            raise ValueError(f"ApexConfig.min_replay_ratio={low} must be > 0 with min_replay_ratio * learning_starts "
                             f">= batch_size {self.agent.batch_size} (else the first batch never comes).")
        if low is not None and high is not None and low > high:
            raise ValueError(f"ApexConfig.min_replay_ratio={low} > max_replay_ratio={high}.")
        if self.learning_starts < self.agent.batch_size:
            raise ValueError(f"ApexConfig.learning_starts {self.learning_starts} < batch_size "
                             f"{self.agent.batch_size}: the first batch needs that many transitions.")

    @property
    def frame_skip(self) -> int:
        from workbench.envs import is_atari

        return 4 if is_atari(self.env_id) else 1

    @property
    def frame_storage(self) -> bool:
        """Atari: actors send steps and the replay keeps each frame once (``replay.FrameStorage``),
        rebuilding stacks and n-step windows by index (7 KB per step against 56 KB)."""
        from workbench.envs import is_atari

        return is_atari(self.env_id)

    @property
    def parameter_sync_steps(self) -> int:
        """Agent steps per env between parameter refreshes."""
        return max(1, self.parameter_sync_frames // self.frame_skip)

    def explorations(self, num_actors: int) -> list[float]:
        """Each actor's exploration: epsilons (DQN) or noise scales (DPG)."""
        if self.algo == "dqn":
            return actor_epsilons(num_actors, self.exploration_base, self.exploration_alpha)
        return actor_noise_scales(num_actors)


def _default_agent_config(algo: str) -> Any:
    if algo == "dqn":
        from workbench.algos.dqn import DQNConfig

        # Ape-X DQN (Appendix C): 3-step double Q, batch 512, Adam... lr 0.00025 / 4, target every 2,500.
        return DQNConfig(n_step=3, double=True, batch_size=512, learning_rate=0.00025 / 4,
                         target_update_interval=2_500, max_grad_norm=40.0, prioritized=True,
                         priority_alpha=0.6, priority_beta_start=0.4, replay_capacity=100_000)
    from workbench.algos.ddpg import DDPGConfig

    return DDPGConfig(n_step=3, prioritized=True)


def make_agent(config: ApexConfig, device: "str | torch.device" = "cpu") -> Any:
    """The learner (or an actor's copy): ``DQN`` on a ``QNetwork`` or ``DDPG`` on a policy and a
    critic, sized from the env's spaces. Its own replay is unused (the central one serves)."""
    from workbench.envs import env_spaces

    observation_space, action_space = env_spaces(config.env_id)
    if config.algo == "dqn":
        from workbench.algos.dqn import DQN
        from workbench.models import QNetwork

        if not hasattr(action_space, "n"):
            raise ValueError(f"{config.env_id} has continuous actions; Ape-X DQN needs discrete ones. "
                             "Use algo='ddpg' (Ape-X DPG).")
        q_network = QNetwork(observation_space.shape, int(action_space.n), **config.model_options)
        return DQN(q_network, config.agent, device=device, replay=_NO_REPLAY)
    from workbench.algos.ddpg import DDPG
    from workbench.models import ContinuousQ, DeterministicPolicy

    if hasattr(action_space, "n"):
        raise ValueError(f"{config.env_id} has discrete actions; Ape-X DPG needs continuous ones. Use algo='dqn'.")
    obs_dim = int(np.prod(observation_space.shape))
    policy = DeterministicPolicy(obs_dim, action_space.low, action_space.high, **config.model_options)
    critic = ContinuousQ(obs_dim, int(np.prod(action_space.shape)), **config.model_options)
    return DDPG(policy, critic, config.agent, device=device, replay=_NO_REPLAY)


class _NoReplay:
    """Stands in for an agent's own replay: in Ape-X only the central one holds data."""

    def __len__(self) -> int:
        return 0


_NO_REPLAY = _NoReplay()


# --- the roles ------------------------------------------------------------------------------------


class ApexActor:
    """One actor: its envs, its copy of the networks, its exploration, its local buffer.

    ``collect()`` steps ``block_steps`` steps per env and returns a block for the replay: n-step
    transitions (``algos.dqn.NStepTransitions``; windows wait for the next block to complete, so
    none is cut short), their initial priorities, and the episodes that ended.
    """

    def __init__(self, config: ApexConfig, index: int, exploration: float) -> None:
        from workbench.algos.dqn import NStepTransitions
        from workbench.envs import make_vector_env

        torch.set_num_threads(1)
        self.config, self.index = config, index
        self.agent = make_agent(config, "cpu")
        self.exploration = float(exploration)
        seed = config.seed * 10_007 + index * config.envs_per_actor  # distinct across actors and restarts
        self.env = make_vector_env(config.env_id, config.envs_per_actor, seed=seed)
        self.obs, _ = self.env.reset(seed=seed)
        self.nstep = NStepTransitions(config.agent.n_step, config.agent.gamma)
        self.env_steps = 0
        self.steps_since_sync = math.inf  # refresh at the first chance
        self.parameter_version = -1

    def wants_parameters(self) -> bool:
        return self.steps_since_sync >= self.config.parameter_sync_steps

    def load_parameters(self, state: dict[str, torch.Tensor], version: int) -> None:
        self.agent.load_actor_state(state)
        self.parameter_version = version
        self.steps_since_sync = 0

    def collect(self) -> dict[str, Any]:
        """One block: the transitions, their priorities, and what the actor saw."""
        from workbench.rollout import Rollout

        steps, num_envs = self.config.block_steps, self.config.envs_per_actor
        obs, actions, rewards, terminated, truncated, returns = [], [], [], [], [], []
        exploration = torch.full((num_envs,), self.exploration)
        for _ in range(steps):
            obs_tensor = torch.as_tensor(self.obs)
            action = self.agent.act(obs_tensor, exploration).cpu()
            next_obs, reward, term, trunc, info = self.env.step(action.numpy())
            obs.append(obs_tensor)
            actions.append(action)
            rewards.append(torch.as_tensor(reward, dtype=torch.float32))
            terminated.append(torch.as_tensor(term))
            truncated.append(torch.as_tensor(trunc))
            returns.extend(float(r) for r in info["episode_return"][info["episode_done"]])
            self.obs = next_obs
        rollout = Rollout(obs=torch.stack(obs), actions=torch.stack(actions), rewards=torch.stack(rewards),
                          terminated=torch.stack(terminated), truncated=torch.stack(truncated),
                          truncation_values=torch.zeros(steps, num_envs), policy_outputs={},
                          next_obs=torch.as_tensor(self.obs))
        self.env_steps += steps * num_envs
        self.steps_since_sync += steps
        block = {"actor": self.index, "env_steps": steps * num_envs, "episode_returns": returns,
                 "exploration": self.exploration, "parameter_version": self.parameter_version}
        if self.config.frame_storage:
            block.update(self._frame_block(rollout))
        else:
            transitions = self.nstep.add(rollout)
            priorities = self.agent.initial_priorities(transitions) if len(transitions["actions"]) else torch.zeros(0)
            # numpy, not tensors, cross to the replay: torch's shared-memory handover fetches a
            # file descriptor per tensor through a socket, which costs more than copying a block.
            block["transitions"] = {key: value.numpy() for key, value in transitions.items()}
            block["priorities"] = priorities.numpy()
        return block

    def _frame_block(self, rollout: Any) -> dict[str, Any]:
        """Atari: the block's steps for ``FrameStorage`` (which builds the windows itself), with a
        priority per step from the windows that end inside this block; a window that runs past it
        gets NaN, which the replay turns into its largest priority (Schaul et al. 2016's rule for
        data not yet seen by a network)."""
        from workbench.algos.dqn import NStepTransitions

        nstep = NStepTransitions(self.config.agent.n_step, self.config.agent.gamma)  # this block only
        transitions = nstep.add(rollout)
        priorities = np.full(tuple(rollout.rewards.shape), np.nan, dtype=np.float32)
        if len(transitions["actions"]):
            priorities[nstep.kept.numpy()] = self.agent.initial_priorities(transitions).numpy()
        num_envs = self.config.envs_per_actor
        steps = {"obs": rollout.obs.numpy(), "actions": rollout.actions.numpy(), "rewards": rollout.rewards.numpy(),
                 "terminated": rollout.terminated.numpy(), "truncated": rollout.truncated.numpy(),
                 "env_ids": np.arange(self.index * num_envs, (self.index + 1) * num_envs)}
        return {"steps": steps, "priorities": priorities.reshape(-1)}

    def close(self) -> None:
        self.env.close()


class ReplayServer:
    """The central replay (Horgan et al. 2018, Sec. 3): one ``PrioritizedReplay`` that every actor
    adds to, with the priorities the actors computed, and the learner samples from and updates.
    It also counts what each actor contributed."""

    def __init__(self, config: ApexConfig) -> None:
        from workbench.replay import FrameStorage, PrioritizedReplay

        self.config = config
        storage = None
        if config.frame_storage:  # one stream per env of every actor the run may grow to
            streams = config.max_actors * config.envs_per_actor
            storage = FrameStorage(config.replay_capacity // streams * streams, num_envs=streams,
                                   n_step=config.agent.n_step, gamma=config.agent.gamma)
        self.replay = PrioritizedReplay(config.replay_capacity if storage is None else storage.capacity,
                                        alpha=config.priority_alpha, beta=config.priority_beta,
                                        storage=storage, seed=config.seed)
        self.max_priority = 1.0  # the largest |TD| seen, for steps whose windows no actor could see
        self.added = 0
        self.sampled = 0
        self.per_actor: dict[int, dict[str, Any]] = {}
        self._new_returns: list[tuple[int, float]] = []  # episodes since the last ``take_stats``

    def add_block(self, block: dict[str, Any]) -> int:
        """Add one actor block; returns the replay's size."""
        data = block["steps"] if "steps" in block else block["transitions"]
        priorities = np.asarray(block["priorities"], dtype=np.float64)
        count = len(priorities)
        if count:
            known = ~np.isnan(priorities)
            if known.any():
                self.max_priority = max(self.max_priority, float(priorities[known].max()))
            self.replay.add(data, np.where(known, priorities, self.max_priority))
        self.added += count
        stats = self.per_actor.setdefault(block["actor"], {"transitions": 0, "env_steps": 0, "episodes": 0,
                                                           "returns": deque(maxlen=20)})
        stats["transitions"] += count
        stats["env_steps"] += block["env_steps"]
        stats["episodes"] += len(block["episode_returns"])
        stats["returns"].extend(block["episode_returns"])
        stats["exploration"] = block["exploration"]
        stats["parameter_version"] = block["parameter_version"]
        self._new_returns.extend((block["actor"], r) for r in block["episode_returns"])
        return len(self.replay)

    def accepting(self) -> bool:
        """Whether actors' blocks are taken now: False while the learner lags behind
        ``min_replay_ratio`` samples per transition added after ``learning_starts``."""
        low = self.config.min_replay_ratio
        return low is None or self.sampled >= low * (self.added - self.config.learning_starts)

    def ready(self, batch_size: int) -> bool:
        if len(self.replay) < max(batch_size, self.config.learning_starts):
            return False
        limit = self.config.max_replay_ratio
        return limit is None or self.sampled + batch_size <= limit * self.added

    def sample(self, batch_size: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray] | None:
        """A prioritized batch (numpy arrays), or None while the replay is not ready (warming up, or
        the replay-ratio cap reached)."""
        if not self.ready(batch_size):
            return None
        batch, indices, weights = self.replay.sample(batch_size)
        self.sampled += batch_size
        return batch, indices, weights

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        priorities = np.asarray(priorities, dtype=np.float64)
        if len(priorities):
            self.max_priority = max(self.max_priority, float(priorities.max()))
        self.replay.update_priorities(np.asarray(indices), priorities)

    def take_stats(self) -> dict[str, Any]:
        """Counters, and the episodes (actor, return) that ended since the last call."""
        new, self._new_returns = self._new_returns, []
        return {"replay_size": len(self.replay), "added": self.added, "sampled": self.sampled,
                "episodes": new,
                "per_actor": {i: {k: (list(v) if k == "returns" else v) for k, v in s.items()}
                              for i, s in self.per_actor.items()}}


# --- the learner, and the run that ties the roles together ----------------------------------------


class Apex(BackgroundTraining):
    """An Ape-X run: actors, the central replay and the learner (this process).

    ``train(...)`` runs it in the calling thread until a limit; ``start(...)`` runs the same in a
    background thread (a notebook stays live) and ``stop()`` ends it. Every ``log_interval``
    seconds a row goes to ``metrics``: learner updates, env steps, transitions added, replay size,
    rates, the number of actors, returns (all actors, and the actor exploring least), per-actor
    counts; changes (actors added, removed, restarted) go to ``events`` and into the rows.

    Args:
        config: an ``ApexConfig``.
        backend: ``"local"`` (processes) or ``"ray"``.
        device: where the learner trains (``"cuda"`` needs a GPU; the actors act on the CPU).
    """

    run_name = "Ape-X"

    def __init__(self, config: ApexConfig, *, backend: str = "local", device: str = "cpu") -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "ray":
            from workbench.apex_backends import import_ray

            import_ray()
        from workbench.system import resolve_device

        self.config = config
        self.backend_name = backend
        self.device = resolve_device(device)
        self.agent = make_agent(config, self.device)
        self.settings = RunSettings(Settings(num_actors=config.num_actors, num_envs=config.max_actors,
                                             horizon=1, minibatch_size=1))
        self.metrics: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.status = "created"
        self.error: BaseException | None = None
        self.learner_updates = 0
        self.restarts = 0
        self._backend: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._episodes: dict[int, deque] = {}
        self._all_returns: deque = deque(maxlen=20)

    # --- control ----------------------------------------------------------------------------------

    def set_num_actors(self, num_actors: int) -> None:
        """Ask for ``num_actors`` actors; the learner applies it at its next step."""
        if isinstance(num_actors, bool) or not isinstance(num_actors, int) or not 1 <= num_actors <= self.config.max_actors:
            raise ValueError(f"num_actors must be an int in [1, max_actors={self.config.max_actors}], "
                             f"got {num_actors!r}; raise ApexConfig.max_actors for more.")
        self.settings.update(num_actors=num_actors)

    def actor_pids(self) -> dict[int, int]:
        """Process ids of the local back end's actors (index -> pid)."""
        if self._backend is None or self.backend_name != "local":
            return {}
        return self._backend.actor_pids()

    # --- the learner loop -------------------------------------------------------------------------

    def train(self, *, max_updates: int | None = None, max_seconds: float | None = None,
              max_env_steps: int | None = None, target_return: float | None = None,
              target_metric: str = "return_least_exploring", log_interval: float = 1.0,
              on_row: Callable[[dict], None] | None = None) -> list[dict[str, Any]]:
        """Learn until ``max_updates`` learner updates, ``max_seconds``, ``max_env_steps`` (checked
        at each row), ``target_return`` reached by ``target_metric`` (a row's
        ``"return_least_exploring"``: the actor exploring least, its last 10 episodes, at least 5;
        or ``"return_all_actors"``: the last 20 episodes of all actors), or ``stop()``.
        Returns the metric rows."""
        if target_metric not in ("return_least_exploring", "return_all_actors"):
            raise ValueError(f"target_metric must be 'return_least_exploring' or 'return_all_actors', "
                             f"got {target_metric!r}")
        if max_updates is None and max_seconds is None and max_env_steps is None and target_return is None:
            raise ValueError("give train() a limit: max_updates, max_seconds or target_return "
                             "(or use start() and stop()).")
        threads = torch.get_num_threads()
        torch.set_num_threads(self.config.learner_threads)
        self._stop.clear()
        self.status = "running"
        self._start_time = time.monotonic()
        self._last_row_time, self._last_row = self._start_time, {"learner_updates": 0, "added": 0}
        try:
            self._open()
            batch_size = self.config.agent.batch_size
            metrics: dict[str, float] = {}
            next_row = self._start_time + log_interval
            while not self._stop.is_set():
                self._apply_settings()
                self._restart_dead_actors()
                while self._backend.pending_batches < 2:  # one batch in flight while the learner learns
                    self._backend.request_sample(batch_size)
                sample = self._backend.take_batch(timeout=0.05)
                if sample is not None:
                    batch, indices, weights = sample
                    metrics, priorities = self.agent.learn(batch, weights)
                    self._backend.update_priorities(indices, priorities)
                    self.learner_updates += 1
                    if self.learner_updates % self.config.publish_interval == 0:
                        self._backend.publish(self.agent.actor_state())
                now = time.monotonic()
                done = ((max_updates is not None and self.learner_updates >= max_updates)
                        or (max_seconds is not None and now - self._start_time >= max_seconds))
                if now >= next_row or done:
                    row = self._row(metrics)
                    next_row = now + log_interval
                    if on_row is not None:
                        on_row(row)
                    reached = row.get(target_metric)
                    if target_return is not None and reached is not None and reached >= target_return:
                        done = True
                    if max_env_steps is not None and row["env_steps"] >= max_env_steps:
                        done = True
                if done:
                    break
            self.status = "stopped" if self._stop.is_set() else "finished"
        except BaseException:
            self.status = "failed"
            raise
        finally:
            self._close()
            torch.set_num_threads(threads)
        return self.metrics

    def _open(self) -> None:
        from workbench.apex_backends import LocalBackend, RayBackend

        backend = LocalBackend if self.backend_name == "local" else RayBackend
        self._backend = backend(self.config, self.agent.actor_state())
        self._running: list[int] = []
        self._resize(self.settings.applied.num_actors)

    def _close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def _resize(self, num_actors: int) -> None:
        explorations = self.config.explorations(num_actors)
        self._backend.set_explorations(explorations)
        for index in range(len(self._running), num_actors):
            self._backend.start_actor(index)
        for index in range(num_actors, len(self._running)):
            self._backend.stop_actor(index)
        self._running = list(range(num_actors))

    def _apply_settings(self) -> None:
        change = self.settings.take_changes(self.learner_updates)
        if change is None:
            return
        settings, _ = change
        old = len(self._running)
        self._resize(settings.num_actors)
        self._event("actors", old=old, new=settings.num_actors)

    def _restart_dead_actors(self) -> None:
        for index in self._backend.dead_actors():
            self._backend.actors.pop(index, None)
            self._backend.start_actor(index)
            self.restarts += 1
            self._event("restart", actor=index)

    def _event(self, kind: str, **details: Any) -> None:
        self.events.append({"event": kind, "time": time.monotonic() - self._start_time,
                            "learner_updates": self.learner_updates, **details})

    def _row(self, learner_metrics: dict[str, float]) -> dict[str, Any]:
        stats = self._backend.stats()
        now = time.monotonic()
        for actor, episode_return in stats["episodes"]:
            self._episodes.setdefault(actor, deque(maxlen=10)).append(episode_return)
            self._all_returns.append(episode_return)
        elapsed = max(now - self._last_row_time, 1e-9)
        least_exploring = max(self._running) if self._running else None
        greedy_returns = self._episodes.get(least_exploring, ())
        per_actor = stats["per_actor"]
        row = {
            "time": now - self._start_time,
            "learner_updates": self.learner_updates,
            "env_steps": sum(a["env_steps"] for a in per_actor.values()),
            "transitions_added": stats["added"],
            "samples_trained": stats["sampled"],
            "replay_size": stats["replay_size"],
            "num_actors": len(self._running),
            "updates_per_second": (self.learner_updates - self._last_row["learner_updates"]) / elapsed,
            "transitions_per_second": (stats["added"] - self._last_row["added"]) / elapsed,
            "return_all_actors": float(np.mean(self._all_returns)) if self._all_returns else None,
            "return_least_exploring": float(np.mean(greedy_returns)) if len(greedy_returns) >= 5 else None,
            "per_actor": {int(i): {"transitions": a["transitions"], "env_steps": a["env_steps"],
                                   "episodes": a["episodes"], "exploration": a.get("exploration"),
                                   "mean_return": float(np.mean(a["returns"])) if a["returns"] else None}
                          for i, a in per_actor.items()},
            "events": [e for e in self.events if e["time"] > self._last_row.get("time", -1.0)],
            **learner_metrics,
        }
        self._last_row_time, self._last_row = now, {**row, "added": stats["added"]}
        self.metrics.append(row)
        return row


# --- recipes: Ape-X runs with a stated target, for tests and benchmarks/learning.py ------------------


@dataclass
class ApexRecipe:
    """An Ape-X run with its target, in the shape of ``recipes.Recipe`` (``benchmarks/learning.py``
    runs both). ``total_steps`` is the env-step budget; the target is met by ``target_metric``."""

    name: str
    config: ApexConfig
    target_return: float
    total_steps: int
    target_metric: str = "return_least_exploring"
    note: str = ""
    torch_threads: int = 1
    device: str = "cpu"
    """The learner's device (``"auto"``: the GPU when there is one)."""
    algorithm: type = field(default=None, init=False)  # set below: Apex

    def __post_init__(self) -> None:
        self.algorithm = Apex

    @property
    def env_id(self) -> str:
        return self.config.env_id

    sampler = "apex-local"

    @property
    def num_workers(self) -> int:
        return self.config.num_actors

    @property
    def num_envs(self) -> int:
        return self.config.num_actors * self.config.envs_per_actor

    @property
    def horizon(self) -> int:
        return self.config.block_steps

    def run(self, seed: int, *, max_seconds: float | None = None,
            on_update: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Train until the target, the env-step budget or ``max_seconds``; returns
        ``steps_to_target`` (None if not reached), ``stopped`` and the run's metric rows."""
        apex = Apex(replace(self.config, seed=seed), device=self.device)
        reached: dict[str, int] = {}

        def row(r: dict[str, Any]) -> None:
            value = r.get(self.target_metric)
            if value is not None and value >= self.target_return and not reached:
                reached["steps"] = r["env_steps"]
            if on_update is not None:
                episodes = sum(a["episodes"] for a in r["per_actor"].values())
                on_update({"env_steps": r["env_steps"], "mean_return": value, "episodes": episodes,
                           "seconds": r["time"], "learner_updates": r["learner_updates"]})

        started = time.monotonic()
        rows = apex.train(max_env_steps=self.total_steps, max_seconds=max_seconds, target_return=self.target_return,
                          target_metric=self.target_metric, log_interval=2.0, on_row=row)
        steps = reached.get("steps")
        if steps is not None:
            stopped = "target"
        elif max_seconds is not None and time.monotonic() - started >= max_seconds:
            stopped = "time"
        else:
            stopped = "budget"
        return {"steps_to_target": steps, "stopped": stopped, "rows": rows}


def _cartpole_apex() -> ApexConfig:
    from workbench.algos.dqn import DQNConfig

    return ApexConfig(env_id="CartPole-v1",
                      agent=DQNConfig(n_step=3, double=True, batch_size=64, learning_rate=1e-3, adam_eps=1e-8,
                                      replay_capacity=100_000, target_update_interval=256, prioritized=True,
                                      priority_alpha=0.6, max_grad_norm=10.0),
                      model_options=dict(dueling=True, hidden=(256, 256)), num_actors=4, learning_starts=1_000,
                      max_replay_ratio=32.0)


def _pendulum_apex_dpg() -> ApexConfig:
    from workbench.algos.ddpg import DDPGConfig

    return ApexConfig(env_id="Pendulum-v1", algo="ddpg", agent=DDPGConfig(n_step=3, batch_size=128, prioritized=True),
                      model_options=dict(hidden=(128, 128)), num_actors=4, learning_starts=1_000,
                      max_replay_ratio=128.0, min_replay_ratio=128.0)


def _pong_apex() -> ApexConfig:
    from workbench.algos.dqn import DQNConfig

    # The paper's learner (Appendix C: 3-step double dueling DQN, Adam lr 0.00025 / 4, target copied
    # every 2,500 updates, alpha 0.6, beta 0.4) at one machine's scale: 8 actors x 4 envs, batch 256,
    # a 1M-step frame-once replay (7 GB), at most 8 samples trained per step (DQN's ratio).
    return ApexConfig(env_id="ALE/Pong-v5",
                      agent=DQNConfig(n_step=3, double=True, batch_size=256, learning_rate=0.00025 / 4,
                                      adam_eps=1.5e-4, target_update_interval=2_500, max_grad_norm=40.0,
                                      prioritized=True, replay_capacity=1_000_000),
                      model_options=dict(dueling=True), num_actors=8, envs_per_actor=4, block_steps=50,
                      replay_capacity=1_000_000, learning_starts=50_000, max_replay_ratio=8.0,
                      learner_threads=2)


APEX_RECIPES: dict[str, ApexRecipe] = {
    recipe.name: recipe for recipe in (
        ApexRecipe(name="apex-dqn-cartpole", config=_cartpole_apex(), target_return=475.0, total_steps=200_000,
                   note="4 actors (epsilons 0.4 ** (1 + 7 i / 3)), dueling double 3-step DQN, batch 64, at most 32 "
                        "samples trained per transition; target met by the actor exploring least (last 10 "
                        "episodes). Seen: 26k learner updates, 103k env steps, 167 s on 2 cores."),
        ApexRecipe(name="apex-dpg-pendulum", config=_pendulum_apex_dpg(), target_return=-200.0, total_steps=20_000,
                   target_metric="return_all_actors",
                   note="Ape-X DPG (Sec. 3.2): 4 actors with Gaussian noise 0.5 -> 0.05 half-ranges, 3-step "
                        "DDPG learner, one update of 128 per env step (min = max replay ratio); target met by "
                        "the last 20 episodes of all actors."),
        ApexRecipe(name="apex-dqn-pong", config=_pong_apex(), target_return=18.0, total_steps=2_500_000,
                   device="auto", torch_threads=2,
                   note="Ape-X DQN on Pong (sticky actions, -v5): 10M frames budget, learner on the GPU when "
                        "there is one. Not yet run to its target here (no GPU was lent); an hour on a CPU: "
                        "benchmarks/learning.py --recipes apex-dqn-pong --seeds 0 --max-seconds 3600."),
    )
}
