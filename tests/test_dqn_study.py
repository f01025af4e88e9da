"""Specifications for notebook 05's experiments: the DQN family as one-line changes to plain DQN
(``runs.dqn_family.DQN_VARIANTS``, ``runs.dqn_family.dqn_variant``),
``studies.dqn_studies.dqn_variants_study`` and the large-batch
``studies.dqn_studies.dqn_batch_study`` (learning rate scaled, replay ratio held)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from workbench.learners import DQNConfig, ReplayAgentConfig
from workbench.runs.dqn_family import DQN_BASE, DQN_VARIANTS, MODEL_OPTIONS, dqn_variant
from workbench.runs.recipes import RECIPES
from workbench.studies import dqn_studies

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def differences(recipe) -> dict:
    """What ``recipe`` changes in ``DQN_BASE``: learner and replay fields and model options."""
    changed = {}
    for part, kind in (("config", DQNConfig), ("replay", ReplayAgentConfig)):
        mine, base = getattr(recipe, part), getattr(DQN_BASE, part)
        for f in dataclasses.fields(kind):
            if getattr(mine, f.name) != getattr(base, f.name):
                changed[f.name] = getattr(mine, f.name)
    base_model, model = dict(DQN_BASE.model_options), dict(recipe.model_options)
    changed.update({key: value for key, value in model.items() if base_model.get(key) != value})
    return changed


def test_the_base_is_plain_dqn():
    c = DQN_BASE.config
    assert (c.n_step, c.double, DQN_BASE.replay.prioritized) == (1, False, False)
    model = DQN_BASE.make_model((4,), 2)
    assert not model.dueling and model.num_atoms == 1
    # the sizes are the dqn-cartpole recipe's: only the extensions are off
    recipe = RECIPES["dqn-cartpole"]
    assert (
        dataclasses.replace(c, n_step=recipe.config.n_step, double=recipe.config.double)
        == recipe.config
    )


@pytest.mark.parametrize("label", list(DQN_VARIANTS))
def test_each_variant_differs_from_plain_dqn_in_its_changes_only(label):
    changes = DQN_VARIANTS[label]
    assert differences(dqn_variant(**changes)) == changes


def test_the_single_extensions_are_one_change_each_and_the_last_is_all_of_them():
    assert DQN_VARIANTS["+ double"] == {"double": True}
    assert DQN_VARIANTS["+ dueling"] == {"dueling": True}
    assert DQN_VARIANTS["+ 3-step"] == {"n_step": 3}
    assert DQN_VARIANTS["+ prioritized"] == {"prioritized": True}
    assert DQN_VARIANTS["C51"]["num_atoms"] == 51
    combined = {}
    for label in ("+ double", "+ dueling", "+ 3-step", "+ prioritized", "C51"):
        combined.update(DQN_VARIANTS[label])
    assert DQN_VARIANTS["all (Rainbow - noisy)"] == combined
    model = dqn_variant(**combined).make_model((4,), 2)
    assert model.dueling and model.num_atoms == 51 and model.support[-1] == 100.0


def test_model_options_go_to_the_network_replay_fields_to_the_replay_and_the_rest_to_the_config():
    recipe = dqn_variant(dueling=True, learning_rate=5e-4, prioritized=True)
    assert dict(recipe.model_options)["dueling"] is True and recipe.config.learning_rate == 5e-4
    assert recipe.replay.prioritized and not DQN_BASE.replay.prioritized
    assert "dueling" in MODEL_OPTIONS and "learning_rate" not in MODEL_OPTIONS


def test_an_unknown_change_names_the_valid_ones():
    with pytest.raises(ValueError, match="neither DQNConfig nor ReplayAgentConfig fields nor"):
        dqn_variant(duelling=True)
    with pytest.raises(ValueError, match="DQN recipe"):
        dqn_variant(RECIPES["ppo-cartpole"], double=True)


def test_the_variants_study_runs_each_variant_with_its_changes(tmp_path):
    variants = {"DQN": {}, "+ double": {"double": True}}
    curves = dqn_studies.dqn_variants_study(
        variants, total_steps=1_600, seed=3, runs_dir=str(tmp_path), progress=False
    )
    assert [curve.label for curve in curves] == list(variants)
    for curve, changes in zip(curves, variants.values()):
        assert (
            curve.settings["changes"] == changes and curve.returns and curve.env_steps[-1] <= 1_600
        )
        # 0.5 updates per env step once learning_starts (1,000) steps are in: about 300
        assert 250 <= curve.settings["updates"] <= 320, curve.settings["updates"]
        assert curve.settings["steps_to_target"] == curve.steps_to(475.0)
    assert "single" in curves[0].settings["algo"] and "double" in curves[1].settings["algo"]


@pytest.mark.parametrize("rule", ["sqrt", "linear"])
def test_the_batch_study_scales_the_learning_rate_and_holds_the_replay_ratio(tmp_path, rule):
    recipe = RECIPES["dqn-cartpole"]
    base = recipe.config
    results = dqn_studies.dqn_batch_study(
        [32, 128],
        total_steps=1_024,
        scale_rule=rule,
        seed=0,
        runs_dir=str(tmp_path),
        progress=False,
        learning_starts=256,
    )
    for result in results:
        k = result.batch_size / base.batch_size
        assert result.learning_rate == pytest.approx(
            base.learning_rate * (math.sqrt(k) if rule == "sqrt" else k)
        )
        assert result.replay_ratio == recipe.replay.replay_ratio
        assert result.target_update_interval == round(base.target_update_interval / k)
        # learning starts with the collect that reaches step 256: 1,024 - 224 steps owe updates
        assert result.trained_env_steps == 1_024 - 224
        assert result.updates == math.floor(
            result.trained_env_steps * recipe.replay.replay_ratio / result.batch_size
        )
        assert abs(result.updates - result.expected_updates) < 1
        assert result.learn_seconds > 0 and result.samples_per_second == pytest.approx(
            result.updates_per_second * result.batch_size
        )
    assert results[0].updates == 4 * results[1].updates  # a 4x batch: 4x fewer gradient steps


def test_the_batch_study_can_keep_the_learning_rate_and_set_the_replay_ratio(tmp_path):
    (result,) = dqn_studies.dqn_batch_study(
        [128],
        total_steps=512,
        scale_rule=None,
        replay_ratio=8.0,
        runs_dir=str(tmp_path),
        progress=False,
        learning_starts=128,
    )
    assert result.learning_rate == RECIPES["dqn-cartpole"].config.learning_rate
    # at step 128 the replay holds 4 envs x (32 - 2) completed 3-step windows, fewer than a batch:
    # learning starts one collect later, with the collect that ends at step 160
    assert result.trained_env_steps == 512 - 128
    assert result.replay_ratio == 8.0 and result.updates == (512 - 128) * 8 // 128


def test_the_batch_study_rejects_a_batch_that_is_not_a_positive_int(tmp_path):
    with pytest.raises(ValueError, match="positive ints"):
        dqn_studies.dqn_batch_study([0], total_steps=64, runs_dir=str(tmp_path), progress=False)
