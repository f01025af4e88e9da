"""The three systems learn with their learner on a GPU (skipped on a machine without one).

The CPU tests run every line of the device code but the device itself (``resolve_device``, moving
a model and its optimizer, the ``no_gpu`` errors); these run the rest where a GPU is lent: each
recipe's whole run, learner (and SEED's inference server) on ``cuda``, must reach the recipe's
target within its env-step budget, the same claim its CPU record makes (``data/learning*.json``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from workbench.apex import APEX_RECIPES
from workbench.seed import SEED_RECIPES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def run_on_cuda(recipe, tmp_path) -> dict:
    result = replace(recipe, device="cuda").run(0, max_seconds=300, runs_dir=str(tmp_path))
    assert result["run"].device.type == "cuda"
    return result


def test_seed_vtrace_learns_cartpole_with_server_and_learner_on_the_gpu(tmp_path):
    result = run_on_cuda(SEED_RECIPES["seed-vtrace-cartpole"], tmp_path)
    assert result["steps_to_target"] is not None, result["curve"][-1]


def test_seed_r2d2_keeps_recurrent_state_on_the_gpu_and_learns(tmp_path):
    result = run_on_cuda(SEED_RECIPES["seed-r2d2-cartpole-novelocity"], tmp_path)
    assert result["steps_to_target"] is not None, result["curve"][-1]


def test_apex_dqn_learns_cartpole_with_its_learner_on_the_gpu(tmp_path):
    result = run_on_cuda(APEX_RECIPES["apex-dqn-cartpole"], tmp_path)
    assert result["steps_to_target"] is not None, result["curve"][-1]
