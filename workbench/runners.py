"""The run: one loop for any algorithm with ``update(rollout) -> dict``, with its metrics,
checkpoints and live settings, in a background thread so that a notebook stays live.

The loop is rlpyt's ``minibatch_rl`` runner (Stooke & Abbeel 2018, *Accelerated Methods for Deep
RL*, https://arxiv.org/abs/1803.02811): ``rollout = sampler.collect(policy)``, ``metrics =
algo.update(rollout)``, record; :meth:`Run._loop` is the whole of it. Between iterations the run

* takes the changes of its :class:`~workbench.control.RunSettings` (widgets write them) and
  applies them: ``num_actors``, ``num_envs``, ``horizon`` resize the sampler; ``minibatch_size``
  sets ``algo.config.num_minibatches = batch_size // minibatch_size``; ``learner_devices`` moves
  the model and its optimizer state (one device), or hands the algorithm to a data-parallel
  learner (several: ``learner_factory``, from ``workbench.distributed``). Each applied change is an
  event row in the metrics, so plots can mark it; a change that cannot be applied is refused (an
  event too) and the run goes on as it was. In async mode the batch already collected is learned
  from first, so a new ``num_envs`` or ``horizon`` shows one iteration later;
* writes one row of namespaced metrics per iteration to ``runs/<name>/metrics.jsonl`` (after a
  header line: config, settings, algorithm, git commit, date, machine) and to ``run.metrics``;
* writes ``runs/<name>/checkpoint.pt`` every ``checkpoint_every`` iterations and when it ends.

Two modes (``RunConfig.mode``). ``"sync"``: collect, then learn on what was just collected.
``"async"`` (Stooke & Abbeel 2018, Sec. 3.3 and 4): a collector thread collects batch k+1 with a
behaviour copy of the model while the learner optimises batch k, so collection hides behind
learning; each batch is then one update old (``charts/policy_lag`` = 1).

In a notebook::

    run = Run("CartPole-v1", PPO(model, config), sampler="serial",
              settings=RunSettings(num_envs=8, horizon=32, minibatch_size=256),
              config=RunConfig(total_steps=100_000))
    run.start()    # returns at once; the loop runs in a background thread, widgets stay live
    run.wait()     # in a cell of its own: the kernel's interrupt button now stops the run cleanly

``run.pause()``, ``run.resume()``, ``run.stop()`` work from any cell or button. A kernel restart
(interpreter exit) stops live runs through an ``atexit`` hook, keeping metrics and checkpoints.
Every exit path (finish, stop, error, interrupt) closes the sampler, so no worker outlives its run;
a failure never passes silently: ``run.status == "failed"``, ``run.error`` holds the exception and
``run.error_traceback`` its traceback, which is also printed.

The algorithm interface is deliberately small, so DQN, Ape-X and SEED learners plug in later:
``model`` (the ``nn.Module`` the sampler acts with), ``update(rollout) -> dict[str, float]``,
``state_dict()`` / ``load_state_dict(state)``; optionally ``set_progress(fraction)``,
``config.num_minibatches``, and for device moves either ``to(device)`` or ``optimizer`` / ``device``
attributes (what A2C and PPO have).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import dataclasses
import datetime
import json
import math
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
import weakref
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
import torch

from workbench import samplers, system, workers
from workbench.control import RunSettings, Settings
from workbench.rollout import Rollout

__all__ = ["Run", "RunConfig", "load_metrics", "move_learner", "move_optimizer_state"]

STATUSES = ("created", "running", "paused", "stopping", "finished", "stopped", "failed")
ENDED = ("finished", "stopped", "failed")
_POLL = 0.1
"""Seconds between looks at the stop flag in every wait: no wait in a run is unbounded."""


@dataclass
class RunConfig:
    """How long a run goes, how it runs, and where it writes."""

    total_steps: int = 100_000
    """Environment steps (``T * B`` per iteration, summed) after which the run finishes."""
    mode: Literal["sync", "async"] = "sync"
    """``"sync"``: collect, then learn on that batch. ``"async"``: a collector thread collects the
    next batch while the learner optimises this one (Stooke & Abbeel 2018, Sec. 3.3); batches are
    then one update old (``charts/policy_lag`` = 1)."""
    checkpoint_every: int = 0
    """Iterations between checkpoints; 0: only when the run stops or finishes."""
    runs_dir: str = dataclasses.field(default_factory=lambda: os.environ.get("WORKBENCH_RUNS_DIR", "runs"))
    """Folder that holds one folder per run: ``<runs_dir>/<name>/metrics.jsonl``, ``checkpoint.pt``.
    Default: ``$WORKBENCH_RUNS_DIR``, else ``runs`` (relative to the working directory)."""
    name: str | None = None
    """The run's folder; None: the creation time and env id, e.g. ``2026-11-05_14-03-22_CartPole-v1``."""
    seed: int = 0
    """Seed of the environments (env ``i`` gets ``seed + i``). Seed torch yourself before making the
    model; on resume the run restores torch's, numpy's and Python's generators."""
    log_every: int = 0
    """Print one line every this many iterations; 0: silent (metrics are recorded either way)."""

    def __post_init__(self) -> None:
        for name in ("total_steps", "checkpoint_every", "log_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"RunConfig.{name} must be an int >= 0, got {value!r}.")
        if self.mode not in ("sync", "async"):
            raise ValueError(f"RunConfig.mode must be 'sync' or 'async', got {self.mode!r}.")


# --------------------------------------------------------------------------------------------------
# Moving a learner between devices


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: "str | torch.device") -> None:
    """Move an optimizer's per-parameter state (Adam's moments, RMSProp's averages) to ``device``,
    after its parameters were moved there (``model.to(device)`` keeps the same Parameter objects,
    so the optimizer still refers to them; only its state stays behind).

    Follows torch's own rule (``Optimizer.load_state_dict``): a scalar ``step`` stays on the CPU
    unless its group is ``capturable`` or ``fused``.
    """
    device = torch.device(device)
    for group in optimizer.param_groups:
        step_on_cpu = not (group.get("capturable") or group.get("fused"))
        for param in group["params"]:
            state = optimizer.state.get(param)
            for key, value in (state or {}).items():
                if isinstance(value, torch.Tensor) and not (key == "step" and step_on_cpu):
                    state[key] = value.to(device)


def move_learner(algo: Any, device: "str | torch.device") -> None:
    """Put an algorithm's model and optimizer state on ``device``: ``algo.to(device)`` when it has
    one (learners with target networks or replay on the device), else ``algo.model``,
    ``algo.optimizer``'s state and ``algo.device`` (A2C, PPO)."""
    device = torch.device(device)
    if callable(getattr(algo, "to", None)):
        algo.to(device)
        return
    algo.model.to(device)
    if getattr(algo, "optimizer", None) is not None:
        move_optimizer_state(algo.optimizer, device)
    if hasattr(algo, "device"):
        algo.device = device


def _model_device(model: torch.nn.Module) -> torch.device | None:
    parameter = next(model.parameters(), None)
    return None if parameter is None else parameter.device


# --------------------------------------------------------------------------------------------------
# Collectors: where batches come from (sync: this thread; async: a thread one batch ahead)


@dataclass
class _Batch:
    rollout: Rollout
    version: int
    """Updates applied to the parameters that collected it (the run's iteration then)."""
    wait_seconds: float
    """How long the learner waited for it."""


class _SyncCollector:
    """Collects in the loop's own thread with the learner's model: no policy lag."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self.lock = threading.Lock()  # held by collects and resizes (uncontended here)

    def next(self, model: torch.nn.Module, version: int, stop: threading.Event) -> _Batch | None:
        start = time.perf_counter()
        with self.lock:
            rollout = self.sampler.collect(model)
        return _Batch(rollout, version, time.perf_counter() - start)

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """The sampler acts with the learner's own model: nothing to copy."""

    def close(self) -> None:
        pass


class _AsyncCollector:
    """A thread that collects the next batch with a behaviour copy of the model while the learner
    optimises the current one (Stooke & Abbeel 2018, Sec. 3.3: sampler and optimiser run at the
    same time; Sec. 4: the batch is one update old).

    The handshake keeps the collector exactly one batch ahead: it starts batch k+1 when the learner
    takes batch k (``_go``). After update k the learner copies its parameters into the behaviour
    copy under ``lock``, which the collector holds for a whole collect, so parameters never change
    mid-collect (the sampler is resized under the same lock); and it does so only once batch k+1's
    collect has begun. Batch k+1 is therefore always collected with the parameters of update k-1
    and consumed by update k+1: a lag of one update (zero for the first batch), and which parameters
    collect which batch does not depend on thread scheduling. The learner loses nothing by waiting:
    it needs batch k+1 next. Every wait polls a flag, so ``close()`` ends the thread
    within one collect.
    """

    def __init__(self, sampler: Any, model: torch.nn.Module, version: int) -> None:
        self.sampler = sampler
        self.behaviour = copy.deepcopy(model).requires_grad_(False)
        self.lock = threading.Lock()
        self.error: BaseException | None = None
        self._version = version
        self._batches: queue.Queue = queue.Queue(maxsize=1)
        self._go = threading.Semaphore(1)
        self._started = 0  # collects begun
        self._taken = 0  # batches the learner took
        self._progress = threading.Condition()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._collect_loop, name="run-collector", daemon=True)
        self._thread.start()

    def _collect_loop(self) -> None:
        try:
            while not self._closing.is_set():
                if not self._go.acquire(timeout=_POLL):
                    continue
                with self.lock:
                    if self._closing.is_set():
                        break
                    with self._progress:
                        self._started += 1
                        self._progress.notify_all()
                    version = self._version
                    rollout = self.sampler.collect(self.behaviour)
                self._batches.put_nowait((rollout, version))  # the learner took the last one
        except BaseException as error:  # reported to the learner, which fails the run with it
            self.error = error

    def next(self, model: torch.nn.Module, version: int, stop: threading.Event) -> _Batch | None:
        start = time.perf_counter()
        while True:
            try:
                rollout, behaviour_version = self._batches.get(timeout=_POLL)
                break
            except queue.Empty:
                if self.error is not None:
                    raise self.error
                if stop.is_set():
                    return None
        self._taken += 1
        self._go.release()  # the collector starts the next batch, with the parameters published so far
        return _Batch(rollout, behaviour_version, time.perf_counter() - start)

    def publish(self, model: torch.nn.Module, version: int) -> None:
        with self._progress:  # not before the collect the last next() allowed has begun
            while self._started <= self._taken:
                if self.error is not None:
                    raise self.error
                self._progress.wait(_POLL)
        with self.lock, torch.no_grad():  # between collects
            for target, source in zip(self.behaviour.state_dict().values(), model.state_dict().values()):
                target.copy_(source)
            self._version = version

    def close(self) -> None:
        self._closing.set()
        self._thread.join(timeout=workers.WORKER_TIMEOUT + 10)
        if self._thread.is_alive():
            warnings.warn("the run's collector thread did not end; closing its sampler anyway")


# --------------------------------------------------------------------------------------------------
# Files: metrics (JSON lines) and checkpoints


def _jsonable(value: Any) -> Any:
    """Strict JSON: NaN and infinities become null; tuples lists; tensors and numpy scalars numbers."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (torch.Tensor, np.generic)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def load_metrics(path: "str | os.PathLike") -> tuple[list[dict], list[dict]]:
    """``(headers, rows)`` from a run's ``metrics.jsonl`` (or its folder).

    A header line starts every segment of the run (its start, each restart or resume); rows are
    iteration rows (``charts/iteration`` ...) and event rows (with an ``"event"`` key). Non-finite
    numbers were written as null.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    headers, rows = [], []
    with open(path) as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                (headers if record.get("type") == "header" else rows).append(record)
    return headers, rows


def _git_commit() -> str:
    """The package's commit (read-only ``git rev-parse HEAD``), or ``"unknown"``."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else "unknown"


def _config_dict(config: Any) -> Any:
    return asdict(config) if dataclasses.is_dataclass(config) else repr(config)


def _rng_states() -> dict[str, Any]:
    """Generators' states in types ``torch.load(weights_only=True)`` accepts."""
    kind, keys, position, has_gauss, gauss = np.random.get_state()
    states = {
        "torch": torch.get_rng_state(),
        "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    kind, keys, position, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _load_checkpoint_file(path: "str | os.PathLike") -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoint.pt"
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}; pass a run's folder or its checkpoint.pt")
    return torch.load(path, map_location="cpu", weights_only=True)


# --------------------------------------------------------------------------------------------------
# The run

_LIVE_RUNS: "weakref.WeakSet[Run]" = weakref.WeakSet()
"""Runs whose loop is going: the atexit hook stops them (the one piece of module state it needs)."""


def _stop_live_runs() -> None:
    """At interpreter exit (a kernel restart): stop every live run, keeping metrics and checkpoint."""
    for run in list(_LIVE_RUNS):
        run.stop(wait=True, timeout=60.0)


def _default_name(env_id: str, runs_dir: Path) -> str:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    base = f"{stamp}_{re.sub(r'[^A-Za-z0-9._-]+', '-', env_id)}"
    name, n = base, 1
    while (runs_dir / name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


class Run:
    """One training run of ``algo`` on ``env_id``: the loop, its metrics, checkpoints and settings.

    Args:
        env_id: gymnasium id (``"CartPole-v1"``, ``"ALE/Pong-v5"``).
        algo: the learner (see the module docstring for the interface): ``model``,
            ``update(rollout) -> dict``, ``state_dict``, ``load_state_dict``.
        sampler: ``"serial"``, ``"parallel"``, ``"batched"`` or ``"alternating"``, made with
            ``samplers.make_sampler`` from the settings' ``num_actors`` (workers; unused by the
            serial sampler), ``num_envs`` (B) and ``horizon`` (T) when the loop starts.
        settings: the live settings (default ``RunSettings()``). They are the source of truth: at
            construction ``algo.config.num_minibatches`` is set from ``minibatch_size`` and the
            learner is moved to ``learner_devices`` (with a warning where that changes the algo).
        config: a :class:`RunConfig`.
        learner_factory: ``(algo, devices) -> learner`` for more than one learner device: the
            data-parallel learner of ``workbench.distributed``. The learner has ``update(rollout)
            -> dict`` and optionally ``close()``, and keeps ``algo``'s parameters current (they are
            what checkpoints save and samplers act with).
        sampler_options: more arguments for ``make_sampler`` (``device``, ``env_options``).

    Life cycle: ``start()`` (background thread) or ``run()`` (this thread); ``pause()``,
    ``resume()``, ``stop()``; ``wait()``, which in a notebook makes the interrupt button a clean
    stop. A stopped run can be started again (a new sampler; the same files). To continue a saved
    run in a new process: ``Run.from_checkpoint(path, algo)`` (``resume()`` is taken: it unpauses).

    Attributes:
        status: one of ``created``, ``running``, ``paused``, ``stopping``, ``finished``,
            ``stopped``, ``failed``.
        error, error_traceback: the exception that failed the run, and its traceback text.
        iteration, env_steps: updates done and environment steps consumed (continued on resume).
        metrics: a snapshot of the rows so far (iteration rows and event rows).
        sampler: the sampler while (and after) the loop runs; None before.
        dir, metrics_path, checkpoint_path: ``<runs_dir>/<name>/``, its two files.
    """

    def __init__(
        self,
        env_id: str,
        algo: Any,
        *,
        sampler: str = "serial",
        settings: RunSettings | None = None,
        config: RunConfig | None = None,
        learner_factory: Callable[[Any, tuple[str, ...]], Any] | None = None,
        sampler_options: dict | None = None,
    ) -> None:
        if sampler not in samplers.SAMPLERS:
            raise ValueError(f"Unknown sampler {sampler!r}; choose one of {', '.join(samplers.SAMPLERS)}.")
        missing = [name for name in ("model", "update", "state_dict", "load_state_dict") if not hasattr(algo, name)]
        if missing:
            raise TypeError(f"{type(algo).__name__} lacks {missing}: a Run needs an algorithm with model, "
                            "update(rollout) -> dict, state_dict() and load_state_dict(state).")
        self.env_id = env_id
        self.algo = algo
        self.learner = algo  # or the data-parallel learner that learner_factory makes
        self.sampler_kind = sampler
        self.sampler_options = dict(sampler_options or {})
        self.settings = settings if settings is not None else RunSettings()
        self.learner_factory = learner_factory
        self._apply_initial_settings()  # raises (changing nothing on disk) for devices that cannot work
        config = config or RunConfig()
        runs_dir = Path(config.runs_dir)
        self.config = replace(config, name=config.name or _default_name(env_id, runs_dir))
        self.dir = runs_dir / self.config.name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.dir / "metrics.jsonl"
        self.checkpoint_path = self.dir / "checkpoint.pt"
        self.sampler: Any = None
        self.error: BaseException | None = None
        self.error_traceback: str | None = None
        self.iteration = 0
        self.env_steps = 0
        self.callback_errors: list[str] = []
        self._status = "created"
        self._status_changed = threading.Condition()
        self._rows: list[dict] = []
        self._rows_lock = threading.Lock()
        self._state_lock = threading.RLock()  # an update, or a checkpoint of its result
        self._callbacks: list[Callable[[dict], None]] = []
        self._failed_callbacks: list[Callable[[dict], None]] = []
        self._stop = threading.Event()
        self._unpaused = threading.Event()
        self._unpaused.set()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None  # start()'s background thread
        self._loop_thread: threading.Thread | None = None  # whichever thread runs the loop
        self._wall_offset = 0.0  # seconds of earlier segments (restarts, checkpoints resumed)
        self._segment_start: float | None = None
        self._segments = 0  # loop starts (each writes a header line)
        self._loaded_from: str | None = None

    # --- life cycle -------------------------------------------------------------------------------

    @property
    def status(self) -> str:
        return self._status

    @property
    def name(self) -> str:
        return self.config.name

    def start(self) -> "Run":
        """Run the loop in a background (daemon) thread and return at once."""
        self._begin()
        self._thread = threading.Thread(target=self._main, name=f"run-{self.name}", daemon=True)
        self._thread.start()
        return self

    def run(self) -> "Run":
        """Run the loop in this thread until it ends (scripts, tests). In the main thread, Ctrl-C
        stops it cleanly at the end of the iteration (a second Ctrl-C stops it at once). Raises the
        loop's error if it failed."""
        self._begin()
        with _interrupt_stops(self):
            self._main()
        if self._status == "failed":
            raise self.error
        return self

    def wait(self, timeout: float | None = None) -> str:
        """Block until the run ends (or ``timeout`` seconds pass); returns the status.

        In a notebook, call ``run.wait()`` in a cell to make the kernel's interrupt button stop the
        run: the KeyboardInterrupt becomes a clean stop (metrics and checkpoint kept), and the cell
        returns normally with a message. Re-raises the loop's error if the run failed.
        """
        if self._status == "created":
            return self._status
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while not self._done.wait(_POLL):
                if deadline is not None and time.monotonic() > deadline:
                    return self._status
        except KeyboardInterrupt:
            print(f"Interrupted: stopping run {self.name!r} at the end of this iteration ...", flush=True)
            self.stop(wait=True)
            print(f"Run {self.name!r} {self._status} at iteration {self.iteration}, {self.env_steps} env "
                  f"steps; metrics in {self.metrics_path}, checkpoint {self.checkpoint_path}.", flush=True)
            return self._status
        if self._status == "failed":
            raise self.error
        return self._status

    def pause(self, wait: bool = True, timeout: float | None = None) -> str:
        """Pause at the next iteration boundary (``wait``: until then). Settings may change meanwhile."""
        self._unpaused.clear()
        if wait and threading.current_thread() is not self._loop_thread:
            self._wait_for(lambda: self._status in ("paused", "created", *ENDED), timeout)
        return self._status

    def resume(self) -> str:
        """Continue a paused run (to continue from a checkpoint, see :meth:`from_checkpoint`)."""
        self._unpaused.set()
        return self._status

    def stop(self, wait: bool = True, timeout: float | None = None) -> str:
        """End the run at the next iteration boundary (a paused run at once); ``wait``: until it has
        ended, with its last metrics row and checkpoint written and its sampler closed."""
        self._stop.set()
        self._unpaused.set()
        with self._status_changed:
            if self._status == "created":
                self._set_status("stopped")
                self._done.set()
            elif self._status in ("running", "paused"):
                self._set_status("stopping")
        if wait and threading.current_thread() is not self._loop_thread:
            self._wait_for(lambda: self._done.is_set(), timeout)
        return self._status

    # --- settings ---------------------------------------------------------------------------------

    def update_settings(self, **values: Any) -> Settings:
        """``settings.update(**values)``, after checks that need the run: the learner devices exist
        (``system.resolve_device``: ValueError), and several need a ``learner_factory``
        (NotImplementedError). Raises, changing nothing, when the values cannot work; the loop
        applies the new settings at its next iteration boundary."""
        if "learner_devices" in values:
            self._check_devices(tuple(values["learner_devices"]))
        return self.settings.update(**values)

    def _check_devices(self, devices: tuple[str, ...]) -> list[torch.device]:
        resolved = [system.resolve_device(device) for device in devices]
        if len(devices) > 1 and self.learner_factory is None:
            raise NotImplementedError(
                f"learner_devices={tuple(devices)}: more than one learner device needs a data-parallel "
                "learner (DDP), which workbench.distributed provides (DataParallelLearner); pass it as "
                "Run(..., learner_factory=...), or use a single device."
            )
        return resolved

    def _set_minibatches(self, settings: Settings) -> None:
        """``algo.config.num_minibatches = batch_size // minibatch_size``, where the algo has one."""
        config = getattr(self.algo, "config", None)
        if config is not None and hasattr(config, "num_minibatches"):
            config.num_minibatches = settings.batch_size // settings.minibatch_size

    def _place_learner(self, devices: tuple[str, ...]) -> None:
        """One device: move the algorithm there. Several: a data-parallel learner over them."""
        resolved = self._check_devices(devices)
        self._release_learner()  # leaving (or re-forming) a data-parallel learner
        if len(resolved) > 1:
            self.learner = self.learner_factory(self.algo, tuple(devices))  # workbench.distributed
        else:
            move_learner(self.algo, resolved[0])

    def _release_learner(self) -> None:
        if self.learner is not self.algo:
            learner, self.learner = self.learner, self.algo
            if callable(getattr(learner, "close", None)):
                learner.close()

    def _apply_initial_settings(self) -> None:
        """At construction: the settings are the truth; say where that changes the algorithm."""
        settings = self.settings.applied
        config = getattr(self.algo, "config", None)
        num_minibatches = settings.batch_size // settings.minibatch_size
        if getattr(config, "num_minibatches", num_minibatches) != num_minibatches:
            warnings.warn(f"Run: {type(self.algo).__name__}.config.num_minibatches {config.num_minibatches} "
                          f"-> {num_minibatches} (batch_size {settings.batch_size} // minibatch_size "
                          f"{settings.minibatch_size}); set RunSettings(minibatch_size=...) to choose.")
        self._set_minibatches(settings)
        device = _model_device(self.algo.model)
        target = self._check_devices(settings.learner_devices)[0]
        moved = device is not None and (device.type, device.index or 0) != (target.type, target.index or 0)
        if len(settings.learner_devices) == 1 and moved:
            warnings.warn(f"Run: moving {type(self.algo).__name__} from {device} to learner_devices "
                          f"{settings.learner_devices}; set RunSettings(learner_devices=...) to choose.")
        if len(settings.learner_devices) == 1:  # a data-parallel learner is made when the loop starts
            self._place_learner(settings.learner_devices)

    def _apply_settings(self, collector: Any) -> None:
        """Take the settings' changes at this boundary and apply them, or refuse them whole."""
        taken = self.settings.take_changes(self.iteration)
        if taken is None:
            return
        new, change = taken
        old = replace(new, **change.old)
        event = {"iteration": self.iteration, "env_steps": self.env_steps, "old": change.old, "new": change.new}
        try:
            self._check_devices(new.learner_devices)  # before anything changes
            if self._sampler_shape(old) != self._sampler_shape(new):
                workers_, envs, horizon = self._sampler_shape(new)
                with collector.lock:  # between collects (async: the collector thread's)
                    self.sampler.resize(num_workers=workers_, num_envs=envs, horizon=horizon)
            self._set_minibatches(new)
            if old.learner_devices != new.learner_devices:
                self._place_learner(new.learner_devices)
        except Exception as error:
            # Set back what the loop runs with (a write landing between these two calls would be
            # lost: a narrow race with a widget, whose next write is seen again).
            self.settings.update(**asdict(old))
            self.settings.take_changes(self.iteration)
            self._record({"event": "settings_refused", **event, "error": f"{type(error).__name__}: {error}"})
            print(f"Run {self.name!r}: settings {change.new} refused, keeping {change.old}: {error}",
                  file=sys.stderr, flush=True)
            return
        self._record({"event": "settings", **event})

    def _sampler_shape(self, settings: Settings) -> tuple[int | None, int, int]:
        workers_ = None if self.sampler_kind == "serial" else settings.num_actors
        return workers_, settings.num_envs, settings.horizon

    # --- the loop ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        """rlpyt's minibatch_rl: collect, update, record; settings and checkpoints between iterations."""
        collector = None
        try:
            self._place_learner(self.settings.applied.learner_devices)  # several: DDP, for this loop
            self.sampler = self._make_sampler()
            collector = self._make_collector()  # sync: collects here; async: a thread one batch ahead
            while self.env_steps < self.config.total_steps and self._proceed():  # waits while paused
                self._apply_settings(collector)
                if getattr(self.algo, "set_progress", None):
                    self.algo.set_progress(self.env_steps / max(1, self.config.total_steps))
                start = time.perf_counter()
                batch = collector.next(self.algo.model, self.iteration, self._stop)
                if batch is None:  # stopped while waiting for it
                    break
                learn_start = time.perf_counter()
                with self._state_lock:
                    metrics = self.learner.update(batch.rollout)
                    lag = self.iteration - batch.version  # updates between collecting and learning
                    self.iteration += 1
                    self.env_steps += batch.rollout.num_steps
                learn_seconds = time.perf_counter() - learn_start
                collector.publish(self.algo.model, self.iteration)
                self._record(self._row(batch, metrics, lag, learn_seconds, time.perf_counter() - start))
                if self.config.checkpoint_every and self.iteration % self.config.checkpoint_every == 0:
                    self.save_checkpoint()
        finally:
            _close_quietly(collector, self.sampler, self._release_learner)

    def _main(self) -> None:
        """The loop, then whatever ended it: status, checkpoint, error report."""
        self._loop_thread = threading.current_thread()
        outcome, error = "finished", None
        try:
            self._write_header()
            self._loop()
        except KeyboardInterrupt:  # run() in the main thread, interrupted twice: still a clean stop
            self._stop.set()
        except BaseException as exc:  # never die silently
            outcome, error = "failed", exc
        if outcome != "failed" and self._stop.is_set():
            outcome = "stopped"
        if outcome != "failed":
            try:
                self.save_checkpoint()
            except Exception as exc:
                outcome, error = "failed", exc
        if error is not None:
            self.error = error
            self.error_traceback = "".join(traceback.format_exception(error))
            print(f"Run {self.name!r} failed at iteration {self.iteration}:\n{self.error_traceback}",
                  file=sys.stderr, flush=True)
        self._wall_offset, self._segment_start = self._wall_seconds(), None
        with self._status_changed:
            self._set_status(outcome)
            _LIVE_RUNS.discard(self)
            self._done.set()

    def _begin(self) -> None:
        with self._status_changed:
            if self._status not in ("created", "stopped", "finished"):
                raise RuntimeError(
                    f"run {self.name!r} is {self._status}; "
                    + ("make a new Run (or Run.from_checkpoint)." if self._status == "failed" else "stop it first.")
                )
            if self._segments == 0 and self._loaded_from is None and self.metrics_path.exists():
                raise FileExistsError(
                    f"{self.metrics_path} exists: another run wrote there. Use another RunConfig.name "
                    "(None picks a fresh one), or continue that run with Run.from_checkpoint(...)."
                )
            self._stop.clear()
            self._done.clear()
            self.error = self.error_traceback = None
            self._set_status("running")
            _LIVE_RUNS.add(self)
        # Registered again at each start, so it runs before exit hooks registered since (LIFO),
        # such as the one that ends worker processes, which the run must close itself.
        atexit.unregister(_stop_live_runs)
        atexit.register(_stop_live_runs)

    def _proceed(self) -> bool:
        """False once stop() was called; blocks here, at an iteration boundary, while paused."""
        if not self._unpaused.is_set() and not self._stop.is_set():
            with self._status_changed:
                if self._status == "running":
                    self._set_status("paused")
            while not self._unpaused.wait(_POLL):
                pass
            with self._status_changed:
                if self._status == "paused":
                    self._set_status("running")
        return not self._stop.is_set()

    def _set_status(self, status: str) -> None:  # with _status_changed held
        self._status = status
        self._status_changed.notify_all()

    def _wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._status_changed:
            while not predicate() and not self._done.is_set():
                if deadline is not None and time.monotonic() > deadline:
                    return
                self._status_changed.wait(_POLL)

    def _make_sampler(self) -> Any:
        workers_, num_envs, horizon = self._sampler_shape(self.settings.applied)
        # A continued run's envs start from other seeds than its first iterations' did.
        seed = self.config.seed + 10_007 * self.iteration
        return samplers.make_sampler(self.sampler_kind, self.env_id, num_envs=num_envs, horizon=horizon,
                                     num_workers=workers_ or 1, seed=seed, **self.sampler_options)

    def _make_collector(self) -> Any:
        if self.config.mode == "async":
            return _AsyncCollector(self.sampler, self.algo.model, self.iteration)
        return _SyncCollector(self.sampler)

    # --- metrics ----------------------------------------------------------------------------------

    @property
    def metrics(self) -> list[dict]:
        """A snapshot of every row so far: iteration rows, and event rows (an ``"event"`` key)."""
        with self._rows_lock:
            return list(self._rows)

    def on_iteration(self, fn: Callable[[dict], None]) -> Callable[[dict], None]:
        """Call ``fn(row)`` from the loop's thread with each new row (iteration rows and event
        rows). Its exceptions are reported (printed, and kept in ``callback_errors``), not fatal.
        Returns ``fn``, so it also works as a decorator."""
        self._callbacks.append(fn)
        return fn

    def _row(self, batch: _Batch, metrics: dict, lag: int, learn_seconds: float, seconds: float) -> dict:
        rollout, timings = batch.rollout, batch.rollout.timings
        row = {
            **metrics,  # the algorithm's own keys (losses/..., charts/learning_rate ...)
            "charts/iteration": self.iteration,
            "charts/env_steps": self.env_steps,
            "charts/wall_seconds": self._wall_seconds(),
            "charts/steps_per_second": rollout.num_steps / seconds,
            "charts/episodes": len(rollout.episodes),
            "charts/num_envs": rollout.num_envs,
            "charts/horizon": rollout.horizon,
            "charts/policy_lag": lag,
            "time/env": timings.get("env", math.nan),
            "time/inference": timings.get("inference", math.nan),
            "time/wait": timings.get("wait", math.nan),
            "time/collect": timings.get("total", math.nan),
            "time/batch_wait": batch.wait_seconds,  # sync: the whole collect; async: what learning did not hide
            "time/learn": learn_seconds,
            "time/iteration": seconds,
        }
        if rollout.episodes.returns:  # raw returns of the episodes that ended in this batch
            row["charts/episode_return"] = float(np.mean(rollout.episodes.returns))
            row["charts/episode_length"] = float(np.mean(rollout.episodes.lengths))
        return row

    def _record(self, row: dict) -> None:
        with self._rows_lock:
            self._rows.append(row)
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(_jsonable(row)) + "\n")
        if "event" not in row and self.config.log_every and self.iteration % self.config.log_every == 0:
            self._log(row)
        for fn in list(self._callbacks):
            try:
                fn(row)
            except Exception:
                text = traceback.format_exc()
                if not any(fn is seen for seen in self._failed_callbacks):  # printed once per callback
                    self._failed_callbacks.append(fn)
                    print(f"Run {self.name!r}: callback {getattr(fn, '__name__', fn)!r} raised (the run goes "
                          f"on; later errors only in run.callback_errors):\n{text}", file=sys.stderr, flush=True)
                if len(self.callback_errors) < 100:
                    self.callback_errors.append(text)

    def _wall_seconds(self) -> float:
        running = 0.0 if self._segment_start is None else time.perf_counter() - self._segment_start
        return self._wall_offset + running

    def _log(self, row: dict) -> None:
        episode_return = row.get("charts/episode_return", math.nan)
        print(f"[{self.name}] iteration {self.iteration:>6}  env steps {self.env_steps:>9}  "
              f"return {episode_return:7.1f}  {row['charts/steps_per_second']:8.0f} steps/s", flush=True)

    def _write_header(self) -> None:
        header = {
            "type": "header",
            "env_id": self.env_id,
            "sampler": self.sampler_kind,
            "sampler_options": self.sampler_options,
            "config": asdict(self.config),
            "settings": asdict(self.settings.applied),
            "algo": f"{type(self.algo).__module__}.{type(self.algo).__qualname__}",
            "algo_config": _config_dict(getattr(self.algo, "config", None)),
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "resumed_from": self._loaded_from if self._segments == 0 else None,
            "git_commit": _git_commit(),
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "machine": asdict(system.machine_info()),
        }
        self._segments += 1
        self._segment_start = time.perf_counter()
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(_jsonable(header)) + "\n")

    # --- checkpoints ------------------------------------------------------------------------------

    def save_checkpoint(self, path: "str | os.PathLike | None" = None) -> Path:
        """Write the algorithm's state, counters, settings, config and RNG states, atomically (a
        temporary file, then ``os.replace``): a crash mid-write leaves the previous checkpoint."""
        path = Path(path) if path is not None else self.checkpoint_path
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with self._state_lock:  # no update half-way through what is saved
            state = {
                "env_id": self.env_id,
                "sampler": self.sampler_kind,
                "sampler_options": self.sampler_options,
                "algo_class": f"{type(self.algo).__module__}.{type(self.algo).__qualname__}",
                "algo": self.algo.state_dict(),
                "iteration": self.iteration,
                "env_steps": self.env_steps,
                "wall_seconds": self._wall_seconds(),
                "settings": asdict(self.settings.applied),
                "config": asdict(self.config),
                "rng": _rng_states(),
            }
            try:
                torch.save(state, temporary)
                os.replace(temporary, path)
            finally:
                temporary.unlink(missing_ok=True)
        return path

    def load_checkpoint(self, path: "str | os.PathLike") -> "Run":
        """Continue from a checkpoint (a file, or a run's folder): the algorithm's state, iteration,
        env steps, wall clock and RNG states; earlier rows of this run's metrics file are read back
        into ``run.metrics``, and new ones are appended to it."""
        if self._status not in ("created", "stopped", "finished"):
            raise RuntimeError(f"run {self.name!r} is {self._status}; load a checkpoint before starting it.")
        checkpoint = _load_checkpoint_file(path)
        with self._state_lock:
            self.algo.load_state_dict(checkpoint["algo"])
            self.iteration = int(checkpoint["iteration"])
            self.env_steps = int(checkpoint["env_steps"])
            self._wall_offset = float(checkpoint["wall_seconds"])
            _set_rng_states(checkpoint["rng"])
        rows = []
        if self.metrics_path.exists():  # rows past the checkpoint (a crash after it) are left out
            _, rows = load_metrics(self.metrics_path)
            rows = [r for r in rows if r.get("charts/iteration", r.get("iteration", 0)) <= self.iteration]
        with self._rows_lock:
            self._rows = rows
        self._loaded_from = str(path)
        return self

    @classmethod
    def from_checkpoint(
        cls,
        path: "str | os.PathLike",
        algo: Any,
        *,
        env_id: str | None = None,
        sampler: str | None = None,
        settings: RunSettings | None = None,
        config: RunConfig | None = None,
        learner_factory: Callable[[Any, tuple[str, ...]], Any] | None = None,
        sampler_options: dict | None = None,
    ) -> "Run":
        """A run that continues a checkpoint (a file, or a run's folder), with ``algo`` (made as
        the original was) restored. Env id, sampler, settings and config default to the saved ones
        (a config without a name keeps the saved name, so the same metrics file grows); pass a
        config with a larger ``total_steps`` to train further. Not started: call start() or run()."""
        saved = _load_checkpoint_file(path)
        saved_config = RunConfig(**saved["config"])
        config = replace(config, name=config.name or saved_config.name) if config else saved_config
        settings = settings or RunSettings(Settings(**saved["settings"]))
        run = cls(env_id or saved["env_id"], algo, sampler=sampler or saved["sampler"], settings=settings,
                  config=config, learner_factory=learner_factory,
                  sampler_options=saved["sampler_options"] if sampler_options is None else sampler_options)
        return run.load_checkpoint(path)

    def __repr__(self) -> str:
        return (f"Run({self.name!r}, {self.env_id!r}, {type(self.algo).__name__}, status={self._status!r}, "
                f"iteration={self.iteration}, env_steps={self.env_steps})")


def _close_quietly(collector: Any, sampler: Any, release_learner: Callable[[], None]) -> None:
    """Close the collector (joins its thread), the sampler, and a data-parallel learner; report,
    never raise, so that an error while closing does not hide the one that ended the run."""
    for close in (getattr(collector, "close", None), getattr(sampler, "close", None), release_learner):
        try:
            if close is not None:
                close()
        except Exception:
            print(f"closing the run's {close} failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _interrupt_stops(run: Run):
    """In the main thread: the first SIGINT asks ``run`` to stop at the iteration's end; the
    handler then steps aside, so a second SIGINT raises KeyboardInterrupt as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    previous = signal.default_int_handler if previous is None else previous

    def handler(signum, frame):
        signal.signal(signal.SIGINT, previous)
        print(f"Interrupted: stopping run {run.name!r} at the end of this iteration "
              "(interrupt again to stop at once) ...", flush=True)
        run.stop(wait=False)

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


atexit.register(_stop_live_runs)
