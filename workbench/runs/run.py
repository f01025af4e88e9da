"""A run of samplers and a learner: rlpyt's ``minibatch_rl`` runner on the shared life cycle.

The loop (Stooke & Abbeel 2018, https://arxiv.org/abs/1803.02811) is one step per update::

    rollout = sampler.collect(policy)          # [T, B] (collectors: this thread, or one ahead)
    metrics = learner.update(rollout)

Between steps the run applies the changes of its ``RunSettings`` (widgets write them):
``num_workers``, ``num_envs``, ``horizon`` resize the sampler; ``num_minibatches`` sets
``algo.config.num_minibatches``; ``learner_devices`` moves the
learner (one device) or hands it to a data-parallel learner (several: ``learner_factory``, e.g.
``learners.RunLearner``). Each applied change is an event row, so plots can mark it; a change that
cannot be applied is refused (an event too) and the run goes on as it was. In async mode the batch
already collected is learned from first, so a new ``num_envs`` or ``horizon`` shows one step later.
A sampler worker that dies is restarted by the sampler, and the run records a ``worker_restart``
event.

In a notebook::

    run = Run("CartPole-v1", PPO(model, config), sampler="serial",
              settings=RunSettings(num_envs=8, horizon=32, num_minibatches=1),
              config=RunConfig(total_steps=100_000))
    run.start()    # returns at once; the loop runs in a background thread, widgets stay live
    run.wait()     # in a cell of its own: the kernel's interrupt button now stops the run cleanly

The learner is any ``learners.Learner`` whose batch is a rollout (``PPO``, ``A2C``), or an
off-policy learner in a ``learners.ReplayAgent`` (``DQN``, ``DDPG``); optionally ``set_progress``
(the schedules follow ``env_steps / total_steps``) and ``config.num_minibatches``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import torch

from workbench import sampling, system
from workbench.learners.base import Learner, missing_members
from workbench.runs.checkpoints import CHECKPOINT_SECONDS, load_checkpoint_file
from workbench.runs.collectors import AsyncCollector, SyncCollector
from workbench.runs.faults import check_finite
from workbench.runs.lifecycle import Limits, RunLifecycle, default_runs_dir
from workbench.runs.records import config_to_dict
from workbench.runs.settings import RunSettings, Settings

__all__ = ["Run", "RunConfig"]


@dataclass
class RunConfig:
    """How long a run goes, how it runs, and where it writes."""

    total_steps: int = 100_000
    """Environment steps after which the run finishes (its ``env_steps`` limit, which ``start``
    may override); schedules (learning-rate annealing, epsilon) follow the fraction of these done,
    whatever limit ends the run."""
    mode: Literal["sync", "async"] = "sync"
    """``"sync"``: collect, then learn on that batch. ``"async"``: a collector thread collects the
    next batch while the learner optimises this one (Stooke & Abbeel 2018, Sec. 3.3); batches are
    then one update old (``charts/policy_lag`` = 1)."""
    checkpoint_every: int = 0
    """Iterations between checkpoints; 0: not by iterations (on the timer below, and when the run
    stops or finishes)."""
    checkpoint_seconds: float | None = CHECKPOINT_SECONDS
    """Wall seconds between checkpoints (``runs.checkpoints``); None: none on a timer."""
    runs_dir: str = dataclasses.field(default_factory=default_runs_dir)
    """Folder that holds one folder per run: ``<runs_dir>/<name>/metrics.jsonl``, ``checkpoint.pt``.
    Default: ``$WORKBENCH_RUNS_DIR``, else ``runs`` (relative to the working directory)."""
    name: str | None = None
    """The run's folder; None: the creation time and env id, e.g.
    ``2026-11-05_14-03-22_CartPole-v1``."""
    seed: int = 0
    """Seed of the environments (env ``i`` gets ``seed + i``). Seed torch yourself before making the
    model; on resume the run restores torch's, numpy's and Python's generators."""
    log_every: int = 0
    """Print one line every this many iterations; 0: silent (metrics are recorded either way)."""

    def __post_init__(self) -> None:
        if isinstance(self.runs_dir, os.PathLike):  # a str in checkpoints (torch.load's allowlist)
            object.__setattr__(self, "runs_dir", os.fspath(self.runs_dir))
        for name in ("total_steps", "checkpoint_every", "log_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"RunConfig.{name} must be an int >= 0, got {value!r}.")
        if self.mode not in ("sync", "async"):
            raise ValueError(f"RunConfig.mode must be 'sync' or 'async', got {self.mode!r}.")


def _model_device(model: torch.nn.Module) -> torch.device | None:
    parameter = next(model.parameters(), None)
    return None if parameter is None else parameter.device


class Run(RunLifecycle):
    """One training run of ``algo`` on ``env_id``: the loop, its metrics, checkpoints and settings.

    Args:
        env_id: gymnasium id (``"CartPole-v1"``, ``"ALE/Pong-v5"``).
        algo: the learner (module docstring): ``PPO``, ``A2C``, or ``ReplayAgent(DQN(...), ...)``.
        sampler: ``"serial"``, ``"parallel"``, ``"batched"`` or ``"alternating"``, made with
            ``sampling.make_sampler`` from the settings' ``num_workers`` (unused by the
            serial sampler), ``num_envs`` (B) and ``horizon`` (T) when the loop starts.
        settings: the live settings (default ``RunSettings()``). They are the source of truth: at
            construction ``algo.config.num_minibatches`` is set from theirs (or theirs from the
            algo's, when they leave it None) and the learner is moved to ``learner_devices``
            (with a warning where that moves the algo).
        config: a ``RunConfig``.
        learner_factory: ``(algo, devices) -> learner`` for more than one learner device
            (``learners.RunLearner``); it keeps ``algo``'s parameters current (they are what
            samplers act with) and hands the learner back at ``close()``.
        sampler_options: more arguments for ``make_sampler`` (``device``, ``env_options``).

    The life cycle (``runs.lifecycle``): ``start()`` / ``run()``, ``pause()``, ``resume()``,
    ``stop()``, ``wait()``. A stopped run can be started again (a new sampler; the same files). To
    continue a saved run in a new process: ``Run.from_checkpoint(path, algo)``.

    Attributes:
        sampler: the sampler while (and after) the loop runs; None before.
        learner: ``algo``, or the data-parallel learner made from it.
    """

    kind = "run"

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
        if sampler not in sampling.SAMPLERS:
            raise ValueError(
                f"Unknown sampler {sampler!r}; choose one of {', '.join(sampling.SAMPLERS)}."
            )
        missing = missing_members(algo, Learner)
        if missing:
            raise TypeError(
                f"{type(algo).__name__} lacks {missing}: a Run needs a workbench Learner "
                "(learners.base.Learner: model, device, reduction, batch_axis, "
                "update(rollout) -> dict, state_dict(), load_state_dict(state) and to(device))."
            )
        if getattr(algo, "batch_axis", 1) == 0:
            raise TypeError(
                f"{type(algo).__name__} learns from sampled transitions, not rollouts; give the "
                f"run its replay: Run(env_id, ReplayAgent({type(algo).__name__}(...), "
                "ReplayAgentConfig()), ...)"
            )
        config = config or RunConfig()
        self.env_id = env_id
        self.algo = algo
        self.learner = algo  # or the data-parallel learner that learner_factory makes
        self.sampler_kind = sampler
        self.sampler_options = dict(sampler_options or {})
        self.learner_factory = learner_factory
        settings = settings if settings is not None else RunSettings()
        self.settings = settings
        # raises (changing nothing on disk) for devices that cannot work
        self._apply_initial_settings()
        super().__init__(
            name=config.name,
            runs_dir=config.runs_dir,
            label=env_id,
            settings=settings,
            limits=Limits(env_steps=config.total_steps),
            checkpoint_every=config.checkpoint_every,
            checkpoint_seconds=config.checkpoint_seconds,
            log_every=config.log_every,
        )
        self.config = replace(config, name=self.name)
        self.sampler: Any = None
        self._collector: Any = None

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
                f"learner_devices={tuple(devices)}: more than one learner device needs a "
                "data-parallel learner, which workbench.learners provides (RunLearner); pass it as "
                "Run(..., learner_factory=RunLearner), or use a single device."
            )
        return resolved

    def _set_minibatches(self, settings: Settings) -> None:
        """``algo.config.num_minibatches`` from the settings, where the algo has one."""
        config = getattr(self.algo, "config", None)
        if config is not None and hasattr(config, "num_minibatches"):
            config.num_minibatches = settings.num_minibatches

    def _place_learner(self, devices: tuple[str, ...]) -> None:
        """One device: move the algorithm there. Several: a data-parallel learner over them."""
        resolved = self._check_devices(devices)
        self._release_learner()  # leaving (or re-forming) a data-parallel learner
        if len(resolved) > 1:
            self.learner = self.learner_factory(self.algo, tuple(devices))
        else:
            self.algo.to(resolved[0])

    def _release_learner(self) -> None:
        if self.learner is not self.algo:
            learner, self.learner = self.learner, self.algo
            if callable(getattr(learner, "close", None)):
                learner.close()

    def _apply_initial_settings(self) -> None:
        """At construction: the settings are the truth; say where that changes the algorithm."""
        if self.settings.applied.num_minibatches is None:  # left to the learner: its count
            learners = getattr(getattr(self.algo, "config", None), "num_minibatches", None)
            try:
                self.settings.settle(num_minibatches=learners or 1)
            except ValueError as error:
                raise ValueError(
                    f"{type(self.algo).__name__}.config.num_minibatches: {error} Or give "
                    "RunSettings(num_minibatches=...)."
                ) from None
        settings = self.settings.applied
        self._set_minibatches(settings)
        device = _model_device(self.algo.model)
        target = self._check_devices(settings.learner_devices)[0]
        moved = device is not None and (device.type, device.index or 0) != (
            target.type,
            target.index or 0,
        )
        if len(settings.learner_devices) == 1 and moved:
            warnings.warn(
                f"Run: moving {type(self.algo).__name__} from {device} to learner_devices "
                f"{settings.learner_devices}; set RunSettings(learner_devices=...) to choose.",
                stacklevel=3,
            )
        if (
            len(settings.learner_devices) == 1
        ):  # a data-parallel learner is made when the loop starts
            self._place_learner(settings.learner_devices)

    def apply_settings(self, new: Settings, old: Settings) -> None:
        self._check_devices(new.learner_devices)  # before anything changes
        if self._sampler_shape(old) != self._sampler_shape(new):
            workers, envs, horizon = self._sampler_shape(new)
            with self._collector.lock:  # between collects (async: the collector thread's)
                self.sampler.resize(num_workers=workers, num_envs=envs, horizon=horizon)
        self._set_minibatches(new)
        if old.learner_devices != new.learner_devices:
            self._place_learner(new.learner_devices)

    def _sampler_shape(self, settings: Settings) -> tuple[int | None, int, int]:
        workers = None if self.sampler_kind == "serial" else settings.num_workers
        return workers, settings.num_envs, settings.horizon

    # --- the loop's steps -------------------------------------------------------------------------

    def open_loop(self) -> None:
        self._place_learner(self.settings.applied.learner_devices)  # several: DDP, for this loop
        workers, num_envs, horizon = self._sampler_shape(self.settings.applied)
        seed = self.config.seed + 10_007 * self.iteration  # a continued run's envs: other seeds
        self.sampler = sampling.make_sampler(
            self.sampler_kind,
            self.env_id,
            num_envs=num_envs,
            horizon=horizon,
            num_workers=workers or 1,
            seed=seed,
            **self.sampler_options,
        )
        if self.config.mode == "async":
            self._collector = AsyncCollector(self.sampler, self.algo.model, self.iteration)
        else:
            self._collector = SyncCollector(self.sampler)

    def progress(self) -> float:
        """Fraction of the planned run done, over which schedules anneal (the learning rate,
        DQN's epsilon): env steps over ``config.total_steps``. A limit given to ``start`` or
        changed while the run goes ends it sooner or later and leaves the schedule alone (CleanRL
        anneals over its ``total_timesteps`` whatever stops the run): a run stopped at 500k env
        steps of a 4M budget has trained as the first 500k steps of the 4M run."""
        return (
            min(self.env_steps / self.config.total_steps, 1.0) if self.config.total_steps else 0.0
        )

    def step(self) -> dict[str, Any] | None:
        if callable(getattr(self.algo, "set_progress", None)):
            self.algo.set_progress(self.progress())
        start = time.perf_counter()
        batch = self._collector.next(self.algo.model, self.iteration, self.control.stop_event)
        for event in self.sampler.take_events():  # workers that died and were restarted
            self.event(event.pop("event"), **event)
        if batch is None:  # stopped while waiting for it
            return None
        learn_start = time.perf_counter()
        metrics = self.learner.update(batch.rollout)
        check_finite(
            metrics, batch.rollout, f"update {self.updates + 1} (iteration {self.iteration + 1})"
        )
        lag = self.iteration - batch.version  # updates between collecting and learning
        self.updates += 1
        self.env_steps += batch.rollout.num_steps
        learn_seconds = time.perf_counter() - learn_start
        self._collector.publish(self.algo.model, self.iteration + 1)
        self.record_episodes(batch.rollout.episodes.returns, batch.rollout.episodes.lengths)
        rollout, timings = batch.rollout, batch.rollout.timings
        return {
            **metrics,  # the learner's own keys (losses/..., charts/learning_rate ...)
            "charts/num_envs": rollout.num_envs,
            "charts/horizon": rollout.horizon,
            "charts/policy_lag": lag,
            "time/env": timings.get("env", math.nan),
            "time/inference": timings.get("inference", math.nan),
            "time/wait": timings.get("wait", math.nan),
            "time/collect": timings.get("total", math.nan),
            # sync: the whole collect; async: what learning did not hide
            "time/batch_wait": batch.wait_seconds,
            "time/learn": learn_seconds,
            "time/iteration": time.perf_counter() - start,
        }

    def close_loop(self) -> None:
        """Close the collector (joins its thread), the sampler, and a data-parallel learner; report,
        never raise, so that an error while closing does not hide the one that ended the run."""
        for close in (
            getattr(self._collector, "close", None),
            getattr(self.sampler, "close", None),
            self._release_learner,
        ):
            try:
                if close is not None:
                    close()
            except Exception as error:
                warnings.warn(f"closing the run's {close} failed: {error!r}", stacklevel=2)

    # --- checkpoints ------------------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "sampler": self.sampler_kind,
            "sampler_options": self.sampler_options,
            "config": asdict(self.config),
            "algo": f"{type(self.algo).__module__}.{type(self.algo).__qualname__}",
            "algo_config": config_to_dict(getattr(self.algo, "config", None)),
        }

    def run_state(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "sampler": self.sampler_kind,
            "sampler_options": self.sampler_options,
            "algo_class": f"{type(self.algo).__module__}.{type(self.algo).__qualname__}",
            "algo": self.learner.state_dict(),
            "config": asdict(self.config),
        }

    def load_run_state(self, state: dict[str, Any]) -> None:
        self.algo.load_state_dict(state["algo"])

    @classmethod
    def from_checkpoint(
        cls,
        path: Any,
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
        config with a larger ``total_steps`` to train further. Not started: call start() or
        run()."""
        saved = load_checkpoint_file(path)
        state = saved["state"]
        saved_config = RunConfig(**state["config"])
        config = replace(config, name=config.name or saved_config.name) if config else saved_config
        settings = settings or RunSettings(Settings.from_saved(saved["settings"]))
        run = cls(
            env_id or state["env_id"],
            algo,
            sampler=sampler or state["sampler"],
            settings=settings,
            config=config,
            learner_factory=learner_factory,
            sampler_options=state["sampler_options"]
            if sampler_options is None
            else sampler_options,
        )
        return run.load_checkpoint(saved, str(path))

    def __repr__(self) -> str:
        return (
            f"Run({self.name!r}, {self.env_id!r}, {type(self.algo).__name__}, "
            f"status={self.status!r}, iteration={self.iteration}, env_steps={self.env_steps})"
        )
