"""``benchmarks/apex_ideas.py``: each variant is the recipe with one of Ape-X's ideas off."""

from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

import apex_ideas  # noqa: E402  (the benchmarks folder, as when the script runs)

from workbench.apex import actor_epsilons  # noqa: E402
from workbench.apex.recipes import APEX_RECIPES  # noqa: E402


def variant(name: str):
    base = APEX_RECIPES["apex-dqn-cartpole"].config
    return dataclasses.replace(base, **apex_ideas.VARIANTS[name])


def test_the_paper_variant_is_the_recipe():
    config = variant("paper")
    assert config.initial_priorities and config.exploration_schedule == "ladder"
    assert config.explorations(4) == actor_epsilons(4)


def test_max_priority_changes_only_where_new_transitions_enter():
    config = variant("max priority")
    assert not config.initial_priorities and config.explorations(4) == actor_epsilons(4)


def test_one_annealed_epsilon_changes_only_the_exploration():
    config = variant("one annealed epsilon")
    assert config.initial_priorities and config.explorations(4) == [1.0] * 4
    assert config.num_actors == APEX_RECIPES["apex-dqn-cartpole"].config.num_actors
