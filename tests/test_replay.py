"""Specifications for ``workbench.replay``, in three tiers.

1. Literal references: ``SumTree.find`` against ``np.searchsorted`` on a cumsum; sampling
   frequencies against P(i) (Schaul et al. 2016, Eq. 1); IS weights against the formula computed
   term by term; ``FrameStorage`` against the stacks and n-step windows of a synthetic Atari stream,
   written as slow per-item loops, and against ``kernels.nstep_targets``.
2. Small cases: last write wins, the max-priority default, ring overwrite, pending priorities,
   bytes per Atari transition.
3. Errors that name the fix.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from workbench.kernels import nstep_targets
from workbench.replay import (
    ArrayStorage,
    FrameStorage,
    MinTree,
    PrioritizedReplay,
    SumTree,
    UniformReplay,
)

# ==================================================================================================
# Helpers


def exact_priorities(capacity: int, seed: int) -> np.ndarray:
    """Multiples of 0.5 in [0, 8], a third of them 0: every prefix sum is exact in float64."""
    rng = np.random.default_rng(seed)
    p = rng.integers(1, 17, size=capacity) / 2.0
    p[rng.random(capacity) < 1 / 3] = 0.0
    p[-1] = 0.0 if capacity > 1 else p[-1]  # a zero leaf at the end, too
    if not p.any():
        p[0] = 1.0
    return p


def filled_tree(p: np.ndarray) -> SumTree:
    tree = SumTree(p.size)
    tree.update(np.arange(p.size), p)
    return tree


def sample_frequencies(
    replay, key: str, num_items: int, batches: int, batch_size: int
) -> np.ndarray:
    counts = np.zeros(num_items)
    for _ in range(batches):
        batch, _, _ = replay.sample(batch_size)
        counts += np.bincount(batch[key], minlength=num_items)
    return counts / counts.sum()


def item_batch(ids) -> dict[str, np.ndarray]:
    ids = np.asarray(ids, dtype=np.int64)
    return {"id": ids, "obs": np.stack([ids, -ids], axis=1).astype(np.float32)}


K, N_STEP, GAMMA = 4, 3, 0.9
FRAME = (2, 2)  # tiny frames: 4 pixels are enough to make every frame unique


def synthetic_atari(
    num_envs: int, steps: int, seed: int, *, game_over=0.10, time_limit=0.05, life_lost=0.05
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Time-major [steps, B] Atari-like steps stacked the way ale_py stacks them, and int [steps, B]
    the row where each step's episode began.

    Every frame is unique and nonzero (it encodes a global frame number, the env and a constant)
    and a new episode's stack is padded with zero frames. After each step the episode ends by a
    game over (``terminated``) or a time limit (``truncated``), or a life is lost (``terminated``
    under ``episodic_life``: the game and its frames go on), with the given probabilities; so
    short episodes, even of one step, occur.
    """
    rng = np.random.default_rng(seed)
    obs = np.zeros((steps, num_envs, K, *FRAME), dtype=np.uint8)
    terminated = np.zeros((steps, num_envs), dtype=bool)
    truncated = np.zeros((steps, num_envs), dtype=bool)
    starts = np.zeros((steps, num_envs), dtype=np.int64)
    frame_number = 0
    for b in range(num_envs):
        stack, start = np.zeros((K, *FRAME), dtype=np.uint8), 0
        for t in range(steps):
            frame = np.array([1 + frame_number % 250, 1 + frame_number // 250, 1 + b, 7], np.uint8)
            frame_number += 1
            stack = np.concatenate([stack[1:], frame.reshape(1, *FRAME)])
            obs[t, b], starts[t, b] = stack, start
            u = rng.random()
            if u < game_over:
                terminated[t, b] = True
            elif u < game_over + time_limit:
                truncated[t, b] = True
            else:
                terminated[t, b] = u < game_over + time_limit + life_lost
                continue  # the same episode goes on
            stack, start = np.zeros_like(stack), t + 1  # the next step starts a new episode
    batch = {
        "obs": obs,
        "actions": rng.integers(0, 6, size=(steps, num_envs)),
        "rewards": rng.normal(size=(steps, num_envs)).astype(np.float32),
        "terminated": terminated,
        "truncated": truncated,
    }
    return batch, starts


def reference_transition(steps, starts, a, b, oldest, newest, n=N_STEP, gamma=GAMMA):
    """One stored step, literally: None if not sampleable, else the transition it gives."""
    if max(starts[a, b], a - (K - 1)) < oldest:
        return None  # its stack reaches back past the oldest stored row
    ret, m, terminal = 0.0, 0, False
    for j in range(n):
        if a + j > newest:
            return None  # the window is not complete yet
        ret += gamma**j * float(steps["rewards"][a + j, b])
        m += 1
        if steps["terminated"][a + j, b]:
            terminal = True
            break
        if steps["truncated"][a + j, b]:
            return None  # its bootstrap would need the final observation
    if not terminal and a + m > newest:
        return None
    return {
        "obs": steps["obs"][a, b],
        "actions": steps["actions"][a, b],
        "returns": ret,
        "discounts": 0.0 if terminal else gamma**m,
        "next_obs": np.zeros_like(steps["obs"][a, b]) if terminal else steps["obs"][a + m, b],
    }


# ==================================================================================================
# Tier 1: literal references


@pytest.mark.parametrize("capacity", [1, 7, 1000, 5000, 100_003])
def test_sum_tree_find_is_searchsorted_on_the_cumsum(capacity):
    p = exact_priorities(capacity, seed=capacity)
    tree = filled_tree(p)
    cumsum = np.cumsum(p)
    assert tree.total == cumsum[-1]
    rng = np.random.default_rng(0)
    boundaries = cumsum[cumsum < cumsum[-1]]  # values exactly at a prefix sum
    values = np.concatenate([[0.0], boundaries, rng.random(2000) * cumsum[-1]])
    found = tree.find(values)
    np.testing.assert_array_equal(found, np.searchsorted(cumsum, values, side="right"))
    assert (p[found] > 0).all()  # zero-priority leaves are never found


def test_sum_tree_find_with_random_float_priorities():
    rng = np.random.default_rng(1)
    p = rng.random(20_000) * (rng.random(20_000) < 0.7)  # 30% zeros
    tree = filled_tree(p)
    values = rng.random(5000) * tree.total
    found = tree.find(values)
    cumsum = np.cumsum(p)
    tol = 1e-9 * cumsum[-1]
    assert (p[found] > 0).all()
    assert (cumsum[found] > values - tol).all()  # the leaf's prefix sum exceeds v ...
    assert (cumsum[found] - p[found] <= values + tol).all()  # ... the one before it does not
    assert (found == np.searchsorted(cumsum, values, side="right")).mean() > 0.999


def test_sum_tree_values_at_or_past_the_total_give_the_last_positive_leaf():
    for capacity in (6, 10_000):  # the leaves in the flat top level; then below it
        p = np.zeros(capacity)
        p[[1, 3, capacity // 2, capacity - 3]] = [2.0, 3.0, 1.0, 4.0]
        tree = filled_tree(p)
        np.testing.assert_array_equal(tree.find([10.0, 10.0 + 1e-9, 1e6]), [capacity - 3] * 3)
        np.testing.assert_array_equal(
            tree.find([0.0, 1.999, 2.0, 4.999, 5.0, 6.0, 9.999]),
            [1, 1, 3, 3, capacity // 2, capacity - 3, capacity - 3],
        )


def test_prioritized_sampling_frequencies_match_eq_1():
    alpha = 0.7
    td = np.array([0.0, 0.5, 1.0, 2.0, 3.0, 0.1, 4.0, 1.5])
    replay = PrioritizedReplay(8, alpha=alpha, eps=0.0, seed=0)
    replay.add(item_batch(np.arange(8)), priorities=td)
    want = td**alpha / (td**alpha).sum()  # P(i) = p_i^alpha / sum_k p_k^alpha
    got = sample_frequencies(replay, "id", 8, batches=100, batch_size=1000)
    np.testing.assert_allclose(got, want, atol=0.005)
    assert got[0] == 0.0  # priority 0 (eps = 0): never sampled


def test_importance_weights_match_the_formula_over_the_whole_buffer():
    alpha, beta, eps = 0.6, 0.4, 1e-6
    td = np.array([0.3, 2.0, 1.0, 1e-5, 5.0, 0.7])  # item 3: too rare to be in the batch
    replay = PrioritizedReplay(10, alpha=alpha, beta=beta, eps=eps, seed=1)
    replay.add(item_batch(np.arange(6)), priorities=td)
    batch, indices, weights = replay.sample(64)
    assert 3 not in indices
    n = 6
    P = (td + eps) ** alpha / ((td + eps) ** alpha).sum()
    w = (n * P) ** -beta / ((n * P) ** -beta).max()  # max over the buffer, not the batch
    assert weights.dtype == np.float32
    np.testing.assert_allclose(weights, w[batch["id"]], rtol=1e-6)
    np.testing.assert_array_equal(indices, batch["id"])  # slots fill from 0
    replay.beta = 1.0  # a plain attribute: the learner anneals it
    _, indices, weights = replay.sample(64)
    np.testing.assert_allclose(weights, (P.min() / P)[indices], rtol=1e-6)


def test_frame_storage_rebuilds_stacks_and_windows_across_episodes_and_wrap_around():
    # Blocks of random lengths from random subsets of the envs (``env_ids``), interleaved, into a
    # ring of 23 rows per env that wraps several times; every slot checked after every add.
    B, rows, steps_per_env = 3, 23, 120
    steps, starts = synthetic_atari(B, steps=steps_per_env, seed=2)
    storage = FrameStorage(rows * B, num_envs=B, n_step=N_STEP, gamma=GAMMA)
    rng = np.random.default_rng(3)
    position = np.zeros(B, dtype=np.int64)  # steps of each env added so far
    slots = np.arange(rows * B)
    checked = 0
    while (position < steps_per_env).any():
        envs = np.flatnonzero((rng.random(B) < 0.6) & (position < steps_per_env))
        if envs.size == 0:
            continue
        T = int(min(rng.integers(1, 8), (steps_per_env - position[envs]).min()))
        t = position[envs] + np.arange(T)[:, None]  # [T, B'] each env's next steps
        block = {key: value[t, envs] for key, value in steps.items()}
        if envs.size < B or rng.random() < 0.5:
            block["env_ids"] = envs  # (all envs in order may also leave env_ids out)
        storage.write(storage.check(block)[0])
        position[envs] += T

        newest = position[slots % B] - 1
        oldest = np.maximum(position[slots % B] - rows, 0)
        step = newest - (newest - slots // B) % rows  # which step each slot holds
        want = [
            reference_transition(steps, starts, a, b, o, n) if a >= 0 else None
            for a, b, o, n in zip(step, slots % B, oldest, newest)
        ]
        ok = storage.sampleable(slots)
        np.testing.assert_array_equal(ok, [w is not None for w in want])
        got = storage.get(slots[ok])
        for i, w in enumerate(w for w in want if w is not None):
            for key in ("obs", "next_obs", "actions"):
                np.testing.assert_array_equal(got[key][i], w[key], err_msg=key)
            assert got["returns"][i] == pytest.approx(w["returns"], rel=1e-6, abs=1e-6)
            assert got["discounts"][i] == pytest.approx(w["discounts"], rel=1e-6)
        checked += ok.sum()
    assert checked > 1000  # the checks above covered many transitions
    assert len(storage) == rows * B


def test_frame_storage_targets_agree_with_nstep_targets():
    # Terminations only (nstep_targets' window cut at a truncation bootstraps from the final
    # observation, which FrameStorage does not store): the same n-step targets.
    B, T = 2, 60
    steps, _ = synthetic_atari(B, steps=T, seed=3, time_limit=0.0)
    storage = FrameStorage(T * B, num_envs=B, n_step=N_STEP, gamma=GAMMA)
    storage.write(storage.check(steps)[0])

    def q(stack: np.ndarray) -> np.ndarray:  # any function of the observation will do
        return stack.reshape(stack.shape[0], -1).astype(np.float64).sum(1) / 100

    obs_after = np.concatenate([steps["obs"][1:], steps["obs"][-1:]])  # the state after step t
    bootstrap = torch.tensor(q(obs_after.reshape(T * B, *obs_after.shape[2:])).reshape(T, B))
    discounts = torch.tensor(GAMMA * (~steps["terminated"]), dtype=torch.float64)
    want = nstep_targets(
        torch.tensor(steps["rewards"], dtype=torch.float64), discounts, bootstrap, N_STEP
    )
    slots = np.arange(T * B)
    ok = storage.sampleable(slots)
    got = storage.get(slots[ok])
    targets = got["returns"] + got["discounts"] * q(got["next_obs"])
    np.testing.assert_allclose(targets, want.numpy().reshape(-1)[ok], rtol=1e-5, atol=1e-5)
    assert ok.sum() > 0.8 * T * B


# ==================================================================================================
# Tier 2: small cases


def test_sum_tree_update_repeated_indices_last_write_wins():
    tree = SumTree(5)
    tree.update([0, 1, 2, 3, 4], [1.0, 1.0, 1.0, 1.0, 1.0])
    tree.update([3, 1, 3, 3], [7.0, 2.0, 0.0, 5.0])
    np.testing.assert_array_equal(tree[np.arange(5)], [1.0, 2.0, 1.0, 5.0, 1.0])
    assert tree.total == 10.0
    mins = MinTree(5)
    assert mins.min == np.inf
    mins.update([2, 2, 4], [0.5, 3.0, 4.0])
    assert mins.min == 3.0


def test_sum_tree_parents_are_recomputed_not_drifted():
    rng = np.random.default_rng(4)
    capacity = 9000  # not a power of two, and deeper than the flat top level
    tree = SumTree(capacity)
    p = np.zeros(capacity)
    for _ in range(200):
        idx = rng.integers(capacity, size=256)
        values = rng.integers(0, 9, size=256) / 4.0
        tree.update(idx, values)
        idx_unique, last = np.unique(idx[::-1], return_index=True)  # each index's last write
        p[idx_unique] = values[::-1][last]
    assert tree.total == p.sum()
    cumsum = np.cumsum(p)
    values = np.concatenate([cumsum[cumsum < cumsum[-1]], rng.random(1000) * cumsum[-1]])
    np.testing.assert_array_equal(tree.find(values), np.searchsorted(cumsum, values, side="right"))


def test_new_transitions_get_the_largest_priority_seen():
    replay = PrioritizedReplay(4, alpha=1.0, eps=0.0, seed=5)
    replay.add(item_batch([0]))  # nothing seen yet: p = 1
    replay.add(item_batch([1]), priorities=[3.0])
    replay.add(item_batch([2]))  # p = 3, the largest seen
    got = sample_frequencies(replay, "id", 3, batches=20, batch_size=700)
    np.testing.assert_allclose(got, [1 / 7, 3 / 7, 3 / 7], atol=0.01)
    replay.update_priorities(np.array([0]), np.array([9.0]))
    replay.add(item_batch([3]))  # p = 9
    got = sample_frequencies(replay, "id", 4, batches=20, batch_size=2400)
    np.testing.assert_allclose(got, [9 / 24, 3 / 24, 3 / 24, 9 / 24], atol=0.01)


def test_ring_overwrites_the_oldest():
    replay = PrioritizedReplay(4, alpha=1.0, eps=0.0, seed=6)
    np.testing.assert_array_equal(
        replay.add(item_batch([0, 1, 2]), priorities=[1000.0, 1, 1]), [0, 1, 2]
    )
    np.testing.assert_array_equal(replay.add(item_batch([3, 4]), priorities=[1.0, 1.0]), [3, 0])
    assert len(replay) == 4
    got = sample_frequencies(replay, "id", 5, batches=10, batch_size=400)
    np.testing.assert_allclose(got, [0.0, 0.25, 0.25, 0.25, 0.25])  # item 0 and its 1000 gone
    uniform = UniformReplay(4, seed=6)
    uniform.add(item_batch([0, 1, 2, 3]))
    uniform.add(item_batch([4, 5]))
    batch, indices, weights = uniform.sample(2000)
    assert set(batch["id"]) == {2, 3, 4, 5}
    np.testing.assert_array_equal(weights, np.ones(2000, dtype=np.float32))
    np.testing.assert_allclose(np.bincount(batch["id"], minlength=6)[2:] / 2000, 0.25, atol=0.04)


def test_update_priorities_changes_sampling_and_keeps_the_last_of_repeated_indices():
    replay = PrioritizedReplay(3, alpha=1.0, eps=0.0, seed=7)
    replay.add(item_batch([0, 1, 2]), priorities=[1.0, 1.0, 1.0])
    replay.update_priorities(np.array([2, 1, 2]), torch.tensor([50.0, 2.0, 7.0]))  # torch works too
    got = sample_frequencies(replay, "id", 3, batches=10, batch_size=1000)
    np.testing.assert_allclose(got, [0.1, 0.2, 0.7], atol=0.005)


def test_add_accepts_cpu_torch_tensors():
    replay = PrioritizedReplay(8, seed=8)
    replay.add(
        {"obs": torch.zeros(3, 4), "actions": torch.tensor([1, 2, 3])}, priorities=torch.ones(3)
    )
    batch, _, _ = replay.sample(5)
    assert batch["obs"].shape == (5, 4) and batch["obs"].dtype == np.float32
    assert set(batch["actions"]) <= {1, 2, 3}


def test_pending_windows_keep_their_priority_until_complete():
    B = 2
    steps, _ = synthetic_atari(B, steps=16, seed=9, game_over=0.0, time_limit=0.0, life_lost=0.0)
    storage = FrameStorage(40 * B, num_envs=B, n_step=N_STEP, gamma=GAMMA)
    replay = PrioritizedReplay(40 * B, alpha=1.0, eps=0.0, storage=storage, seed=10)
    first = {k: v[:8] for k, v in steps.items()}
    priorities = np.ones((8, B))
    priorities[7, 0] = 1e6  # the newest step of env 0: its 3-step window is not complete yet
    replay.add(first, priorities=priorities)
    batch, indices, _ = replay.sample(256)
    assert 7 * B not in set(indices)  # slot = row * B + env
    assert not any(np.array_equal(o, steps["obs"][7, 0]) for o in batch["obs"])
    replay.add({k: v[8:] for k, v in steps.items()}, priorities=np.ones((8, B)))
    batch, indices, _ = replay.sample(256)
    assert (indices == 7 * B).mean() > 0.99  # complete now, with the priority it came with
    np.testing.assert_array_equal(batch["obs"][indices == 7 * B][0], steps["obs"][7, 0])


def test_prioritized_frame_replay_samples_exactly_the_sampleable_steps():
    # The trees follow the storage as windows complete and the ring overwrites stacks' history.
    B, rows = 3, 12
    steps, _ = synthetic_atari(B, steps=60, seed=13)
    storage = FrameStorage(rows * B, num_envs=B, n_step=N_STEP, gamma=GAMMA)
    replay = PrioritizedReplay(rows * B, storage=storage, seed=14)
    rng = np.random.default_rng(15)
    position = np.zeros(B, dtype=np.int64)
    while (position < 60).all():
        envs = np.flatnonzero(rng.random(B) < 0.7)
        if envs.size == 0:
            continue
        T = int(min(rng.integers(1, 5), (60 - position[envs]).min()))
        t = position[envs] + np.arange(T)[:, None]
        replay.add({**{key: value[t, envs] for key, value in steps.items()}, "env_ids": envs})
        position[envs] += T
        sampleable = set(np.flatnonzero(storage.sampleable(np.arange(rows * B))))
        if sampleable:  # equal priorities, 4 samples per slot: stratified sampling hits each one
            _, indices, _ = replay.sample(4 * rows * B)
            assert set(indices) == sampleable


def test_uniform_replay_samples_only_sampleable_frame_steps():
    B = 2
    steps, _ = synthetic_atari(B, steps=30, seed=11)
    storage = FrameStorage(20 * B, num_envs=B, n_step=N_STEP, gamma=GAMMA)
    replay = UniformReplay(20 * B, storage=storage, seed=12)
    replay.add({k: v[:15] for k, v in steps.items()})
    replay.add({k: v[15:] for k, v in steps.items()})  # 30 steps into 20 rows: wrapped
    _, indices, weights = replay.sample(500)
    assert storage.sampleable(indices).all()
    assert len(set(indices)) == storage.sampleable(np.arange(40)).sum()  # and all of them
    assert (weights == 1).all()


def test_atari_bytes_per_transition():
    B, capacity = 4, 2000
    storage = FrameStorage(capacity, num_envs=B, n_step=3)
    replay = PrioritizedReplay(capacity, storage=storage)
    obs = np.zeros((2, B, 4, 84, 84), dtype=np.uint8)
    flags = np.zeros((2, B), dtype=bool)
    replay.add(
        {
            "obs": obs,
            "actions": np.zeros((2, B), dtype=np.int64),
            "rewards": np.zeros((2, B), dtype=np.float32),
            "terminated": flags,
            "truncated": flags,
        }
    )
    assert storage.nbytes / capacity <= 84 * 84 + 16  # one frame, an action, a reward, three flags
    assert replay.nbytes / capacity <= 7_500  # with the trees and the priorities
    stacks = 2 * obs[0, 0].nbytes  # obs and next_obs stored whole
    assert stacks / (replay.nbytes / capacity) > 7


def test_the_replay_module_does_not_import_torch():
    # A replay server process (Ape-X) stays small: importing torch alone costs a process ~320 MB.
    code = "import sys, workbench.replay; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ==================================================================================================
# Tier 3: errors that name the fix


def test_capacity_and_argument_errors():
    for make in (SumTree, MinTree, ArrayStorage, PrioritizedReplay, UniformReplay):
        with pytest.raises(ValueError, match="capacity must be an integer >= 1"):
            make(0)
    with pytest.raises(ValueError, match="capacity must be an integer >= 1"):
        FrameStorage(0, num_envs=1)
    with pytest.raises(ValueError, match="not a multiple of num_envs 3; use 9 or 12"):
        FrameStorage(10, num_envs=3)
    with pytest.raises(ValueError, match="differs from the storage's 6; pass the same capacity"):
        PrioritizedReplay(8, storage=ArrayStorage(6))
    with pytest.raises(ValueError, match="alpha must be finite and >= 0"):
        PrioritizedReplay(8, alpha=-1.0)


def test_sampling_an_empty_replay_says_to_add_first():
    with pytest.raises(ValueError, match=r"add\(batch\) transitions"):
        PrioritizedReplay(4).sample(2)
    with pytest.raises(ValueError, match=r"empty; add\(batch\)"):
        UniformReplay(4).sample(2)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        PrioritizedReplay(4).sample(0)
    with pytest.raises(ValueError, match="every leaf is 0"):
        SumTree(4).find([0.0])


def test_batch_key_and_shape_mismatches():
    replay = PrioritizedReplay(8)
    with pytest.raises(ValueError, match="same first dimension N"):
        replay.add({"obs": np.zeros((3, 4)), "actions": np.zeros(2)})
    replay.add({"obs": np.zeros((3, 4)), "actions": np.zeros(3)})
    with pytest.raises(ValueError, match="differ from the stored keys.*same keys"):
        replay.add({"obs": np.zeros((3, 4)), "action": np.zeros(3)})
    with pytest.raises(ValueError, match=r"per-item shape \[5\].*holds \[4\]"):
        replay.add({"obs": np.zeros((3, 5)), "actions": np.zeros(3)})
    with pytest.raises(ValueError, match="do not fit in capacity 8; add them in blocks"):
        replay.add({"obs": np.zeros((9, 4)), "actions": np.zeros(9)})
    frames = FrameStorage(16, num_envs=2)
    with pytest.raises(
        ValueError, match=r"keys \['obs', 'actions', 'rewards', 'terminated', 'truncated'\]"
    ):
        PrioritizedReplay(16, storage=frames).add({"obs": np.zeros((2, 2, 4, 3, 3), np.uint8)})
    with pytest.raises(ValueError, match=r"obs must be \[T, B=2, frame_stack, H, W\]"):
        frames.check({k: np.zeros((2, 3, 4, 3, 3)) for k in FrameStorage.KEYS})
    with pytest.raises(ValueError, match=r"env_ids must be distinct integers in \[0, 2\)"):
        frames.check(
            {**{k: np.zeros((2, 2, 4, 3, 3)) for k in FrameStorage.KEYS}, "env_ids": [1, 1]}
        )


def test_bad_priorities_and_indices_are_refused():
    replay = PrioritizedReplay(8)
    with pytest.raises(ValueError, match=r"finite and >= 0 \(pass \|TD error\|\)"):
        replay.add(item_batch([0, 1]), priorities=[1.0, np.nan])
    assert len(replay) == 0  # nothing stored by a refused add
    with pytest.raises(ValueError, match="got 1 priorities for 2 transitions"):
        replay.add(item_batch([0, 1]), priorities=[1.0])
    replay.add(item_batch([0, 1]))
    with pytest.raises(ValueError, match=r"finite and >= 0"):
        replay.update_priorities(np.array([0]), np.array([-0.5]))
    with pytest.raises(ValueError, match=r"finite and >= 0"):
        replay.update_priorities(np.array([0]), np.array([np.inf]))
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 8\)"):
        replay.update_priorities(np.array([8]), np.array([1.0]))
    with pytest.raises(ValueError, match="1-D integer array"):
        replay.update_priorities(np.array([0.0]), np.array([1.0]))


# ==================================================================================================
# SequenceReplay (R2D2)


def sequences(ids, L: int = 5, H: int = 3) -> dict[str, np.ndarray]:
    """Batch-major sequences whose entries name (sequence id, step)."""
    ids = np.asarray(ids, dtype=np.float32)
    steps = np.arange(L, dtype=np.float32)
    return {
        "obs": np.stack([ids[:, None] * 100 + steps, -(ids[:, None] * 100 + steps)], axis=-1),
        "actions": (ids[:, None] * 100 + steps).astype(np.int64),
        "state_h": np.repeat(ids[:, None], H, axis=1),
        "state_c": np.repeat(-ids[:, None], H, axis=1),
    }


def test_sequence_replay_returns_per_step_keys_time_major():
    from workbench.replay import SequenceReplay

    replay = SequenceReplay(8, seed=0)
    assert (replay.alpha, replay.beta) == (0.9, 0.6)  # R2D2, Table 2
    replay.add(sequences(np.arange(6)))
    batch, indices, weights = replay.sample(4)
    assert batch["obs"].shape == (5, 4, 2) and batch["actions"].shape == (5, 4)
    assert batch["state_h"].shape == batch["state_c"].shape == (4, 3)
    assert batch["obs"].flags["C_CONTIGUOUS"] and weights.shape == (4,)
    for b, slot in enumerate(indices):
        np.testing.assert_array_equal(batch["obs"][:, b, 0], slot * 100 + np.arange(5))
        np.testing.assert_array_equal(batch["actions"][:, b], slot * 100 + np.arange(5))
        np.testing.assert_array_equal(batch["state_h"][b], [slot] * 3)
        np.testing.assert_array_equal(batch["state_c"][b], [-slot] * 3)


def test_sequence_replay_samples_sequences_in_proportion_to_priority():
    from workbench.replay import SequenceReplay

    replay = SequenceReplay(4, alpha=1.0, beta=1.0, eps=0.0, seed=0)
    replay.add(sequences([0, 1]), priorities=[1.0, 3.0])
    counts = np.zeros(2)
    for _ in range(200):
        batch, indices, weights = replay.sample(10)
        counts += np.bincount(indices, minlength=2)
        np.testing.assert_array_equal(batch["state_h"][:, 0], indices)
        np.testing.assert_allclose(weights, np.where(indices == 0, 1.0, 1 / 3), rtol=1e-6)
    assert abs(counts[1] / counts.sum() - 0.75) < 0.02
    replay.update_priorities(np.array([0, 1]), np.array([3.0, 1.0]))
    _, indices, _ = replay.sample(1000)
    assert abs(np.mean(indices == 0) - 0.75) < 0.03


def test_sequence_replay_names_the_layout_it_expects():
    from workbench.replay import SequenceReplay

    replay = SequenceReplay(8)
    replay.add(sequences([0, 1], L=5))
    with pytest.raises(ValueError, match=r"one L \(L = 5, set by the first add\)"):
        replay.add(sequences([2], L=4))
    with pytest.raises(ValueError, match="np.swapaxes"):
        replay.add({**sequences([2]), "rewards": np.zeros(1)})  # a per-step key without L
    with pytest.raises(ValueError, match="only per-sequence keys"):
        SequenceReplay(8).add({"state_h": np.zeros((2, 3))})
