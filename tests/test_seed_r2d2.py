"""SEED RL with an R2D2 learner (Espeholt et al. 2020; Kapturowski et al. 2019): the wiring between
the inference server, the sequence assembly and the replay, and the claim that memory matters.

Tiers: sequences checked against a literal record of what the server saw; per-slot
epsilons against ``apex.actor_epsilons`` and their behaviour; a run stopped and resumed from its
checkpoint carries on (about 10 s on 2 CPU cores). The claim itself, on CartPole with the
velocities hidden (R2D2 through SEED reaches 300 within the recipe's 80k env steps, a feed-forward
DQN given the env steps R2D2 took stays under half of it), is asserted where its runs already
are: notebook 08's memory study (``studies.seed_studies.memory_matters``) runs both agents, at the
recipe's budget under ``bin/test``; ``benchmarks/learning.py`` runs the recipe at three seeds.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch

from workbench.apex.exploration import actor_epsilons
from workbench.learners import R2D2Config
from workbench.runs.records import load_metrics
from workbench.seed import SEED_RECIPES, Seed
from workbench.seed.env_actors import FIRST

RECIPE = SEED_RECIPES["seed-r2d2-cartpole-novelocity"]


def small_run(runs_dir, **changes) -> Seed:
    """The recipe's system with short sequences (L = 2 + 5 + 1, a new one every 3 steps)."""
    learner = R2D2Config(
        burn_in=2, sequence_length=5, overlap=2, n_step=2, batch_size=8, replay_capacity=1000
    )
    config = replace(RECIPE.config, transport="serial", learner=learner, min_replay_sequences=16)
    return Seed(replace(config, **changes), runs_dir=runs_dir)


class Recorder:
    """A server listener that keeps, per env slot, every step it answered: the observation, the
    FIRST flag and the recurrent state the server used (before the step, after any reset)."""

    def __init__(self) -> None:
        self.rows: dict[int, list[tuple[np.ndarray, bool, np.ndarray, np.ndarray]]] = {}

    def on_step(self, batch) -> None:
        h, c = batch.state
        for i, slot in enumerate(batch.slots.tolist()):
            first = bool(batch.flags[i] & FIRST)
            self.rows.setdefault(slot, []).append(
                (batch.obs[i].copy(), first, h[i].copy(), c[i].copy())
            )

    def on_restart(self, slots) -> None:
        pass


def test_replayed_sequences_hold_the_servers_state_at_their_first_row(tmp_path) -> None:
    run = small_run(tmp_path)
    recorder = Recorder()
    run.learning.server.listeners.append(recorder)
    run.run(env_steps=600)
    c = run.learning.learner_config
    L, stride = c.stored_length, c.stride
    assert run.updates > 0
    stored = run.learning.replay.storage.get(np.arange(len(run.learning.replay)))
    assert stored["obs"].shape[1:] == (L, 2) and stored["actions"].shape[1:] == (L,)
    # Window k of a slot holds its steps [k * stride, k * stride + L): the assembler cuts them so.
    windows = {}
    for rows in recorder.rows.values():
        for start in range(0, len(rows) - L + 1, stride):
            obs = np.stack([r[0] for r in rows[start : start + L]])
            windows[obs.tobytes()] = (
                rows[start][2],
                rows[start][3],
                [r[1] for r in rows[start : start + L]],
            )
    assert len(run.learning.replay) == run.learning.sequences_added == len(windows)
    for i in range(len(run.learning.replay)):
        h, c_state, first = windows[stored["obs"][i].tobytes()]
        np.testing.assert_array_equal(stored["state_h"][i], h)
        np.testing.assert_array_equal(stored["state_c"][i], c_state)
        np.testing.assert_array_equal(stored["first"][i], first)
    # The server's state is zero where an episode starts, and only there (an LSTM's is not, after
    # a step).
    for rows in recorder.rows.values():
        for _, first, h, c_state in rows:
            assert first == (not h.any() and not c_state.any())
    sample, _, _ = run.learning.replay.sample(4)
    assert sample["obs"].shape == (L, 4, 2) and sample["state_h"].shape == (4, run.model.lstm_size)


def test_each_slot_acts_with_its_actors_epsilon(tmp_path) -> None:
    run = small_run(tmp_path, num_actors=4, envs_per_actor=2)
    expected = np.repeat(actor_epsilons(4), 2)
    epsilons = run.learning.policy.epsilons.numpy()
    np.testing.assert_allclose(epsilons[:8], expected, rtol=1e-6)
    # The slots of actors the run may add later (up to config.actor_limit) explore fully until then.
    assert len(epsilons) == run.config.slots == 32 and (epsilons[8:] == 1.0).all()
    assert run.learning.least_exploring_actor == 3 and (expected[6:] == expected.min()).all()
    # One observation for every request: the greedy action is the same, so a slot's other action
    # shows up with probability epsilon / 2 (two actions).
    n = 4000
    slots = torch.arange(8).repeat_interleave(n)
    obs = torch.zeros(8 * n, 2)
    state = run.model.initial_state(8 * n)
    actions, _, _ = run.learning.policy.step(obs, state, torch.ones(8 * n, dtype=torch.bool), slots)
    greedy = run.model.act(obs[:1], run.model.initial_state(1), None, 0.0)[0]
    other = (actions != greedy).float().reshape(8, n).mean(1).numpy()
    np.testing.assert_allclose(other, expected / 2, atol=0.025)


def test_actors_wait_for_a_learner_that_falls_behind_the_replay_ratio(tmp_path) -> None:
    """Local transport, a learner slowed to 30 ms more per update: the actors could step thousands
    of times meanwhile; held to the ratio they step about 10 * 4 / 16 * 32 = 20 times per update."""
    run = Seed(replace(RECIPE.config, transport="local"), runs_dir=tmp_path)
    update = run.learner.update

    def slow_update(*args, **kwargs):
        time.sleep(0.03)
        return update(*args, **kwargs)

    run.learner.update = slow_update
    run.run(updates=50)
    c, envs = run.learning.learner_config, run.config.num_actors
    warmup_windows = run.config.min_replay_sequences // envs - 1
    before = envs * (c.stored_length + warmup_windows * c.stride)  # 704
    per_update = c.batch_size / run.config.replay_ratio * c.stride  # 20 env steps (all envs)
    assert run.updates == 50
    assert run.env_steps <= before + 50 * per_update + 400, run.env_steps  # seen: 1211; 8183 unheld


def test_a_stopped_r2d2_run_resumed_from_its_checkpoint_carries_on(tmp_path) -> None:
    """The checkpoint holds the learner (online and target networks, optimizer, its update count)
    and the run's counters, not the replay: the resumed run refills it, then learns on, its
    learner's update count still the run's, appending to the same metrics file."""
    run = small_run(tmp_path)
    run.run(env_steps=600)
    assert run.ended_by == "env_steps" and run.updates > 0
    assert run.learner.num_updates == run.updates
    _, rows = load_metrics(run.metrics_path)

    resumed = Seed.from_checkpoint(run.dir)
    assert resumed.name == run.name and resumed.metrics_path == run.metrics_path
    assert resumed.updates == run.updates == resumed.learner.num_updates
    assert (
        resumed.env_steps == run.env_steps
        and resumed.learning.sequences_added == run.learning.sequences_added
    )
    saved, loaded = run.learner.state_dict(), resumed.learner.state_dict()
    for network in ("model", "target_model"):
        assert loaded[network].keys() == saved[network].keys()
        assert all(torch.equal(loaded[network][k], saved[network][k]) for k in saved[network])
    assert len(resumed.learning.replay) == 0  # not saved: the actors refill it

    resumed.run(env_steps=1500)
    assert resumed.env_steps >= 1500 and resumed.updates > run.updates
    assert resumed.learner.num_updates == resumed.updates
    headers, rows_after = load_metrics(run.metrics_path)
    assert len(headers) == 2 and headers[1]["resumed_from"] == str(run.dir)
    assert rows_after[: len(rows)] == rows and len(rows_after) > len(rows)
    new = [row for row in rows_after[len(rows) :] if "event" not in row]
    assert new and all(row["charts/env_steps"] > run.env_steps for row in new)
    assert new[-1]["charts/updates"] == resumed.updates
