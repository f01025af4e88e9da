"""The loops the workbench's samplers are measured against (notebook 01, benchmarks): one
gymnasium env with ``AtariPreprocessing`` stepped and inferred one observation at a time (the naive
loop), and gymnasium's own vector envs (sync and async) with batched inference."""

from __future__ import annotations

import functools
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from workbench.envs import is_atari
from workbench.measure.throughput import Throughput, check_seconds, frameskip_of, throughput_result

__all__ = ["gym_vector_loop", "make_preprocessed_env", "naive_loop"]


def make_preprocessed_env(env_id: str, seed: int | None = None) -> gym.Env:
    """One gymnasium env, preprocessed as ``make_vector_env`` does, in Python.

    Atari ids: ``gym.make(env_id, frameskip=1, repeat_action_probability=<the id's>)`` in
    ``AtariPreprocessing(frame_skip=4, noop_max=30, screen_size=84, grayscale_obs=True)`` and
    ``FrameStackObservation(4)``: observations uint8 ``[4, 84, 84]``. Other ids: plain
    ``gym.make``. Module-level (and picklable with ``functools.partial``) for AsyncVectorEnv.
    """
    import ale_py

    gym.register_envs(ale_py)
    if not is_atari(env_id):
        env = gym.make(env_id)
    else:
        sticky = float(gym.spec(env_id).kwargs.get("repeat_action_probability", 0.0))
        env = gym.make(env_id, frameskip=1, repeat_action_probability=sticky)
        env = gym.wrappers.AtariPreprocessing(
            env, frame_skip=4, noop_max=30, screen_size=84, grayscale_obs=True
        )
        env = gym.wrappers.FrameStackObservation(env, 4)
    if seed is not None:
        env.action_space.seed(seed)
    return env


def naive_loop(
    env_id: str, model: nn.Module, seconds: float, *, seed: int = 0, label: str | None = None
) -> Throughput:
    """One env, one forward pass per step at batch 1: the baseline every sampler is compared to.

    The env is :func:`make_preprocessed_env` (gymnasium's ``AtariPreprocessing`` and
    ``FrameStackObservation`` for Atari); ``model.act`` chooses each action under no_grad with
    torch's current thread count (set it with :func:`torch_threads`). The env is closed on return.
    """
    check_seconds(seconds)
    env = make_preprocessed_env(env_id, seed)
    env_s = inference_s = 0.0
    steps = 0
    try:
        obs, _ = env.reset(seed=seed)
        with torch.no_grad():
            for warmup in (True, False):
                start = time.perf_counter()
                while True:
                    t0 = time.perf_counter()
                    action = model.act(torch.as_tensor(np.asarray(obs))[None])["action"]
                    t1 = time.perf_counter()
                    obs, _, terminated, truncated, _ = env.step(action[0].item())
                    if terminated or truncated:
                        obs, _ = env.reset()
                    t2 = time.perf_counter()
                    if warmup:
                        if t2 - start >= 0.2:  # a few steps, untimed
                            break
                        continue
                    steps += 1
                    inference_s += t1 - t0
                    env_s += t2 - t1
                    elapsed = t2 - start
                    if elapsed >= seconds:
                        break
    finally:
        env.close()
    details = {"env_id": env_id, "num_envs": 1, "torch_threads": torch.get_num_threads()}
    stages = {"env": env_s, "inference": inference_s, "total": elapsed}
    return throughput_result(
        label or "naive (1 gym env, batch 1)", steps, elapsed, frameskip_of(env_id), stages, details
    )


def gym_vector_loop(
    env_id: str,
    num_envs: int,
    model: nn.Module,
    seconds: float,
    mode: str = "async",
    *,
    seed: int = 0,
    label: str | None = None,
) -> Throughput:
    """gymnasium's vector env of :func:`make_preprocessed_env` envs, one batched forward per step.

    Args:
        mode: ``"async"`` (``AsyncVectorEnv``: one process per env, gymnasium's default start
            method) or ``"sync"`` (``SyncVectorEnv``: all in this process).
        seconds: wall-clock seconds to step for, after 0.2 s of untimed steps.

    Same-step autoreset, as the workbench's envs, so every counted step is a real transition. The
    env (and its processes) is closed on return, also on an error or Ctrl-C.
    """
    check_seconds(seconds)
    if mode not in ("async", "sync"):
        raise ValueError(f"mode must be 'async' or 'sync', got {mode!r}.")
    env_fns = [functools.partial(make_preprocessed_env, env_id, seed + i) for i in range(num_envs)]
    vector_class = gym.vector.AsyncVectorEnv if mode == "async" else gym.vector.SyncVectorEnv
    env = None
    finished = False
    env_s = inference_s = 0.0
    steps = 0
    try:
        env = vector_class(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        obs, _ = env.reset(seed=seed)
        with torch.no_grad():
            for warmup in (True, False):
                start = time.perf_counter()
                while True:
                    t0 = time.perf_counter()
                    actions = model.act(torch.as_tensor(obs))["action"].numpy()
                    t1 = time.perf_counter()
                    obs, *_ = env.step(actions)
                    t2 = time.perf_counter()
                    if warmup:
                        if t2 - start >= 0.2:
                            break
                        continue
                    steps += num_envs
                    inference_s += t1 - t0
                    env_s += t2 - t1
                    elapsed = t2 - start
                    if elapsed >= seconds:
                        break
        finished = True
    finally:
        if env is not None:
            # After an error or Ctrl-C a worker may never answer: terminate instead of asking.
            env.close(terminate=not finished)
    details = {
        "env_id": env_id,
        "num_envs": num_envs,
        "mode": mode,
        "torch_threads": torch.get_num_threads(),
    }
    stages = {"env": env_s, "inference": inference_s, "total": elapsed}
    label = label or f"gym {'Async' if mode == 'async' else 'Sync'}VectorEnv({num_envs})"
    return throughput_result(label, steps, elapsed, frameskip_of(env_id), stages, details)
