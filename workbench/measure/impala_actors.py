"""IMPALA-style actors: a model in every actor process, the baseline of the central-inference study.

IMPALA (Espeholt et al. 2018) keeps a copy of the policy in every actor, which runs a batch-1
forward pass on its own CPU each step; SEED RL moves that forward pass to one server. These actors
are what ``central_inference.measure_impala`` counts.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from workbench.envs import make_vector_env
from workbench.models import ActorCritic
from workbench.processes import WORKER_TIMEOUT, SharedArray, die_with_parent

__all__ = ["LATENCY_WINDOW", "ImpalaActorSpec", "ImpalaActors", "impala_actor_main"]

#: Forward times each IMPALA-style actor keeps (a ring), for its latency percentiles.
LATENCY_WINDOW = 4096


@dataclass
class ImpalaActorSpec:
    """What one IMPALA-style actor needs: its env, its model and its row of the shared counters."""

    env_id: str
    index: int
    seed: int
    parent_pid: int
    obs_shape: tuple[int, ...]
    num_actions: int
    state_dict: dict[str, np.ndarray]
    """The model's parameters as numpy arrays (pickled once, at start)."""
    env_options: dict = field(default_factory=dict)
    nice: int = 0


def impala_actor_main(spec: ImpalaActorSpec, shared: dict[str, SharedArray], control: Any) -> None:
    """An IMPALA-style actor process: its own ``ActorCritic`` on one torch thread, one env, one
    batch-1 forward pass per step, until ``shared["stop"]`` is set or its parent dies.

    ``shared`` (allocated by the parent): ``steps`` int64 ``[A]`` (steps done by actor ``index``),
    ``forward`` float64 ``[A, LATENCY_WINDOW]`` (its last forward times, seconds, a ring indexed by
    step), ``actions`` int64 ``[A, num_actions]`` (how often it chose each action), ``go`` and
    ``stop`` uint8 ``[1]``. It reports ``("ready", pid)`` or ``("error", traceback)`` on
    ``control`` once its model and env exist, then waits for ``go`` (set when every actor is
    ready)."""
    die_with_parent(spec.parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it ends us
    envs = None
    try:
        if spec.nice:
            os.nice(spec.nice)
        torch.set_num_threads(1)  # one core per actor, as an IMPALA actor has its own CPU
        torch.manual_seed(spec.seed)
        model = ActorCritic(spec.obs_shape, spec.num_actions)
        model.load_state_dict(
            {key: torch.from_numpy(value) for key, value in spec.state_dict.items()}
        )
        model.eval()
        envs = make_vector_env(spec.env_id, 1, num_threads=1, **spec.env_options)
        obs, _ = envs.reset(seed=spec.seed)
        arrays = {key: value.array() for key, value in shared.items()}
        steps, forward, actions = (
            arrays["steps"],
            arrays["forward"][spec.index],
            arrays["actions"][spec.index],
        )
        go, stop = arrays["go"], arrays["stop"]
        control.send(("ready", os.getpid()))
    except BaseException:
        control.send(("error", traceback.format_exc()))
        if envs is not None:
            envs.close()
        return
    try:
        while not (
            go[0] or stop[0]
        ):  # actors ready early must not take the CPU of those still starting
            time.sleep(0.005)
        count = 0
        while not stop[0]:
            started = time.perf_counter()
            action = model.act(torch.from_numpy(obs))["action"].numpy()
            forward[count % LATENCY_WINDOW] = time.perf_counter() - started
            obs, *_ = envs.step(action)
            actions[action[0]] += 1
            count += 1
            steps[spec.index] = count
    except BaseException:
        try:
            control.send(("error", traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass
    finally:
        envs.close()


class ImpalaActors:
    """``num_actors`` :func:`impala_actor_main` processes and their shared counters.

    ``start()`` spawns them, waits until each has built its model and env, then lets them all
    step at once; ``stop()`` asks
    them to end, waits up to 3 s, kills what is left. A context manager; the processes also die
    with this one however it ends."""

    def __init__(
        self,
        env_id: str,
        num_actors: int,
        model: ActorCritic,
        *,
        seed: int = 0,
        env_options: dict | None = None,
        nice: int = 0,
    ) -> None:
        self.env_id = env_id
        self.num_actors = num_actors
        self.seed = seed
        self.env_options = dict(env_options or {})
        self.nice = nice
        self._context = multiprocessing.get_context("spawn")
        self._obs_shape = tuple(model.obs_shape)
        self._num_actions = model.num_actions
        self._state = {
            key: value.detach().cpu().numpy().copy() for key, value in model.state_dict().items()
        }
        ctx = self._context
        self.shared = {
            "steps": SharedArray.allocate(ctx, (num_actors,), np.int64),
            "forward": SharedArray.allocate(
                ctx, (num_actors, LATENCY_WINDOW), np.float64, fill=np.nan
            ),
            "actions": SharedArray.allocate(ctx, (num_actors, self._num_actions), np.int64),
            "go": SharedArray.allocate(ctx, (1,), np.uint8),
            "stop": SharedArray.allocate(ctx, (1,), np.uint8),
        }
        self.arrays = {key: value.array() for key, value in self.shared.items()}
        self.processes: list = []
        self._controls: list = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.is_alive()]

    @property
    def steps(self) -> int:
        """Steps done by all actors so far."""
        return int(self.arrays["steps"].sum())

    def start(self) -> "ImpalaActors":
        try:
            for index in range(self.num_actors):
                reader, writer = self._context.Pipe(duplex=False)
                spec = ImpalaActorSpec(
                    self.env_id,
                    index,
                    self.seed + 1000 * index,
                    os.getpid(),
                    self._obs_shape,
                    self._num_actions,
                    self._state,
                    self.env_options,
                    self.nice,
                )
                process = self._context.Process(
                    target=impala_actor_main,
                    args=(spec, self.shared, writer),
                    name=f"workbench-impala-actor-{index}",
                    daemon=True,
                )
                process.start()
                writer.close()  # so that the actor's death reads as EOF here
                self.processes.append(process)
                self._controls.append(reader)
            deadline = time.monotonic() + WORKER_TIMEOUT
            for index, control in enumerate(self._controls):
                if not control.poll(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(
                        f"IMPALA actor {index} did not start in {WORKER_TIMEOUT:.0f} s; "
                        "the machine may be overloaded: use fewer actors."
                    )
                try:
                    kind, detail = control.recv()
                except (EOFError, OSError):
                    raise RuntimeError(
                        f"IMPALA actor {index} exited (code {self.processes[index].exitcode}) "
                        "before it was ready"
                    ) from None
                if kind == "error":
                    raise RuntimeError(f"IMPALA actor {index} failed to start:\n{detail}")
            self.arrays["go"][0] = 1
        except BaseException:
            self.stop()
            raise
        return self

    def check(self) -> None:
        """Raise when an actor failed or died."""
        for index, (process, control) in enumerate(zip(self.processes, self._controls)):
            if control.poll():
                try:
                    kind, detail = control.recv()
                except (EOFError, OSError):
                    kind, detail = "died", ""
                raise RuntimeError(
                    f"IMPALA actor {index} failed:\n{detail}"
                    if kind == "error"
                    else f"IMPALA actor {index} died (exit code {process.exitcode})"
                )
            if not process.is_alive():
                raise RuntimeError(f"IMPALA actor {index} died (exit code {process.exitcode})")

    def forward_times(self) -> np.ndarray:
        """The actors' recent forward times in seconds (all actors together)."""
        times = self.arrays["forward"].ravel()
        return times[np.isfinite(times)]

    def stop(self) -> None:
        self.arrays["stop"][0] = 1
        deadline = time.monotonic() + 3.0
        for process in self.processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process.is_alive():
                process.kill()
                process.join(timeout=2.0)
        for control in self._controls:
            control.close()
        self._controls = []

    def __enter__(self) -> "ImpalaActors":
        return self.start() if not self.processes else self

    def __exit__(self, *exc) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------------
# The measurements
