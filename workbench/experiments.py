"""The course's experiments, as functions: a notebook calls one and plots its result.

* :func:`batch_size_study`: one recipe at several batch sizes ``B x T`` with the learning rate
  scaled to each (Stooke & Abbeel 2018, Sec. 4, Fig. 3 and 4): return against env steps (sample
  complexity) and against wall time (what the larger batch buys).
* :func:`sync_vs_async`: the same run made twice, synchronous and asynchronous (Sec. 3.3): steps/s,
  where each iteration's time goes, and the policy lag; :func:`busy_cores` repeats it on a machine
  where another job takes cores.
* :func:`dqn_variants_study`: the DQN family on CartPole, each member one change to plain DQN
  (``recipes.DQN_VARIANTS``), and :func:`dqn_batch_study`: large-batch DQN at a fixed replay ratio
  with the learning rate scaled (Stooke & Abbeel 2018, Sec. 4).
* :func:`learning_curve`: a :class:`workbench.runners.Run`'s rows as a curve of the mean return
  of the last episodes; :func:`wait_for_row` waits for a row (an event) of a live run.
* :func:`apex_throughput`: Ape-X's transitions/s into replay and learner updates/s against the number
  of actors (Horgan et al. 2018); :func:`apex_cartpole_config` is its CartPole run and
  :func:`wait_for_apex_row` waits for a row (an event) of an Ape-X run going in the background.

Each run is a ``Run`` (its metrics file under ``runs_dir``), run in the caller's thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
import time
from typing import Any, Callable, Sequence

import torch

from workbench.control import RunSettings
from workbench.recipes import DQN_BASE, DQN_VARIANTS, RECIPES, Recipe, dqn_variant
from workbench.runners import Run, RunConfig

__all__ = [
    "DQNBatchResult",
    "LearningCurve",
    "ModeResult",
    "batch_size_study",
    "busy_cores",
    "dqn_batch_study",
    "dqn_variants_study",
    "learning_curve",
    "make_recipe_run",
    "sync_vs_async",
    "wait_for_row",
    # Ape-X (notebook 06)
    "APEX_CARTPOLE_AGENT",
    "ApexThroughput",
    "apex_cartpole_config",
    "apex_throughput",
    "wait_for_apex_row",
]


@dataclass
class LearningCurve:
    """One run's progress: the mean raw return of (about) the last ``window`` episodes."""

    label: str
    env_steps: list[int] = field(default_factory=list)
    wall_seconds: list[float] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    steps_per_second: float = 0.0
    """Env steps per wall second over the whole run."""
    learning_rate: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def final_return(self) -> float:
        return self.returns[-1] if self.returns else float("nan")

    def steps_to(self, target: float) -> int | None:
        """Env steps at which the curve first reached ``target`` (None: never)."""
        return next((steps for steps, value in zip(self.env_steps, self.returns) if value >= target), None)

    def seconds_to(self, target: float) -> float | None:
        """Wall seconds at which the curve first reached ``target`` (None: never)."""
        return next((sec for sec, value in zip(self.wall_seconds, self.returns) if value >= target), None)


def learning_curve(rows: Sequence[dict], label: str, *, window: int = 20) -> LearningCurve:
    """The curve of a run's iteration rows: after each iteration with ended episodes, the mean
    return of the latest batches that hold at least ``window`` episodes (each batch's mean weighted
    by its episode count), as ``train``'s last-20 mean is over single episodes."""
    curve = LearningCurve(label)
    recent: list[tuple[float, int]] = []  # (batch mean return, episodes), newest last
    rows = [row for row in rows if "event" not in row]
    for row in rows:
        if not row.get("charts/episodes") or row.get("charts/episode_return") is None:
            continue
        recent.append((row["charts/episode_return"], row["charts/episodes"]))
        while len(recent) > 1 and sum(count for _, count in recent[1:]) >= window:
            recent.pop(0)
        total = sum(count for _, count in recent)
        curve.env_steps.append(row["charts/env_steps"])
        curve.wall_seconds.append(row["charts/wall_seconds"])
        curve.returns.append(sum(mean * count for mean, count in recent) / total)
    if rows:
        curve.steps_per_second = rows[-1]["charts/env_steps"] / max(rows[-1]["charts/wall_seconds"], 1e-9)
        curve.learning_rate = rows[-1].get("charts/learning_rate")
    return curve


def make_recipe_run(
    recipe: "str | Recipe",
    *,
    seed: int = 0,
    num_envs: int | None = None,
    horizon: int | None = None,
    num_actors: int | None = None,
    sampler: str | None = None,
    total_steps: int | None = None,
    name: str | None = None,
    runs_dir: str | None = None,
    mode: str = "sync",
    learner_factory: Any = None,
    **config_changes: Any,
) -> Run:
    """A ``Run`` of a recipe (``workbench.recipes.RECIPES``) at a chosen size (default: the recipe's
    own sampler, envs, horizon and step budget).

    ``config_changes`` replace fields of the recipe's algorithm config (e.g.
    ``scale_learning_rate="sqrt"``). The minibatch count of the recipe is kept, so a larger batch
    gets larger minibatches (as learning-rate scaling assumes)."""
    recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
    sampler = sampler or getattr(recipe, "sampler", "serial")
    num_actors = num_actors or getattr(recipe, "num_workers", 1)
    num_envs = num_envs or recipe.num_envs
    horizon = horizon or recipe.horizon
    config = dataclasses.replace(recipe.config, **config_changes)
    torch.manual_seed(seed)
    from workbench import envs

    observation_space, action_space = envs.env_spaces(recipe.env_id)
    model = recipe.make_model(observation_space.shape, action_space.n)
    kwargs = {"seed": seed} if "seed" in recipe.algorithm.__init__.__code__.co_varnames else {}
    algo = recipe.algorithm(model, config, **kwargs)
    batch = num_envs * horizon
    minibatches = getattr(config, "num_minibatches", 1)
    if batch % minibatches:
        raise ValueError(f"batch B*T = {num_envs}*{horizon} = {batch} is not divisible by the recipe's "
                         f"{minibatches} minibatches; pick B and T whose product it divides.")
    settings = RunSettings(num_actors=num_actors, num_envs=num_envs, horizon=horizon,
                           minibatch_size=batch // minibatches)
    run_config = RunConfig(total_steps=total_steps or recipe.total_steps, mode=mode, seed=seed, name=name,
                           **({"runs_dir": runs_dir} if runs_dir is not None else {}))
    return Run(recipe.env_id, algo, sampler=sampler, settings=settings, config=run_config,
               learner_factory=learner_factory)


def batch_size_study(
    recipe: "str | Recipe",
    shapes: Sequence[tuple[int, int]],
    *,
    total_steps: int,
    scale_rule: str | None = "sqrt",
    seed: int = 0,
    runs_dir: str | None = None,
    progress: bool = True,
) -> list[LearningCurve]:
    """Train ``recipe`` once per batch shape ``(B, T)``, each for ``total_steps`` env steps.

    The recipe's learning rate was tuned at its own ``B * T``; with ``scale_rule`` each run scales
    it to its batch (``workbench.algos.pg.scaled_learning_rate``; Stooke & Abbeel 2018, Sec. 4).
    Returns one :class:`LearningCurve` per shape, labelled ``"B x T = batch"``.
    """
    recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
    runs_dir = runs_dir or tempfile.mkdtemp(prefix="workbench-batch-study-")
    changes = {}
    if scale_rule is not None:
        changes = dict(scale_learning_rate=scale_rule, reference_batch_size=recipe.num_envs * recipe.horizon)
    curves = []
    for num_envs, horizon in shapes:
        label = f"{num_envs} x {horizon} = {num_envs * horizon}"
        run = make_recipe_run(recipe, seed=seed, num_envs=num_envs, horizon=horizon, total_steps=total_steps,
                              name=f"{recipe.name}-{num_envs}x{horizon}-seed{seed}", runs_dir=runs_dir, **changes)
        run.run()
        curve = learning_curve(run.metrics, label)
        curve.settings = dict(num_envs=num_envs, horizon=horizon, batch_size=num_envs * horizon)
        curves.append(curve)
        if progress:
            print(f"{recipe.name} batch {label:>18}: return {curve.final_return:6.1f} after {run.env_steps:,} "
                  f"steps, {curve.steps_per_second:,.0f} steps/s, lr {curve.learning_rate:.2e}", flush=True)
    return curves


def wait_for_row(run: Run, predicate: Callable[[dict], bool], *, timeout: float = 120.0) -> dict:
    """The first row of ``run.metrics`` for which ``predicate(row)`` holds, waiting for it while the
    run goes. Raises TimeoutError after ``timeout`` seconds, RuntimeError if the run ends first."""
    from workbench.runners import ENDED

    deadline = time.monotonic() + timeout
    seen = 0
    while True:
        ended = run.status in ENDED
        rows = run.metrics
        for row in rows[seen:]:
            if predicate(row):
                return row
        seen = len(rows)
        if ended:
            raise RuntimeError(f"run {run.name!r} ended ({run.status}) before the row came"
                               + (f": {run.error}" if run.error else ""))
        if time.monotonic() > deadline:
            raise TimeoutError(f"no such row in run {run.name!r} after {timeout:g} s (status {run.status})")
        time.sleep(0.05)


@dataclass
class ModeResult:
    """One mode's iterations after the warm-up: means per iteration, in seconds."""

    mode: str
    steps_per_second: float
    iteration_seconds: float
    learn_seconds: float
    """The update (forward, backward, optimizer steps)."""
    batch_wait_seconds: float
    """The learner waiting for its batch: the whole collect when sync; what learning did not
    hide when async."""
    collect_seconds: float
    """The sampler's collect, whichever thread ran it."""
    policy_lag: float
    """Updates between the parameters that collected a batch and the update that learns from it."""
    iterations: int


def sync_vs_async(make_run: Callable[[str], Run], *, warmup: int = 1) -> dict[str, ModeResult]:
    """Run ``make_run("sync")`` then ``make_run("async")`` to the end (each a ``Run`` with its
    ``RunConfig.mode`` set as asked) and compare their iterations after the first ``warmup``.

    Synchronous (rlpyt's minibatch_rl): collect batch k, then learn on it. Asynchronous (Stooke &
    Abbeel 2018, Sec. 3.3): a collector thread collects batch k+1 with the parameters of update k
    while the learner learns on batch k, so the learner waits only for what learning did not hide
    and every batch is one update old (policy lag 1).
    """
    results = {}
    for mode in ("sync", "async"):
        run = make_run(mode)
        if run.config.mode != mode:
            raise ValueError(f"make_run({mode!r}) made a {run.config.mode!r} run; pass mode to its RunConfig.")
        run.run()
        rows = [row for row in run.metrics if "event" not in row][warmup:]
        if not rows:
            raise ValueError(f"the {mode} run made {run.iteration} iterations, none after the {warmup} of "
                             "warm-up; give it more total_steps.")

        def mean(key: str) -> float:
            return sum(row[key] for row in rows) / len(rows)

        seconds = sum(row["time/iteration"] for row in rows)
        results[mode] = ModeResult(
            mode=mode,
            steps_per_second=sum(row["charts/num_envs"] * row["charts/horizon"] for row in rows) / seconds,
            iteration_seconds=seconds / len(rows),
            learn_seconds=mean("time/learn"),
            batch_wait_seconds=mean("time/batch_wait"),
            collect_seconds=mean("time/collect"),
            policy_lag=mean("charts/policy_lag"),
            iterations=len(rows),
        )
    return results


_SPIN = """import sys
from workbench.workers import die_with_parent
die_with_parent(int(sys.argv[1]))  # a killed kernel takes this process with it
while True:
    pass
"""


@contextlib.contextmanager
def busy_cores(count: int = 1):
    """While the block runs, ``count`` processes each spin on a core: another job on the machine.

    They end with the block (an exception or an interrupt included) and with this process."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"busy_cores(count) needs an int >= 0, got {count!r}.")
    processes = [subprocess.Popen([sys.executable, "-c", _SPIN, str(os.getpid())]) for _ in range(count)]
    try:
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()


# --------------------------------------------------------------------------------------------------
# The DQN family and large-batch DQN (notebook 05)


def _run_curve(recipe: Recipe, label: str, *, total_steps: int, seed: int, runs_dir: str,
               **config_changes: Any) -> tuple[Run, LearningCurve]:
    """One run of ``recipe`` to ``total_steps`` in this thread, and its learning curve."""
    run = make_recipe_run(recipe, seed=seed, total_steps=total_steps, runs_dir=runs_dir,
                          name=f"{recipe.name}-{_slug(label)}-seed{seed}", **config_changes)
    run.run()
    if run.status != "finished":
        raise RuntimeError(f"run {run.name!r} ended {run.status}" + (f": {run.error}" if run.error else ""))
    return run, learning_curve(run.metrics, label)


def _study_dir(prefix: str) -> str:
    """A fresh folder for one study's runs: inside ``$WORKBENCH_RUNS_DIR`` when it is set (the
    tests and nbval set it to a folder they remove), else in the system's temporary folder."""
    parent = os.environ.get("WORKBENCH_RUNS_DIR") or None
    if parent:
        os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=parent)


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-") or "run"


def dqn_variants_study(
    variants: "dict[str, dict[str, Any]] | None" = None,
    *,
    total_steps: int,
    base: "Recipe | None" = None,
    seed: int = 0,
    target: float = 475.0,
    runs_dir: str | None = None,
    progress: bool = True,
) -> list[LearningCurve]:
    """Train each member of the DQN family for ``total_steps`` env steps, with the same seed.

    ``variants`` maps a label to its changes to ``base`` (default ``recipes.DQN_VARIANTS`` on
    ``recipes.DQN_BASE``, plain DQN on CartPole-v1), applied by ``recipes.dqn_variant``:
    ``{"+ double": {"double": True}}`` differs from the base only in ``DQNConfig.double``.
    Returns one :class:`LearningCurve` per variant, in order; ``curve.settings`` holds the
    ``changes``, the agent (``algo``), its gradient steps (``updates``) and ``steps_to_target``
    (env steps at which the last-20-episode mean first reached ``target``, or None).
    """
    variants = DQN_VARIANTS if variants is None else variants
    base = DQN_BASE if base is None else base
    runs_dir = runs_dir or _study_dir("workbench-dqn-variants-")
    curves = []
    for label, changes in variants.items():
        recipe = dqn_variant(base, name=base.name, **changes)
        run, curve = _run_curve(recipe, label, total_steps=total_steps, seed=seed, runs_dir=runs_dir)
        curve.settings = dict(changes=dict(changes), algo=repr(run.algo), updates=run.algo.num_updates,
                              steps_to_target=curve.steps_to(target), target=target)
        curves.append(curve)
        if progress:
            reached = curve.steps_to(target)
            print(f"{label:<22} {repr(run.algo):<58} best {max(curve.returns, default=float('nan')):5.0f}  "
                  f"to {target:g}: {f'{reached:,} steps' if reached else 'not reached':>12}  "
                  f"{curve.wall_seconds[-1] if curve.wall_seconds else 0:5.0f} s", flush=True)
    return curves


@dataclass
class DQNBatchResult:
    """One batch size of the large-batch DQN study."""

    batch_size: int
    learning_rate: float
    """After scaling (``DQN.learning_rate_for``)."""
    replay_ratio: float
    """Samples trained per env step, the same at every batch size."""
    target_update_interval: int
    """Gradient steps between target copies (held at the same number of samples trained)."""
    env_steps: int
    trained_env_steps: int
    """Env steps collected from the first iteration that took a gradient step on (learning waits
    for ``learning_starts`` steps and for one batch in the replay)."""
    updates: int
    """Gradient steps taken: ``trained_env_steps * replay_ratio / batch_size``, give or take one
    iteration's worth."""
    wall_seconds: float
    learn_seconds: float
    """The learner's share of the wall time (``time/learn`` summed: n-step transitions, replay,
    gradient steps)."""
    steps_to_target: int | None
    curve: LearningCurve

    @property
    def expected_updates(self) -> float:
        """What the replay ratio owes: ``trained_env_steps * replay_ratio / batch_size``."""
        return self.trained_env_steps * self.replay_ratio / self.batch_size

    @property
    def updates_per_second(self) -> float:
        """Gradient steps per second of the learner's time."""
        return self.updates / max(self.learn_seconds, 1e-9)

    @property
    def samples_per_second(self) -> float:
        """Samples trained (``updates * batch_size``) per second of the learner's time."""
        return self.updates * self.batch_size / max(self.learn_seconds, 1e-9)

    @property
    def final_return(self) -> float:
        return self.curve.final_return

    @property
    def best_return(self) -> float:
        return max(self.curve.returns, default=float("nan"))


def dqn_batch_study(
    batch_sizes: Sequence[int],
    *,
    total_steps: int,
    recipe: "str | Recipe" = "dqn-cartpole",
    scale_rule: str | None = "sqrt",
    replay_ratio: float | None = None,
    seed: int = 0,
    target: float = 475.0,
    runs_dir: str | None = None,
    progress: bool = True,
    **config_changes: Any,
) -> list[DQNBatchResult]:
    """Large-batch DQN (Stooke & Abbeel 2018, Sec. 4): ``recipe`` at each batch size, same seed,
    ``total_steps`` env steps each.

    Held fixed: the **replay ratio** (samples trained per env step; the recipe's unless
    ``replay_ratio`` is given), so a ``k``-times larger batch takes ``k`` times fewer gradient
    steps, and the target network's refresh in samples trained (``target_update_interval`` divided
    by ``k``, at least 1). Scaled: the learning rate, by ``scale_rule`` against the recipe's own
    batch size (``pg.scaled_learning_rate``: ``"sqrt"`` multiplies it by ``sqrt(k)``, ``"linear"`` by
    ``k``; None keeps it). ``config_changes`` replace further ``DQNConfig`` fields in every run.
    """
    recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
    reference = recipe.config.batch_size
    replay_ratio = recipe.config.replay_ratio if replay_ratio is None else float(replay_ratio)
    runs_dir = runs_dir or _study_dir("workbench-dqn-batch-")
    results = []
    for batch_size in batch_sizes:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"dqn_batch_study: batch sizes must be positive ints, got {batch_size!r}.")
        interval = max(1, round(recipe.config.target_update_interval * reference / batch_size))
        changes = dict(batch_size=batch_size, replay_ratio=replay_ratio, target_update_interval=interval,
                       replay_capacity=max(recipe.config.replay_capacity, batch_size))
        if scale_rule is not None:
            changes.update(scale_learning_rate=scale_rule, reference_batch_size=reference)
        changes.update(config_changes)
        label = f"batch {batch_size}"
        run, curve = _run_curve(recipe, label, total_steps=total_steps, seed=seed, runs_dir=runs_dir, **changes)
        rows = [row for row in run.metrics if "event" not in row]
        first = next((row for row in rows if row.get("charts/gradient_steps", 0) > 0), None)
        trained = 0 if first is None else run.env_steps - (
            first["charts/env_steps"] - first["charts/num_envs"] * first["charts/horizon"])
        curve.settings = dict(changes)
        result = DQNBatchResult(
            batch_size=batch_size,
            learning_rate=run.algo.optimizer.param_groups[0]["lr"],
            replay_ratio=replay_ratio,
            target_update_interval=interval,
            env_steps=run.env_steps,
            trained_env_steps=trained,
            updates=run.algo.num_updates,
            wall_seconds=rows[-1]["charts/wall_seconds"] if rows else 0.0,
            learn_seconds=sum(row["time/learn"] for row in rows),
            steps_to_target=curve.steps_to(target),
            curve=curve,
        )
        results.append(result)
        if progress:
            print(f"batch {batch_size:>5}: lr {result.learning_rate:.2e}, {result.updates:>6,} updates "
                  f"({result.updates_per_second:,.0f}/s, {result.samples_per_second:,.0f} samples/s), "
                  f"best return {result.best_return:5.0f}, {result.wall_seconds:.0f} s", flush=True)
    return results


# --------------------------------------------------------------------------------------------------
# Ape-X (notebook 06)

from typing import TYPE_CHECKING  # noqa: E402 (this section's own imports)

if TYPE_CHECKING:
    from workbench.apex import ApexConfig

APEX_CARTPOLE_AGENT = dict(n_step=3, double=True, batch_size=64, learning_rate=1e-3, adam_eps=1e-8,
                           replay_capacity=100_000, target_update_interval=256, prioritized=True,
                           priority_alpha=0.6, max_grad_norm=10.0)
"""``DQNConfig`` fields of Ape-X on CartPole-v1: the paper's 3-step double Q on a dueling network
(Horgan et al. 2018, Appendix C), with CartPole's batch, learning rate and target interval (the agent
of ``tests/test_apex.py``'s CartPole runs). With 4 actors it reached a return of 475 here in 8k-28k
learner updates (0.5-1.5 min on 2 cores), 200 in 4k-32k."""


def apex_cartpole_config(**changes: Any) -> "ApexConfig":
    """An ``apex.ApexConfig`` for Ape-X DQN on CartPole-v1: ``APEX_CARTPOLE_AGENT``, a dueling MLP
    (64, 64), 1,000 transitions before learning; ``changes`` replace any ``ApexConfig`` field
    (``num_actors=4``, ``max_replay_ratio=32.0``, ``model_options=...``)."""
    from workbench.algos.dqn import DQNConfig
    from workbench.apex import ApexConfig

    values: dict[str, Any] = dict(env_id="CartPole-v1", agent=DQNConfig(**APEX_CARTPOLE_AGENT),
                                  model_options=dict(dueling=True, hidden=(64, 64)), num_actors=2,
                                  max_actors=16, learning_starts=1_000, seed=0)
    values.update(changes)
    return ApexConfig(**values)


@dataclass
class ApexThroughput:
    """One Ape-X run measured after its warm-up: how fast data goes in and how fast it is learned.

    Rates are differences of the run's counters between the first row at which every actor had
    sent a block and the learner was updating, and the last row, over the wall time between them.
    """

    num_actors: int
    transitions_per_second: float
    """n-step transitions added to the central replay per second (all actors together)."""
    env_steps_per_second: float
    """Env steps per second, all actors together (about the transitions: one per step)."""
    updates_per_second: float
    """Learner updates (gradient steps) per second."""
    samples_per_second: float
    """Transitions trained on per second: updates x batch size."""
    seconds: float
    """Wall seconds measured (the window between the two rows)."""
    warmup_seconds: float
    """Seconds from ``train()`` to the window's first row: processes started, replay warmed up."""
    per_actor_transitions: dict[int, int] = field(default_factory=dict)
    """Transitions each actor sent within the window."""

    @property
    def replay_ratio(self) -> float:
        """Samples trained per transition added: how often each transition is replayed."""
        return self.samples_per_second / max(self.transitions_per_second, 1e-9)


def apex_throughput(
    actor_counts: Sequence[int] = (1, 2, 4),
    *,
    seconds: float = 5.0,
    config: "ApexConfig | None" = None,
    backend: str = "local",
    warmup_timeout: float = 120.0,
    log_interval: float = 0.5,
    progress: bool = True,
) -> list[ApexThroughput]:
    """Ape-X throughput against the number of actors (Horgan et al. 2018, Fig. 5's question on
    this machine): one run per count, each measured for ``seconds`` after its warm-up.

    Each run is ``config`` (default :func:`apex_cartpole_config`: CartPole, a free-running
    learner) with ``num_actors`` set, trained in this thread until ``seconds`` have passed since
    the first row at which every actor had sent a block and the learner was updating; then
    stopped (its processes end). Returns one :class:`ApexThroughput` per count, in order.

    Raises TimeoutError if a run does not warm up within ``warmup_timeout`` seconds.
    """
    from workbench.apex import Apex

    if not seconds > 0:
        raise ValueError(f"apex_throughput: seconds must be > 0, got {seconds!r}.")
    config = config or apex_cartpole_config()
    results = []
    for count in actor_counts:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"apex_throughput: actor counts must be positive ints, got {count!r}.")
        run_config = dataclasses.replace(config, num_actors=count, max_actors=max(config.max_actors, count))
        apex = Apex(run_config, backend=backend)
        window: dict[str, dict] = {}

        def watch(row: dict, apex: Any = apex, count: int = count, window: dict = window) -> None:
            if "start" not in window:
                if row["learner_updates"] > 0 and len(row["per_actor"]) >= count:
                    window["start"] = row
                elif row["time"] > warmup_timeout:
                    apex.stop()
            elif row["time"] - window["start"]["time"] >= seconds:
                window["end"] = row
                apex.stop()

        apex.train(max_seconds=warmup_timeout + seconds + 30.0, log_interval=log_interval, on_row=watch)
        if "start" not in window:
            raise TimeoutError(f"apex_throughput: the run with {count} actor(s) did not warm up within "
                               f"{warmup_timeout:g} s (every actor sending, the learner updating); the machine "
                               "may be overloaded, or raise warmup_timeout.")
        first, last = window["start"], window.get("end", apex.metrics[-1])
        elapsed = max(last["time"] - first["time"], 1e-9)
        updates = last["learner_updates"] - first["learner_updates"]
        result = ApexThroughput(
            num_actors=count,
            transitions_per_second=(last["transitions_added"] - first["transitions_added"]) / elapsed,
            env_steps_per_second=(last["env_steps"] - first["env_steps"]) / elapsed,
            updates_per_second=updates / elapsed,
            samples_per_second=(last["samples_trained"] - first["samples_trained"]) / elapsed,
            seconds=elapsed,
            warmup_seconds=first["time"],
            per_actor_transitions={i: last["per_actor"][i]["transitions"] - first["per_actor"].get(i, {}).get("transitions", 0)
                                   for i in sorted(last["per_actor"])},
        )
        results.append(result)
        if progress:
            print(f"{count:>3} actor(s): {result.transitions_per_second:8,.0f} transitions/s into replay, "
                  f"{result.updates_per_second:6,.0f} learner updates/s ({result.samples_per_second:8,.0f} samples/s), "
                  f"{result.seconds:.1f} s measured after {result.warmup_seconds:.1f} s of warm-up", flush=True)
    return results


def wait_for_apex_row(apex: Any, predicate: Callable[[dict], bool], *, timeout: float = 120.0) -> dict:
    """The first row of ``apex.metrics`` (an ``apex.Apex`` going in the background) for which
    ``predicate(row)`` holds, waiting for it. Raises TimeoutError after ``timeout`` seconds,
    RuntimeError if the run ends (stopped, finished, failed) first."""
    deadline = time.monotonic() + timeout
    seen = 0
    started = False
    while True:
        status = apex.status
        started = started or status == "running"
        ended = (started and status in ("stopped", "finished", "failed")) or apex.error is not None
        rows = apex.metrics
        for row in rows[seen:]:
            if predicate(row):
                return row
        seen = len(rows)
        if ended:
            raise RuntimeError(f"the Ape-X run ended ({status}) before the row came"
                               + (f": {apex.error!r}" if apex.error is not None else ""))
        if time.monotonic() > deadline:
            raise TimeoutError(f"no such row in the Ape-X run after {timeout:g} s (status {status})")
        time.sleep(0.05)
