"""Specifications for the faults a run stops at (``workbench.runs.faults``, ``workbench.restarts``):
a NaN loss stops every run kind at the update that produced it, keeps that update's batch beside
the run and leaves the last good checkpoint as it was; an actor that keeps dying is restarted
after a growing wait, then ends the run with an error that names it."""

from __future__ import annotations

import os
import signal
from dataclasses import replace

import pytest
import torch

from workbench.apex import Apex, ApexConfig
from workbench.learners import PPO, DQNConfig, PPOConfig
from workbench.models import ActorCritic
from workbench.restarts import ActorKeepsDying, RestartBudget, RestartSchedule
from workbench.runs import Run, RunConfig, RunSettings
from workbench.runs.checkpoints import load_checkpoint_file
from workbench.runs.faults import NonFiniteLoss, check_finite
from workbench.seed import SEED_RECIPES, Seed

ONE_ACTOR_CARTPOLE = ApexConfig(  # a small Ape-X: one actor, learning after 200 transitions
    env_id="CartPole-v1",
    learner=DQNConfig(batch_size=32),
    model_options=dict(hidden=(32, 32)),
    num_actors=1,
    learning_starts=200,
)


def poison(owner, at_update: int) -> None:
    """Make ``owner.update`` report a NaN policy loss from its ``at_update``-th call on."""
    real, calls = owner.update, []

    def update(batch):
        metrics = real(batch)
        calls.append(1)
        return {**metrics, "losses/poisoned": float("nan")} if len(calls) >= at_update else metrics

    owner.update = update


def test_a_finite_update_passes_and_a_nan_or_infinite_loss_is_named():
    check_finite({"losses/q": 0.5, "charts/learning_rate": float("nan")}, None, "update 1")
    with pytest.raises(NonFiniteLoss, match=r"losses/q=nan, losses/v=inf at update 7"):
        check_finite({"losses/q": float("nan"), "losses/v": float("inf")}, None, "update 7")


def test_a_nan_loss_stops_a_run_at_its_update_and_keeps_the_batch_and_the_last_good_checkpoint(
    tmp_path,
):
    torch.manual_seed(0)
    algo = PPO(ActorCritic((4,), 2), PPOConfig(num_epochs=2, num_minibatches=2))
    poison(algo, at_update=3)
    settings = RunSettings(num_workers=1, num_envs=4, horizon=16, num_minibatches=2)
    config = RunConfig(runs_dir=str(tmp_path), name="nan", checkpoint_every=1, total_steps=10**6)
    run = Run("CartPole-v1", algo, config=config, settings=settings)
    with pytest.raises(NonFiniteLoss, match=r"at update 3 \(iteration 3\).*nonfinite_batch\.pt"):
        run.run()
    assert run.status == "failed" and "last good checkpoint" in str(run.error)
    assert load_checkpoint_file(run.dir)["updates"] == 2  # the last good one, not overwritten
    batch = torch.load(run.dir / "nonfinite_batch.pt", weights_only=False)
    assert batch.num_steps == 64  # the rollout of the failing update


def test_a_nan_loss_stops_a_seed_run_with_its_batch(tmp_path):
    config = replace(SEED_RECIPES["seed-vtrace-cartpole"].config, transport="serial")
    seed = Seed(config, runs_dir=str(tmp_path), log_interval=0.5)
    poison(seed.learning.learner, at_update=2)
    with pytest.raises(NonFiniteLoss, match="at update 2"):
        seed.run(env_steps=5_000)
    batch = torch.load(seed.dir / "nonfinite_batch.pt", weights_only=False)
    assert batch["rewards"].shape[1] == config.learner.batch_size  # [T, B]: the update's unrolls


@pytest.mark.slow
def test_a_nan_loss_stops_an_apex_run_with_its_batch(tmp_path):
    config = ONE_ACTOR_CARTPOLE
    apex = Apex(config, runs_dir=str(tmp_path), log_interval=0.5)
    poison(apex.learner, at_update=5)
    with pytest.raises(NonFiniteLoss, match="at update 5"):
        apex.run(seconds=120)
    assert apex.actor_pids() == {}  # the actors went with the run
    batch = torch.load(apex.dir / "nonfinite_batch.pt", weights_only=False)
    assert len(batch["weights"]) == 32


# --- an actor that keeps dying -----------------------------------------------------------------


def test_a_restart_waits_longer_each_time_and_a_fourth_death_within_the_window_is_an_error():
    now = [0.0]
    budget = RestartBudget(max_restarts=3, window=60.0, backoff=0.5, clock=lambda: now[0])
    waits = []
    for _ in range(3):
        waits.append(budget.delay(7))
        budget.restarted(7)
        now[0] += 1.0
    assert waits == [0.5, 1.0, 2.0]
    with pytest.raises(ActorKeepsDying, match=r"actor 7 died 4 times within 60 s.*not restarted"):
        budget.delay(7, "exit code -9")
    now[0] += 60.0  # the window has passed: the actor may die again
    assert budget.delay(7) == 0.5


def test_a_dead_actor_is_started_again_once_its_wait_has_passed_and_counted():
    now = [0.0]
    schedule = RestartSchedule(
        RestartBudget(backoff=0.5, clock=lambda: now[0]), clock=lambda: now[0]
    )
    assert schedule.died(3, "exit code -9") == 0.5
    assert schedule.died(3) == 0.5  # reported again while it waits: one restart, not two
    started: list[int] = []
    assert schedule.restart_due(started.append, wanted=lambda index: True) == []
    now[0] += 0.5
    assert schedule.restart_due(started.append, wanted=lambda index: True) == [(3, 0.5, None)]
    assert started == [3] and schedule.count == 1 and 3 not in schedule


def test_a_dead_actor_retired_while_it_waits_is_forgotten_not_started():
    now = [0.0]
    schedule = RestartSchedule(
        RestartBudget(backoff=0.5, clock=lambda: now[0]), clock=lambda: now[0]
    )
    schedule.died(1)
    now[0] += 1.0
    started: list[int] = []
    assert schedule.restart_due(started.append, wanted=lambda index: False) == []
    assert started == [] and schedule.count == 0 and 1 not in schedule


@pytest.mark.slow
def test_an_apex_actor_killed_again_and_again_is_restarted_after_a_backoff_then_ends_the_run(
    tmp_path,
):
    config = ONE_ACTOR_CARTPOLE
    apex = Apex(config, runs_dir=str(tmp_path), log_interval=0.3)
    apex.actor_restarts = RestartSchedule(RestartBudget(max_restarts=2, window=60.0, backoff=0.2))
    killed: set[int] = set()

    @apex.on_row
    def kill_each_new_actor(row: dict) -> None:
        for pid in apex.actor_pids().values():
            if pid not in killed:
                killed.add(pid)
                os.kill(pid, signal.SIGKILL)

    with pytest.raises(ActorKeepsDying, match="actor 0 died 3 times within 60 s"):
        apex.run(seconds=120)
    restarts = [row for row in apex.events if row["event"] == "actor_restart"]
    assert [row["after_seconds"] for row in restarts] == [0.2, 0.4]
    assert apex.status == "failed" and apex.actor_pids() == {}
