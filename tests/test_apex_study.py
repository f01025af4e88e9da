"""Specifications for notebook 06's parts: ``studies.apex_studies`` (Ape-X throughput against
actors), ``studies.curves.wait_for_row`` on an Ape-X run, the ``lab.plots`` figures of Ape-X, and
``lab.system_panels.ApexPanel``.

Tiny CartPole runs on the local transport: one or two actors, a learner that starts after 200
transitions. Widgets are driven from code, as the browser would drive them: setting a control's
``value`` is what moving it does, ``click()`` is a press.
"""

from __future__ import annotations

import time

import pytest
from processes import live_children, wait_gone

from workbench.apex import Apex, actor_epsilons
from workbench.lab import plots
from workbench.lab.system_panels import ApexPanel
from workbench.studies.apex_studies import (
    ApexThroughput,
    apex_cartpole_config,
    apex_throughput,
    return_over_time,
)
from workbench.studies.curves import wait_for_row

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def small_config(**changes):
    return apex_cartpole_config(
        **{"num_actors": 1, "max_actors": 3, "learning_starts": 200, **changes}
    )


def metric_rows(run) -> list[dict]:
    """The run's metric rows (its event rows left out)."""
    return [row for row in run.metrics if "event" not in row]


# --- the config and the figures (no processes) ----------------------------------------------------


def test_apex_cartpole_config_is_the_papers_agent_on_cartpole_and_takes_changes():
    config = apex_cartpole_config(num_actors=3, learning_starts=500)
    assert (
        config.env_id == "CartPole-v1" and config.num_actors == 3 and config.learning_starts == 500
    )
    learner = config.learner  # the paper's learner; its replay is the central one, prioritized
    assert (learner.n_step, learner.double, learner.batch_size) == (3, True, 64)
    assert (config.priority_alpha, config.priority_beta) == (0.6, 0.4)
    assert config.model_options["dueling"] is True
    assert config.explorations(3) == actor_epsilons(3)


def test_apex_throughput_refuses_bad_arguments_before_starting_anything():
    with pytest.raises(ValueError, match="positive ints"):
        apex_throughput((0,), seconds=1.0, config=small_config())
    with pytest.raises(ValueError, match="seconds"):
        apex_throughput((1,), seconds=0.0, config=small_config())


def test_return_over_time_checks_every_count_before_the_first_run(tmp_path):
    # a bad last count fails at once: no minutes of runs before the error
    started = time.perf_counter()
    with pytest.raises(ValueError, match="return_over_time: actor counts must be positive ints"):
        return_over_time((1, 2, 0), seconds=60.0, config=small_config(), runs_dir=str(tmp_path))
    assert time.perf_counter() - started < 5 and not list(tmp_path.iterdir())


def test_replay_ratio_is_samples_per_transition():
    result = ApexThroughput(
        num_actors=2,
        transitions_per_second=100.0,
        env_steps_per_second=100.0,
        updates_per_second=10.0,
        samples_per_second=640.0,
        seconds=3.0,
        warmup_seconds=4.0,
    )
    assert result.replay_ratio == pytest.approx(6.4)


def test_throughput_figure_draws_both_rates_against_actors():
    rows = [
        ApexThroughput(n, 100.0 * n, 100.0 * n, 50.0 / n, 3200.0 / n, 3.0, 4.0) for n in (1, 2, 4)
    ]
    figure = plots.apex_throughput(rows)
    by_name = {trace.name: trace for trace in figure.data}
    assert list(by_name["transitions/s"].y) == [100.0, 200.0, 400.0]
    assert list(by_name["learner updates/s"].y) == [50.0, 25.0, 12.5]
    assert list(by_name["linear in actors"].y) == [100.0, 200.0, 400.0]


def test_actor_bars_are_labelled_by_epsilon_and_colored_from_most_to_least_exploring():
    eps = actor_epsilons(3)
    per_actor = {
        i: {
            "transitions": 10 * (i + 1),
            "exploration": eps[i],
            "mean_return": None if i == 2 else 20.0,
        }
        for i in range(3)
    }
    bars = plots.apex_actor_bars(per_actor)
    assert bars["labels"][0] == "actor 0<br>ε=0.4" and bars["transitions"] == [10, 20, 30]
    assert bars["returns"] == [20.0, 20.0, None]
    assert bars["colors"][0] != bars["colors"][2]
    figure = plots.apex_actors(per_actor)
    assert list(figure.data[0].y) == [10, 20, 30]


# --- runs -----------------------------------------------------------------------------------------


def test_apex_throughput_on_one_actor_gives_positive_rates_and_ends_its_processes():
    before = live_children()
    (result,) = apex_throughput((1,), seconds=2.0, config=small_config(), progress=False)
    assert result.num_actors == 1
    assert result.transitions_per_second > 0 and result.updates_per_second > 0
    # The replay counts a batch when it samples it; the learner keeps up to two batches in flight.
    slack = 2 * 64 / result.seconds + 1e-6
    assert abs(result.samples_per_second - 64 * result.updates_per_second) <= slack
    assert result.seconds >= 2.0 and result.warmup_seconds > 0
    assert list(result.per_actor_transitions) == [0] and result.per_actor_transitions[0] > 0
    left = wait_gone(list(live_children() - before))
    assert left == [], "an actor or the replay process outlived the measurement"


def test_the_panel_slider_sets_the_actors_and_stop_ends_the_run(tmp_path):
    before = live_children()
    apex = Apex(small_config(), runs_dir=tmp_path)
    panel = ApexPanel(apex, limits={"seconds": 120})
    assert panel.actors.max == 3 and panel.actors.value == 1
    assert panel.buttons["stop"].disabled and not panel.buttons["start"].disabled
    panel.start()
    try:
        wait_for_row(apex, lambda row: row["charts/updates"] > 0, timeout=90)
        panel.actors.value = 2  # what a drag of the slider does
        assert apex.settings.current.num_actors == 2
        grown = wait_for_row(
            apex,
            lambda row: (
                "event" not in row
                and row["charts/num_actors"] == 2
                and row["apex/per_actor"].get(1, {}).get("transitions", 0) > 0
            ),
            timeout=90,
        )
        assert grown["apex/per_actor"][1]["exploration"] == pytest.approx(actor_epsilons(2)[1])
        panel.refresh()
        assert not panel.buttons["stop"].disabled
        panel.buttons["stop"].click()  # returns at once; the run ends in its thread
        apex.wait(timeout=60)
    finally:
        apex.stop()
    assert apex.status == "stopped"
    panel._watcher.join(10)
    assert [(e["event"], e["old"], e["new"]) for e in panel.events] == [
        ("settings", {"num_actors": 1}, {"num_actors": 2})
    ]
    for figure in (panel.return_figure, panel.rate_figure):
        assert len(figure.layout.shapes) == 1  # the change, as a dashed line
    rows = metric_rows(apex)
    assert len(panel.rate_figure.data[0].x) == len(rows)
    transitions = [rows[-1]["apex/per_actor"][i]["transitions"] for i in (0, 1)]
    assert list(panel.actor_figure.data[0].y) == transitions
    assert "stopped" in panel.status.value and not panel.buttons["start"].disabled
    left = wait_gone(list(live_children() - before))
    assert left == [], "an actor or the replay process outlived the run"


def test_the_panels_actors_slider_reaches_max_actors_and_asks_the_run_for_more(tmp_path):
    """A run may grow to ``config.max_actors`` actors (16 by default), more than it starts with;
    the slider reaches it, and moving it past the start count asks the run for more actors."""
    config = apex_cartpole_config(num_actors=2, learning_starts=200)
    apex = Apex(config, runs_dir=tmp_path)
    assert config.max_actors == 16
    panel = ApexPanel(apex, limits={"seconds": 120})
    assert panel.actors.max == config.max_actors > panel.actors.value == 2
    assert not panel.actors.disabled
    panel.actors.value = 5
    assert apex.settings.current.num_actors == 5  # applied by the loop at its next step
    assert "asked for 5 actors" in panel.message.value
    panel.actors.value = config.max_actors
    assert apex.settings.current.num_actors == config.max_actors
    assert apex.status == "created" and apex.actor_pids() == {}


def test_the_panel_refuses_more_actors_than_the_run_allows_and_moves_the_slider_back(tmp_path):
    apex = Apex(small_config(), runs_dir=tmp_path)
    panel = ApexPanel(apex, limits={"seconds": 1})
    panel.actors.max = 5  # a slider moved past the run's max_actors (3)
    panel.actors.value = 5
    assert "max_actors" in panel.message.value
    assert panel.actors.value == 1 and apex.settings.current.num_actors == 1


def test_wait_for_row_says_when_the_apex_run_ended_first(tmp_path):
    apex = Apex(small_config(), runs_dir=tmp_path)
    apex.start(seconds=1.0)
    with pytest.raises(RuntimeError, match="ended"):
        wait_for_row(apex, lambda row: False, timeout=90)
    apex.stop()


# --- return against wall time at each actor count (Ape-X's Fig. 5 question) -----------------------


def test_return_over_time_runs_each_count_for_its_time_and_keeps_its_replay_ratio(tmp_path):
    # The study's clock is wall time from the run's start, actor start-up included (Ape-X's Fig. 5
    # is drawn against wall time); 15 s leave a busy machine time to start an actor process and
    # learn (6 s did not, once in a loop under load: the actor had sent nothing).
    (one,) = return_over_time(
        (1,), 15.0, target=-1.0, config=small_config(), runs_dir=str(tmp_path)
    )
    assert one.num_actors == 1 and one.transitions > 0 and one.samples_trained > 0
    assert one.replay_ratio == pytest.approx(one.samples_trained / one.transitions)
    assert one.seconds == sorted(one.seconds) and 3.0 < one.seconds[-1] < 40.0
    assert one.seconds_to_target == one.seconds[0]  # every return is >= -1
    assert wait_gone(list(live_children())) == [], "an actor or the replay process outlived the run"


def test_return_over_time_refuses_a_count_that_is_not_a_positive_int():

    with pytest.raises(ValueError, match="positive ints"):
        return_over_time((0,), 5.0, config=small_config())
