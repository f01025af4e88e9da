"""The CPU-dependent levers a recipe chooses at start (``workbench.runs.levers``).

The rates below are what each CPU measured for ``ppo-pong-fast``'s network (one minibatch step of
256, one thread; ``data/pong_levers*.json``): on an AVX2-only CPU (torch's kernels capped with
``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``) bfloat16 is emulated and the learner is the
slower half of the run; on the AVX-512 bf16 EPYC the envs and the learner are about even. A
machine is simulated by replacing the two measurements with its figures.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from workbench.learners import PPO, DQNConfig, PPOConfig, choose_precision
from workbench.learners import precision as precision_module
from workbench.models import ActorCritic, QNetwork
from workbench.rollout import Rollout
from workbench.runs import levers as levers_module
from workbench.runs import recipes as recipes_module
from workbench.runs.levers import (
    DOUBLE_DQN_PASSES,
    LEARNER_BOUND,
    choose_threads,
    collector_rate,
    learner_work,
)
from workbench.runs.recipes import RECIPES

FAST = RECIPES["ppo-pong-fast"]

# samples/s of one minibatch step (label -> rate) and the collector's env steps/s, as measured;
# compiled contiguous at the ratio to compiled channels-last measured later on each CPU (AVX2-only:
# 4,994 against 5,048 at batch 256 on two threads; bf16 EPYC: 0.95 of bfloat16 channels-last
# eager, data/training_throughput_epyc_bf16.json)
AVX2_ONLY = (
    {
        "float32/contiguous": 2_349,
        "float32/channels_last": 2_966,
        "bfloat16/contiguous": 374,
        "bfloat16/channels_last": 560,
        "float32/contiguous/compiled": 3_371,
        "float32/channels_last/compiled": 3_407,
    },
    2_445,
)
AVX512_BF16 = (
    {
        "float32/contiguous": 2_392,
        "float32/channels_last": 3_193,
        "bfloat16/contiguous": 4_078,
        "bfloat16/channels_last": 6_528,
        "bfloat16/contiguous/compiled": 6_200,
        "bfloat16/channels_last/compiled": 7_700,
    },
    2_543,
)


def simulate(monkeypatch, machine) -> None:
    """This process measures ``machine``'s figures instead of its own."""
    rates, collector = machine

    def update_rate(model, obs_shape, minibatch, *, autocast, channels_last, compile=False, **_):
        return rates[precision_module.label(autocast, channels_last, compile)]

    monkeypatch.setattr(precision_module, "update_rate", update_rate)
    monkeypatch.setattr(levers_module, "collector_rate", lambda *args, **kwargs: collector)
    monkeypatch.setattr(recipes_module, "usable_cores", lambda: 2)


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_a_second_thread_goes_to_the_learner_only_where_it_bounds_the_run():
    assert choose_threads(852, 2_445, cores=2) == 2  # AVX2-only: learner 0.35 of the collector
    assert choose_threads(1_925, 2_543, cores=2) == 1  # bf16 EPYC: 0.76, about even
    assert choose_threads(852, 2_445, cores=1) == 1  # no second core to give
    assert choose_threads(LEARNER_BOUND * 1_000, 1_000, cores=2) == 1  # the bound itself: not under


def test_ppo_trains_each_env_step_once_an_epoch_on_minibatches_of_its_rollout():
    # ppo-pong-fast: 8 envs x 128 steps in 4 minibatches, 4 epochs
    assert learner_work(FAST.config, FAST.num_envs, FAST.horizon) == (256, 4.0)


def test_a_double_dqn_trains_its_batch_and_its_replay_ratio_at_five_thirds_of_a_pass_a_sample():
    config = DQNConfig(batch_size=64, double=True)
    minibatch, passes = learner_work(config, num_envs=16, horizon=8, replay_ratio=8.0)
    assert minibatch == 64  # the replay's batch, not the rollout's
    assert passes == pytest.approx(8.0 * DOUBLE_DQN_PASSES) == pytest.approx(40 / 3)
    single = dataclasses.replace(config, double=False)
    assert learner_work(single, 16, 8, replay_ratio=8.0)[1] == pytest.approx(8.0 * 4 / 3)


def test_on_an_avx2_only_cpu_the_pong_recipe_learns_float32_channels_last_compiled_on_two_threads(
    monkeypatch, restore_threads
):
    simulate(monkeypatch, AVX2_ONLY)
    learner = FAST.make_learner(0)
    config = learner.config
    assert (config.autocast, config.channels_last, config.compile) == (None, True, True)
    assert torch.get_num_threads() == 2


def test_on_the_bf16_epyc_the_pong_recipe_learns_bfloat16_compiled_on_one_thread(
    monkeypatch, restore_threads
):
    simulate(monkeypatch, AVX512_BF16)
    torch.set_num_threads(2)
    learner = FAST.make_learner(0)
    config = learner.config
    assert (config.autocast, config.channels_last, config.compile) == ("bfloat16", True, True)
    assert torch.get_num_threads() == 1


def test_a_recipe_that_does_not_measure_threads_leaves_them_alone(monkeypatch, restore_threads):
    simulate(monkeypatch, AVX2_ONLY)
    torch.set_num_threads(1)
    dataclasses.replace(FAST, measure_threads=False).make_learner(0)
    assert torch.get_num_threads() == 1


def test_a_recipe_measured_once_keeps_its_levers_and_measures_no_more(monkeypatch, restore_threads):
    simulate(monkeypatch, AVX2_ONLY)
    measured = FAST.with_measured_levers()
    config = measured.config
    assert (config.autocast, config.channels_last, config.compile) == (None, True, True)
    assert not measured.measure_precision
    simulate(monkeypatch, AVX512_BF16)  # another machine's figures: a new measurement would differ
    learner = measured.make_learner(0)
    assert (learner.config.autocast, learner.config.channels_last) == (None, True)


def test_levers_measured_to_be_shown_fix_the_run_made_from_them(monkeypatch, restore_threads):
    simulate(monkeypatch, AVX512_BF16)
    torch.set_num_threads(2)
    model = FAST.make_model((4, 42, 42), 6)
    levers = FAST.choose_levers(model, (4, 42, 42))
    fixed = FAST.with_levers(levers)
    assert torch.get_num_threads() == levers.torch_threads == 1
    simulate(monkeypatch, AVX2_ONLY)  # a second measurement would choose float32 on two threads
    learner = fixed.make_learner(0)
    config = learner.config
    assert (config.autocast, config.channels_last, config.compile) == ("bfloat16", True, True)
    assert torch.get_num_threads() == 1


def test_a_recipe_that_measures_nothing_is_its_own_measured_self():
    recipe = dataclasses.replace(FAST, measure_precision=False)
    assert recipe.with_measured_levers() is recipe


def test_compiling_is_kept_only_when_it_measures_faster(monkeypatch):
    rates = dict(AVX512_BF16[0])
    rates["bfloat16/channels_last/compiled"] = 1.05 * rates["bfloat16/channels_last"]
    simulate(monkeypatch, (rates, 0))
    model = ActorCritic((4, 42, 42), 6, trunk="cnn-universe")
    assert not choose_precision(model, (4, 42, 42), 256, try_compile=True).compile
    rates["bfloat16/channels_last/compiled"] = 1.2 * rates["bfloat16/channels_last"]
    choice = choose_precision(model, (4, 42, 42), 256, try_compile=True)
    assert choice.compile and choice.rate == rates["bfloat16/channels_last/compiled"]


def test_compiling_may_choose_the_layout_that_lost_eager(monkeypatch):
    # The dueling Q-network of apex-dqn-pong-fast and dqn-pong-fast, batch 64, on the AVX2-only
    # EPYC on one thread: channels-last won eager and gained nothing compiled; contiguous compiled
    # was 1.27x the best eager step (an update of the whole DQN loss: 38 ms against 56 ms).
    rates = {
        "float32/contiguous": 1_076,
        "float32/channels_last": 2_494,
        "float32/contiguous/compiled": 3_174,
        "float32/channels_last/compiled": 2_435,
    }
    simulate(monkeypatch, (rates, 0))
    model = QNetwork((4, 42, 42), 6, trunk="cnn-universe", dueling=True)
    choice = choose_precision(model, (4, 42, 42), 64, candidates=(None,), try_compile=True)
    assert (choice.autocast, choice.channels_last, choice.compile) == (None, False, True)
    assert choice.rate == 3_174


def test_the_collector_rate_is_a_positive_rate_of_real_pong_steps():
    model = ActorCritic((4, 42, 42), 6, trunk="cnn-universe")
    options = {"screen_size": 42, "repeat_action_probability": 0.0}
    rate = collector_rate("ALE/Pong-v5", options, 2, model, seconds=0.2)
    assert 10 < rate < 1e6


def test_a_compiled_update_computes_what_the_eager_one_does(restore_threads):
    """torch.compile changes the speed of PPO's forward pass, not what one update computes."""
    torch.set_num_threads(1)
    T, B = 4, 2
    generator = torch.Generator().manual_seed(0)
    rollout = Rollout(
        obs=torch.randn(T, B, 4, generator=generator),
        actions=torch.randint(0, 2, (T, B), generator=generator),
        rewards=torch.randn(T, B, generator=generator),
        terminated=torch.zeros(T, B, dtype=torch.bool),
        truncated=torch.zeros(T, B, dtype=torch.bool),
        truncation_values=torch.zeros(T, B),
        next_obs=torch.randn(B, 4, generator=generator),
        policy_outputs={
            "logp": torch.full((T, B), -0.7),
            "value": torch.zeros(T, B),
        },
    )
    updated = []
    for compile in (False, True):
        torch.manual_seed(0)
        model = ActorCritic((4,), 2)
        ppo = PPO(model, PPOConfig(num_epochs=1, num_minibatches=1, compile=compile), seed=0)
        metrics = ppo.update(rollout)
        updated.append((metrics, [p.detach().clone() for p in model.parameters()]))
    (eager_metrics, eager), (compiled_metrics, fused) = updated
    assert compiled_metrics["losses/policy"] == pytest.approx(
        eager_metrics["losses/policy"], abs=1e-5
    )
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(eager, fused))


def test_every_precision_that_is_not_emulated_is_tried_compiled(monkeypatch):
    # Ape-X DQN's update on the Xeon with avx512_bf16 (one thread, batch 64, updates/s x 64):
    # bfloat16 channels-last won eager, but compiled float32 overtook every compiled bfloat16.
    rates = {
        "float32/contiguous": 20.2 * 64,
        "float32/channels_last": 23.7 * 64,
        "bfloat16/contiguous": 24.2 * 64,
        "bfloat16/channels_last": 24.8 * 64,
        "float32/contiguous/compiled": 44.6 * 64,
        "float32/channels_last/compiled": 40.0 * 64,
        "bfloat16/contiguous/compiled": 34.2 * 64,
        "bfloat16/channels_last/compiled": 32.0 * 64,
    }
    simulate(monkeypatch, (rates, 0))
    model = QNetwork((4, 42, 42), 6, trunk="cnn-universe", dueling=True)
    choice = choose_precision(model, (4, 42, 42), 64, try_compile=True)
    assert (choice.autocast, choice.channels_last, choice.compile) == (None, False, True)


def test_a_learner_that_hands_over_its_update_is_timed_by_it():
    built, calls = [], []

    def make_update(*, autocast, channels_last, compile):
        built.append((autocast, channels_last, compile))
        return lambda: calls.append(1)

    model = QNetwork((4,), 2)
    rate = precision_module.update_rate(
        model, (4,), 64, autocast=None, channels_last=False, seconds=0.01, make_update=make_update
    )
    assert built == [(None, False, False)] and len(calls) >= 3 and rate > 0
