"""RunSettings: widgets write from one thread, the run's loop reads between iterations."""

import threading

import pytest

from workbench.control import RunSettings, Settings


def test_batch_size_is_envs_times_horizon():
    assert Settings(num_envs=8, horizon=128).batch_size == 1024


def test_no_change_means_nothing_to_apply():
    settings = RunSettings()
    assert settings.take_changes(iteration=0) is None


def test_a_change_is_applied_once_and_records_old_and_new_values():
    settings = RunSettings(num_actors=2, num_envs=8)
    settings.update(num_actors=4)
    new, change = settings.take_changes(iteration=7)
    assert new.num_actors == 4 and settings.applied.num_actors == 4
    assert (change.iteration, change.old, change.new) == (7, {"num_actors": 2}, {"num_actors": 4})
    assert settings.take_changes(iteration=8) is None


def test_changes_made_between_iterations_arrive_together():
    settings = RunSettings(num_envs=8, horizon=128, minibatch_size=256)
    settings.update(num_envs=16)
    settings.update(horizon=64)
    _, change = settings.take_changes(iteration=1)
    assert change.new == {"num_envs": 16, "horizon": 64}


def test_an_invalid_update_raises_and_changes_nothing():
    settings = RunSettings(num_envs=8, horizon=128, minibatch_size=256)
    with pytest.raises(ValueError, match="divisor of 1024"):
        settings.update(minibatch_size=300)
    with pytest.raises(ValueError, match="num_actors <= 8"):
        settings.update(num_actors=9)
    with pytest.raises(ValueError, match="Unknown setting"):
        settings.update(actors=3)
    assert settings.current == Settings(num_envs=8, horizon=128, minibatch_size=256)


def test_learner_devices_must_be_distinct():
    with pytest.raises(ValueError, match="cpu:0"):
        RunSettings(learner_devices=("cpu", "cpu"))


def test_updates_from_many_threads_leave_a_consistent_value():
    settings = RunSettings(num_envs=64, num_actors=1, horizon=16, minibatch_size=16)

    def writer(value: int) -> None:
        for _ in range(200):
            settings.update(num_actors=value)

    threads = [threading.Thread(target=writer, args=(v,)) for v in (2, 4, 8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert settings.current.num_actors in (2, 4, 8)
    new, _ = settings.take_changes(iteration=0)
    assert new == settings.applied == settings.current
