"""The policy-gradient studies of notebooks 03-04 (Stooke & Abbeel 2018, Sec. 3-4).

* ``batch_size_study``: one recipe at several batch sizes ``B x T`` with the learning rate scaled
  to each (Sec. 4, Fig. 3 and 4): return against env steps (sample complexity) and against wall
  time (what the larger batch buys);
* ``sync_vs_async``: the same run made twice, synchronous and asynchronous (Sec. 3.3): steps/s,
  where each iteration's time goes, and the policy lag; ``busy_cores`` repeats it on a machine
  where another job takes cores.

Each run is a ``runs.Run`` (its metrics file under ``runs_dir``), run in the caller's thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.progress import each
from workbench.runs import Run, RunConfig, RunSettings
from workbench.runs.recipes import RECIPES, Recipe
from workbench.studies.curves import LearningCurve, learning_curve, study_dir

__all__ = ["ModeResult", "batch_size_study", "busy_cores", "make_recipe_run", "sync_vs_async"]


def make_recipe_run(
    recipe: "str | Recipe",
    *,
    seed: int = 0,
    num_envs: int | None = None,
    horizon: int | None = None,
    num_workers: int | None = None,
    sampler: str | None = None,
    total_steps: int | None = None,
    name: str | None = None,
    runs_dir: str | None = None,
    mode: str = "sync",
    learner_factory: Any = None,
    **config_changes: Any,
) -> Run:
    """A ``Run`` of a recipe (``runs.recipes.RECIPES``) at a chosen size (default: the recipe's
    own sampler, envs, horizon and step budget).

    ``config_changes`` replace fields of the recipe's algorithm config (e.g.
    ``scale_learning_rate="sqrt"``). The minibatch count of the recipe is kept, so a larger batch
    gets larger minibatches (as learning-rate scaling assumes)."""
    recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
    sampler = sampler or recipe.sampler
    num_workers = num_workers or recipe.num_workers
    num_envs = num_envs or recipe.num_envs
    horizon = horizon or recipe.horizon
    config = dataclasses.replace(recipe.config, **config_changes)
    batch = num_envs * horizon
    minibatches = getattr(config, "num_minibatches", 1)
    if batch % minibatches:  # before the learner: a recipe may measure the machine to make it
        raise ValueError(
            f"batch B*T = {num_envs}*{horizon} = {batch} is not divisible by the recipe's "
            f"{minibatches} minibatches; pick B and T whose product it divides."
        )
    algo = dataclasses.replace(recipe, config=config).make_learner(seed)
    settings = RunSettings(
        num_workers=num_workers,
        num_envs=num_envs,
        horizon=horizon,
        num_minibatches=minibatches,
    )
    run_config = RunConfig(
        total_steps=total_steps or recipe.total_steps,
        mode=mode,
        seed=seed,
        name=name,
        **({"runs_dir": runs_dir} if runs_dir is not None else {}),
    )
    return Run(
        recipe.env_id,
        algo,
        sampler=sampler,
        settings=settings,
        config=run_config,
        learner_factory=learner_factory,
    )


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
    it to its batch (``kernels.scaled_learning_rate``; Stooke & Abbeel 2018, Sec. 4).
    Returns one :class:`LearningCurve` per shape, labelled ``"B x T = batch"``.
    """
    recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
    runs_dir = runs_dir or study_dir("workbench-batch-study-")
    changes = {}
    if scale_rule is not None:
        changes = dict(
            scale_learning_rate=scale_rule, reference_batch_size=recipe.num_envs * recipe.horizon
        )
    curves = []
    for num_envs, horizon in each(shapes, f"{recipe.name}: batch shapes", unit="run"):
        label = f"{num_envs} x {horizon} = {num_envs * horizon}"
        run = make_recipe_run(
            recipe,
            seed=seed,
            num_envs=num_envs,
            horizon=horizon,
            total_steps=total_steps,
            name=f"{recipe.name}-{num_envs}x{horizon}-seed{seed}",
            runs_dir=runs_dir,
            **changes,
        )
        run.run()
        curve = learning_curve(run.metrics, label)
        curve.settings = dict(num_envs=num_envs, horizon=horizon, batch_size=num_envs * horizon)
        curves.append(curve)
        if progress:
            print(
                f"{recipe.name} batch {label:>18}: return {curve.final_return:6.1f} "
                f"after {run.env_steps:,} steps, {curve.steps_per_second:,.0f} steps/s, "
                f"lr {curve.learning_rate:.2e}",
                flush=True,
            )
    return curves


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
    for mode in each(("sync", "async"), "sync, then async", unit="run"):
        run = make_run(mode)
        if run.config.mode != mode:
            raise ValueError(
                f"make_run({mode!r}) made a {run.config.mode!r} run; pass mode to its RunConfig."
            )
        run.run()
        rows = [row for row in run.metrics if "event" not in row][warmup:]
        if not rows:
            raise ValueError(
                f"the {mode} run made {run.iteration} iterations, none after the {warmup} of "
                "warm-up; give it more total_steps."
            )

        def mean(key: str, rows: list[dict] = rows) -> float:
            return sum(row[key] for row in rows) / len(rows)

        seconds = sum(row["time/iteration"] for row in rows)
        results[mode] = ModeResult(
            mode=mode,
            steps_per_second=sum(row["charts/num_envs"] * row["charts/horizon"] for row in rows)
            / seconds,
            iteration_seconds=seconds / len(rows),
            learn_seconds=mean("time/learn"),
            batch_wait_seconds=mean("time/batch_wait"),
            collect_seconds=mean("time/collect"),
            policy_lag=mean("charts/policy_lag"),
            iterations=len(rows),
        )
    return results


_SPIN = """import sys
from workbench.processes import die_with_parent
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
    processes = [
        subprocess.Popen([sys.executable, "-c", _SPIN, str(os.getpid())]) for _ in range(count)
    ]
    try:
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            process.kill()
        for process in processes:
            process.wait()
