"""The gradient noise scale: the batch size past which a larger batch stops saving steps.

McCandlish et al. 2018, *An Empirical Model of Large-Batch Training* (https://arxiv.org/abs/1812.06162)
predict the critical batch from the gradient's noise, the simple noise scale (their Eq. 2.8)::

    B_simple = tr(Σ) / |G|²

``G`` the true gradient, ``Σ`` the covariance of one sample's gradient. Below ``B_simple`` doubling
the batch nearly halves the steps to a given loss (the batch buys speed); far above it, it buys
almost nothing, and a run of fixed samples takes too few steps. Both terms come from the squared
norms of mean gradients at two batch sizes, since ``E|G_B|² = |G|² + tr(Σ)/B`` (their App. A.1)::

    |G|²  ≈ (B_big |G_big|² − B_small |G_small|²) / (B_big − B_small)
    tr(Σ) ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)

Each estimate from one batch is noisy (and can be negative); the noise scale is the ratio of their
averages over many batches. In RL the samples of one rollout are correlated (consecutive steps of
one env), so the estimate counts a rollout's env steps as if independent, as the paper does for its
Atari agents (Sec. 3.3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from workbench.kernels.losses import clipped_policy_loss, value_loss
from workbench.studies.curves import study_dir

__all__ = [
    "NoiseEstimate",
    "NoiseScaleTrace",
    "noise_estimate",
    "noise_scale_figure",
    "ppo_gradient",
    "ppo_noise_scale",
    "windowed_noise_scale",
]


@dataclass(frozen=True)
class NoiseEstimate:
    """One batch's unbiased estimates of ``|G|²`` and ``tr(Σ)``."""

    gradient_sq: float
    trace: float
    small: int
    big: int


def noise_estimate(
    gradient: Callable[[torch.Tensor], torch.Tensor],
    num_samples: int,
    small: int,
    generator: torch.Generator | None = None,
) -> NoiseEstimate:
    """Estimate ``|G|²`` and ``tr(Σ)`` from one batch of ``num_samples``.

    ``gradient(indices)`` is the flat gradient of the mean loss over those samples. The batch is
    shuffled and cut into disjoint chunks of ``small``; ``|G_small|²`` is the chunks' mean squared
    norm, ``|G_big|²`` the squared norm over all of them (``big`` = the chunks' union).
    """
    if not 1 <= small <= num_samples // 2:
        raise ValueError(
            f"noise_estimate: small={small} must be between 1 and half the batch "
            f"({num_samples // 2}), so at least two chunks make the small-batch estimate"
        )
    order = torch.randperm(num_samples, generator=generator)
    big = num_samples - num_samples % small
    chunks = order[:big].split(small)
    big_sq = float(gradient(order[:big]).square().sum())
    small_sq = sum(float(gradient(chunk).square().sum()) for chunk in chunks) / len(chunks)
    gradient_sq = (big * big_sq - small * small_sq) / (big - small)
    trace = (small_sq - big_sq) / (1.0 / small - 1.0 / big)
    return NoiseEstimate(gradient_sq, trace, small, big)


def ppo_gradient(learner: Any, rollout: Any) -> tuple[Callable[[torch.Tensor], torch.Tensor], int]:
    """PPO's loss gradient on ``rollout`` at the learner's current parameters, as ``noise_estimate``
    takes it: the first minibatch step of an update (the ratio is 1; advantages normalised over
    the whole batch), in float32. Returns ``(gradient, T * B)``."""
    config = learner.config
    rollout, behaviour_values, advantages, returns = learner.prepare(rollout)
    obs = rollout.obs.flatten(0, 1)
    actions = rollout.actions.flatten(0, 1)
    behaviour_logp = rollout.policy_outputs["logp"].flatten(0, 1).float()
    values = behaviour_values.flatten(0, 1)
    advantages, returns = advantages.flatten(0, 1), returns.flatten(0, 1)
    if config.normalize_advantages:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    parameters = [p for p in learner.model.parameters() if p.requires_grad]

    def gradient(indices: torch.Tensor) -> torch.Tensor:
        out = learner.model.evaluate(obs[indices], actions[indices])
        policy_loss, _ = clipped_policy_loss(
            behaviour_logp[indices], out["logp"].float(), advantages[indices], config.clip_coef
        )
        critic_loss = value_loss(
            out["value"].float(),
            returns[indices],
            behaviour_values=values[indices],
            clip_coef=config.clip_coef if config.clip_value_loss else None,
        )
        loss = (
            policy_loss
            + config.value_coef * critic_loss
            - config.entropy_coef * out["entropy"].float().mean()
        )
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, parameters)])

    return gradient, rollout.num_steps


@dataclass
class NoiseScaleTrace:
    """Estimates taken along a run: ``points`` rows of ``env_steps``, ``update``, ``gradient_sq``,
    ``trace``; ``noise_scale`` is the ratio of their means over a window of rows."""

    recipe: str
    seed: int
    batch: int
    small: int
    points: list[dict[str, float]] = field(default_factory=list)

    def noise_scale(self, first: int = 0, last: int | None = None) -> float:
        rows = self.points[first:last]
        gradient_sq = sum(p["gradient_sq"] for p in rows) / max(len(rows), 1)
        trace = sum(p["trace"] for p in rows) / max(len(rows), 1)
        return trace / gradient_sq if gradient_sq > 0 else float("inf")


def ppo_noise_scale(
    recipe: Any,
    total_steps: int,
    *,
    small: int = 64,
    every: int = 1,
    seed: int = 0,
    runs_dir: str | None = None,
) -> NoiseScaleTrace:
    """Train ``recipe`` (a PPO recipe) for ``total_steps`` env steps and estimate the noise scale
    on every ``every``-th rollout, just before the learner's update on it."""
    learner = recipe.make_learner(seed)
    trace = NoiseScaleTrace(recipe.name, seed, recipe.num_envs * recipe.horizon, small)
    generator = torch.Generator().manual_seed(seed)
    update = learner.update
    env_steps = 0

    def measured_update(rollout: Any) -> dict[str, float]:
        nonlocal env_steps
        env_steps += rollout.num_steps
        if learner.num_updates % every == 0:
            gradient, count = ppo_gradient(learner, rollout)
            estimate = noise_estimate(gradient, count, small, generator)
            trace.points.append(
                {
                    "env_steps": env_steps,
                    "update": learner.num_updates,
                    "gradient_sq": estimate.gradient_sq,
                    "trace": estimate.trace,
                }
            )
        return update(rollout)

    learner.update = measured_update  # this learner only: each rollout is measured, then learned
    runs_dir = runs_dir or study_dir("workbench-noise-scale-")
    run = recipe.make_run(seed, learner=learner, runs_dir=runs_dir, name=f"noise-{recipe.name}")
    run.run(env_steps=total_steps)
    return trace


def windowed_noise_scale(
    points: list[dict[str, float]], window: int = 10
) -> list[dict[str, float]]:
    """``B_simple`` along a run: the ratio of the mean ``trace`` to the mean ``gradient_sq`` over
    each run of ``window`` consecutive estimates (one estimate alone is too noisy, and can be
    negative), at the window's last env steps. Windows whose mean ``|G|²`` is not positive are
    left out."""
    rows = []
    for end in range(window, len(points) + 1, window):
        chunk = points[end - window : end]
        gradient_sq = sum(p["gradient_sq"] for p in chunk) / window
        trace = sum(p["trace"] for p in chunk) / window
        if gradient_sq > 0:
            rows.append({"env_steps": chunk[-1]["env_steps"], "noise_scale": trace / gradient_sq})
    return rows


def noise_scale_figure(
    recipes: dict[str, dict[str, Any]],
    *,
    batches: dict[str, list[int]] | None = None,
    window: int = 10,
    title: str | None = None,
) -> go.Figure:
    """One panel per recipe of a ``benchmarks/noise_scale.py`` record (``recipes``): ``B_simple``
    along the run (``windowed_noise_scale``, log axis), the recipe's own batch as a dashed line and
    each of ``batches[recipe]`` (e.g. the learning-rate study's) as a dotted one: a batch below the
    curve still buys steps, one far above it mostly buys samples."""
    names = list(recipes)
    figure = make_subplots(rows=1, cols=len(names), subplot_titles=names)
    for col, name in enumerate(names, start=1):
        result = recipes[name]
        rows = windowed_noise_scale(result["points"], window)
        figure.add_trace(
            go.Scatter(
                x=[r["env_steps"] for r in rows],
                y=[r["noise_scale"] for r in rows],
                mode="lines+markers",
                name=f"B_simple, {name}",
                line=dict(color="#1f77b4"),
            ),
            row=1,
            col=col,
        )
        figure.add_hline(
            y=result["batch"],
            line_dash="dash",
            line_color="#d62728",
            annotation_text=f"recipe's batch {result['batch']:,}",
            row=1,
            col=col,
        )
        for batch in (batches or {}).get(name, []):
            figure.add_hline(
                y=batch,
                line_dash="dot",
                line_color="#7f7f7f",
                annotation_text=f"{batch:,}",
                annotation_position="bottom right",
                row=1,
                col=col,
            )
    figure.update_yaxes(type="log", title_text="simple noise scale (samples)", col=1)
    figure.update_xaxes(title_text="env steps")
    figure.update_layout(title=title, height=380, showlegend=False)
    return figure
