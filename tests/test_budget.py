"""The budget picks every run size in one place, from WORKBENCH_BUDGET."""

import pytest

from workbench.course import budget


def test_ci_is_the_default(monkeypatch):
    monkeypatch.delenv("WORKBENCH_BUDGET", raising=False)
    assert budget.current().name == "ci"


def test_full_budget_is_larger_than_ci(monkeypatch):
    monkeypatch.setenv("WORKBENCH_BUDGET", "full")
    full = budget.current()
    monkeypatch.setenv("WORKBENCH_BUDGET", "ci")
    ci = budget.current()
    assert full.measure_seconds > ci.measure_seconds
    assert max(full.env_counts) > max(ci.env_counts)
    assert full.sampler_envs * full.sampler_horizon > ci.sampler_envs * ci.sampler_horizon
    assert full.live_steps > ci.live_steps and full.batch_study_steps > ci.batch_study_steps
    assert set(ci.batch_shapes) <= set(full.batch_shapes)


def test_unknown_budget_names_the_choices(monkeypatch):
    monkeypatch.setenv("WORKBENCH_BUDGET", "huge")
    with pytest.raises(ValueError, match="ci, full"):
        budget.current()
