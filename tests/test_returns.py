"""Specifications for ``workbench.kernels`` (returns, V-trace, C51 projection, value rescaling),
in three tiers.

1. Literal float64 references, written as slow Python loops straight from the papers' equations
   (sum forms where the paper gives them, not the recursions the package uses), compared on random
   inputs with terminations and truncations.
2. Small hand-computed cases and identities (lambda = 0 / 1, n = 1 / n >= T, on-policy V-trace).
3. Argument errors that name the expected shapes; V-trace outputs carry no gradient.
"""

from __future__ import annotations

import math

import pytest
import torch

from workbench.kernels import (
    GAEReturns,
    VTraceReturns,
    categorical_projection,
    gae,
    gae_from_rollout,
    inverse_value_rescale,
    nstep_targets,
    value_rescale,
    vtrace,
)
from workbench.rollout import Rollout

T, B = 7, 4
GAMMA = 0.9


def random_episode_data(seed: int, T: int = T, B: int = B) -> dict[str, torch.Tensor]:
    """float64 [T, B] data with some terminations and some (non-terminal) truncations."""
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(T, B, generator=g) < 0.2
    truncated = (torch.rand(T, B, generator=g) < 0.2) & ~terminated
    truncation_values = torch.where(
        truncated,
        torch.randn(T, B, generator=g, dtype=torch.float64),
        torch.zeros(T, B, dtype=torch.float64),
    )
    return dict(
        rewards=torch.randn(T, B, generator=g, dtype=torch.float64),
        values=torch.randn(T, B, generator=g, dtype=torch.float64),
        bootstrap_value=torch.randn(B, generator=g, dtype=torch.float64),
        terminated=terminated,
        truncated=truncated,
        truncation_values=truncation_values,
        behaviour_logp=-torch.rand(T, B, generator=g, dtype=torch.float64) * 2,
        target_logp=-torch.rand(T, B, generator=g, dtype=torch.float64) * 2,
    )


def make_rollout(d: dict[str, torch.Tensor]) -> Rollout:
    T, B = d["rewards"].shape
    return Rollout(
        obs=torch.zeros(T, B, 1),
        actions=torch.zeros(T, B, dtype=torch.long),
        rewards=d["rewards"],
        terminated=d["terminated"],
        truncated=d["truncated"],
        truncation_values=d["truncation_values"],
        policy_outputs={},
        next_obs=torch.zeros(B, 1),
    )


def episode_boundary_args(
    d: dict[str, torch.Tensor], gamma: float = GAMMA
) -> dict[str, torch.Tensor]:
    """discounts, next_values, continuation as ``gae_from_rollout`` builds them."""
    next_values = torch.cat([d["values"][1:], d["bootstrap_value"][None]])
    next_values = torch.where(d["truncated"], d["truncation_values"], next_values)
    return dict(
        discounts=gamma * (~d["terminated"]).double(),
        next_values=next_values,
        continuation=(~(d["terminated"] | d["truncated"])).double(),
    )


# ==================================================================================================
# Tier 1: literal float64 references from the papers


def reference_gae(
    rewards, values, bootstrap_value, discounts, lam, next_values=None, continuation=None
):
    """Schulman et al. 2016, Eq. 16: A_t = sum_l (prod_{j<l} gamma lambda c) delta_{t+l}."""
    T, B = len(rewards), len(rewards[0])
    out = [[0.0] * B for _ in range(T)]
    for b in range(B):

        def v_next(t, b=b):
            if next_values is not None:
                return float(next_values[t][b])
            return float(values[t + 1][b]) if t + 1 < T else float(bootstrap_value[b])

        def cont(t, b=b):
            if continuation is not None:
                return float(continuation[t][b])
            return 1.0 if discounts[t][b] > 0 else 0.0

        deltas = [
            float(rewards[t][b]) + float(discounts[t][b]) * v_next(t) - float(values[t][b])
            for t in range(T)
        ]
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(T - t):  # the paper's l
                total += weight * deltas[t + k]
                weight *= lam * float(discounts[t + k][b]) * cont(t + k)
            out[t][b] = total
    return torch.tensor(out, dtype=torch.float64)


def reference_gae_episodes(d, gamma, lam):
    """Per environment, per episode: delta with the final observation's value at a truncation."""
    T, B = d["rewards"].shape
    out = torch.zeros(T, B, dtype=torch.float64)
    for b in range(B):
        advantage = 0.0
        for t in reversed(range(T)):
            r, v = float(d["rewards"][t, b]), float(d["values"][t, b])
            if d["terminated"][t, b]:
                advantage = r - v
            elif d["truncated"][t, b]:
                advantage = r + gamma * float(d["truncation_values"][t, b]) - v
            else:
                v_next = (
                    float(d["values"][t + 1, b]) if t + 1 < T else float(d["bootstrap_value"][b])
                )
                advantage = r + gamma * v_next - v + gamma * lam * advantage
            out[t, b] = advantage
    return out


def reference_vtrace(
    behaviour_logp,
    target_logp,
    rewards,
    values,
    bootstrap_value,
    discounts,
    rho_bar,
    pg_rho_bar,
    c_bar,
    next_values=None,
    continuation=None,
):
    """Espeholt et al. 2018, Eq. 1 (the sum, not Remark 1's recursion) and Section 4.2."""
    T, B = rewards.shape

    def clip(x, bar):
        return x if bar is None else min(bar, x)

    vs = torch.zeros(T, B, dtype=torch.float64)
    pg = torch.zeros(T, B, dtype=torch.float64)
    for b in range(B):
        ratio = [math.exp(float(target_logp[t, b]) - float(behaviour_logp[t, b])) for t in range(T)]
        V = [float(values[t, b]) for t in range(T)]
        d = [float(discounts[t, b]) for t in range(T)]
        r = [float(rewards[t, b]) for t in range(T)]
        nv = [
            (
                float(next_values[t, b])
                if next_values is not None
                else (V[t + 1] if t + 1 < T else float(bootstrap_value[b]))
            )
            for t in range(T)
        ]
        k = [
            float(continuation[t, b]) if continuation is not None else (1.0 if d[t] > 0 else 0.0)
            for t in range(T)
        ]
        for s in range(T):
            total = V[s]
            for t in range(s, T):
                weight = 1.0  # prod_{i=s}^{t-1} gamma_i c_i (within the episode)
                for i in range(s, t):
                    weight *= d[i] * k[i] * clip(ratio[i], c_bar)
                total += weight * clip(ratio[t], rho_bar) * (r[t] + d[t] * nv[t] - V[t])
            vs[s, b] = total
        for s in range(T):
            # v_{s+1} within the episode: the next value plus its V-trace correction.
            correction = float(vs[s + 1, b]) - V[s + 1] if s + 1 < T else 0.0
            v_next = nv[s] + k[s] * correction
            pg[s, b] = clip(ratio[s], pg_rho_bar) * (r[s] + d[s] * v_next - V[s])
    return vs, pg


def reference_nstep(rewards, discounts, bootstrap_values, n, continuation=None):
    """The n-step target: the m = min(n, T - t) next rewards, each discounted by the product of the
    discounts before it, plus the product of all m discounts times the bootstrap value (Rainbow,
    Eq. 2, with per-step discounts); m also cut after the first step where the episode ended."""
    T, B = rewards.shape
    out = torch.zeros(T, B, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            m = min(n, T - t)
            if continuation is not None:
                for j in range(t, t + m):
                    if continuation[j, b] == 0:
                        m = j - t + 1
                        break
            total, discount = 0.0, 1.0
            for k in range(m):
                total += discount * float(rewards[t + k, b])
                discount *= float(discounts[t + k, b])
            out[t, b] = total + discount * float(bootstrap_values[t + m - 1, b])
    return out


def reference_projection(next_probs, rewards, discounts, support):
    """Bellemare et al. 2017, Algorithm 1, one transition and one atom at a time (l == u fixed)."""
    Bn, N = next_probs.shape
    v_min, v_max = float(support[0]), float(support[-1])
    dz = (v_max - v_min) / (N - 1)
    out = torch.zeros(Bn, N, dtype=torch.float64)
    for i in range(Bn):
        for j in range(N):
            tz = min(v_max, max(v_min, float(rewards[i]) + float(discounts[i]) * float(support[j])))
            b = (tz - v_min) / dz
            lo, hi = math.floor(b), math.ceil(b)  # Algorithm 1's l and u
            p = float(next_probs[i, j])
            if lo == hi:
                out[i, lo] += p
            else:
                out[i, lo] += p * (hi - b)
                out[i, hi] += p * (b - lo)
    return out


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
def test_gae_matches_the_paper_sum(lam):
    d = random_episode_data(seed=1)
    discounts = GAMMA * (~d["terminated"]).double()
    got = gae(d["rewards"], d["values"], d["bootstrap_value"], discounts, lam)
    want = reference_gae(d["rewards"], d["values"], d["bootstrap_value"], discounts, lam)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("lam", [0.0, 0.7, 1.0])
def test_gae_with_episode_boundaries_matches_references(lam):
    d = random_episode_data(seed=2)
    assert d["terminated"].any() and d["truncated"].any()
    extra = episode_boundary_args(d)
    got = gae(
        d["rewards"],
        d["values"],
        d["bootstrap_value"],
        extra["discounts"],
        lam,
        next_values=extra["next_values"],
        continuation=extra["continuation"],
    )
    torch.testing.assert_close(got, reference_gae_episodes(d, GAMMA, lam), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(
        got,
        reference_gae(
            d["rewards"],
            d["values"],
            d["bootstrap_value"],
            extra["discounts"],
            lam,
            next_values=extra["next_values"],
            continuation=extra["continuation"],
        ),
        rtol=1e-10,
        atol=1e-10,
    )
    out = gae_from_rollout(make_rollout(d), d["values"], d["bootstrap_value"], GAMMA, lam)
    assert isinstance(out, GAEReturns)
    torch.testing.assert_close(out.advantages, got, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out.returns, got + d["values"], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "thresholds", [(1.0, 1.0, 1.0), (2.0, 0.5, 0.9), (None, None, None), (0.8, 1.5, 0.3)]
)
def test_vtrace_matches_the_paper_sum(thresholds):
    d = random_episode_data(seed=3)
    discounts = GAMMA * (~d["terminated"]).double()
    args = (
        d["behaviour_logp"],
        d["target_logp"],
        d["rewards"],
        d["values"],
        d["bootstrap_value"],
        discounts,
    )
    got = vtrace(*args, *thresholds)
    assert isinstance(got, VTraceReturns)
    want_vs, want_pg = reference_vtrace(*args, *thresholds)
    torch.testing.assert_close(got.vs, want_vs, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(got.pg_advantages, want_pg, rtol=1e-10, atol=1e-10)


def test_vtrace_with_episode_boundaries_matches_the_paper_sum():
    d = random_episode_data(seed=4)
    extra = episode_boundary_args(d)
    args = (
        d["behaviour_logp"],
        d["target_logp"],
        d["rewards"],
        d["values"],
        d["bootstrap_value"],
        extra["discounts"],
        1.2,
        0.8,
        0.9,
    )
    got = vtrace(*args, next_values=extra["next_values"], continuation=extra["continuation"])
    want_vs, want_pg = reference_vtrace(*args, extra["next_values"], extra["continuation"])
    torch.testing.assert_close(got.vs, want_vs, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(got.pg_advantages, want_pg, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n", [1, 2, 3, T - 1, T, T + 3])
def test_nstep_targets_match_the_formula(n):
    d = random_episode_data(seed=5)
    discounts = GAMMA * (~d["terminated"]).double()
    bootstrap_values = torch.randn(
        T, B, dtype=torch.float64, generator=torch.Generator().manual_seed(6)
    )
    got = nstep_targets(d["rewards"], discounts, bootstrap_values, n)
    want = reference_nstep(d["rewards"], discounts, bootstrap_values, n)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    continuation = (~(d["terminated"] | d["truncated"])).double()
    got = nstep_targets(d["rewards"], discounts, bootstrap_values, n, continuation=continuation)
    want = reference_nstep(d["rewards"], discounts, bootstrap_values, n, continuation)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_categorical_projection_matches_algorithm_1():
    g = torch.Generator().manual_seed(7)
    Bn, N = 16, 11
    support = torch.linspace(-5.0, 5.0, N, dtype=torch.float64)
    next_probs = torch.softmax(torch.randn(Bn, N, generator=g, dtype=torch.float64), dim=1)
    rewards = torch.randn(Bn, generator=g, dtype=torch.float64) * 3
    rewards[:4] = torch.tensor([1.0, -2.0, 7.0, -9.0])  # exact atoms, and beyond both ends
    discounts = torch.where(torch.rand(Bn, generator=g) < 0.25, 0.0, 0.99).double()
    discounts[:2] = 1.0  # r + z_j lands exactly on atoms
    got = categorical_projection(next_probs, rewards, discounts, support)
    want = reference_projection(next_probs, rewards, discounts, support)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


def test_value_rescale_matches_the_papers_formulas():
    x = torch.cat(
        [
            -torch.logspace(-6, 6, 50, dtype=torch.float64),
            torch.zeros(1, dtype=torch.float64),
            torch.logspace(-6, 6, 50, dtype=torch.float64),
        ]
    )
    eps = 1e-3
    h = torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + eps * x  # Kapturowski et al. 2019
    torch.testing.assert_close(value_rescale(x, eps), h, rtol=1e-9, atol=1e-12)
    y = h[x.abs() > 1e-3]  # Pohlen et al. 2018, Prop. A.2 (its cancellation needs |x| not tiny)
    h_inv = torch.sign(y) * (
        ((torch.sqrt(1 + 4 * eps * (y.abs() + 1 + eps)) - 1) / (2 * eps)) ** 2 - 1
    )
    torch.testing.assert_close(inverse_value_rescale(y, eps), h_inv, rtol=1e-7, atol=0)


# ==================================================================================================
# Tier 2: small hand-computed cases and identities


def discounted_returns(rewards, discounts, bootstrap_value):
    out, acc = torch.zeros_like(rewards), bootstrap_value
    for t in reversed(range(rewards.shape[0])):
        acc = rewards[t] + discounts[t] * acc
        out[t] = acc
    return out


def test_gae_hand_computed():
    # T = 3, B = 1, gamma = 0.5, lam = 0.5, no episode end.
    rewards = torch.tensor([[1.0], [0.0], [2.0]], dtype=torch.float64)
    values = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    bootstrap = torch.tensor([4.0], dtype=torch.float64)
    discounts = torch.full((3, 1), 0.5, dtype=torch.float64)
    # deltas: 1 + 0.5*2 - 1 = 1;  0 + 0.5*3 - 2 = -0.5;  2 + 0.5*4 - 3 = 1
    # A_2 = 1;  A_1 = -0.5 + 0.25 * 1 = -0.25;  A_0 = 1 + 0.25 * -0.25 = 0.9375
    got = gae(rewards, values, bootstrap, discounts, 0.5)
    torch.testing.assert_close(got, torch.tensor([[0.9375], [-0.25], [1.0]], dtype=torch.float64))


def test_gae_lambda_one_is_discounted_return_minus_values_and_zero_is_td_error():
    d = random_episode_data(seed=8)
    discounts = GAMMA * (~d["terminated"]).double()
    r, v, bv = d["rewards"], d["values"], d["bootstrap_value"]
    torch.testing.assert_close(
        gae(r, v, bv, discounts, 1.0), discounted_returns(r, discounts, bv) - v
    )
    next_v = torch.cat([v[1:], bv[None]])
    torch.testing.assert_close(gae(r, v, bv, discounts, 0.0), r + discounts * next_v - v)


def test_gae_accepts_float32_and_bool_continuation():
    d = random_episode_data(seed=9)
    extra = episode_boundary_args(d)
    f32 = {k: v.float() for k, v in d.items() if v.is_floating_point()}
    got = gae(
        f32["rewards"],
        f32["values"],
        f32["bootstrap_value"],
        extra["discounts"].float(),
        0.9,
        next_values=extra["next_values"].float(),
        continuation=extra["continuation"].bool(),
    )
    assert got.dtype == torch.float32
    torch.testing.assert_close(
        got.double(), reference_gae_episodes(d, GAMMA, 0.9), rtol=1e-5, atol=1e-5
    )


def test_gae_from_rollout_truncation_and_termination_by_hand():
    # One environment, T = 4: truncated (time limit) at t = 1, terminated at t = 2.
    d = dict(
        rewards=torch.tensor([[1.0], [2.0], [3.0], [4.0]]),
        terminated=torch.tensor([[False], [False], [True], [False]]),
        truncated=torch.tensor([[False], [True], [False], [False]]),
        truncation_values=torch.tensor([[0.0], [10.0], [0.0], [0.0]]),
    )
    values = torch.tensor([[0.5], [0.6], [0.7], [0.8]])
    bootstrap = torch.tensor([0.9])
    gamma, lam = 0.9, 0.8
    out = gae_from_rollout(make_rollout(d), values, bootstrap, gamma, lam)
    # t=3: 4 + 0.9*0.9 - 0.8 = 4.01
    # t=2 (terminated): 3 - 0.7 = 2.3, nothing from t=3
    # t=1 (truncated): 2 + 0.9*10 - 0.6 = 10.4 (truncation value, not V(obs[2])), nothing from t=2
    # t=0: 1 + 0.9*0.6 - 0.5 + 0.9*0.8*10.4 = 1.04 + 7.488 = 8.528
    want = torch.tensor([[8.528], [10.4], [2.3], [4.01]])
    torch.testing.assert_close(out.advantages, want)
    torch.testing.assert_close(out.returns, want + values)

    # Nothing flows across either boundary: changing what lies after one leaves what lies before.
    def advantages(rewards=d["rewards"], values=values, bootstrap=bootstrap):
        return gae_from_rollout(
            make_rollout(dict(d, rewards=rewards)), values, bootstrap, gamma, lam
        ).advantages

    bumped = advantages(rewards=d["rewards"] + torch.tensor([[0.0], [0.0], [5.0], [0.0]]))
    torch.testing.assert_close(bumped[:2], want[:2])  # the new episode's reward: not before t=2
    bumped = advantages(values=values + torch.tensor([[0.0], [0.0], [5.0], [0.0]]))
    torch.testing.assert_close(bumped[:2], want[:2])  # V(obs[2]) is not the truncation bootstrap
    bumped = advantages(rewards=d["rewards"] + torch.tensor([[0.0], [0.0], [0.0], [5.0]]))
    torch.testing.assert_close(bumped[:3], want[:3])  # after the termination: not before t=3
    bumped = advantages(bootstrap=bootstrap + 5.0)
    torch.testing.assert_close(bumped[:3], want[:3])


def test_gae_from_rollout_terminated_and_truncated_is_terminal():
    d = dict(
        rewards=torch.tensor([[1.0], [2.0]]),
        terminated=torch.tensor([[True], [False]]),
        truncated=torch.tensor([[True], [False]]),
        truncation_values=torch.tensor([[float("nan")], [0.0]]),
    )
    out = gae_from_rollout(
        make_rollout(d), torch.tensor([[0.5], [0.6]]), torch.tensor([0.9]), 0.9, 0.8
    )
    torch.testing.assert_close(
        out.advantages[0], torch.tensor([0.5])
    )  # r - V, no bootstrap, no NaN


def test_nstep_hand_computed_and_limits():
    rewards = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    discounts = torch.tensor([[0.5], [0.5], [0.5]], dtype=torch.float64)
    q = torch.tensor([[10.0], [20.0], [40.0]], dtype=torch.float64)
    # n = 2: G_0 = 1 + 0.5*2 + 0.25*20 = 7;  G_1 = 2 + 0.5*3 + 0.25*40 = 13.5;
    #        G_2 (cut short, m = 1) = 3 + 0.5*40 = 23
    torch.testing.assert_close(
        nstep_targets(rewards, discounts, q, 2),
        torch.tensor([[7.0], [13.5], [23.0]], dtype=torch.float64),
    )
    # n = 1 is the one-step target r + d q.
    d = random_episode_data(seed=10)
    disc = GAMMA * (~d["terminated"]).double()
    q = d["values"]
    torch.testing.assert_close(nstep_targets(d["rewards"], disc, q, 1), d["rewards"] + disc * q)
    # n >= T is the full discounted return, bootstrapped from the last step's value.
    full = discounted_returns(d["rewards"], disc, q[-1])
    for n in (T, T + 5):
        torch.testing.assert_close(nstep_targets(d["rewards"], disc, q, n), full)
    # A termination inside the window ends it: nothing after it counts.
    disc2 = discounts.clone()
    disc2[0] = 0.0
    got = nstep_targets(
        rewards, disc2, torch.tensor([[10.0], [20.0], [40.0]], dtype=torch.float64), 3
    )
    assert got[0, 0].item() == 1.0


def test_categorical_projection_mass_exact_atoms_and_clipping():
    support = torch.linspace(-10.0, 10.0, 51)  # dz = 0.4
    g = torch.Generator().manual_seed(11)
    next_probs = torch.softmax(torch.randn(64, 51, generator=g), dim=1)
    rewards = torch.randn(64, generator=g) * 4
    discounts = torch.full((64,), 0.99)
    discounts[::3] = 0.0
    out = categorical_projection(next_probs, rewards, discounts, support)
    torch.testing.assert_close(out.sum(1), torch.ones(64))  # mass is conserved
    assert (out >= 0).all()

    one_hot = torch.zeros(1, 51)
    one_hot[0, 25] = 1.0  # all mass at z = 0
    # A reward that lands exactly on an atom (1.2 = z_28), with d = 0 and with d = 1.
    for d in (0.0, 1.0):
        out = categorical_projection(one_hot, torch.tensor([1.2]), torch.tensor([d]), support)
        assert out.sum().item() == pytest.approx(1.0, abs=1e-6)
        assert out[0, 28].item() == pytest.approx(1.0, abs=1e-5)
    # Exactly on atoms in float64: the mass lands whole (the l == u case).
    support64 = torch.linspace(-2.0, 2.0, 5, dtype=torch.float64)  # dz = 1
    p = torch.tensor([[0.1, 0.2, 0.3, 0.25, 0.15]], dtype=torch.float64)
    out = categorical_projection(
        p,
        torch.tensor([1.0], dtype=torch.float64),
        torch.tensor([1.0], dtype=torch.float64),
        support64,
    )
    # z + 1: -1, 0, 1, 2, 3 -> clipped at 2
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.1, 0.2, 0.3, 0.4]], dtype=torch.float64))
    # Halfway between atoms: split evenly.
    out = categorical_projection(one_hot, torch.tensor([0.2]), torch.tensor([1.0]), support)
    torch.testing.assert_close(out[0, 25:27], torch.tensor([0.5, 0.5]))
    # Clipping at v_max and v_min.
    out = categorical_projection(
        next_probs[:2], torch.tensor([100.0, -100.0]), torch.tensor([0.99, 0.99]), support
    )
    torch.testing.assert_close(out[0, -1], torch.tensor(1.0))
    torch.testing.assert_close(out[1, 0], torch.tensor(1.0))


def test_vtrace_on_policy_is_the_bootstrapped_lambda_one_return():
    d = random_episode_data(seed=12)
    discounts = GAMMA * (~d["terminated"]).double()
    r, v, bv = d["rewards"], d["values"], d["bootstrap_value"]
    logp = d["behaviour_logp"]
    for thresholds in ((1.0, 1.0, 1.0), (1.0, 3.0, 2.0), (None, None, None)):
        out = vtrace(logp, logp, r, v, bv, discounts, *thresholds)
        want_vs = discounted_returns(r, discounts, bv)  # n-step bootstrapped returns, TD(1)
        torch.testing.assert_close(out.vs, want_vs)
        torch.testing.assert_close(out.vs, gae(r, v, bv, discounts, 1.0) + v)
        vs_next = torch.cat([want_vs[1:], bv[None]])
        torch.testing.assert_close(out.pg_advantages, r + discounts * vs_next - v)
    # With episode boundaries, on-policy V-trace is GAE(lambda = 1) with the same boundaries.
    extra = episode_boundary_args(d)
    out = vtrace(
        logp,
        logp,
        r,
        v,
        bv,
        extra["discounts"],
        next_values=extra["next_values"],
        continuation=extra["continuation"],
    )
    torch.testing.assert_close(out.vs, reference_gae_episodes(d, GAMMA, 1.0) + v)


def test_vtrace_hand_computed_clipping():
    # T = 1: vs = V + min(rho_bar, rho)(r + d V' - V); pg = min(pg_rho_bar, rho)(r + d V' - V).
    rho = 3.0
    out = vtrace(
        torch.tensor([[0.0]]),
        torch.tensor([[math.log(rho)]]),
        torch.tensor([[1.0]]),
        torch.tensor([[2.0]]),
        torch.tensor([4.0]),
        torch.tensor([[0.5]]),
        clip_rho_threshold=2.0,
        clip_pg_rho_threshold=0.5,
    )
    # td = 1 + 0.5*4 - 2 = 1
    torch.testing.assert_close(out.vs, torch.tensor([[4.0]]))
    torch.testing.assert_close(out.pg_advantages, torch.tensor([[0.5]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inverse_value_rescale_inverts_over_a_wide_range(dtype):
    x = torch.logspace(-6, 7, 400, dtype=dtype)
    x = torch.cat([-x, torch.zeros(1, dtype=dtype), x])
    for eps in (1e-3, 1e-2, 0.0):
        back = inverse_value_rescale(value_rescale(x, eps), eps)
        torch.testing.assert_close(back, x, rtol=1e-4, atol=0)
        y = torch.linspace(-1e3, 1e3, 101, dtype=dtype)
        torch.testing.assert_close(
            value_rescale(inverse_value_rescale(y, eps), eps), y, rtol=1e-4, atol=1e-6
        )
    assert value_rescale(torch.tensor([3.0]), 0.0).item() == pytest.approx(1.0)  # sqrt(4) - 1
    assert inverse_value_rescale(torch.tensor([1.0]), 0.0).item() == pytest.approx(3.0)


# ==================================================================================================
# Tier 3: argument errors, and no gradient through V-trace


def test_gae_shape_errors_name_the_expected_shapes():
    r, v, bv, dsc = torch.zeros(5, 3), torch.zeros(5, 3), torch.zeros(3), torch.ones(5, 3)
    with pytest.raises(ValueError, match=r"expected rewards \[T, B\].*bootstrap_value \[B\]"):
        gae(r, v.T, bv, dsc, 0.9)  # batch-major values
    with pytest.raises(ValueError, match=r"bootstrap_value \[B\].*got.*bootstrap_value \[1, 3\]"):
        gae(r, v, bv[None], dsc, 0.9)
    with pytest.raises(ValueError, match=r"expected rewards \[T, B\]"):
        gae(torch.zeros(5), v, bv, dsc, 0.9)
    with pytest.raises(ValueError, match=r"next_values \[T, B\]"):
        gae(r, v, bv, dsc, 0.9, next_values=torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"lam must be in \[0, 1\]"):
        gae(r, v, bv, dsc, 1.5)


def test_gae_from_rollout_errors():
    d = random_episode_data(seed=13)
    rollout = make_rollout(d)
    with pytest.raises(ValueError, match=r"values \[T, B\] = \[7, 4\]"):
        gae_from_rollout(rollout, d["values"][:-1], d["bootstrap_value"], GAMMA, 0.9)
    tv = d["truncation_values"].clone()
    tv[d["truncated"]] = float("nan")
    with pytest.raises(ValueError, match="truncation value"):
        gae_from_rollout(
            make_rollout(dict(d, truncation_values=tv)),
            d["values"],
            d["bootstrap_value"],
            GAMMA,
            0.9,
        )


def test_vtrace_shape_errors_and_thresholds():
    x, bv = torch.zeros(5, 3), torch.zeros(3)
    with pytest.raises(ValueError, match=r"expected behaviour_logp \[T, B\], target_logp \[T, B\]"):
        vtrace(x, torch.zeros(5, 4), x, x, bv, x)
    with pytest.raises(ValueError, match=r"bootstrap_value \[B\]"):
        vtrace(x, x, x, x, torch.zeros(5), x)
    with pytest.raises(ValueError, match="clip_c_threshold must be positive"):
        vtrace(x, x, x, x, bv, x, clip_c_threshold=0.0)


def test_nstep_and_projection_argument_errors():
    x = torch.zeros(5, 3)
    with pytest.raises(ValueError, match=r"bootstrap_values \[T, B\]"):
        nstep_targets(x, x, torch.zeros(3), 2)
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        nstep_targets(x, x, x, 0)
    support = torch.linspace(-1, 1, 5)
    with pytest.raises(ValueError, match=r"expected next_probs \[B, N\], rewards \[B\]"):
        categorical_projection(torch.zeros(4, 5), torch.zeros(4, 1), torch.zeros(4), support)
    with pytest.raises(ValueError, match=r"support \[N\]"):
        categorical_projection(torch.zeros(4, 6), torch.zeros(4), torch.zeros(4), support)
    with pytest.raises(ValueError, match="evenly spaced"):
        categorical_projection(
            torch.zeros(4, 3), torch.zeros(4), torch.zeros(4), torch.tensor([0.0, 1.0, 3.0])
        )


def test_vtrace_outputs_carry_no_gradient():
    d = random_episode_data(seed=14)
    target_logp = d["target_logp"].clone().requires_grad_(True)
    values = d["values"].clone().requires_grad_(True)
    out = vtrace(
        d["behaviour_logp"],
        target_logp,
        d["rewards"],
        values,
        d["bootstrap_value"],
        GAMMA * (~d["terminated"]).double(),
    )
    assert not out.vs.requires_grad and out.vs.grad_fn is None
    assert not out.pg_advantages.requires_grad and out.pg_advantages.grad_fn is None
