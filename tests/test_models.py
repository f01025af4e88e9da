"""Specifications for workbench.models: trunks, ActorCritic, QNetwork, the [B] / [T, B] contract."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from workbench.models import MLP, ActorCritic, NatureCNN, QNetwork, make_trunk

ATARI = (4, 84, 84)
CARTPOLE = (4,)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def atari_obs(*lead: int) -> torch.Tensor:
    return torch.randint(0, 256, (*lead, *ATARI), dtype=torch.uint8)


# --- trunks -------------------------------------------------------------------------------------


def test_nature_cnn_maps_84x84x4_to_512_features() -> None:
    cnn = NatureCNN(in_channels=4)
    assert cnn.output_size == 512
    assert cnn(atari_obs(2)).shape == (2, 512)


def test_nature_cnn_scales_uint8_by_1_over_255() -> None:
    cnn = NatureCNN()
    frames = atari_obs(3)
    torch.testing.assert_close(cnn(frames), cnn(frames.float() / 255))


def test_nature_cnn_measures_its_flatten_size_for_other_image_sizes() -> None:
    cnn = NatureCNN(in_channels=1, image_size=(64, 48))
    assert cnn(torch.zeros(2, 1, 64, 48, dtype=torch.uint8)).shape == (2, 512)


def test_nature_cnn_rejects_images_too_small_for_its_kernels() -> None:
    with pytest.raises(ValueError, match="36x36"):
        NatureCNN(image_size=(20, 20))


def test_mlp_trunk_for_cartpole_observations() -> None:
    trunk = make_trunk(CARTPOLE)
    assert isinstance(trunk, MLP) and trunk.output_size == 64
    # float64 observations straight from numpy are accepted and computed in the weights' dtype.
    assert trunk(torch.randn(5, 4, dtype=torch.float64)).dtype == torch.float32
    assert MLP(4, hidden=(32, 16)).output_size == 16


def test_make_trunk_picks_cnn_for_images() -> None:
    assert isinstance(make_trunk(ATARI), NatureCNN)


def test_make_trunk_flattens_any_shape_when_asked_for_an_mlp() -> None:
    trunk = make_trunk((2, 3), kind="mlp", hidden=(8,))
    assert trunk(torch.randn(5, 2, 3)).shape == (5, 8)


@pytest.mark.parametrize(
    ("obs_shape", "hint"),
    [((84, 84), "kind='mlp'"), ((84, 84, 4), "channels-last"), ((), "kind='mlp'")],
)
def test_make_trunk_rejects_ambiguous_shapes_and_names_the_fix(obs_shape, hint) -> None:
    with pytest.raises(ValueError, match=hint):
        make_trunk(obs_shape)


# --- shape contract -----------------------------------------------------------------------------


def test_time_major_and_batch_inputs_give_the_same_values() -> None:
    obs = torch.randn(3, 5, *CARTPOLE)  # [T, B, D]
    flat = obs.reshape(15, *CARTPOLE)
    ac = ActorCritic(CARTPOLE, 2)
    logits_tb, value_tb = ac(obs)
    logits_n, value_n = ac(flat)
    assert logits_tb.shape == (3, 5, 2) and value_tb.shape == (3, 5)
    torch.testing.assert_close(logits_tb.reshape(15, 2), logits_n)
    torch.testing.assert_close(value_tb.reshape(15), value_n)

    qnet = QNetwork(CARTPOLE, 3, dueling=True, num_atoms=5)
    assert qnet(obs).shape == (3, 5, 3)
    torch.testing.assert_close(qnet(obs).reshape(15, 3), qnet(flat))
    assert qnet.distribution(obs).shape == (3, 5, 3, 5)


def test_cnn_heads_accept_time_major_uint8_frames() -> None:
    obs = atari_obs(2, 3)
    qnet = QNetwork(ATARI, 6)
    torch.testing.assert_close(qnet(obs).reshape(6, 6), qnet(obs.reshape(6, *ATARI)))


@pytest.mark.parametrize(
    ("shape", "hint"),
    [
        ((4,), "unsqueeze"),  # one observation without a batch dimension
        ((8, 5), r"obs_shape=\(4,\)"),  # wrong observation size
        ((2, 3, 4, 4), "leading dimensions"),  # too many leading dimensions
    ],
)
def test_bad_observation_shapes_raise_a_helpful_error(shape, hint) -> None:
    ac = ActorCritic(CARTPOLE, 2)
    qnet = QNetwork(CARTPOLE, 2)
    for call in (ac, ac.act, qnet, qnet.act):
        with pytest.raises(ValueError, match=hint):
            call(torch.zeros(shape))


# --- ActorCritic --------------------------------------------------------------------------------


def test_actor_critic_act_returns_valid_actions_with_logp_consistent_with_evaluate() -> None:
    ac = ActorCritic(CARTPOLE, 3)
    obs = torch.randn(4, 6, *CARTPOLE)
    out = ac.act(obs)
    assert out["action"].shape == (4, 6) and out["action"].dtype == torch.int64
    assert ((out["action"] >= 0) & (out["action"] < 3)).all()
    assert not out["logp"].requires_grad  # samplers call act: no graph is kept
    ev = ac.evaluate(obs, out["action"])
    torch.testing.assert_close(ev["logp"], out["logp"])
    torch.testing.assert_close(ev["value"], out["value"])
    assert ((ev["entropy"] > 0) & (ev["entropy"] <= math.log(3) + 1e-6)).all()


def test_actor_critic_deterministic_act_takes_the_most_probable_action() -> None:
    ac = ActorCritic(CARTPOLE, 3)
    obs = torch.randn(10, *CARTPOLE)
    logits, _ = ac(obs)
    assert torch.equal(ac.act(obs, deterministic=True)["action"], logits.argmax(-1))


def test_actor_critic_starts_near_uniform() -> None:
    # Policy-head gain 0.01 (baselines / CleanRL): the first policy explores every action.
    ac = ActorCritic(ATARI, 6)
    logits, _ = ac(atari_obs(4))
    assert logits.abs().max() < 0.1


def test_gradients_flow_to_every_parameter_through_evaluate() -> None:
    ac = ActorCritic(ATARI, 4)
    obs = atari_obs(2, 3)
    ev = ac.evaluate(obs, torch.randint(0, 4, (2, 3)))
    (ev["logp"].sum() + ev["entropy"].sum() + ev["value"].sum()).backward()
    for name, param in ac.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_evaluate_rejects_actions_that_do_not_match_the_observations() -> None:
    ac = ActorCritic(CARTPOLE, 2)
    with pytest.raises(ValueError, match="leading"):
        ac.evaluate(torch.zeros(3, 5, 4), torch.zeros(5, dtype=torch.int64))


# --- QNetwork -----------------------------------------------------------------------------------


def test_dueling_q_minus_v_has_zero_mean_over_actions() -> None:
    qnet = QNetwork(CARTPOLE, 5, dueling=True)
    obs = torch.randn(7, *CARTPOLE)
    value = qnet.value_head(qnet.trunk(obs)).squeeze(-1)  # V(s), [N]
    q = qnet(obs)
    torch.testing.assert_close((q - value[:, None]).mean(-1), torch.zeros(7), atol=1e-6, rtol=0)


def test_categorical_probabilities_sum_to_one_and_q_is_their_mean_return() -> None:
    for dueling in (False, True):
        qnet = QNetwork(CARTPOLE, 3, num_atoms=11, v_min=-5.0, v_max=5.0, dueling=dueling)
        obs = torch.randn(6, *CARTPOLE)
        probs = qnet.distribution(obs)
        assert probs.shape == (6, 3, 11)
        torch.testing.assert_close(probs.sum(-1), torch.ones(6, 3))
        torch.testing.assert_close(qnet(obs), probs @ qnet.support)
        torch.testing.assert_close(qnet.distribution(obs, log=True).exp(), probs)


def test_categorical_support_is_an_evenly_spaced_buffer() -> None:
    qnet = QNetwork(CARTPOLE, 2, num_atoms=51)
    torch.testing.assert_close(qnet.support, torch.linspace(-10.0, 10.0, 51))
    assert "support" in dict(qnet.named_buffers())
    assert "support" in qnet.state_dict()


def test_distribution_requires_a_categorical_network() -> None:
    with pytest.raises(ValueError, match="num_atoms"):
        QNetwork(CARTPOLE, 2).distribution(torch.zeros(1, 4))


def test_epsilon_zero_is_greedy() -> None:
    qnet = QNetwork(CARTPOLE, 4)
    obs = torch.randn(20, *CARTPOLE)
    out = qnet.act(obs, epsilon=0.0)
    assert torch.equal(out["action"], out["q"].argmax(-1))


def test_epsilon_one_is_uniform_over_all_actions() -> None:
    qnet = QNetwork(CARTPOLE, 4)
    obs = torch.randn(1, *CARTPOLE).expand(4000, *CARTPOLE)  # one state: greedy is one action
    counts = torch.bincount(qnet.act(obs, epsilon=1.0)["action"], minlength=4)
    # Each count is Binomial(4000, 1/4): mean 1000, sd ~27; 150 is > 5 sd.
    assert ((counts - 1000).abs() < 150).all(), counts


def test_per_row_epsilon_explores_only_in_its_rows() -> None:
    qnet = QNetwork(CARTPOLE, 4)
    obs = torch.randn(1, *CARTPOLE).expand(2000, *CARTPOLE)
    epsilon = torch.zeros(2000)
    epsilon[1000:] = 1.0  # Ape-X: one epsilon per actor
    out = qnet.act(obs, epsilon=epsilon)
    greedy = out["q"].argmax(-1)
    assert torch.equal(out["action"][:1000], greedy[:1000])
    assert len(out["action"][1000:].unique()) == 4


def test_per_env_epsilon_broadcasts_over_time() -> None:
    qnet = QNetwork(CARTPOLE, 3)
    obs = torch.randn(5, 2, *CARTPOLE)  # [T, B]
    out = qnet.act(obs, epsilon=torch.tensor([0.0, 1.0]))
    assert out["action"].shape == (5, 2)
    assert torch.equal(out["action"][:, 0], out["q"][:, 0].argmax(-1))
    with pytest.raises(ValueError, match="epsilon"):
        qnet.act(obs, epsilon=torch.zeros(3))


def test_constructors_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="num_actions"):
        ActorCritic(CARTPOLE, 0)
    with pytest.raises(ValueError, match="num_atoms"):
        QNetwork(CARTPOLE, 2, num_atoms=0)
    with pytest.raises(ValueError, match="v_min < v_max"):
        QNetwork(CARTPOLE, 2, num_atoms=51, v_min=1.0, v_max=-1.0)


def test_heads_accept_a_custom_trunk_module() -> None:
    trunk = MLP(4, hidden=(16,), activation=nn.ReLU)
    qnet = QNetwork(CARTPOLE, 2, trunk=trunk)
    assert qnet.trunk is trunk and qnet.output_size == 2
    assert qnet(torch.randn(3, 4)).shape == (3, 2)
