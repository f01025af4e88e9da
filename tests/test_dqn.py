"""Specifications for ``workbench.learners.DQN`` and its ``ReplayAgent``: n-step transitions from
rollouts (``workbench.replay.NStepTransitions``), the DQN family's targets (double, categorical),
the replay ratio a ``ReplayAgent`` holds, and that the agent learns CartPole (one seed; three in
``benchmarks/learning.py``)."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch

from workbench.kernels import linear_schedule
from workbench.learners import DQN, DQNConfig, ReplayAgent, ReplayAgentConfig
from workbench.models import QNetwork
from workbench.replay import FrameStorage, NStepTransitions, PrioritizedReplay, UniformReplay
from workbench.rollout import Rollout

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def synthetic_rollout(T: int, B: int, generator: torch.Generator, first_id: int) -> Rollout:
    """Observations are unique ids (``first_id`` + position), so a transition names its start;
    random rewards, terminations (15%) and truncations (8%)."""
    ids = torch.arange(first_id, first_id + (T + 1) * B, dtype=torch.float32).reshape(T + 1, B, 1)
    terminated = torch.rand(T, B, generator=generator) < 0.15
    truncated = (torch.rand(T, B, generator=generator) < 0.08) & ~terminated
    return Rollout(
        obs=ids[:T],
        actions=torch.randint(2, (T, B), generator=generator),
        rewards=torch.randn(T, B, generator=generator),
        terminated=terminated,
        truncated=truncated,
        truncation_values=torch.zeros(T, B),
        policy_outputs={},
        next_obs=ids[T],
    )


def literal_transitions(
    rollouts: list[Rollout], n: int, gamma: float
) -> dict[float, tuple[float, float, float]]:
    """Hessel et al. 2018, Eq. 2, one (env, t) at a time over the rollouts joined along T:
    start id -> (return, discount, id of the observation after the window). Windows that reach a
    truncation are left out (their bootstrap needs the final observation)."""
    obs = torch.cat([r.obs for r in rollouts])
    after = torch.cat([torch.cat([r.obs[1:], r.next_obs[None]]) for r in rollouts])
    rewards = torch.cat([r.rewards for r in rollouts])
    terminated = torch.cat([r.terminated for r in rollouts])
    truncated = torch.cat([r.truncated for r in rollouts])
    length, num_envs = rewards.shape
    out = {}
    for b in range(num_envs):
        for t in range(length):
            ret, discount, m, usable, complete = 0.0, 1.0, 0, True, False
            for k in range(n):
                if t + k >= length:
                    break
                ret += discount * rewards[t + k, b].item()
                m += 1
                if terminated[t + k, b]:
                    discount, complete = 0.0, True
                    break
                discount *= gamma
                if truncated[t + k, b]:
                    usable, complete = False, True
                    break
            complete = complete or m == n
            if complete and usable:
                out[obs[t, b, 0].item()] = (ret, discount, after[t + m - 1, b, 0].item())
    return out


@pytest.mark.parametrize("n", [1, 3, 5])
def test_nstep_transitions_match_the_literal_sums_across_rollouts(n):
    generator = torch.Generator().manual_seed(n)
    builder = NStepTransitions(n, gamma=0.9)
    rollouts, got = [], {}
    for i in range(4):
        rollout = synthetic_rollout(7, 3, generator, first_id=1000 * i)
        rollouts.append(rollout)
        out = builder.add(rollout)
        for start, ret, discount, next_id in zip(
            out["obs"][:, 0].tolist(),
            out["returns"].tolist(),
            out["discounts"].tolist(),
            out["next_obs"][:, 0].tolist(),
        ):
            assert start not in got, f"transition from {start} emitted twice"
            got[start] = (ret, discount, next_id)
    expected = literal_transitions(rollouts, n, 0.9)
    pending = set(expected) - set(got)  # windows still open at the end of the last rollout
    assert len(pending) <= 3 * (n - 1) and not set(got) - set(expected)
    for start, values in got.items():
        assert values == pytest.approx(expected[start], abs=1e-5), start


def test_a_one_step_transition_is_the_step_itself():
    generator = torch.Generator().manual_seed(0)
    rollout = synthetic_rollout(5, 2, generator, first_id=0)
    out = NStepTransitions(1, gamma=0.99).add(rollout)
    usable = ~rollout.truncated
    assert torch.equal(out["returns"], rollout.rewards[usable])
    assert torch.equal(out["actions"], rollout.actions[usable])


def test_linear_schedule_ends_at_its_end():
    assert linear_schedule(1.0, 0.05, 0.0) == 1.0
    assert linear_schedule(1.0, 0.05, 0.5) == pytest.approx(0.525)
    assert linear_schedule(1.0, 0.05, 3.0) == pytest.approx(0.05)


def batch_of(q_network: QNetwork, size: int = 64, *, discount: float = 0.0, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {
        "obs": torch.randn(size, *q_network.obs_shape, generator=generator),
        "actions": torch.randint(q_network.num_actions, (size,), generator=generator),
        "returns": torch.rand(size, generator=generator) * 4 - 2,
        "discounts": torch.full((size,), discount),
        "next_obs": torch.randn(size, *q_network.obs_shape, generator=generator),
    }


def test_with_zero_discounts_q_regresses_to_the_returns():
    torch.manual_seed(0)
    q_network = QNetwork((4,), 2, dueling=True)
    agent = DQN(q_network, DQNConfig(learning_rate=3e-3, batch_size=64))
    batch = batch_of(q_network)
    for _ in range(600):
        agent.update(batch)
    q_taken = q_network(batch["obs"]).gather(1, batch["actions"][:, None]).squeeze(1)
    assert (q_taken - batch["returns"]).abs().mean() < 0.15


def test_double_q_values_the_online_argmax_with_the_target_network():
    torch.manual_seed(0)
    agent = DQN(QNetwork((4,), 3), DQNConfig(double=True))
    torch.nn.init.normal_(agent.target.advantage_head.weight)  # make the two networks disagree
    next_obs = torch.randn(32, 4)
    online_choice = agent.q_network(next_obs).argmax(-1)
    expected = agent.target(next_obs).gather(1, online_choice[:, None]).squeeze(1)
    assert torch.allclose(agent.next_values(next_obs), expected)
    agent.config.double = False
    assert torch.allclose(agent.next_values(next_obs), agent.target(next_obs).max(-1).values)


def test_priorities_are_the_absolute_td_errors():
    torch.manual_seed(0)
    agent = DQN(QNetwork((4,), 2), DQNConfig(max_grad_norm=None))
    batch = batch_of(agent.q_network, discount=0.9)
    with torch.no_grad():
        q_taken = agent.q_network(batch["obs"]).gather(1, batch["actions"][:, None]).squeeze(1)
        target = batch["returns"] + 0.9 * agent.next_values(batch["next_obs"])
    agent.update(batch)
    assert torch.allclose(agent.priorities, (target - q_taken).abs(), atol=1e-6)


def test_categorical_learning_moves_the_mass_to_the_return():
    torch.manual_seed(0)
    q_network = QNetwork((4,), 2, num_atoms=11, v_min=-5.0, v_max=5.0)
    agent = DQN(q_network, DQNConfig(learning_rate=3e-3))
    batch = batch_of(q_network, size=32)
    batch["returns"] = torch.full((32,), 2.0)  # atom 7 of -5..5
    for _ in range(300):
        agent.update(batch)
    priorities = agent.priorities
    probs = q_network.distribution(batch["obs"])[torch.arange(32), batch["actions"]]
    assert probs[:, 7].mean() > 0.9 and (priorities >= 0).all()


def atari_batch(q_network: QNetwork, size: int = 32) -> dict:
    generator = torch.Generator().manual_seed(0)
    frames = (size, *q_network.obs_shape)
    return {
        "obs": torch.randint(0, 256, frames, generator=generator, dtype=torch.uint8),
        "actions": torch.randint(q_network.num_actions, (size,), generator=generator),
        "returns": torch.rand(size, generator=generator) * 2 - 1,
        "discounts": torch.full((size,), 0.97),
        "next_obs": torch.randint(0, 256, frames, generator=generator, dtype=torch.uint8),
    }


@pytest.mark.parametrize("num_atoms", [1, 51])
def test_a_bfloat16_channels_last_update_takes_the_float32_step_up_to_rounding(num_atoms):
    # The precision levers of the policy gradients, for DQN on Atari frames (issue 25): the loss,
    # its priorities and the step match float32's to bfloat16's precision.
    torch.manual_seed(0)
    q_network = QNetwork((4, 42, 42), 6, dueling=True, trunk="cnn-universe", num_atoms=num_atoms)
    fast_network = copy.deepcopy(q_network)
    plain = DQN(q_network, DQNConfig(max_grad_norm=None))
    fast = DQN(fast_network, DQNConfig(max_grad_norm=None, autocast="bfloat16", channels_last=True))
    conv = next(m for m in fast_network.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    batch = atari_batch(q_network)
    plain_metrics, fast_metrics = plain.update(batch), fast.update(batch)
    assert fast_metrics["losses/q"] == pytest.approx(plain_metrics["losses/q"], rel=0.05)
    torch.testing.assert_close(fast.priorities, plain.priorities, rtol=0.1, atol=0.02)


def test_precision_dqn_does_not_support_names_the_fix():
    with pytest.raises(ValueError, match="bfloat16"):
        DQNConfig(autocast="float16")


@pytest.mark.parametrize("learning_rate", [0.0, -1e-4])
def test_a_learning_rate_that_is_not_positive_is_refused_with_the_config(learning_rate):
    # at once, not when the optimizer is built inside a run's process
    with pytest.raises(ValueError, match="learning_rate must be positive"):
        DQNConfig(learning_rate=learning_rate)


@pytest.mark.parametrize("num_atoms", [1, 51])
def test_a_compiled_dqn_takes_the_eager_steps_and_priorities_through_target_copies(num_atoms):
    # Three updates with a target copy after the second: the compiled loss reads the networks'
    # parameters as they are now (an optimizer step, a copy into the target), not as traced.
    torch.manual_seed(0)
    q_network = QNetwork((4,), 3, dueling=True, num_atoms=num_atoms, v_min=-2.0, v_max=2.0)
    compiled_network = copy.deepcopy(q_network)
    config = DQNConfig(target_update_interval=2, learning_rate=1e-2)
    eager = DQN(q_network, config)
    fused = DQN(compiled_network, replace(config, compile=True))
    generator = torch.Generator().manual_seed(1)
    for _ in range(3):
        batch = {
            "obs": torch.randn(16, 4, generator=generator),
            "actions": torch.randint(3, (16,), generator=generator),
            "returns": torch.randn(16, generator=generator),
            "discounts": torch.full((16,), 0.97),
            "next_obs": torch.randn(16, 4, generator=generator),
            "weights": torch.rand(16, generator=generator),
        }
        expected, got = eager.update(batch), fused.update(batch)
        assert got["losses/q"] == pytest.approx(expected["losses/q"], rel=1e-4, abs=1e-6)
        torch.testing.assert_close(fused.priorities, eager.priorities, rtol=1e-4, atol=1e-5)
    for a, b in zip(q_network.parameters(), compiled_network.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    for a, b in zip(eager.target.parameters(), fused.target.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert fused.state_dict()["model"].keys() == eager.state_dict()["model"].keys()


def test_a_batch_without_the_transition_keys_names_them():
    agent = DQN(QNetwork((4,), 2))
    with pytest.raises(ValueError, match="next_obs"):
        agent.update(
            {
                "obs": torch.zeros(2, 4),
                "actions": torch.zeros(2),
                "returns": torch.zeros(2),
                "discounts": torch.zeros(2),
            }
        )


# --- the agent in a sampler loop: ReplayAgent -----------------------------------------------------


def plain_rollout(T: int, B: int, generator: torch.Generator, first_id: int) -> Rollout:
    """``synthetic_rollout`` without episode ends: every step gives a transition."""
    rollout = synthetic_rollout(T, B, generator, first_id)
    rollout.terminated = torch.zeros(T, B, dtype=torch.bool)
    rollout.truncated = torch.zeros(T, B, dtype=torch.bool)
    return rollout


@pytest.mark.parametrize("prioritized", [False, True])
def test_replay_agent_holds_the_replay_ratio_as_the_old_loop_did(prioritized):
    """Gradient steps after S env steps past the warm-up are ``floor(S * replay_ratio /
    batch_size)``, the fraction carried from rollout to rollout; the rollout that crosses
    ``learning_starts`` counts whole (the rule of the DQN loop before ``ReplayAgent``)."""
    torch.manual_seed(0)
    config = DQNConfig(n_step=1, batch_size=32)
    replay = ReplayAgentConfig(replay_ratio=8.0, learning_starts=40, prioritized=prioritized)
    agent = ReplayAgent(DQN(QNetwork((1,), 2), config), replay, seed=0)
    assert isinstance(agent.replay, PrioritizedReplay if prioritized else UniformReplay)
    generator = torch.Generator().manual_seed(0)
    steps = []
    for i in range(8):  # 15 env steps each: rollouts 1-2 warm up (30 < 40), rollout 3 crosses
        metrics = agent.update(plain_rollout(5, 3, generator, first_id=100 * i))
        steps.append(agent.learner.num_updates)
        assert metrics["charts/gradient_steps"] == agent.learner.num_updates
    # S = 15 * (k - 2) after rollout k >= 3; 15 * 8 / 32 = 3.75 updates per rollout.
    assert steps == [0, 0, 3, 7, 11, 15, 18, 22]
    assert steps == [math.floor(max(0, 15 * (k - 2)) * 8.0 / 32) for k in range(1, 9)]
    assert agent.env_steps == 120 and len(agent.replay) == 120
    assert agent.limiter.sampled == 22 * 32 and agent.limiter.counted == 90


def test_the_loop_anneals_the_acting_epsilon_and_a_checkpoint_keeps_where_it_was():
    """Mnih et al. 2015's schedule: epsilon falls linearly from start to end over the first
    ``exploration_fraction`` of the run, then stays; the learner's own config has no epsilon."""
    schedule = ReplayAgentConfig(
        exploration_start=1.0, exploration_end=0.1, exploration_fraction=0.5
    )
    agent = ReplayAgent(DQN(QNetwork((4,), 2), DQNConfig()), schedule)
    epsilon = lambda: agent.model.epsilon.item()  # noqa: E731
    assert epsilon() == pytest.approx(1.0)
    agent.set_progress(0.25)
    assert epsilon() == pytest.approx(0.55)
    saved = agent.state_dict()
    agent.set_progress(0.75)
    assert epsilon() == pytest.approx(0.1)
    again = ReplayAgent(DQN(QNetwork((4,), 2), DQNConfig()), schedule)
    again.load_state_dict(saved)
    assert again.model.epsilon.item() == pytest.approx(0.55)
    assert not hasattr(DQNConfig(), "epsilon_start")


def frame_rollout(T: int, B: int, t0: int, generator: torch.Generator) -> Rollout:
    """Atari-shaped steps ``t0 .. t0 + T - 1``: 4-frame stacks of 42x42 frames, newest last, each
    frame filled with its id ``1 + 100 b + t + 3`` (env b, time t), so a stack names its step."""
    times = torch.arange(t0 - 3, t0 + T + 1)
    ids = 1 + 100 * torch.arange(B)[None, :] + times[:, None] + 3  # [T + 4, B]
    frames = ids[..., None, None].expand(-1, -1, 42, 42).to(torch.uint8)
    stacks = torch.stack([frames[k : k + T + 1] for k in range(4)], dim=2)  # [T + 1, B, 4, ...]
    return Rollout(
        obs=stacks[:T],
        actions=torch.randint(3, (T, B), generator=generator),
        rewards=torch.randn(T, B, generator=generator),
        terminated=torch.zeros(T, B, dtype=torch.bool),
        truncated=torch.zeros(T, B, dtype=torch.bool),
        truncation_values=torch.zeros(T, B),
        policy_outputs={},
        next_obs=stacks[T],
    )


@pytest.mark.parametrize("prioritized", [False, True])
def test_replay_agent_with_frame_streams_learns_from_windows_rebuilt_from_frames_stored_once(
    prioritized,
):
    """``frame_streams``: each frame stored once (``FrameStorage``, rlpyt's frame buffer); what the
    learner samples is the n-step transition (Hessel et al. 2018, Eq. 2) of the step it names."""
    torch.manual_seed(0)
    config = DQNConfig(n_step=3, gamma=0.9, batch_size=16)
    replay = ReplayAgentConfig(
        replay_ratio=8.0, learning_starts=20, replay_capacity=101, prioritized=prioritized
    )
    network = QNetwork((4, 42, 42), 3, trunk="cnn-universe")
    agent = ReplayAgent(DQN(network, config), replay, seed=0, frame_streams=2)
    assert isinstance(agent.replay.storage, FrameStorage) and agent.replay.capacity == 100
    generator = torch.Generator().manual_seed(0)
    rollouts = [frame_rollout(10, 2, 10 * i, generator) for i in range(4)]
    for rollout in rollouts:
        agent.update(rollout)
    # 80 env steps, the rollout that crosses learning_starts counted whole: 80 * 8 / 16 updates
    assert agent.learner.num_updates == 80 * 8 // 16
    rewards = torch.cat([r.rewards for r in rollouts])
    batch, _, _ = agent.replay.sample(64)
    newest = torch.as_tensor(batch["obs"][:, -1, 0, 0]).long()
    envs, times = (newest - 1) // 100, (newest - 1) % 100 - 3
    assert times.max() <= 36  # windows whose next stack (t + 3 <= 39) is stored
    expected = sum(0.9**k * rewards[times + k, envs] for k in range(3))
    torch.testing.assert_close(torch.as_tensor(batch["returns"]).float(), expected)
    torch.testing.assert_close(
        torch.as_tensor(batch["discounts"]).float(), torch.full((64,), 0.729)
    )
    assert (torch.as_tensor(batch["next_obs"][:, -1, 0, 0]).long() == newest + 3).all()
    # 2 x 42 x 42 frames a step, not two 4-frame stacks: under a third of the transitions' bytes
    assert agent.replay.storage.nbytes < 100 * 2 * 4 * 42 * 42 / 3
