"""Specifications for ``workbench.runs.Run``: the loop that owns metrics, checkpoints, settings.

Tiny CartPole runs (T=16, B=4: 64 env steps per iteration, well under a second for a few
iterations), mostly with the serial sampler; one with a BatchedSampler's two worker processes,
whose end is checked with psutil. One learning check: PPO through Run solves CartPole as
its recipe says (``workbench.runs.recipes``).

Also the shared parts of every run kind seen through ``Run``: the four limits
(``workbench.runs.Limits``) and the shared row schema; and a sampler worker that dies mid-run.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import psutil
import pytest
import torch

from workbench import sampling
from workbench.learners import PPO, PPOConfig, move_optimizer_state
from workbench.models import ActorCritic
from workbench.runs import Limits, Run, RunConfig, RunSettings, load_metrics
from workbench.runs.recipes import RECIPES

CARTPOLE = "CartPole-v1"
STEPS = 64  # T * B of small_settings()
ROW_KEYS = {
    "charts/env_steps",
    "charts/iteration",
    "charts/wall_seconds",
    "charts/steps_per_second",
    "charts/episodes",
    "charts/policy_lag",
    "time/env",
    "time/inference",
    "time/wait",
    "time/learn",
    "time/iteration",
    "losses/policy",  # the algorithm's own metrics come along
    "charts/learning_rate",
}
SHARED_KEYS = {  # every metric row of every run kind (runs.lifecycle)
    "charts/iteration",
    "charts/env_steps",
    "charts/updates",
    "charts/wall_seconds",
    "charts/steps_per_second",
    "charts/updates_per_second",
    "charts/episodes",
    "charts/total_episodes",
    "charts/mean_return",
}
RETURN_WINDOW = 20  # episodes in charts/mean_return


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def make_algo(seed: int = 0, **config) -> PPO:
    torch.manual_seed(seed)
    return PPO(
        ActorCritic((4,), 2), PPOConfig(num_epochs=2, num_minibatches=2, **config), seed=seed
    )


def small_settings(**values) -> RunSettings:
    """B=4 envs x T=16 steps, 2 minibatches of 32."""
    return RunSettings(
        **{"num_workers": 1, "num_envs": 4, "horizon": 16, "num_minibatches": 2, **values}
    )


def make_run(
    tmp_path,
    *,
    iterations: int = 4,
    algo=None,
    settings=None,
    sampler="serial",
    sampler_options=None,
    **config,
) -> Run:
    config = RunConfig(
        total_steps=iterations * STEPS, runs_dir=str(tmp_path), name="test", **config
    )
    return Run(
        CARTPOLE,
        algo or make_algo(),
        sampler=sampler,
        settings=settings or small_settings(),
        config=config,
        sampler_options=sampler_options,
    )


def wait_until(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def iteration_rows(run: Run) -> list[dict]:
    return [row for row in run.metrics if "event" not in row]


def events(run: Run) -> list[dict]:
    return [row for row in run.metrics if "event" in row]


def on_iteration(run: Run):
    """Register the decorated ``fn(row)`` for the run's metric rows (``run.on_row`` also hands
    over event rows, which carry ``charts/iteration`` too)."""

    def register(fn):
        run.on_row(lambda row: None if "event" in row else fn(row))
        return fn

    return register


def parameters(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def collector_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "run-collector"]


# --- metrics file -------------------------------------------------------------------------------


def test_a_sync_run_writes_a_header_then_one_row_per_iteration(tmp_path):
    run = make_run(tmp_path, iterations=5).run()
    assert run.status == "finished" and run.iteration == 5 and run.env_steps == 5 * STEPS

    headers, rows = load_metrics(run.dir)
    assert len(headers) == 1 and len(rows) == 5
    first_line = run.metrics_path.read_text().splitlines()[0]
    assert '"type": "header"' in first_line
    header = headers[0]
    assert header["env_id"] == CARTPOLE and header["algo"] == "workbench.learners.ppo.PPO"
    assert header["algo_config"]["num_epochs"] == 2
    assert header["config"]["total_steps"] == 5 * STEPS and header["config"]["name"] == "test"
    assert header["settings"]["num_envs"] == 4
    assert header["git_commit"] and header["date"] and header["machine"]["cores"] >= 1

    for i, row in enumerate(rows, start=1):
        assert set(row) >= ROW_KEYS, ROW_KEYS - set(row)
        assert row["charts/iteration"] == i and row["charts/env_steps"] == i * STEPS
        assert row["charts/policy_lag"] == 0
        if row["charts/episodes"]:
            assert row["charts/episode_return"] > 0
        else:
            assert "charts/episode_return" not in row
    assert any("charts/episode_return" in row for row in rows)
    assert [r["charts/env_steps"] for r in iteration_rows(run)] == [
        r["charts/env_steps"] for r in rows
    ]
    assert run.checkpoint_path.is_file()  # written when the run finished

    with pytest.raises(FileExistsError, match="from_checkpoint"):
        make_run(tmp_path).run()  # the same name again: never mixed into that run's file


def test_callback_errors_are_reported_and_not_fatal(tmp_path):
    seen = []
    run = make_run(tmp_path, iterations=3)
    run.on_row(seen.append)

    @run.on_row
    def broken(row):
        raise KeyError("widget bug")

    run.run()
    assert run.status == "finished" and len(seen) == 3
    assert len(run.callback_errors) == 3 and "widget bug" in run.callback_errors[0]


def test_a_learner_without_to_is_refused_naming_what_it_lacks(tmp_path):
    class NoTo:
        def __init__(self) -> None:
            self.inner = make_algo()
            self.model = self.inner.model
            self.update, self.state_dict = self.inner.update, self.inner.state_dict
            self.load_state_dict = self.inner.load_state_dict
            self.device, self.reduction = self.inner.device, self.inner.reduction
            self.batch_axis = self.inner.batch_axis

    with pytest.raises(TypeError, match=r"lacks \['to'\].*to\(device\)"):
        make_run(tmp_path, algo=NoTo())


# --- the shared row schema and the four limits ----------------------------------------------------


def test_every_metric_row_carries_the_shared_keys(tmp_path):
    run = make_run(tmp_path, iterations=12).run()
    _, rows = load_metrics(run.dir)
    assert len(rows) == 12
    shared = [{key: row[key] for key in SHARED_KEYS} for row in iteration_rows(run)]
    assert [{key: row[key] for key in SHARED_KEYS} for row in rows] == shared  # file = memory
    total = 0
    for i, row in enumerate(rows, start=1):
        assert set(row) >= SHARED_KEYS, SHARED_KEYS - set(row)
        assert row["charts/iteration"] == i == row["charts/updates"]
        assert row["charts/env_steps"] == i * STEPS
        assert row["charts/steps_per_second"] > 0 and row["charts/updates_per_second"] > 0
        total += row["charts/episodes"]
        assert row["charts/total_episodes"] == total
        if total < RETURN_WINDOW:
            assert row["charts/mean_return"] is None
        else:
            assert row["charts/mean_return"] > 0
    assert total >= RETURN_WINDOW, "the test needs 20 episodes to end (CartPole, random policy)"
    walls = [row["charts/wall_seconds"] for row in rows]
    assert walls == sorted(walls) and walls[0] > 0


@pytest.mark.parametrize(
    "limit, value, ended_by",
    [
        ("env_steps", 3 * STEPS, "env_steps"),
        ("updates", 3, "updates"),
        ("seconds", 1.0, "seconds"),
        ("target_return", 0.0, "target"),
    ],
)
def test_each_limit_ends_the_run_and_names_itself(tmp_path, limit, value, ended_by):
    run = make_run(tmp_path, iterations=200)  # its env_steps limit (total_steps) is far away
    run.run(**{limit: value})
    assert run.status == "finished" and run.ended_by == ended_by
    rows = iteration_rows(run)
    if limit == "env_steps":
        assert run.env_steps == value and len(rows) == 3
    elif limit == "updates":
        assert run.updates == value and len(rows) == 3
    elif limit == "seconds":
        assert run.wall_seconds >= value
        assert all(row["charts/wall_seconds"] < value for row in rows[:-1])
    else:  # the first row whose target metric (the mean of the last 20 returns) reaches it
        assert run.target_metric == "charts/mean_return"
        assert rows[-1]["charts/mean_return"] >= value
        assert all(row["charts/mean_return"] is None for row in rows[:-1])
    assert run.env_steps < 200 * STEPS


def test_unknown_limits_raise_naming_the_valid_ones(tmp_path):
    run = make_run(tmp_path)
    for start in (run.run, run.start):
        with pytest.raises(ValueError, match="steps") as raised:
            start(steps=3 * STEPS)
        for name in ("env_steps", "updates", "seconds", "target_return"):
            assert name in str(raised.value)
    assert run.status == "created" and not run.metrics_path.exists()
    assert run.limits == Limits(env_steps=4 * STEPS)


# --- life cycle: stop, pause, failure, interrupt ------------------------------------------------


def test_stop_from_another_thread_ends_cleanly_and_the_workers_are_gone(tmp_path):
    run = make_run(
        tmp_path,
        iterations=100_000,
        sampler="batched",
        settings=small_settings(num_workers=2),
        sampler_options={"device": "cpu"},
    )
    run.start()
    assert run.status == "running"
    wait_until(lambda: run.iteration >= 2)
    pids = run.sampler.worker_pids
    assert len(pids) == 2 and alive(pids) == pids

    stopper = threading.Thread(target=run.stop)
    stopper.start()
    stopper.join(60)
    assert run.wait(timeout=60) == "stopped" and run.error is None
    checkpoint = torch.load(run.checkpoint_path, weights_only=True)
    assert checkpoint["iteration"] == run.iteration and checkpoint["env_steps"] == run.env_steps
    assert len(iteration_rows(run)) == run.iteration
    wait_until(lambda: alive(pids) == [], timeout=10)


def test_pause_stops_progress_and_resume_restarts_it(tmp_path):
    run = make_run(tmp_path, iterations=100_000).start()
    try:
        wait_until(lambda: run.iteration >= 1)
        assert run.pause() == "paused"
        paused_at = run.iteration
        time.sleep(0.5)
        assert run.iteration == paused_at and run.status == "paused"
        run.resume()
        wait_until(lambda: run.iteration >= paused_at + 2)
        assert run.status == "running"
    finally:
        assert run.stop() == "stopped"


@pytest.fixture
def closed_samplers(monkeypatch) -> list:
    """Samplers the run made, appended when the run closes them."""
    closed = []
    make_sampler = sampling.make_sampler

    def spy(*args, **kwargs):
        sampler = make_sampler(*args, **kwargs)
        close = sampler.close
        sampler.close = lambda: (closed.append(sampler), close())
        return sampler

    monkeypatch.setattr(sampling, "make_sampler", spy)
    return closed


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failing_update_fails_the_run_keeps_the_error_and_closes_the_sampler(
    tmp_path, closed_samplers, mode
):
    class Exploding:
        def __init__(self) -> None:
            self.inner = make_algo()
            self.model = self.inner.model
            self.device, self.reduction = self.inner.device, self.inner.reduction
            self.batch_axis = self.inner.batch_axis

        def update(self, rollout):
            if self.inner.num_updates == 2:
                raise RuntimeError("boom in update")
            return self.inner.update(rollout)

        def state_dict(self):
            return self.inner.state_dict()

        def load_state_dict(self, state):
            self.inner.load_state_dict(state)

        def to(self, device):
            self.inner.to(device)

    run = make_run(tmp_path, iterations=10, algo=Exploding(), mode=mode).start()
    with pytest.raises(RuntimeError, match="boom in update"):
        run.wait(timeout=60)
    assert run.status == "failed" and isinstance(run.error, RuntimeError)
    assert "boom in update" in run.error_traceback and "in update" in run.error_traceback
    assert run.iteration == 2 and len(iteration_rows(run)) == 2
    assert closed_samplers == [run.sampler] and collector_threads() == []
    assert not run.checkpoint_path.exists()  # a failed update's state is not saved over a good one


def test_a_failing_collector_thread_fails_an_async_run(tmp_path, closed_samplers):
    run = make_run(tmp_path, iterations=10, mode="async")

    @on_iteration(run)
    def break_the_sampler(row):  # the collector's next collect raises, in the collector thread
        if row.get("charts/iteration") == 2:
            run.sampler.collect = lambda policy: 1 / 0

    with pytest.raises(ZeroDivisionError):
        run.run()
    assert run.status == "failed" and "ZeroDivisionError" in run.error_traceback
    assert closed_samplers == [run.sampler] and collector_threads() == []
    assert run.iteration in (2, 3)  # the batch already collected may still be learned from


def test_wait_turns_a_keyboard_interrupt_into_a_clean_stop(tmp_path):
    run = make_run(tmp_path, iterations=100_000)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupt_when_running():
        wait_until(lambda: run.iteration >= 2)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    try:
        run.start()
        threading.Thread(target=interrupt_when_running, daemon=True).start()
        status = run.wait(timeout=60)  # the cell: returns normally
    except KeyboardInterrupt:
        pytest.fail("wait() let the KeyboardInterrupt through")
    finally:
        signal.signal(signal.SIGINT, previous)
        run.stop()
    assert status == "stopped" and run.error is None
    assert run.checkpoint_path.is_file() and len(iteration_rows(run)) == run.iteration >= 2


def test_run_in_the_main_thread_stops_cleanly_on_ctrl_c(tmp_path):
    run = make_run(tmp_path, iterations=100_000)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(
        target=lambda: (
            wait_until(lambda: run.iteration >= 2),
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT),
        ),
        daemon=True,
    ).start()
    try:
        run.run()
    except KeyboardInterrupt:
        pytest.fail("run() let the first KeyboardInterrupt through")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert run.status == "stopped" and run.checkpoint_path.is_file()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler restored


EXIT_SCRIPT = """
import sys, time
from workbench.learners import PPO
from workbench.models import ActorCritic
from workbench.runs import Run, RunConfig, RunSettings

config = RunConfig(total_steps=10**9, runs_dir=sys.argv[1], name="exit")
settings = RunSettings(num_workers=1, num_envs=4, horizon=16, num_minibatches=4)
run = Run("CartPole-v1", PPO(ActorCritic((4,), 2)), config=config, settings=settings)
run.start()
while run.iteration < 3:
    time.sleep(0.01)
print("leaving with the run going", flush=True)
"""


def test_interpreter_exit_stops_a_live_run_and_keeps_its_checkpoint(tmp_path):
    """A kernel restart ends the interpreter: the atexit hook stops the run (daemon thread)
    cleanly."""
    done = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "leaving" in done.stdout, done.stderr
    checkpoint = torch.load(tmp_path / "exit" / "checkpoint.pt", weights_only=True)
    _, rows = load_metrics(tmp_path / "exit")
    assert checkpoint["iteration"] == len(rows) >= 3


# --- a sampler worker that dies -----------------------------------------------------------------


@pytest.mark.parametrize("sampler", ["batched", "parallel"])
def test_a_killed_sampler_worker_is_restarted_and_the_run_records_it(tmp_path, sampler):
    """As an Ape-X or SEED actor is: the run goes on, with a ``worker_restart`` event row."""
    run = make_run(
        tmp_path,
        iterations=5,
        sampler=sampler,
        settings=small_settings(num_workers=2),
        sampler_options={"device": "cpu"} if sampler == "batched" else None,
    )
    killed = []

    @on_iteration(run)
    def kill_a_worker(row):  # from the loop's thread, between collects
        if row["charts/iteration"] == 2:
            killed.append(run.sampler.worker_pids[1])
            os.kill(killed[0], signal.SIGKILL)
            wait_until(lambda: alive(killed) == [], timeout=10)

    run.run()
    assert run.status == "finished" and run.error is None
    assert run.iteration == 5 and run.env_steps == 5 * STEPS
    (event,) = run.events
    assert event["event"] == "worker_restart" and event["worker"] == 1
    assert event["old_pid"] == killed[0] and event["pid"] == run.sampler.worker_pids[1]
    assert event["pid"] != killed[0]
    assert event["charts/iteration"] == 2 and event["charts/env_steps"] == 2 * STEPS
    assert run.metrics.index(event) == 2  # between iteration rows 2 and 3
    _, rows = load_metrics(run.dir)
    assert [row for row in rows if "event" in row] == [event]
    assert len(rows) == 6


# --- live settings ------------------------------------------------------------------------------


def test_a_run_left_to_its_learner_takes_the_learners_minibatch_count(tmp_path):
    run = make_run(tmp_path, settings=RunSettings(num_workers=1, num_envs=4, horizon=16))
    assert run.settings.applied.num_minibatches == 2  # make_algo's PPOConfig(num_minibatches=2)
    assert run.settings.applied.minibatch_size == 32


def test_the_runs_minibatch_count_is_the_one_its_learner_uses(tmp_path):
    run = make_run(tmp_path, settings=small_settings(num_minibatches=4))
    assert run.algo.config.num_minibatches == 4


def test_a_learner_count_that_does_not_divide_the_batch_is_refused_naming_the_fix(tmp_path):
    with pytest.raises(ValueError, match=r"divisor of 45.*RunSettings\(num_minibatches=\.\.\.\)"):
        make_run(tmp_path, settings=RunSettings(num_workers=1, num_envs=3, horizon=15))


def test_a_settings_change_applies_at_the_next_iteration_and_is_recorded(tmp_path):
    run = make_run(tmp_path, iterations=100_000)

    @on_iteration(run)
    def change(row):
        if row.get("charts/iteration") == 2:  # from the loop thread, as a widget would, mid-run
            run.update_settings(num_envs=8, num_minibatches=1)
        if row.get("charts/iteration") == 4:
            run.stop(wait=False)

    run.run()
    rows = iteration_rows(run)
    assert [r["charts/num_envs"] for r in rows] == [4, 4, 8, 8]
    assert [r["charts/env_steps"] for r in rows] == [64, 128, 256, 384]
    (event,) = events(run)
    assert event["charts/wall_seconds"] > 0
    assert {key: value for key, value in event.items() if key != "charts/wall_seconds"} == {
        "event": "settings",
        "charts/iteration": 2,
        "charts/env_steps": 128,
        "charts/updates": 2,
        "old": {"num_envs": 4, "num_minibatches": 2},
        "new": {"num_envs": 8, "num_minibatches": 1},
    }
    assert run.metrics.index(event) == 2  # between iteration rows 2 and 3
    assert run.algo.config.num_minibatches == 1  # one minibatch of 8 * 16
    assert run.algo.num_gradient_steps == 2 * (2 * 2) + 2 * (2 * 1)  # epochs x minibatches
    assert run.sampler.num_envs == 8


def test_an_invalid_settings_update_raises_and_the_run_goes_on_unchanged(tmp_path):
    run = make_run(tmp_path, iterations=4)
    raised = []

    @on_iteration(run)
    def bad_updates(row):
        if row.get("charts/iteration") == 1:
            for values in (
                {"num_envs": 0},
                {"num_minibatches": 3},
                {"num_workers": 5},
                {"actors": 2},
            ):
                try:
                    run.update_settings(**values)
                except ValueError as error:
                    raised.append(str(error))

    run.run()
    assert len(raised) == 4
    assert run.status == "finished" and events(run) == []
    assert [r["charts/num_envs"] for r in iteration_rows(run)] == [4] * 4
    assert run.settings.current == small_settings().current
    assert run.algo.config.num_minibatches == 2


@pytest.mark.usefixtures("no_gpu")
def test_learner_devices_that_cannot_work_are_refused(tmp_path):
    run = make_run(tmp_path, iterations=3)
    with pytest.raises(ValueError, match="GPU"):
        run.update_settings(learner_devices=["cuda"])
    with pytest.raises(NotImplementedError, match="workbench.learners"):
        run.update_settings(learner_devices=["cpu:0", "cpu:1"])
    with pytest.raises(ValueError, match="GPU"):
        Run(
            CARTPOLE,
            make_algo(),
            settings=small_settings(learner_devices=("cuda",)),
            config=RunConfig(runs_dir=str(tmp_path)),
        )

    @on_iteration(run)
    def bypass(row):  # a write straight to RunSettings skips Run's checks: the loop refuses it
        if row.get("charts/iteration") == 1:
            run.settings.update(learner_devices=("cuda",))

    run.run()
    assert run.status == "finished" and run.iteration == 3
    (event,) = events(run)
    assert (
        event["event"] == "settings_refused"
        and event["charts/iteration"] == 1
        and "GPU" in event["error"]
    )
    assert run.settings.current.learner_devices == ("cpu",) == run.settings.applied.learner_devices
    assert next(run.algo.model.parameters()).device.type == "cpu"


def test_several_learner_devices_go_to_the_learner_factory(tmp_path):
    made = []

    class FakeDataParallel:  # stands in for workbench.learners' RunLearner
        def __init__(self, algo, devices):
            self.algo, self.devices, self.updates, self.closed = algo, devices, 0, False
            made.append(self)

        def update(self, rollout):
            self.updates += 1
            return self.algo.update(rollout)

        def close(self):
            self.closed = True

    def make(name: str) -> Run:
        settings = small_settings(learner_devices=("cpu:0", "cpu:1"))
        return Run(
            CARTPOLE,
            make_algo(),
            settings=settings,
            learner_factory=FakeDataParallel,
            config=RunConfig(total_steps=4 * STEPS, runs_dir=str(tmp_path), name=name),
        )

    make("two").run()
    assert made[0].devices == ("cpu:0", "cpu:1") and made[0].updates == 4
    assert made[0].closed  # with the loop: no learner process outlives the run

    run = make("back-to-one")

    @on_iteration(run)
    def back_to_one(row):
        if row.get("charts/iteration") == 2:
            run.update_settings(learner_devices=["cpu"])

    run.run()
    assert made[1].updates == 2 and made[1].closed
    assert run.learner is run.algo and run.algo.num_updates == 4


def test_move_optimizer_state_moves_moments_and_keeps_step_where_torch_does():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    model.to("meta")
    move_optimizer_state(optimizer, "meta")
    for state in optimizer.state.values():
        assert state["exp_avg"].device.type == "meta" and state["exp_avg_sq"].device.type == "meta"
        assert state["step"].device.type == "cpu"  # not capturable: torch keeps step on the CPU


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_moving_the_learner_to_cuda_mid_run_moves_model_and_optimizer_state(tmp_path):
    run = make_run(tmp_path, iterations=4)

    @on_iteration(run)
    def to_gpu(row):
        if row.get("charts/iteration") == 2:
            run.update_settings(learner_devices=["cuda"])

    run.run()
    assert run.status == "finished" and events(run)[0]["new"] == {"learner_devices": ("cuda",)}
    assert next(run.algo.model.parameters()).device.type == "cuda"
    for state in run.algo.optimizer.state.values():
        assert state["exp_avg"].device.type == "cuda"


# --- checkpoints --------------------------------------------------------------------------------


def test_resume_from_a_checkpoint_restores_parameters_and_continues_env_steps(tmp_path):
    first = make_run(tmp_path, iterations=3).run()
    saved = parameters(first.algo.model)
    saved_optimizer = first.algo.optimizer.state_dict()["state"]

    resumed = Run.from_checkpoint(first.dir, make_algo(seed=1))  # other initial weights
    assert resumed.iteration == 3 and resumed.env_steps == 3 * STEPS
    assert all(torch.equal(a, b) for a, b in zip(saved, parameters(resumed.algo.model)))
    restored_optimizer = resumed.algo.optimizer.state_dict()["state"]
    assert all(
        torch.equal(saved_optimizer[k]["exp_avg"], restored_optimizer[k]["exp_avg"])
        for k in saved_optimizer
    )
    assert len(resumed.metrics) == 3  # the earlier rows, for plots

    resumed.run(env_steps=5 * STEPS)
    assert resumed.status == "finished" and resumed.env_steps == 5 * STEPS
    headers, rows = load_metrics(first.dir)  # the same file, appended
    assert len(headers) == 2 and headers[1]["resumed_from"] == str(first.dir)
    assert headers[1]["iteration"] == 3 and headers[1]["env_steps"] == 3 * STEPS
    assert [r["charts/env_steps"] for r in rows] == [64, 128, 192, 256, 320]
    assert rows[3]["charts/wall_seconds"] >= rows[2]["charts/wall_seconds"]


# --- async --------------------------------------------------------------------------------------


def test_async_mode_collects_one_update_behind_and_stops_cleanly(tmp_path):
    run = make_run(tmp_path, iterations=100_000, mode="async").start()
    wait_until(lambda: run.iteration >= 6)
    assert len(collector_threads()) == 1
    assert run.stop() == "stopped" and run.error is None
    lags = [r["charts/policy_lag"] for r in iteration_rows(run)]
    assert lags[0] == 0 and set(lags[1:]) == {1}, lags
    assert collector_threads() == [] and run.checkpoint_path.is_file()
    assert [r["charts/env_steps"] for r in iteration_rows(run)][-1] == run.env_steps


# --- learning -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_ppo_through_run_solves_cartpole(tmp_path):
    """The recipe ppo-cartpole (workbench.runs.recipes; seed 0: 475 at ~21k steps)."""
    recipe = RECIPES["ppo-cartpole"]
    torch.manual_seed(0)
    algo = PPO(ActorCritic((4,), 2), replace(recipe.config), seed=0)
    settings = RunSettings(
        num_workers=1,
        num_envs=recipe.num_envs,
        horizon=recipe.horizon,
        num_minibatches=1,
    )
    run = Run(
        CARTPOLE,
        algo,
        settings=settings,
        config=RunConfig(total_steps=recipe.total_steps, runs_dir=str(tmp_path), name="ppo"),
    )
    returns: list[float] = []
    solved_at = []

    @on_iteration(run)
    def watch(row):  # mean over (at least) the last 20 episodes, from the per-iteration means
        if "charts/episode_return" in row:
            returns.extend([row["charts/episode_return"]] * row["charts/episodes"])
        if len(returns) >= 20 and sum(returns[-20:]) / 20 >= recipe.target_return and not solved_at:
            solved_at.append(row["charts/env_steps"])
            run.stop(wait=False)

    run.run()
    assert solved_at and solved_at[0] <= recipe.total_steps, iteration_rows(run)[-3:]
    assert run.status == "stopped" and math.isfinite(run.metrics[-1]["losses/value"])


def test_a_run_switches_to_two_gloo_learners_and_back_keeping_its_state(tmp_path):
    """The device picker's "2 learners" on CPU: the data-parallel group forms from the algorithm's
    state at the boundary, trains, and hands its state back when the run returns to one learner."""
    from workbench.learners import RunLearner

    settings = small_settings(learner_devices=("cpu",))
    run = Run(
        CARTPOLE,
        make_algo(),
        settings=settings,
        learner_factory=RunLearner,
        config=RunConfig(total_steps=6 * STEPS, runs_dir=str(tmp_path), name="ddp"),
    )
    snapshots = {}

    @on_iteration(run)
    def steer(row):
        iteration = row.get("charts/iteration")
        if iteration == 2:
            run.update_settings(learner_devices=["cpu:0", "cpu:1"])
        if iteration == 4:
            snapshots["group"] = [p.detach().clone() for p in run.learner.model.parameters()]
            run.update_settings(learner_devices=["cpu"])

    run.run()
    assert run.status == "finished" and run.error is None
    changes = [e["new"]["learner_devices"] for e in events(run) if e.get("event") == "settings"]
    assert changes == [["cpu:0", "cpu:1"], ["cpu"]] or changes == [("cpu:0", "cpu:1"), ("cpu",)]
    assert run.learner is run.algo and run.algo.num_updates == 6
    # What the group learned came back: the single learner continued from its parameters.
    assert any(
        not torch.equal(a, b) for a, b in zip(snapshots["group"], run.algo.model.parameters())
    )
    assert len(iteration_rows(run)) == 6


def test_a_recipe_continues_a_checkpoint_of_its_run_at_another_seed(tmp_path):
    """``Recipe.make_run(resume_from=...)``: the learner, counters and recent returns of the
    checkpoint, under a metrics file of its own; the seed picks the continuation's envs."""
    from workbench.runs.recipes import RECIPES

    recipe = RECIPES["ppo-cartpole"]
    first = recipe.make_run(0, runs_dir=tmp_path, name="first")
    first.run(env_steps=2_048)
    resumed = recipe.make_run(1, runs_dir=tmp_path, name="second", resume_from=first.dir)
    assert (resumed.env_steps, resumed.updates) == (first.env_steps, first.updates)
    same = zip(resumed.algo.model.parameters(), first.algo.model.parameters())
    assert all(torch.equal(a, b) for a, b in same)
    resumed.run(env_steps=first.env_steps + 512)
    assert resumed.env_steps >= first.env_steps + 512 and resumed.updates > first.updates
    assert resumed.metrics_path != first.metrics_path and resumed.config.seed == 1


def test_limits_replaced_while_the_run_goes_end_it_and_are_recorded(tmp_path):
    from workbench.runs.recipes import RECIPES
    from workbench.studies.curves import wait_for_row

    run = RECIPES["ppo-cartpole"].make_run(0, runs_dir=tmp_path)
    run.start(env_steps=10_000_000)
    try:
        wait_for_row(run, lambda row: "event" not in row, timeout=60)
        run.update_limits(env_steps=run.env_steps + 1_024)
        assert run.wait(timeout=60) == "finished", run.status
    finally:
        run.stop()
    assert run.ended_by == "env_steps"
    assert [e["env_steps"] for e in run.events if e["event"] == "limits"] == [run.limits.env_steps]


def test_the_learning_rate_anneals_over_the_planned_budget_whatever_limit_ends_the_run(tmp_path):
    """CleanRL anneals over ``total_timesteps``: a run stopped sooner has trained as the start of
    the planned one (a run stopped at 500k of 4M must not have annealed to zero)."""
    from workbench.runs.recipes import RECIPES

    recipe = RECIPES["ppo-cartpole"]
    assert recipe.config.anneal_lr is False  # the recipe's own setting; annealed here
    annealed = replace(recipe, config=replace(recipe.config, anneal_lr=True))
    run = annealed.make_run(0, runs_dir=tmp_path)
    run.run(env_steps=2_048)
    planned = run.config.total_steps
    assert run.algo.progress == pytest.approx(run.algo.num_updates * 256 / planned, rel=0.2)
    assert run.algo.progress < 0.05 and run.algo.learning_rate > 0.95 * recipe.config.learning_rate
