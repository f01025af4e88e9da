"""Notebook 09's live ci run, sized to the machine (``studies.pong_studies.live_claim``).

A record of continuations holds runs that resumed one checkpoint; the claim for N more env steps
is the least best return they reached within N, less the margin. These records are made up: each
continuation climbs linearly from the checkpoint's level, at its own pace.
"""

from __future__ import annotations

import pytest

from workbench.course import budget
from workbench.studies.pong_studies import level_claim, live_claim, reached_by

START = 500_000


def continuation(seed: int, climb_per_100k: float, until: int = 400_000) -> dict:
    """A run resumed at START at return -20, rising ``climb_per_100k`` per 100k env steps."""
    curve = [{"env_steps": START + 1_024, "mean_return": None}]
    for steps in range(16_384, until + 1, 16_384):
        curve.append(
            {"env_steps": START + steps, "mean_return": -20.0 + climb_per_100k * steps / 100_000}
        )
    return {"seed": seed, "resumed_at_env_steps": START, "curve": curve}


RECORD = {
    "recipes": {
        "ppo-pong-fast": {
            "runs": [continuation(0, 4.0), continuation(1, 2.0), continuation(2, 3.0)]
        }
    }
}


def test_the_claim_is_the_slowest_continuations_return_by_then_less_the_margin():
    claim = live_claim(RECORD, steps_per_second=1_000, wall_seconds=200, margin=1.0, grid=16_384)
    assert claim.env_steps == 196_608  # 200k afforded, on the grid
    slowest = reached_by(RECORD["recipes"]["ppo-pong-fast"]["runs"][1], START + claim.env_steps)
    assert claim.target == pytest.approx(slowest - 1.0)
    assert claim.limit == START + claim.env_steps


def test_a_slow_machine_runs_the_steps_the_claim_needs_not_fewer():
    claim = live_claim(RECORD, steps_per_second=100, wall_seconds=200, least_gain=2.0, grid=16_384)
    # the checkpoint's level is the best first point (-19.34, the fastest's); the slowest climbs
    # 2 per 100k, so with the margin of 1 it clears 2 points above that after 183k: 196,608 on
    # the grid, though only 20k are afforded
    assert claim.env_steps == claim.least_steps == 196_608
    assert claim.target >= claim.start_return + 2.0
    assert "fewer than" in claim.describe()


def test_a_fast_machine_is_held_to_the_recorded_steps():
    claim = live_claim(RECORD, steps_per_second=1e6, wall_seconds=200, grid=16_384)
    assert claim.env_steps == 393_216  # the shortest continuation, on the grid


def test_continuations_of_different_checkpoints_are_refused():
    runs = [continuation(0, 4.0), {**continuation(1, 2.0), "resumed_at_env_steps": 1}]
    with pytest.raises(ValueError, match="one checkpoint"):
        live_claim({"recipes": {"x": {"runs": runs}}}, steps_per_second=1, wall_seconds=1)


def test_continuations_that_never_climbed_give_no_claim():
    flat = {"recipes": {"x": {"runs": [continuation(0, 0.0)]}}}
    with pytest.raises(ValueError, match="climbed"):
        live_claim(flat, steps_per_second=1_000, wall_seconds=200)


def test_the_recorded_continuations_give_the_claims_notebook_09_quotes():
    """Notebook 09's answer 3 quotes these, read from the record its ci run is sized from."""
    import json
    from pathlib import Path

    record = json.loads(
        (Path(__file__).parents[1] / "data/learning_ppo_pong_fast_from_climb.json").read_text()
    )
    seconds = budget.named("ci").atari_live_seconds  # 120: the answer's numbers are the ci cell's
    slow = live_claim(record, steps_per_second=500, wall_seconds=seconds)
    assert (slow.env_steps, slow.least_steps, slow.start_return) == (163_840, 163_840, -18.0)
    assert slow.target == pytest.approx(-15.95)
    fast = live_claim(record, steps_per_second=2_100, wall_seconds=seconds)
    assert (fast.env_steps, round(fast.target, 2)) == (245_760, -12.8)
    assert live_claim(record, steps_per_second=1e6, wall_seconds=seconds).env_steps == 294_912


# --- the level claim (notebook 06's Ape-X check) ------------------------------------------------


def levelled(seed: int, first: int, level: float, until: int = 131_072) -> dict:
    """A run resumed at START whose first reading comes after ``first`` env steps, at ``level``,
    then a point above it every 8,192 env steps."""
    curve = [{"env_steps": START + s, "mean_return": None} for s in range(4_096, first, 8_192)]
    curve += [
        {"env_steps": START + s, "mean_return": level + (1.0 if s > first else 0.0)}
        for s in range(first, until + 1, 8_192)
    ]
    return {"seed": seed, "resumed_at_env_steps": START, "curve": curve}


def level_record(*runs: dict) -> dict:
    return {"recipes": {"apex-dqn-pong-fast": {"runs": list(runs)}}}


def test_the_level_claim_waits_for_every_continuations_first_reading_and_a_quarter_more():
    record = level_record(levelled(0, 52_000, -11.0), levelled(1, 57_200, -13.6))
    claim = level_claim(record, margin=1.5)
    assert claim.first_steps == 57_200
    assert claim.env_steps == 73_728  # 57,200 x 1.25 = 71,500, up to the grid
    assert claim.limit == START + 73_728
    assert claim.first_returns == (-11.0, -13.6)


def test_the_level_claim_is_the_lowest_best_reading_by_then_less_the_margin():
    record = level_record(levelled(0, 52_000, -11.0), levelled(1, 57_200, -13.6))
    claim = level_claim(record, margin=1.5)
    # by 73,728: seed 0 reached -10 (its first reading, then a point above), seed 1 -12.6
    assert claim.target == pytest.approx(-12.6 - 1.5)
    assert "-14.1 within 73,728 more" in claim.describe()


def test_a_continuation_without_a_reading_gives_no_level_claim():
    with pytest.raises(ValueError, match="no reading"):
        level_claim(level_record(levelled(0, 200_000, -11.0)), margin=1.0)


def test_continuations_too_short_for_the_level_claim_are_refused():
    with pytest.raises(ValueError, match="record longer ones"):
        level_claim(level_record(levelled(0, 100_000, -11.0, until=110_000)), margin=1.0)
