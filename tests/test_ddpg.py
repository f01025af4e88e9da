"""Specifications for ``workbench.learners.ddpg`` (n-step DDPG, the Ape-X DPG learner) and its
networks ``models.DeterministicPolicy`` / ``models.ContinuousQ``: exploration noise, TD targets and
priorities, the two gradient steps, target updates, the actor's parameters, and that the agent
learns Pendulum-v1 in a ``ReplayAgent``."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch

from workbench.learners import DDPG, DDPG_REPLAY, DDPGConfig, ReplayAgent
from workbench.models import ContinuousQ, DeterministicPolicy
from workbench.rollout import Rollout

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

LOW, HIGH = [-2.0, 0.0], [2.0, 1.0]  # two action dimensions with different ranges and middles


def make_agent(config: DDPGConfig | None = None, *, obs_dim: int = 3, seed: int = 0) -> DDPG:
    torch.manual_seed(seed)
    policy = DeterministicPolicy(obs_dim, LOW, HIGH, hidden=(32, 32))
    critic = ContinuousQ(obs_dim, len(LOW), hidden=(32, 32))
    return DDPG(policy, critic, config or DDPGConfig(batch_size=16))


def batch_of(size: int = 64, *, discount: float = 0.9, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    return {
        "obs": torch.randn(size, 3, generator=generator),
        "actions": low + (high - low) * torch.rand(size, 2, generator=generator),
        "returns": torch.rand(size, generator=generator) * 4 - 2,
        "discounts": torch.full((size,), discount),
        "next_obs": torch.randn(size, 3, generator=generator),
    }


def perturb(module: torch.nn.Module, seed: int) -> None:
    """Make a target network disagree with its online network."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=generator))


def literal_td(agent: DDPG, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """|returns + discounts * Q'(s', mu'(s')) - Q(s, a)|, one transition at a time."""
    out = []
    with torch.no_grad():
        for i in range(batch["obs"].shape[0]):
            s, a, s2 = (
                batch["obs"][i : i + 1],
                batch["actions"][i : i + 1],
                batch["next_obs"][i : i + 1],
            )
            bootstrap = agent.target_critic(s2, agent.target_policy(s2))[0]
            target = batch["returns"][i] + batch["discounts"][i] * bootstrap
            out.append(abs(float(target) - float(agent.critic(s, a)[0])))
    return torch.tensor(out)


# --- networks -------------------------------------------------------------------------------------


def test_the_policy_stays_inside_the_bounds_whatever_its_weights():
    torch.manual_seed(0)  # unseeded, some draws saturate one action at one bound only
    policy = DeterministicPolicy(3, LOW, HIGH, hidden=(16,))
    torch.nn.init.normal_(policy.head.weight, std=100.0)  # saturate tanh
    actions = policy(torch.randn(500, 3) * 10)
    assert actions.shape == (500, 2)
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    assert ((actions >= low) & (actions <= high)).all()
    assert torch.allclose(actions.amin(0), low, atol=1e-3) and torch.allclose(
        actions.amax(0), high, atol=1e-3
    )


def test_the_bounds_travel_with_the_state_dict():
    source, dest = DeterministicPolicy(3, [-5.0], [5.0]), DeterministicPolicy(3, [-1.0], [1.0])
    dest.load_state_dict(source.state_dict())
    assert dest.action_high.item() == 5.0 and dest.action_scale.item() == 5.0


def test_time_major_inputs_keep_their_leading_dimensions():
    policy, critic = DeterministicPolicy(3, LOW, HIGH), ContinuousQ(3, 2)
    obs = torch.randn(5, 4, 3)
    assert policy(obs).shape == (5, 4, 2) and critic(obs, policy(obs)).shape == (5, 4)


def test_bad_bounds_and_mismatched_actions_name_the_fix():
    with pytest.raises(ValueError, match="low < high"):
        DeterministicPolicy(3, [1.0], [-1.0])
    with pytest.raises(ValueError, match="action_space.low"):
        DeterministicPolicy(3, [-1.0, -1.0], [1.0])
    with pytest.raises(ValueError, match=r"actions\[..., None\]"):
        ContinuousQ(3, 1)(torch.zeros(4, 3), torch.zeros(4))


# --- acting ---------------------------------------------------------------------------------------


def test_act_adds_noise_of_the_given_scale_per_row():
    agent = make_agent()
    scales = torch.tensor([0.02, 0.05, 0.1])
    obs = torch.randn(1, 3).expand(3, 3)  # one state, three actors
    rows = 4000
    actions = agent.act(obs.repeat(rows, 1), scales.repeat(rows)).reshape(rows, 3, 2)
    half_range = (torch.tensor(HIGH) - torch.tensor(LOW)) / 2
    expected = scales[:, None] * half_range  # [actor, dim]
    assert torch.allclose(actions.std(0), expected, rtol=0.08)
    assert torch.allclose(
        actions.mean(0), agent.policy(obs), atol=4 * expected.max().item() / rows**0.5
    )


def test_act_clips_to_the_bounds_and_zero_noise_is_the_policy():
    agent = make_agent()
    obs = torch.randn(256, 3)
    wild = agent.act(obs, 10.0)
    low, high = torch.tensor(LOW), torch.tensor(HIGH)
    assert ((wild >= low) & (wild <= high)).all() and (wild == low).any() and (wild == high).any()
    assert torch.equal(agent.act(obs, 0.0), agent.policy(obs).detach())
    with pytest.raises(ValueError, match="one noise scale per row"):
        agent.act(obs, torch.full((3,), 0.1))


# --- priorities and the learning step -------------------------------------------------------------


def test_initial_priorities_are_the_literal_td_errors_and_change_nothing():
    agent = make_agent()
    perturb(agent.target_critic, 1)
    perturb(agent.target_policy, 2)
    batch = batch_of(32)
    before = copy.deepcopy(agent.state_dict())
    priorities = agent.initial_priorities(batch)
    assert priorities.shape == (32,) and priorities.device.type == "cpu"
    assert torch.allclose(priorities, literal_td(agent, batch), atol=1e-5)
    after = agent.state_dict()
    for name in ("policy", "critic", "target_policy", "target_critic"):
        for key, value in before[name].items():
            assert torch.equal(value, after[name][key]), (name, key)
    assert agent.num_updates == 0


def test_update_keeps_the_td_errors_from_before_its_step():
    agent = make_agent()
    perturb(agent.target_critic, 1)
    batch = batch_of(32)
    expected = literal_td(agent, batch)
    metrics = agent.update({**batch, "weights": torch.rand(32)})
    assert torch.allclose(agent.priorities, expected, atol=1e-5)
    assert not torch.allclose(
        agent.initial_priorities(batch), expected, atol=1e-5
    )  # the critic moved
    assert {"losses/critic", "losses/actor", "charts/q_values"} <= set(metrics)


def test_with_zero_discounts_the_critic_regresses_to_the_returns():
    agent = make_agent(DDPGConfig(critic_learning_rate=3e-3, batch_size=64))
    batch = batch_of(64, discount=0.0)
    for _ in range(500):
        agent.update(batch)
    q_taken = agent.critic(batch["obs"], batch["actions"])
    assert (q_taken - batch["returns"]).abs().mean() < 0.1


def test_zero_importance_weights_leave_the_critic_unchanged():
    agent = make_agent()
    before = copy.deepcopy(agent.critic.state_dict())
    agent.update({**batch_of(32), "weights": torch.zeros(32)})
    for key, value in before.items():
        assert torch.equal(value, agent.critic.state_dict()[key]), key


def test_the_actor_step_climbs_the_critic():
    """Silver et al. 2014, Eq. 6: after the step, mu(s) is worth more under the (updated) critic."""
    agent = make_agent(DDPGConfig(actor_learning_rate=1e-3, batch_size=64))
    batch = batch_of(64)
    old_policy = copy.deepcopy(agent.policy)
    agent.update(batch)
    with torch.no_grad():
        obs = batch["obs"]
        gain = agent.critic(obs, agent.policy(obs)) - agent.critic(obs, old_policy(obs))
    assert gain.mean() > 0


def test_targets_move_by_tau_every_step():
    agent = make_agent(DDPGConfig(tau=0.1, batch_size=16))
    perturb(agent.target_critic, 1)
    old_target = copy.deepcopy(agent.target_critic.state_dict())
    agent.update(batch_of(16))
    for key, online in agent.critic.state_dict().items():
        expected = 0.9 * old_target[key] + 0.1 * online
        assert torch.allclose(agent.target_critic.state_dict()[key], expected, atol=1e-6), key


def test_with_tau_one_the_targets_are_copied_at_the_interval():
    agent = make_agent(DDPGConfig(tau=1.0, target_update_interval=3, batch_size=16))
    initial = copy.deepcopy(agent.target_policy.state_dict())
    for step in range(1, 4):
        agent.update(batch_of(16, seed=step))
        target = agent.target_policy.state_dict()
        if step < 3:
            assert all(torch.equal(initial[k], target[k]) for k in initial)
    assert all(torch.equal(v, agent.policy.state_dict()[k]) for k, v in target.items())


def test_a_batch_without_the_transition_keys_names_them():
    batch = batch_of(8)
    del batch["next_obs"]
    with pytest.raises(ValueError, match="next_obs"):
        make_agent().update(batch)


# --- config, schedules and parameters -------------------------------------------------------------


@pytest.mark.parametrize(
    "options, fix",
    [
        ({"tau": 0.0}, "tau must be in"),
        ({"n_step": 0}, "n_step must be a positive integer"),
        ({"target_update_interval": 0}, "target_update_interval must be a positive int"),
        ({"critic_learning_rate": 0.0}, "critic_learning_rate must be positive"),
    ],
)
def test_config_errors_name_the_fix(options, fix):
    with pytest.raises(ValueError, match=fix):
        DDPGConfig(**options)


@pytest.mark.parametrize(
    "options, fix",
    [
        ({"replay_capacity": 8}, "at least one batch"),  # make_agent's batch is 16
        ({"replay_ratio": 0.0}, "replay_ratio must be positive"),
        ({"exploration_start": -0.1}, "exploration_start must be >= 0"),
    ],
)
def test_loop_config_errors_name_the_fix(options, fix):
    with pytest.raises(ValueError, match=fix):
        ReplayAgent(make_agent(), replace(DDPG_REPLAY, **options))


def test_the_loop_sets_the_acting_policy_s_noise_scale():
    agent = ReplayAgent(make_agent(), replace(DDPG_REPLAY, exploration_start=0.3))
    assert agent.model.noise_scale.item() == pytest.approx(0.3)
    with pytest.raises(ValueError, match="noise scale must be >= 0"):
        agent.learner.set_exploration(-1.0)


def test_set_progress_anneals_beta_to_one():
    replay = replace(DDPG_REPLAY, prioritized=True, priority_beta_start=0.4, replay_capacity=64)
    agent = ReplayAgent(make_agent(), replay, seed=0)
    assert agent.replay.beta == pytest.approx(0.4)
    agent.set_progress(0.5)
    assert agent.replay.beta == pytest.approx(0.7)
    agent.set_progress(2.0)
    assert agent.replay.beta == pytest.approx(1.0)


def test_an_actor_loaded_with_actor_state_computes_the_learners_priorities():
    learner, actor = make_agent(seed=0), make_agent(seed=1)
    for _ in range(3):
        learner.update(batch_of(16))
    actor.load_actor_state(learner.actor_state())
    batch, obs = batch_of(32, seed=5), torch.randn(8, 3)
    assert torch.equal(actor.initial_priorities(batch), learner.initial_priorities(batch))
    assert torch.equal(actor.act(obs, 0.0), learner.act(obs, 0.0))
    assert all(v.device.type == "cpu" for v in learner.actor_state().values())


def test_state_dict_round_trip_restores_networks_optimizers_and_counters():
    source, dest = make_agent(seed=0), make_agent(seed=1)
    for _ in range(2):
        source.update(batch_of(16))
    dest.load_state_dict(copy.deepcopy(source.state_dict()))  # as torch.save / torch.load would
    batch = batch_of(16, seed=3)
    assert dest.num_updates == 2
    assert torch.equal(dest.initial_priorities(batch), source.initial_priorities(batch))
    source.update(batch)
    dest.update(batch)
    assert torch.equal(source.priorities, dest.priorities)
    assert torch.allclose(dest.initial_priorities(batch), source.initial_priorities(batch))


def test_update_adds_nstep_transitions_and_takes_the_owed_steps():
    config = DDPGConfig(n_step=3, batch_size=16)
    replay = replace(DDPG_REPLAY, replay_ratio=8.0, learning_starts=32, replay_capacity=256)
    agent = ReplayAgent(make_agent(config), replay, seed=0)
    T, B = 8, 4
    generator = torch.Generator().manual_seed(0)

    def rollout() -> Rollout:
        return Rollout(
            obs=torch.randn(T, B, 3, generator=generator),
            actions=torch.rand(T, B, 2, generator=generator),
            rewards=torch.randn(T, B, generator=generator),
            terminated=torch.zeros(T, B, dtype=torch.bool),
            truncated=torch.zeros(T, B, dtype=torch.bool),
            truncation_values=torch.zeros(T, B),
            policy_outputs={},
            next_obs=torch.randn(B, 3, generator=generator),
        )

    agent.update(rollout())  # 32 steps: (T - n + 1) * B = 24 complete windows; learning starts
    assert len(agent.replay) == 24 and agent.num_updates == 32 * 8 // 16
    metrics = agent.update(rollout())
    assert len(agent.replay) == 56 and agent.num_updates == 32 and agent.env_steps == 64
    assert agent.replay.sample(4)[0]["actions"].shape == (4, 2) and "losses/critic" in metrics


# --- learning -------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0])
def test_ddpg_learns_pendulum(seed):
    """3-step DDPG on Pendulum-v1 (4 envs, a compact network, one update per two env steps): the
    mean return of the last 10 episodes reaches -200 within 20k env steps (about 6-7k for seeds
    0-2, 15-40 s on 2 busy cores)."""
    from workbench.sampling import SerialSampler

    torch.manual_seed(seed)
    with SerialSampler("Pendulum-v1", num_envs=4, horizon=8, seed=seed) as sampler:
        obs_dim, space = sampler.observation_space.shape[0], sampler.action_space
        policy = DeterministicPolicy(obs_dim, space.low, space.high, hidden=(128, 128))
        critic = ContinuousQ(obs_dim, space.shape[0], hidden=(128, 128))
        config = DDPGConfig(batch_size=128)
        replay = replace(DDPG_REPLAY, replay_ratio=64.0)
        agent = ReplayAgent(DDPG(policy, critic, config), replay, seed=seed)
        returns: list[float] = []
        while agent.env_steps < 20_000:
            rollout = sampler.collect(agent.model)
            agent.update(rollout)
            returns += rollout.episodes.returns
            if len(returns) >= 10 and np.mean(returns[-10:]) >= -200:
                break
    assert len(returns) >= 10 and np.mean(returns[-10:]) >= -200, (agent.env_steps, returns[-10:])
