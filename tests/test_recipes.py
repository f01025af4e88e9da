"""Every recipe, whatever system it runs, is a ``runs.recipe_run.RunnableRecipe``: the one shape
``run_recipe``, ``benchmarks/learning.py``, ``runs.evaluation`` and ``python -m workbench`` use."""

from __future__ import annotations

import pytest

from workbench.apex import APEX_RECIPES
from workbench.runs.recipe_run import RunnableRecipe
from workbench.runs.recipes import RECIPES
from workbench.seed import SEED_RECIPES

EVERY_RECIPE = {**RECIPES, **SEED_RECIPES, **APEX_RECIPES}


def test_the_three_registries_name_each_recipe_once():
    assert len(EVERY_RECIPE) == len(RECIPES) + len(SEED_RECIPES) + len(APEX_RECIPES)


@pytest.mark.parametrize("name", sorted(EVERY_RECIPE))
def test_every_recipe_is_a_runnable_recipe_under_its_own_name(name):
    recipe = EVERY_RECIPE[name]
    assert isinstance(recipe, RunnableRecipe)
    assert recipe.name == name and recipe.total_steps > 0 and recipe.note


@pytest.mark.parametrize("name", sorted(EVERY_RECIPE))
def test_every_recipe_describes_its_system_and_its_envs_for_a_record(name):
    recipe = EVERY_RECIPE[name]
    description = recipe.describe()
    assert description["system"] in ("run", "apex", "seed")
    assert description["algorithm"] and description["num_envs"] >= 1
