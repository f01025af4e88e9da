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


def idea_run(variant: str, seed: int, steps: int | None, seconds: float | None) -> dict:
    curve = [
        {"env_steps": 1_000, "mean_return": None},
        {"env_steps": 2_000, "mean_return": 20.0},
        {"env_steps": 3_000, "mean_return": 480.0 if steps else 300.0},
    ]
    return {
        "variant": variant,
        "seed": seed,
        "steps_to_target": steps,
        "seconds_to_target": seconds,
        "curve": curve,
    }


RUNS = [
    idea_run("paper", 0, 30_000, 10.0),
    idea_run("paper", 1, 50_000, 30.0),
    idea_run("paper", 2, 40_000, 20.0),
    idea_run("max priority", 0, 60_000, 40.0),
    idea_run("max priority", 1, None, None),
]


def test_ideas_summary_counts_the_seeds_that_reached_and_takes_medians_over_them():
    from workbench.studies.apex_studies import ideas_summary

    paper, max_priority = ideas_summary(RUNS)
    assert (paper["variant"], paper["reached"], paper["seeds"]) == ("paper", 3, 3)
    assert (paper["median_steps"], paper["median_seconds"]) == (40_000, 20.0)
    assert (max_priority["reached"], max_priority["seeds"]) == (1, 2)
    assert max_priority["median_steps"] == 60_000  # the seed that never reached is not a zero


def test_ideas_figure_draws_a_line_per_seed_in_one_colour_per_variant():
    from workbench.studies.apex_studies import ideas_figure

    figure = ideas_figure(RUNS, target=475)
    assert len(figure.data) == 5
    colours = {trace.legendgroup: set() for trace in figure.data}
    for trace in figure.data:
        colours[trace.legendgroup].add(trace.line.color)
        assert None not in trace.y  # rows without an episode yet are left out
    assert all(len(c) == 1 for c in colours.values())
    assert colours["paper"] != colours["max priority"]
    assert [t.showlegend for t in figure.data] == [True, False, False, True, False]
