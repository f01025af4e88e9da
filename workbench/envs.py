"""Many simulators behind one vector interface.

``make_vector_env(env_id, num_envs)`` returns a :class:`VectorEnv`:

* ALE ids (``ALE/Pong-v5``, ``BreakoutNoFrameskip-v4``, ...) run on ale_py's C++
  ``AtariVectorEnv``: threaded stepping and the DQN preprocessing (Mnih et al. 2015: 84x84 gray,
  max-pool over the last two frames, frame skip 4, frame stack 4, up to 30 no-op starts) happen in
  C++, off the GIL. With ``batch_size < num_envs`` it runs asynchronously: each ``recv`` returns
  the first ``batch_size`` envs to finish, named by ``info["env_id"]`` (Stooke & Abbeel 2018,
  Sec. 3).
* Other gymnasium ids (CartPole-v1, Pendulum-v1, ...) run on ``gymnasium.vector.SyncVectorEnv``.

Both use same-step autoreset: when an episode ends, the returned observation is already the next
episode's first, and the final one is in ``info["final_obs"]``, so every step is a real transition.

Episode statistics are kept here, on raw rewards, for the whole game: the ALE always runs with
reward clipping and life-loss termination off, and this wrapper derives the training reward
(clipped) and the training termination (life lost, under ``episodic_life``) itself. Reported
returns therefore never see clipped rewards and never stop at a lost life, the bug that made
CleanRL's EnvPool scripts report per-life returns.

This module does not import torch: env-only worker processes stay small (about 40 MB each,
against about 320 MB with torch).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import gymnasium as gym
import numpy as np

from workbench.checks import positive_int
from workbench.system import usable_cores


@dataclass(frozen=True)
class AtariOptions:
    """Preprocessing for ALE ids, named as in the papers (defaults: Mnih et al. 2015)."""

    frameskip: int = 4
    """Agent steps repeat each action this many emulator frames (frames = steps * frameskip)."""
    frame_stack: int = 4
    """Observations stack the last this-many preprocessed frames: ``[frame_stack, 84, 84]``."""
    screen_size: int | tuple[int, int] = 84
    """Frames are resized to ``screen_size x screen_size``, or to ``(height, width)``: ``(210,
    160)`` keeps the native screen (``runs.evaluation.play`` shows games that way)."""
    grayscale: bool = True
    """Luminance only; False keeps RGB (observations ``[frame_stack, H, W, 3]``)."""
    maxpool: bool = True
    """Max over the last two emulator frames of each skip (removes Atari sprite flicker)."""
    noop_max: int = 30
    """Each episode starts with a random number (up to this) of no-op actions."""
    episodic_life: bool = True
    """A lost life is terminal for learning (``terminated``), though the game goes on and the
    reported episode return covers the whole game."""
    reward_clipping: bool = True
    """Training rewards are clipped to their sign {-1, 0, 1}; reported returns stay raw."""
    fire_reset: bool = True
    """Press FIRE on reset in games that need it to start."""
    repeat_action_probability: float | None = None
    """Sticky actions (Machado et al. 2018); None keeps the id's own (0.25 for -v5, 0 for -v4)."""
    max_episode_frames: int = 108_000
    """Episodes are truncated after this many emulator frames (30 minutes of play)."""


class VectorEnv:
    """A batch of environments with same-step autoreset and raw episode statistics.

    ``step(actions)`` returns ``(obs, rewards, terminated, truncated, info)``, each over the
    ``batch_size`` envs named by ``info["env_id"]`` (all envs, in order, unless asynchronous).
    ``info`` holds:

    * ``env_id``: int ``[batch]``;
    * ``final_obs``: ``[batch, *obs_shape]``, the last observation of an episode where
      ``terminated | truncated`` and the game really ended (equal to ``obs`` elsewhere);
    * ``episode_done``: bool ``[batch]``, a whole episode (game) ended at this step;
    * ``episode_return`` / ``episode_length``: float64 / int64 ``[batch]``, its raw return and
      length in agent steps, valid where ``episode_done``;
    * ``raw_reward``: float64 ``[batch]``, the reward before clipping.
    """

    def __init__(
        self,
        inner: Any,
        *,
        env_id: str,
        num_envs: int,
        batch_size: int,
        reward_clipping: bool,
        episodic_life: bool,
        is_ale: bool,
    ) -> None:
        self.inner = inner
        self.env_id = env_id
        self.num_envs = num_envs
        self.batch_size = batch_size
        self.reward_clipping = reward_clipping
        self.episodic_life = episodic_life
        self.single_observation_space = inner.single_observation_space
        self.single_action_space = inner.single_action_space
        self._is_ale = is_ale
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._lengths = np.zeros(num_envs, dtype=np.int64)
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._all_ids = np.arange(num_envs)
        self._closed = False
        self._started = False

    @property
    def observation_shape(self) -> tuple[int, ...]:
        return tuple(self.single_observation_space.shape)

    @property
    def num_actions(self) -> int:
        """Number of discrete actions (ValueError for continuous action spaces)."""
        space = self.single_action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise ValueError(f"{self.env_id} has a continuous action space {space}, not Discrete.")
        return int(space.n)

    @property
    def is_async(self) -> bool:
        return self.batch_size < self.num_envs

    def reset(
        self, seed: "int | Sequence[int] | np.ndarray | None" = None
    ) -> tuple[np.ndarray, dict]:
        """Reset every env. ``seed``: env ``i`` gets ``seed + i`` (an int), or ``seed[i]``."""
        if seed is not None:
            if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
                seeds = np.arange(seed, seed + self.num_envs)
            else:
                seeds = np.asarray(seed)
                if seeds.ndim != 1 or not np.issubdtype(seeds.dtype, np.integer):
                    raise ValueError(
                        "seed must be an int (env i gets seed + i) or one int per env, "
                        f"got {seed!r}."
                    )
            if seeds.shape != (self.num_envs,):
                raise ValueError(
                    f"reset got {seeds.shape[0]} seeds for {self.num_envs} envs; pass one int "
                    "(env i gets seed + i) or exactly one seed per env."
                )
            obs, info = self._reset_inner(seeds)
        else:
            obs, info = self._reset_inner(None)
        self._returns[:] = 0.0
        self._lengths[:] = 0
        env_ids = np.asarray(info.get("env_id", self._all_ids[: len(obs)]))
        if "lives" in info:
            self._lives[env_ids] = info["lives"]
        return obs, {"env_id": env_ids}

    def _reset_inner(self, seeds: "np.ndarray | None") -> tuple[np.ndarray, dict]:
        if self._is_ale:
            if self.is_async and self._started:
                # The other envs' batches are still in flight; resetting over them corrupts the
                # emulators ("Illegal Instruction!"), so collect and drop them first.
                for _ in range(self.num_envs // self.batch_size - 1):
                    self.inner.recv()
            self._started = True
            return self.inner.reset(seed=seeds)
        return self.inner.reset(seed=None if seeds is None else [int(s) for s in seeds])

    def send(self, actions: np.ndarray) -> None:
        """Start stepping the envs of the last batch (asynchronous ALE); see ``recv``."""
        if self._is_ale:
            self.inner.send(np.asarray(actions, dtype=np.int64).reshape(self.batch_size))
        else:
            self._pending = actions

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        if self._is_ale:
            obs, raw_reward, game_over, truncated, info = self.inner.recv()
        else:
            obs, raw_reward, game_over, truncated, info = self.inner.step(self._pending)
        return self._track(obs, raw_reward, game_over, truncated, info)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        self.send(actions)
        return self.recv()

    def _track(self, obs, raw_reward, game_over, truncated, info):
        env_ids = np.asarray(info["env_id"]) if "env_id" in info else self._all_ids
        raw_reward = np.asarray(raw_reward, dtype=np.float64)
        game_over = np.asarray(game_over, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        episode_done = game_over | truncated

        self._returns[env_ids] += raw_reward
        self._lengths[env_ids] += 1
        episode_return = self._returns[env_ids]  # fancy indexing copies
        episode_length = self._lengths[env_ids]
        self._returns[env_ids[episode_done]] = 0.0
        self._lengths[env_ids[episode_done]] = 0

        terminated = game_over
        if "lives" in info:
            lives = np.asarray(info["lives"], dtype=np.int64)
            # After a same-step reset `lives` is the new game's count, so only a drop within a
            # game that goes on is a lost life.
            life_lost = (lives < self._lives[env_ids]) & ~episode_done
            self._lives[env_ids] = lives
            if self.episodic_life:
                terminated = game_over | life_lost

        reward = np.sign(raw_reward) if self.reward_clipping else raw_reward
        out = {
            "env_id": env_ids,
            "final_obs": self._final_obs(obs, episode_done, info),
            "episode_done": episode_done,
            "episode_return": episode_return,
            "episode_length": episode_length,
            "raw_reward": raw_reward,
        }
        return obs, reward.astype(np.float32), terminated, truncated, out

    def _final_obs(self, obs: np.ndarray, episode_done: np.ndarray, info: dict) -> np.ndarray:
        if not episode_done.any():
            return obs
        if self._is_ale:  # ALE: dense, but rows of envs still playing hold stale frames
            mask = episode_done.reshape(-1, *([1] * (obs.ndim - 1)))
            return np.where(mask, info["final_obs"], obs)
        final = obs.copy()  # gymnasium: an object array, None where not done
        for i in np.flatnonzero(episode_done):
            final[i] = info["final_obs"][i]
        return final

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.inner.close()

    def __enter__(self) -> "VectorEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        mode = f", batch_size={self.batch_size} (async)" if self.is_async else ""
        return f"VectorEnv({self.env_id!r}, num_envs={self.num_envs}{mode})"


def _registry() -> dict:
    import ale_py

    gym.register_envs(ale_py)  # idempotent: makes the ALE/ ids visible in gym.registry
    return gym.registry


def is_atari(env_id: str) -> bool:
    spec = _registry().get(env_id)
    return spec is not None and "ale_py" in str(spec.entry_point)


def _check_env_id(env_id: str) -> None:
    registry = _registry()
    if not isinstance(env_id, str) or env_id not in registry:
        matches = difflib.get_close_matches(str(env_id), list(registry), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""
        raise ValueError(
            f"Unknown env id {env_id!r}.{hint} Atari games are 'ALE/<Game>-v5' "
            "(e.g. 'ALE/Pong-v5'); classic control ids are gymnasium's (e.g. 'CartPole-v1')."
        )


def _check_counts(num_envs: int, batch_size: int | None) -> int:
    positive_int(num_envs, "num_envs", "use num_envs >= 1.")
    if batch_size is None:
        return int(num_envs)
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, (int, np.integer))
        or batch_size < 1
    ):
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    if batch_size > num_envs or num_envs % batch_size:
        divisors = [d for d in range(1, num_envs + 1) if num_envs % d == 0]
        raise ValueError(
            f"batch_size={batch_size} does not divide num_envs={num_envs}; "
            f"use one of {divisors} (or change num_envs)."
        )
    return int(batch_size)


def make_vector_env(
    env_id: str,
    num_envs: int,
    *,
    seed: int | None = None,
    batch_size: int | None = None,
    num_threads: int | None = None,
    **atari_options: Any,
) -> VectorEnv:
    """``num_envs`` copies of ``env_id`` as one :class:`VectorEnv`, reset when ``seed`` is given.

    Args:
        env_id: a gymnasium id: ``ALE/<Game>-v5`` (or ``<Game>NoFrameskip-v4``) for Atari,
            anything else registered (``CartPole-v1``) for gymnasium's vector env.
        num_envs: number of environments (>= 1).
        seed: when given, the envs are reset with env ``i`` seeded ``seed + i``.
        batch_size: Atari only: ``recv`` returns this many envs at a time (asynchronous stepping
            when smaller than ``num_envs``); must divide ``num_envs``. Default: all of them.
        num_threads: Atari only: C++ stepping threads (default: min(num_envs, usable cores)).
        **atari_options: fields of :class:`AtariOptions` (Atari ids only).
    """
    _check_env_id(env_id)
    batch_size = _check_counts(num_envs, batch_size)
    spec = gym.spec(env_id)
    if is_atari(env_id):
        env = _make_atari(env_id, spec, num_envs, batch_size, num_threads, atari_options)
    else:
        if atari_options:
            raise ValueError(
                f"{env_id} is not an Atari id; the options {sorted(atari_options)} apply to "
                "ALE ids only. Remove them."
            )
        if batch_size != num_envs:
            raise ValueError(
                f"batch_size={batch_size} < num_envs={num_envs} (asynchronous stepping) needs the "
                f"C++ Atari vector env; {env_id} runs on gymnasium's SyncVectorEnv. "
                "Leave batch_size unset."
            )
        inner = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        )
        env = VectorEnv(
            inner,
            env_id=env_id,
            num_envs=num_envs,
            batch_size=num_envs,
            reward_clipping=False,
            episodic_life=False,
            is_ale=False,
        )
    if seed is not None:
        env.reset(seed=seed)
    return env


def _make_atari(env_id, spec, num_envs, batch_size, num_threads, atari_options) -> VectorEnv:
    from ale_py import AtariVectorEnv

    known = {f.name for f in fields(AtariOptions)}
    unknown = sorted(set(atari_options) - known)
    if unknown:
        raise ValueError(f"Unknown Atari option(s) {unknown}; the options are {sorted(known)}.")
    options = AtariOptions(**atari_options)
    sticky = options.repeat_action_probability
    if sticky is None:
        sticky = float(spec.kwargs.get("repeat_action_probability", 0.0))
    if num_threads is None:
        num_threads = min(num_envs, usable_cores())
    size = options.screen_size
    height, width = (size, size) if isinstance(size, int) else size
    inner = AtariVectorEnv(
        spec.kwargs["game"],
        num_envs,
        batch_size=batch_size,
        num_threads=num_threads,
        autoreset_mode="SameStep",
        max_num_frames_per_episode=options.max_episode_frames,
        repeat_action_probability=sticky,
        img_height=height,
        img_width=width,
        grayscale=options.grayscale,
        stack_num=options.frame_stack,
        frameskip=options.frameskip,
        maxpool=options.maxpool,
        noop_max=options.noop_max,
        use_fire_reset=options.fire_reset,
        # Clipping and life loss are derived in VectorEnv from raw rewards and `lives`, so that
        # episode statistics stay raw and whole-game (see the module docstring).
        reward_clipping=False,
        episodic_life=False,
        life_loss_info=False,
    )
    return VectorEnv(
        inner,
        env_id=env_id,
        num_envs=num_envs,
        batch_size=batch_size,
        reward_clipping=options.reward_clipping,
        episodic_life=options.episodic_life,
        is_ale=True,
    )


def env_spaces(env_id: str, **atari_options: Any) -> tuple[gym.Space, gym.Space]:
    """``(single_observation_space, single_action_space)`` of ``env_id`` without keeping envs."""
    with make_vector_env(env_id, 1, num_threads=1, **atari_options) as env:
        return env.single_observation_space, env.single_action_space


def render_frames(env_id: str, *, steps: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One game frame as a person sees it (RGB) and as the agent sees it (the stacked obs).

    Random play for ``steps`` agent steps, for a look at the game in the tour notebook.
    """
    _check_env_id(env_id)
    if not is_atari(env_id):
        env = gym.make(env_id, render_mode="rgb_array")
        env.reset(seed=seed)
        env.action_space.seed(seed)
        obs = None
        for _ in range(steps):
            obs, *_ = env.step(env.action_space.sample())
        frame = env.render()
        env.close()
        return frame, np.asarray(obs)
    rgb_env = gym.make(env_id, render_mode="rgb_array")
    rgb_env.reset(seed=seed)
    rgb_env.action_space.seed(seed)
    for _ in range(steps):
        rgb_env.step(rgb_env.action_space.sample())
    frame = rgb_env.render()
    rgb_env.close()
    with make_vector_env(env_id, 1, seed=seed, num_threads=1) as env:
        rng = np.random.default_rng(seed)
        obs = None
        for _ in range(steps):
            obs, *_ = env.step(rng.integers(env.num_actions, size=1))
    return frame, obs[0]


# --------------------------------------------------------------------------------------------------
# A partially observed task: CartPole without velocities (for recurrent agents)

#: The gymnasium id of CartPole-v1 seen through ``HideVelocity``, registered at import.
CARTPOLE_NO_VELOCITY = "workbench/CartPoleNoVelocity-v1"


class HideVelocity(gym.ObservationWrapper):
    """CartPole with its velocities hidden: observations keep the cart position and the pole
    angle (CartPole's indices 0 and 2), and drop the cart velocity and the pole's angular
    velocity (indices 1 and 3).

    A partially observed task: from one observation a feed-forward policy cannot tell which way
    the pole is moving, so it cannot balance it for long; a recurrent policy can infer the
    velocities from consecutive observations. This is the motivation of DRQN (Hausknecht & Stone
    2015, *Deep Recurrent Q-Learning for POMDPs*, https://arxiv.org/abs/1507.06527, Sec. 1: the
    "flickering" Atari games) and of R2D2's recurrent network (Kapturowski et al. 2019). Registered
    as ``"workbench/CartPoleNoVelocity-v1"`` (500 steps per episode, as CartPole-v1), so
    ``make_vector_env`` and ``gym.make`` take it in any process that imported ``workbench.envs``.
    """

    KEEP = (0, 2)
    """Observation indices kept: cart position, pole angle."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or space.shape != (4,):
            raise ValueError(
                f"HideVelocity expects CartPole's Box(4,) observations, got {space}; wrap a "
                "CartPole env (gym.make('CartPole-v1'))"
            )
        keep = list(self.KEEP)
        self.observation_space = gym.spaces.Box(
            space.low[keep], space.high[keep], dtype=space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation)[list(self.KEEP)]


def _make_cartpole_no_velocity(**kwargs: Any) -> gym.Env:
    """The entry point of ``CARTPOLE_NO_VELOCITY``: CartPole's env class, velocities hidden
    (``gym.make`` adds the time limit and its checkers around it, as for CartPole-v1)."""
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    return HideVelocity(CartPoleEnv(**kwargs))


if CARTPOLE_NO_VELOCITY not in gym.registry:  # importing this module twice registers it once
    gym.register(
        id=CARTPOLE_NO_VELOCITY,
        entry_point=_make_cartpole_no_velocity,
        max_episode_steps=500,
        reward_threshold=475.0,
    )
