"""The gradient noise scale (McCandlish et al. 2018, App. A.1) from gradient norms at two batch
sizes (``workbench.studies.noise_scale``)."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
import torch

from workbench.runs.recipes import RECIPES
from workbench.sampling import make_sampler
from workbench.studies.noise_scale import (
    noise_estimate,
    noise_scale_figure,
    ppo_gradient,
    ppo_noise_scale,
    windowed_noise_scale,
)

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

import noise_scale as bench  # noqa: E402  (the benchmarks folder, as when the script runs)


def test_the_two_batch_estimates_recover_a_known_gradient_and_noise():
    # Per-sample gradients g_i ~ N(mu, sigma^2 I) in D dims: |G|^2 = |mu|^2, tr(S) = D sigma^2.
    generator = torch.Generator().manual_seed(0)
    mu, sigma, dims = torch.full((10,), 0.5), 2.0, 10
    estimates = []
    for _ in range(200):
        samples = mu + sigma * torch.randn(4096, dims, generator=generator)
        estimates.append(noise_estimate(lambda idx, g=samples: g[idx].mean(0), 4096, 64, generator))
    gradient_sq = sum(e.gradient_sq for e in estimates) / len(estimates)
    trace = sum(e.trace for e in estimates) / len(estimates)
    assert gradient_sq == pytest.approx(float(mu.square().sum()), rel=0.1)  # 2.5
    assert trace == pytest.approx(dims * sigma**2, rel=0.1)  # 40
    assert trace / gradient_sq == pytest.approx(16.0, rel=0.15)  # B_simple


def test_a_small_batch_that_leaves_one_chunk_names_the_fix():
    with pytest.raises(ValueError, match="half the batch"):
        noise_estimate(lambda idx: torch.zeros(1), 100, 60)


def test_the_ppo_gradient_is_the_gradient_of_a_mean_over_samples(one_thread):
    # A mean's gradient over two equal halves is the average of the halves' gradients.
    learner = RECIPES["ppo-cartpole"].make_learner(0)
    with make_sampler("serial", "CartPole-v1", num_envs=4, horizon=16, seed=0) as sampler:
        rollout = sampler.collect(learner.model)
    gradient, count = ppo_gradient(learner, rollout)
    order = torch.randperm(count, generator=torch.Generator().manual_seed(0))
    whole, first, second = gradient(order), gradient(order[:32]), gradient(order[32:])
    assert count == 64 and whole.abs().sum() > 0
    torch.testing.assert_close(whole, (first + second) / 2, rtol=1e-4, atol=1e-6)


def test_a_ppo_run_gives_an_estimate_per_rollout_and_a_positive_noise_scale(one_thread, tmp_path):
    recipe = RECIPES["ppo-cartpole"]
    trace = ppo_noise_scale(
        recipe, total_steps=4 * recipe.num_envs * recipe.horizon, small=32, runs_dir=str(tmp_path)
    )
    assert [p["update"] for p in trace.points] == [0, 1, 2, 3]
    assert all(p["trace"] > 0 for p in trace.points)  # the per-sample gradients do vary
    assert 0 < trace.noise_scale() < float("inf")


def test_the_command_writes_each_recipe_s_noise_scale_by_third_and_its_ratio(tmp_path, capsys):
    out = tmp_path / "noise.json"
    argv = ["--recipes", "ppo-cartpole", "--steps", "1536", "--every", "1", "--out", str(out)]
    assert bench.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"ratios: ppo_cartpole_noise_scale_vs_batch=-?\d+\.\d\d", lines[-1])
    report = json.loads(out.read_text())["recipes"]["ppo-cartpole"]
    assert report["batch"] == 256 and len(report["points"]) == 6  # 1,536 / 256 rollouts
    assert len(report["noise_scale_by_third"]) == 3


def test_an_unknown_recipe_is_refused_with_the_names_that_exist():
    with pytest.raises(SystemExit):
        bench.parse_args(["--recipes", "ppo-cartpol"])


def test_a_run_splits_into_thirds_of_at_least_one_row():
    assert bench.thirds(9) == [(0, 3), (3, 6), (6, 9)]
    assert bench.thirds(2) == [(0, 1), (1, 2), (1, 2)]


def test_the_noise_scale_along_a_run_is_the_ratio_of_windowed_means():
    # Two windows of two: (trace 4 + 12) / (|G|^2 1 + 1) = 8; the second window's mean |G|^2 is
    # negative (a noisy estimate), so it is left out rather than drawn as a negative scale.
    points = [
        {"env_steps": 1, "gradient_sq": 1.0, "trace": 4.0},
        {"env_steps": 2, "gradient_sq": 1.0, "trace": 12.0},
        {"env_steps": 3, "gradient_sq": -2.0, "trace": 1.0},
        {"env_steps": 4, "gradient_sq": 1.0, "trace": 1.0},
    ]
    assert windowed_noise_scale(points, window=2) == [{"env_steps": 2, "noise_scale": 8.0}]


def test_the_figure_draws_a_panel_per_recipe_with_its_batch_and_the_study_s():
    points = [{"env_steps": i, "gradient_sq": 1.0, "trace": 100.0} for i in range(20)]
    record = {"a": {"batch": 256, "points": points}, "b": {"batch": 1024, "points": points}}
    figure = noise_scale_figure(record, batches={"a": [1024, 4096]})
    assert len(figure.data) == 2 and list(figure.data[0].y) == [100.0, 100.0]
    lines = sorted(shape.y0 for shape in figure.layout.shapes)
    assert lines == [256, 1024, 1024, 4096]  # each recipe's batch, then a's study batches
