"""R2D2's Sec. 3 measure (``studies.r2d2_studies``): the Q-value discrepancy of the four ways to
start a replayed sequence's LSTM state."""

from __future__ import annotations

import copy

import pytest
import torch

from workbench.models import RecurrentQNetwork
from workbench.studies.r2d2_studies import STRATEGIES, burn_in_strategies, q_value_discrepancy


def trajectory(steps: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    obs = torch.randn(steps, 1, 2, generator=generator)
    first = torch.zeros(steps, 1, dtype=torch.bool)
    first[0] = True
    return obs, first


def network(seed: int) -> RecurrentQNetwork:
    torch.manual_seed(seed)
    return RecurrentQNetwork((2,), 3, lstm_size=16)


def test_delta_q_is_the_papers_relative_l2_norm():
    q_true = torch.tensor([[1.0, -4.0, 2.0]])
    q_hat = torch.tensor([[2.0, -4.0, 4.0]])
    # ||(1, 0, 2)||_2 / |max_j q_true_j| = sqrt(5) / 2
    assert q_value_discrepancy(q_hat, q_true).item() == pytest.approx(5**0.5 / 2)


def test_a_fresh_stored_state_is_the_true_state():
    current = network(0)
    obs, first = trajectory()
    delta = burn_in_strategies(current, current, obs, first, start=30, burn_in=10, length=20)
    assert list(delta) == list(STRATEGIES)
    assert delta["stored state"].abs().max().item() < 1e-6
    assert delta["stored state + burn-in"].abs().max().item() < 1e-6


def test_a_burn_in_back_to_the_episodes_start_rebuilds_the_true_state():
    current, stale = network(0), network(1)
    obs, first = trajectory()
    delta = burn_in_strategies(current, stale, obs, first, start=10, burn_in=10, length=20)
    assert delta["zero state + burn-in"].abs().max().item() < 1e-6


def test_a_zero_state_mid_episode_is_wrong_at_first_and_forgotten_later():
    current = network(0)
    obs, first = trajectory()
    delta = burn_in_strategies(current, current, obs, first, start=30, burn_in=0, length=30)
    zero = delta["zero state"]
    assert zero[0] > 0.01 and zero[-1] < zero[0], zero


def test_stale_stored_states_differ_and_burn_in_shrinks_the_difference():
    current = network(0)
    stale = copy.deepcopy(current)
    with torch.no_grad():  # the learner has moved on a little since the actors acted
        for parameter in current.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    obs, first = trajectory()
    delta = burn_in_strategies(current, stale, obs, first, start=40, burn_in=15, length=10)
    assert delta["stored state"][0] > 1e-4
    assert delta["stored state + burn-in"][0] < delta["stored state"][0]


@pytest.mark.parametrize(
    ("start", "burn_in", "length", "message"),
    [(5, 10, 10, "no room for burn_in"), (50, 10, 20, "shorten length")],
)
def test_windows_that_do_not_fit_are_refused_with_the_fix(start, burn_in, length, message):
    obs, first = trajectory(steps=60)
    with pytest.raises(ValueError, match=message):
        burn_in_strategies(
            network(0), network(0), obs, first, start=start, burn_in=burn_in, length=length
        )
