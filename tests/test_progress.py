"""Progress bars (``workbench.progress``): drawn in a notebook, hidden in scripts and tests unless
asked for, following a run's limit, one bar per study."""

from __future__ import annotations

import os
import re

import pytest
from kernel_messages import run_in_kernel

from workbench import progress
from workbench.learners import PPO, PPOConfig
from workbench.models import ActorCritic
from workbench.runs import Run, RunConfig, RunSettings

STEPS = 4 * 16  # env steps per iteration of the tiny run


def tiny_run(tmp_path, name: str, iterations: int = 3) -> Run:
    return Run(
        "CartPole-v1",
        PPO(ActorCritic((4,), 2), PPOConfig(num_epochs=1, num_minibatches=2)),
        settings=RunSettings(num_workers=1, num_envs=4, horizon=16, num_minibatches=2),
        config=RunConfig(total_steps=iterations * STEPS, runs_dir=str(tmp_path), name=name),
    )


@pytest.mark.parametrize(
    ("value", "expected"), [("1", True), ("yes", True), ("0", False), ("off", False)]
)
def test_the_environment_variable_forces_bars_on_or_off(monkeypatch, value, expected):
    monkeypatch.setenv("WORKBENCH_PROGRESS", value)
    assert progress.shown() is expected


def test_bars_are_hidden_outside_a_kernel_even_where_ipykernel_is_imported(monkeypatch):
    import ipykernel  # noqa: F401  (nbval imports it into pytest's process, which runs no kernel)

    monkeypatch.delenv("WORKBENCH_PROGRESS", raising=False)
    assert progress.shown() is False


def test_a_run_bar_follows_its_env_step_limit_to_the_end(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_PROGRESS", "1")
    run = tiny_run(tmp_path, "followed").run()
    err = capsys.readouterr().err
    assert run.env_steps == 3 * STEPS
    assert re.search(rf"followed: 100%.*{3 * STEPS}/{3 * STEPS} \[.*env steps", err), err


def test_a_run_inside_a_study_draws_no_bar_of_its_own(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_PROGRESS", "1")
    for index in progress.each(range(2), "two runs"):
        tiny_run(tmp_path, f"inner-{index}", iterations=1).run()
    err = capsys.readouterr().err
    assert "two runs: 100%" in err and "2/2" in err, err
    assert "inner-" not in err, err


def test_no_bar_and_no_output_when_hidden(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_PROGRESS", "0")
    tiny_run(tmp_path, "quiet", iterations=1).run()
    list(progress.each(range(3), "quiet study"))
    assert "%|" not in capsys.readouterr().err


def test_a_loop_that_raises_closes_its_bar_so_later_runs_draw_theirs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WORKBENCH_PROGRESS", "1")
    with pytest.raises(RuntimeError):
        for _ in progress.each(range(3), "failing study"):
            raise RuntimeError("a setting that cannot work")
    tiny_run(tmp_path, "after", iterations=1).run()
    assert re.search(r"after: 100%", capsys.readouterr().err)


def test_in_a_real_kernel_a_run_bar_is_a_widget_redrawn_about_once_a_second(tmp_path):
    """A notebook run's bar must not flood the kernel's output channel: nbval reads a cell's
    messages only when the cell ends, and a queue that overflows drops the cell's last message."""
    env = {k: v for k, v in os.environ.items() if k != "WORKBENCH_PROGRESS"}
    seconds = 4
    code = f"""
from workbench.learners import PPO, PPOConfig
from workbench.models import ActorCritic
from workbench.runs import Run, RunConfig, RunSettings
run = Run("CartPole-v1", PPO(ActorCritic((4,), 2), PPOConfig(num_epochs=1, num_minibatches=1)),
          settings=RunSettings(num_workers=1, num_envs=2, horizon=4, num_minibatches=1),
          config=RunConfig(runs_dir={str(tmp_path)!r}, name="in-kernel"))
run.run(seconds={seconds})
print("updates", run.updates)
"""
    messages, printed = run_in_kernel(code, str(tmp_path), env=env)
    updates = int(re.search(r"updates (\d+)", printed).group(1))
    widgets = [m for m in messages if m["msg_type"] == "comm_open"]
    redraws = [m for m in messages if m["msg_type"] == "comm_msg"]
    assert widgets, "no widget bar was drawn in the kernel"
    assert updates > 10 * seconds, f"too few rows ({updates}) for the bound to mean anything"
    # About one redraw a second, each a few widget messages, plus opening and closing the bar.
    assert len(redraws) <= 4 * (seconds + 2) + 2 * len(widgets), len(redraws)
