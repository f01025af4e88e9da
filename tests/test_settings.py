"""RunSettings: widgets write from one thread, the run's loop reads between iterations. Limits:
when a run's loop ends by itself (``workbench.runs.Limits``; each limit ending a run:
tests/test_runs.py)."""

import threading

import pytest

from workbench.runs import Limits, RunSettings, Settings
from workbench.runs.settings import ActorSettings, actor_settings


def test_batch_size_is_envs_times_horizon():
    assert Settings(num_envs=8, horizon=128).batch_size == 1024


def test_no_change_means_nothing_to_apply():
    settings = RunSettings()
    assert settings.take_changes(iteration=0) is None


def test_a_change_is_applied_once_and_records_old_and_new_values():
    settings = RunSettings(num_workers=2, num_envs=8)
    settings.update(num_workers=4)
    new, change = settings.take_changes(iteration=7)
    assert new.num_workers == 4 and settings.applied.num_workers == 4
    assert (change.iteration, change.old, change.new) == (7, {"num_workers": 2}, {"num_workers": 4})
    assert settings.take_changes(iteration=8) is None


def test_changes_made_between_iterations_arrive_together():
    settings = RunSettings(num_envs=8, horizon=128, num_minibatches=4)
    settings.update(num_envs=16)
    settings.update(horizon=64)
    _, change = settings.take_changes(iteration=1)
    assert change.new == {"num_envs": 16, "horizon": 64}


def test_an_invalid_update_raises_and_changes_nothing():
    settings = RunSettings(num_envs=8, horizon=128, num_minibatches=4)
    with pytest.raises(ValueError, match="divisor of 1024"):
        settings.update(num_minibatches=3)
    with pytest.raises(ValueError, match="num_workers <= 8"):
        settings.update(num_workers=9)
    with pytest.raises(ValueError, match="Unknown setting"):
        settings.update(actors=3)
    assert settings.current == Settings(num_envs=8, horizon=128, num_minibatches=4)


def test_a_setting_named_otherwise_before_is_refused_with_its_name_now():
    with pytest.raises(ValueError, match="num_actors is num_workers now"):
        RunSettings(num_actors=2)
    with pytest.raises(ValueError, match="num_actors is num_workers now"):
        RunSettings().update(num_actors=2)


def test_settings_saved_under_earlier_names_are_read_as_today_s():
    """A checkpoint from before the workers' rename and the minibatch count."""
    saved = {"num_actors": 2, "num_envs": 8, "horizon": 16, "minibatch_size": 32}
    saved["learner_devices"] = ["cpu"]
    settings = Settings.from_saved(saved)
    assert settings == Settings(num_workers=2, num_envs=8, horizon=16, num_minibatches=4)


def test_the_minibatch_size_follows_from_the_batch_and_the_minibatch_count():
    settings = Settings(num_envs=8, horizon=128, num_minibatches=4)
    assert settings.minibatch_size == 256
    assert Settings(num_envs=8, horizon=128).minibatch_size is None  # left to the learner


def test_settling_what_was_left_open_records_no_change():
    settings = RunSettings(num_envs=8, horizon=16)
    settings.settle(num_minibatches=4)
    assert settings.applied.num_minibatches == settings.current.num_minibatches == 4
    assert settings.take_changes(iteration=1) is None
    with pytest.raises(ValueError, match="divisor of 128"):
        settings.settle(num_minibatches=3)


def test_a_run_of_actors_has_one_live_knob_bounded_by_its_max_actors():
    settings = actor_settings(num_actors=2, max_actors=4)
    assert settings.current == ActorSettings(num_actors=2, max_actors=4)
    settings.update(num_actors=4)
    with pytest.raises(ValueError, match=r"\[1, max_actors=4\], got 5"):
        settings.update(num_actors=5)
    with pytest.raises(ValueError, match="cannot change while a run lives"):
        settings.update(max_actors=8)
    with pytest.raises(ValueError, match="Unknown setting"):
        settings.update(num_envs=8)  # an actor's envs are its config's
    assert settings.current.num_actors == 4


def test_a_live_change_gives_a_minibatch_count_not_none():
    settings = RunSettings(num_envs=8, horizon=16, num_minibatches=2)
    with pytest.raises(ValueError, match="give a count"):
        settings.update(num_minibatches=None)
    assert settings.current.num_minibatches == 2


def test_a_refused_change_goes_back_to_what_the_run_runs_with():
    settings = actor_settings(num_actors=2, max_actors=4)
    settings.update(num_actors=3)

    def refuse(new, old):
        raise RuntimeError("no actor can start")

    kind, details = settings.apply_changes(5, refuse)
    assert kind == "settings_refused" and "no actor can start" in details["error"]
    assert settings.current.num_actors == settings.applied.num_actors == 2
    assert settings.take_changes(iteration=6) is None


def test_learner_devices_must_be_distinct():
    with pytest.raises(ValueError, match="cpu:0"):
        RunSettings(learner_devices=("cpu", "cpu"))


def test_updates_from_many_threads_leave_a_consistent_value():
    settings = RunSettings(num_envs=64, num_workers=1, horizon=16, num_minibatches=64)

    def writer(value: int) -> None:
        for _ in range(200):
            settings.update(num_workers=value)

    threads = [threading.Thread(target=writer, args=(v,)) for v in (2, 4, 8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert settings.current.num_workers in (2, 4, 8)
    new, _ = settings.take_changes(iteration=0)
    assert new == settings.applied == settings.current


# --- Limits ---------------------------------------------------------------------------------------

LIMIT_NAMES = ["env_steps", "seconds", "target_return", "updates"]


def test_no_limit_by_default():
    limits = Limits()
    assert not limits.any()
    assert limits.reached(env_steps=10**9, updates=10**9, seconds=1e9) is None


def test_replace_sets_limits_and_keeps_the_others():
    limits = Limits(env_steps=100).replace(updates=5, target_return=-20.0)
    assert limits == Limits(env_steps=100, updates=5, target_return=-20.0) and limits.any()
    assert limits.replace(env_steps=None) == Limits(updates=5, target_return=-20.0)


def test_unknown_limits_raise_value_error_naming_the_valid_ones():
    with pytest.raises(ValueError, match="steps") as raised:
        Limits().replace(steps=10, updates=2)
    assert all(name in str(raised.value) for name in LIMIT_NAMES)


@pytest.mark.parametrize(
    "name, value", [("env_steps", -1), ("seconds", -0.5), ("updates", "10"), ("seconds", True)]
)
def test_a_limit_must_be_a_non_negative_number(name, value):
    with pytest.raises(ValueError, match=name):
        Limits().replace(**{name: value})


@pytest.mark.parametrize(
    "counters, reached",
    [
        ((99, 4, 9.9), None),
        ((100, 4, 9.9), "env_steps"),
        ((99, 5, 9.9), "updates"),
        ((99, 4, 10.0), "seconds"),
        ((100, 5, 10.0), "env_steps"),  # several: the first of env_steps, updates, seconds
    ],
)
def test_reached_names_the_counting_limit_that_was_reached(counters, reached):
    limits = Limits(env_steps=100, updates=5, seconds=10.0, target_return=0.0)
    env_steps, updates, seconds = counters
    assert limits.reached(env_steps, updates, seconds) == reached
