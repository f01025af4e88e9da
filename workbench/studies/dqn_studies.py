"""The DQN studies of notebook 05: the family one change at a time, and large-batch DQN.

* ``dqn_variants_study``: the DQN family on CartPole, each member one change to plain DQN
  (``runs.dqn_family.DQN_VARIANTS``), as in Rainbow's Fig. 1;
* ``dqn_batch_study``: large-batch DQN at a fixed replay ratio with the learning rate scaled
  (Stooke & Abbeel 2018, Sec. 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workbench.learners import ReplayAgentConfig
from workbench.progress import each
from workbench.runs import Run
from workbench.runs.dqn_family import DQN_BASE, DQN_VARIANTS, dqn_variant
from workbench.runs.recipes import RECIPES, Recipe
from workbench.studies.curves import LearningCurve, learning_curve, slug, study_dir
from workbench.studies.pg_studies import make_recipe_run
from workbench.studies.side_by_side import run_side_by_side

__all__ = [
    "DQNBatchResult",
    "dqn_batch_study",
    "dqn_variants_study",
    "run_curve",
    "variant_curve",
]


def run_curve(
    recipe: Recipe, label: str, *, total_steps: int, seed: int, runs_dir: str, **config_changes: Any
) -> tuple[Run, LearningCurve]:
    """One run of ``recipe`` to ``total_steps`` in this thread, and its learning curve."""
    run = make_recipe_run(
        recipe,
        seed=seed,
        total_steps=total_steps,
        runs_dir=runs_dir,
        name=f"{recipe.name}-{slug(label)}-seed{seed}",
        **config_changes,
    )
    run.run()
    if run.status != "finished":
        raise RuntimeError(
            f"run {run.name!r} ended {run.status}" + (f": {run.error}" if run.error else "")
        )
    return run, learning_curve(run.metrics, label)


def dqn_variants_study(
    variants: "dict[str, dict[str, Any]] | None" = None,
    *,
    total_steps: int,
    base: "Recipe | None" = None,
    seed: int = 0,
    target: float = 475.0,
    runs_dir: str | None = None,
    progress: bool = True,
    processes: int | None = None,
) -> list[LearningCurve]:
    """Train each member of the DQN family for ``total_steps`` env steps, with the same seed.

    ``variants`` maps a label to its changes to ``base`` (default ``recipes.DQN_VARIANTS`` on
    ``recipes.DQN_BASE``, plain DQN on CartPole-v1), applied by ``recipes.dqn_variant``:
    ``{"+ double": {"double": True}}`` differs from the base only in ``DQNConfig.double``.
    The members train side by side, one per core (``side_by_side.run_side_by_side``;
    ``processes=1``: one after the other here): each is a one-thread run compared by env steps.
    Returns one :class:`LearningCurve` per variant, in order; ``curve.settings`` holds the
    ``changes``, the agent (``algo``), its gradient steps (``updates``) and ``steps_to_target``
    (env steps at which the last-20-episode mean first reached ``target``, or None).
    """
    variants = DQN_VARIANTS if variants is None else variants
    base = DQN_BASE if base is None else base
    runs_dir = runs_dir or study_dir("workbench-dqn-variants-")
    jobs = [
        (base, label, changes, total_steps, seed, target, runs_dir)
        for label, changes in variants.items()
    ]

    def show(index: int, curve: LearningCurve) -> None:
        reached = curve.steps_to(target)
        print(
            f"{curve.label:<22} {curve.settings['algo']:<58} "
            f"best {max(curve.returns, default=float('nan')):5.0f}  "
            f"to {target:g}: {f'{reached:,} steps' if reached else 'not reached':>12}  "
            f"{curve.wall_seconds[-1] if curve.wall_seconds else 0:5.0f} s",
            flush=True,
        )

    return run_side_by_side(
        variant_curve,
        jobs,
        processes=processes,
        desc="DQN variants",
        on_result=show if progress else None,
    )


def variant_curve(
    base: Recipe,
    label: str,
    changes: dict[str, Any],
    total_steps: int,
    seed: int,
    target: float,
    runs_dir: str,
) -> LearningCurve:
    """One member of ``dqn_variants_study``: ``base`` with ``changes``, trained to
    ``total_steps``; its curve with the member's settings."""
    recipe = dqn_variant(base, name=base.name, **changes)
    run, curve = run_curve(recipe, label, total_steps=total_steps, seed=seed, runs_dir=runs_dir)
    curve.settings = dict(
        changes=dict(changes),
        algo=repr(run.algo),
        updates=run.algo.num_updates,
        steps_to_target=curve.steps_to(target),
        target=target,
    )
    return curve


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
    batch size (``kernels.scaled_learning_rate``: ``"sqrt"`` multiplies it by ``sqrt(k)``,
    ``"linear"`` by ``k``; None keeps it). ``config_changes`` replace further ``DQNConfig`` or
    ``ReplayAgentConfig`` fields in every run (``runs.dqn_family.dqn_variant``).
    """
    recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
    reference = recipe.config.batch_size
    replay = recipe.replay or ReplayAgentConfig()
    replay_ratio = replay.replay_ratio if replay_ratio is None else float(replay_ratio)
    runs_dir = runs_dir or study_dir("workbench-dqn-batch-")
    results = []
    for batch_size in each(batch_sizes, "DQN batch sizes", unit="run"):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"dqn_batch_study: batch sizes must be positive ints, got {batch_size!r}."
            )
        interval = max(1, round(recipe.config.target_update_interval * reference / batch_size))
        changes = dict(
            batch_size=batch_size,
            replay_ratio=replay_ratio,
            target_update_interval=interval,
            replay_capacity=max(replay.replay_capacity, batch_size),
        )
        if scale_rule is not None:
            changes.update(scale_learning_rate=scale_rule, reference_batch_size=reference)
        changes.update(config_changes)
        label = f"batch {batch_size}"
        variant = dqn_variant(recipe, **changes)  # each change to the learner or its replay
        run, curve = run_curve(
            variant, label, total_steps=total_steps, seed=seed, runs_dir=runs_dir
        )
        rows = [row for row in run.metrics if "event" not in row]
        first = next((row for row in rows if row.get("charts/gradient_steps", 0) > 0), None)
        trained = (
            0
            if first is None
            else run.env_steps
            - (first["charts/env_steps"] - first["charts/num_envs"] * first["charts/horizon"])
        )
        curve.settings = dict(changes)
        result = DQNBatchResult(
            batch_size=batch_size,
            learning_rate=run.algo.learner.optimizer.param_groups[0]["lr"],
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
            print(
                f"batch {batch_size:>5}: lr {result.learning_rate:.2e}, "
                f"{result.updates:>6,} updates ({result.updates_per_second:,.0f}/s, "
                f"{result.samples_per_second:,.0f} samples/s), "
                f"best return {result.best_return:5.0f}, {result.wall_seconds:.0f} s",
                flush=True,
            )
    return results
