"""Specifications for ``workbench.lab.run_panel.RunPanel``: controls write the run's settings,
the run applies them at an iteration boundary, and the charts draw what the run recorded.

Tiny CartPole runs (B=4, T=16: 64 env steps per iteration). Widgets are driven from code, as the
browser would drive them: setting a control's ``value`` is what moving it does.
"""

from __future__ import annotations

import time

import pytest
import torch

from workbench.lab.run_panel import RunPanel, learner_choices
from workbench.learners import PPO, PPOConfig, RunLearner
from workbench.models import ActorCritic
from workbench.runs import Run, RunConfig, RunSettings, load_metrics

STEPS = 64


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def make_run(
    tmp_path, *, iterations: int = 3, sampler: str = "serial", learner_factory=None
) -> Run:
    torch.manual_seed(0)
    algo = PPO(ActorCritic((4,), 2), PPOConfig(num_epochs=1, num_minibatches=2), seed=0)
    settings = RunSettings(num_workers=1, num_envs=4, horizon=16, num_minibatches=2)
    return Run(
        "CartPole-v1",
        algo,
        sampler=sampler,
        settings=settings,
        learner_factory=learner_factory,
        config=RunConfig(total_steps=iterations * STEPS, runs_dir=str(tmp_path), name="panel"),
    )


def settings_events(run: Run) -> list[dict]:
    return [row for row in load_metrics(run.metrics_path)[1] if row.get("event") == "settings"]


def test_moving_the_workers_slider_resizes_the_sampler_at_the_next_boundary(tmp_path):
    run = make_run(tmp_path, sampler="batched")
    panel = RunPanel(run)
    panel.workers.value = 2  # before the first iteration: applied at its boundary
    panel.start().wait(timeout=120)
    assert run.status == "finished"
    events = settings_events(run)
    assert [event["new"] for event in events] == [{"num_workers": 2}]
    assert events[0]["old"] == {"num_workers": 1} and events[0]["charts/iteration"] == 0
    assert run.settings.applied.num_workers == 2


def test_the_workers_slider_goes_past_the_runs_starting_count(tmp_path):
    """A 1-worker run can be given more workers: the slider reaches 4 (the envs allow 4), and
    moving it there writes the run's settings."""
    run = make_run(tmp_path, sampler="parallel")
    panel = RunPanel(run)
    assert panel.workers.value == 1 and not panel.workers.disabled
    assert panel.workers.max >= 4
    panel.workers.value = 4
    assert run.settings.current.num_workers == 4
    assert "4 workers" in panel.message.value
    assert panel.workers.value == 4


def test_an_applied_change_is_marked_on_the_charts(tmp_path):
    run = make_run(tmp_path)
    panel = RunPanel(run)
    panel.envs.value = 8  # batch 4x16 -> 8x16, same two minibatches
    panel.start().wait(timeout=120)
    assert [event["new"] for event in panel.events] == [{"num_envs": 8}]  # 2 minibatches of 64
    for figure in (panel.return_figure, panel.speed_figure, panel.stage_figure):
        assert len(figure.layout.shapes) == 1
        assert figure.layout.shapes[0].x0 == 0  # at the env step where the run applied it


def test_fewer_envs_than_workers_is_refused_with_the_reason_and_the_control_moves_back(tmp_path):
    run = make_run(tmp_path, sampler="batched")
    panel = RunPanel(run)
    panel.workers.value = 2
    before = run.settings.current
    panel.envs.value = 1  # two workers cannot share one env
    assert run.settings.current == before
    assert "each worker needs at least one env" in panel.message.value
    assert panel.envs.value == 4


def test_the_charts_draw_every_iteration_the_run_recorded(tmp_path):
    run = make_run(tmp_path, iterations=4)
    panel = RunPanel(run).start()
    panel.wait(timeout=120)
    rows = [row for row in run.metrics if "event" not in row]
    assert len(rows) == 4
    assert list(panel.speed_figure.data[0].x) == [row["charts/env_steps"] for row in rows]
    with_return = [row for row in rows if "charts/episode_return" in row]
    assert list(panel.return_figure.data[0].y) == [
        row["charts/episode_return"] for row in with_return
    ]
    assert list(panel.return_figure.data[1].x) == [
        row["charts/wall_seconds"] for row in with_return
    ]
    assert panel.progress.value == 1.0
    assert "finished" in panel.status.value


def test_the_stop_button_stops_the_run_and_keeps_its_checkpoint(tmp_path):
    run = make_run(tmp_path, iterations=10**6)
    panel = RunPanel(run).start()
    panel.buttons["stop"].click()
    assert panel.wait(timeout=120) == "stopped"
    assert run.checkpoint_path.exists()
    assert "stopped" in panel.status.value
    assert not panel.buttons["start"].disabled and panel.buttons["stop"].disabled


def test_pause_and_resume_buttons(tmp_path):
    run = make_run(tmp_path, iterations=10**6)
    panel = RunPanel(run).start()
    panel.buttons["pause"].click()
    run.pause(wait=True, timeout=60)
    assert run.status == "paused"
    panel.refresh()
    assert panel.buttons["pause"].disabled and not panel.buttons["resume"].disabled
    iteration = run.iteration
    panel.buttons["resume"].click()
    deadline = time.monotonic() + 60
    while run.iteration == iteration and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.iteration > iteration
    assert run.stop(timeout=60) == "stopped"


def test_the_learner_picker_lists_this_machines_devices_and_two_gloo_learners_with_a_factory(
    tmp_path,
):
    plain = learner_choices(make_run(tmp_path / "a"))
    assert plain["cpu"] == ("cpu",) and not any(len(devices) > 1 for devices in plain.values())
    with_ddp = learner_choices(make_run(tmp_path / "b", learner_factory=RunLearner))
    assert with_ddp["2 learners (gloo, cpu)"] == ("cpu:0", "cpu:1")


def test_picking_a_gpu_this_machine_lacks_is_refused_with_the_reason(tmp_path):
    run = make_run(tmp_path)
    panel = RunPanel(run)
    missing = f"cuda:{torch.cuda.device_count()}"  # one past the last GPU (cuda:0 on a CPU machine)
    panel.learner_options[missing] = (missing,)  # as if listed by a stale picker
    panel.learner.options = list(panel.learner_options)
    panel.learner.value = missing
    assert "cuda" in panel.message.value.lower() and panel.learner.value == "cpu"
    assert run.settings.current.learner_devices == ("cpu",)


def unnamed_run(tmp_path, iterations: int = 3) -> Run:
    """A run with a default name (``<date>_<time>_CartPole-v1``), as a notebook makes one."""
    torch.manual_seed(0)
    algo = PPO(ActorCritic((4,), 2), PPOConfig(num_epochs=1, num_minibatches=2), seed=0)
    settings = RunSettings(num_workers=1, num_envs=4, horizon=16, num_minibatches=2)
    config = RunConfig(total_steps=iterations * STEPS, runs_dir=str(tmp_path))
    return Run("CartPole-v1", algo, settings=settings, config=config)


def test_after_a_kernel_restart_the_panel_offers_to_continue_the_newest_run_of_the_same_name(
    tmp_path,
):
    before = unnamed_run(tmp_path).run()  # the run the restarted kernel lost
    time.sleep(1.1)  # a default name has the second it was made in
    again = unnamed_run(tmp_path)  # the cell run again after the restart
    assert again.name != before.name
    panel = RunPanel(again)
    assert panel.earlier == before.dir and "continue" in panel.buttons
    assert before.name in panel.message.value

    panel.press("continue")
    assert panel.run.name == before.name and panel.run.env_steps == 3 * STEPS
    assert "continue" not in panel.buttons
    assert len(panel.return_figure.data[0].x) > 0  # the earlier rows, drawn
    panel.start(env_steps=5 * STEPS).wait(timeout=120)
    steps = [row["charts/env_steps"] for row in load_metrics(before.dir)[1] if "event" not in row]
    assert steps == [STEPS * i for i in range(1, 6)]  # one curve, carried on


def test_a_panel_with_nothing_earlier_to_continue_offers_only_a_new_run(tmp_path):
    panel = RunPanel(unnamed_run(tmp_path))
    assert panel.earlier is None and "continue" not in panel.buttons
