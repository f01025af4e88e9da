"""Replay throughput: the vectorised PrioritizedReplay against a plain per-item Python sum tree.

    .venv/bin/python benchmarks/replay_throughput.py --seconds 5

Measured in one run, at ``--capacity`` (default 1,000,000) with batches of ``--batch`` (512):

* add: transitions/s, in blocks of ``--block`` (1,000) with their priorities, as Ape-X actors send
  them, into a full ring (each add overwrites the oldest);
* sample + update_priorities: batches/s and transitions/s, the learner's loop (sample a batch,
  give its indices new priorities);

for ``workbench.replay.PrioritizedReplay`` and for the same replay with its trees replaced by a
plain per-item Python sum tree and min tree (lists in heap layout, one transition at a time, as the
textbook implementations and OpenAI baselines' segment trees do). Both hold the same data in the
same ``ArrayStorage``: Ape-X-style n-step transitions of CartPole (``obs [4]``, ``actions``,
``returns``, ``discounts``, ``next_obs [4]``), so the difference is the trees alone. The plain
replay is measured for half the seconds (it is slow and steady).

Atari memory: bytes per stored transition of ``PrioritizedReplay`` on ``FrameStorage`` (each frame
once; the trees and priorities included), from an allocation at ``--atari-capacity`` (default
100,000: at 1M the frames alone would take 7 GB; per transition the figure hardly depends on the
capacity), against storing ``obs`` and ``next_obs`` stacks whole; and that replay's add and
sample + update rates.

It prints a table, writes ``--out`` (JSON: machine, command, commit, date, load average) and ends
with ``ratios: vs_python_tree=<x> bytes_per_transition=<n>``: ``vs_python_tree`` is the
sample + update rate of the workbench replay over the plain one's, ``bytes_per_transition`` the
Atari figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import time

import numpy as np
import record  # this folder is sys.path[0] when the script runs

from workbench.replay import ArrayStorage, FrameStorage, PrioritizedReplay


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--capacity", type=int, default=1_000_000, help="transitions held (default 1M)"
    )
    parser.add_argument(
        "--batch", type=int, default=512, help="transitions per sampled batch (default 512)"
    )
    parser.add_argument(
        "--block", type=int, default=1_000, help="transitions per add (default 1000)"
    )
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="seconds per measurement (default 5)"
    )
    parser.add_argument(
        "--atari-capacity",
        type=int,
        default=100_000,
        help="capacity of the Atari FrameStorage measured (default 100k; 1M would take 7 GB)",
    )
    parser.add_argument(
        "--atari-envs", type=int, default=8, help="envs per Atari block (default 8)"
    )
    parser.add_argument(
        "--out", default="data/replay_throughput.json", help="where to write the JSON results"
    )
    args = parser.parse_args(argv)
    if args.capacity < args.block or args.block < 1 or args.batch < 1:
        parser.error("need 1 <= --block <= --capacity and --batch >= 1.")
    if not args.seconds > 0:
        parser.error("--seconds must be positive.")
    if args.atari_capacity % args.atari_envs or args.atari_capacity < 10 * args.block:
        parser.error("--atari-capacity must be a multiple of --atari-envs and at least 10 blocks.")
    return args


# --- the baseline: plain per-item Python trees ----------------------------------------------------


class PlainTree:
    """A sum (or min) tree the textbook way: a list in heap layout (node i has children 2i and
    2i + 1, leaves at [size, 2 size)), updated and searched one item at a time."""

    def __init__(self, capacity: int, kind: str) -> None:
        self.size = 1 << (capacity - 1).bit_length()
        self.kind = kind
        self.tree = [0.0 if kind == "sum" else float("inf")] * (2 * self.size)

    def fill(self, leaves: np.ndarray) -> None:
        """Set every leaf at once (built with numpy: only to start the benchmark full)."""
        nodes = np.array(self.tree)
        nodes[self.size : self.size + leaves.size] = leaves
        level = self.size // 2
        while level >= 1:
            left, right = nodes[2 * level : 4 * level : 2], nodes[2 * level + 1 : 4 * level : 2]
            nodes[level : 2 * level] = (
                left + right if self.kind == "sum" else np.minimum(left, right)
            )
            level //= 2
        self.tree = nodes.tolist()

    def update(self, index: int, value: float) -> None:
        tree, i = self.tree, index + self.size
        tree[i] = value
        i //= 2
        if self.kind == "sum":
            while i >= 1:
                tree[i] = tree[2 * i] + tree[2 * i + 1]
                i //= 2
        else:
            while i >= 1:
                tree[i] = min(tree[2 * i], tree[2 * i + 1])
                i //= 2

    def find(self, value: float) -> int:
        """The first leaf whose prefix sum exceeds ``value``."""
        tree, i, size = self.tree, 1, self.size
        while i < size:
            left = tree[2 * i]
            if value < left:
                i = 2 * i
            else:
                value -= left
                i = 2 * i + 1
        return i - size


class PlainPrioritizedReplay:
    """``PrioritizedReplay``'s algorithm (stratified proportional sampling, IS weights normalised
    over the buffer, max-priority default) on ``PlainTree``s, one transition at a time."""

    def __init__(
        self, capacity: int, alpha: float, beta: float, eps: float, storage: ArrayStorage
    ) -> None:
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.storage = storage
        self.sums, self.mins = PlainTree(capacity, "sum"), PlainTree(capacity, "min")
        self.max_priority = 1.0

    def add(self, batch: dict, priorities: np.ndarray) -> None:
        arrays, _ = self.storage.check(batch)
        written, _ = self.storage.write(arrays)
        for index, p in zip(written.tolist(), priorities.tolist()):
            p += self.eps
            self.max_priority = max(self.max_priority, p)
            p **= self.alpha
            self.sums.update(index, p)
            self.mins.update(index, p)

    def sample(self, batch_size: int):
        sums = self.sums
        segment = sums.tree[1] / batch_size
        p_min = self.mins.tree[1]
        indices, weights = [], []
        for i in range(batch_size):
            index = sums.find((i + random.random()) * segment)
            indices.append(index)
            weights.append((sums.tree[index + sums.size] / p_min) ** -self.beta)
        indices = np.array(indices)
        return self.storage.get(indices), indices, np.array(weights, dtype=np.float32)

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        for index, p in zip(indices.tolist(), priorities.tolist()):
            p += self.eps
            self.max_priority = max(self.max_priority, p)
            p **= self.alpha
            self.sums.update(index, p)
            self.mins.update(index, p)


# --- measurements ---------------------------------------------------------------------------------


def timed(seconds: float, step) -> tuple[int, float]:
    """Call ``step()`` until ``seconds`` have passed; returns (calls, elapsed seconds)."""
    calls, start = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls, elapsed


def vector_block(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """n Ape-X-style CartPole n-step transitions."""
    return {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, size=n),
        "returns": rng.normal(size=n).astype(np.float32),
        "discounts": np.full(n, 0.99**3, dtype=np.float32),
        "next_obs": rng.normal(size=(n, 4)).astype(np.float32),
    }


def measure_replay(name: str, replay, args, seconds: float, rng: np.random.Generator) -> dict:
    """Add rate (blocks into the full ring) and sample + update_priorities rate of one replay."""
    block = vector_block(args.block, rng)
    pool = [rng.exponential(size=args.block) for _ in range(16)]  # |TD errors|
    td = [rng.exponential(size=args.batch) for _ in range(16)]
    it = iter(range(1 << 62))

    def add() -> None:
        replay.add(block, pool[next(it) % 16])

    def learn() -> None:
        _, indices, _ = replay.sample(args.batch)
        replay.update_priorities(indices, td[next(it) % 16])

    adds, add_seconds = timed(seconds, add)
    batches, learn_seconds = timed(seconds, learn)
    return {
        "name": name,
        "add_transitions_per_second": adds * args.block / add_seconds,
        "add_seconds": add_seconds,
        "sample_update_batches_per_second": batches / learn_seconds,
        "sample_update_transitions_per_second": batches * args.batch / learn_seconds,
        "sample_update_seconds": learn_seconds,
    }


def fill_workbench(args, rng) -> PrioritizedReplay:
    replay = PrioritizedReplay(args.capacity, seed=0)
    block = vector_block(args.block, rng)
    for _ in range(args.capacity // args.block):
        replay.add(block, rng.exponential(size=args.block))
    return replay


def fill_plain(args, rng) -> PlainPrioritizedReplay:
    storage = ArrayStorage(args.capacity)
    block = vector_block(args.block, rng)
    for _ in range(args.capacity // args.block):
        storage.write(storage.check(block)[0])
    replay = PlainPrioritizedReplay(args.capacity, 0.6, 0.4, 1e-6, storage)
    priorities = (rng.exponential(size=args.capacity) + 1e-6) ** 0.6
    replay.sums.fill(priorities)
    replay.mins.fill(priorities)
    return replay


def atari_block(T: int, B: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """[T, B] Atari steps whose stacks are consistent (obs[t] = frames t..t+3), no episode end."""
    frames = rng.integers(1, 256, size=(T + 3, B, 84, 84), dtype=np.uint8)
    stacks = np.lib.stride_tricks.sliding_window_view(frames, 4, axis=0)  # [T, B, 84, 84, 4]
    return {
        "obs": np.ascontiguousarray(stacks.transpose(0, 1, 4, 2, 3)),
        "actions": rng.integers(0, 6, size=(T, B)),
        "rewards": rng.normal(size=(T, B)).astype(np.float32),
        "terminated": np.zeros((T, B), dtype=bool),
        "truncated": np.zeros((T, B), dtype=bool),
    }


def measure_atari(args, seconds: float, rng: np.random.Generator) -> dict:
    B = args.atari_envs
    T = max(1, args.block // B)
    storage = FrameStorage(args.atari_capacity, num_envs=B, n_step=3, gamma=0.99)
    replay = PrioritizedReplay(args.atari_capacity, storage=storage, seed=0)
    block = atari_block(T, B, rng)
    for _ in range(args.atari_capacity // (T * B)):
        replay.add(block)
    td = rng.exponential(size=args.batch)
    adds, add_seconds = timed(seconds, lambda: replay.add(block))

    def learn() -> None:
        _, indices, _ = replay.sample(args.batch)
        replay.update_priorities(indices, td)

    batches, learn_seconds = timed(seconds, learn)
    stack = block["obs"][0, 0].nbytes
    per_transition = replay.nbytes / args.atari_capacity
    return {
        "capacity": args.atari_capacity,
        "num_envs": B,
        "n_step": 3,
        "storage_bytes_per_transition": storage.nbytes / args.atari_capacity,
        "replay_bytes_per_transition": per_transition,
        # two stacks, plus the action, the return and the discount
        "obs_and_next_obs_bytes_per_transition": 2 * stack + 8 + 4 + 4,
        "add_transitions_per_second": adds * T * B / add_seconds,
        "sample_update_batches_per_second": batches / learn_seconds,
        "sample_update_transitions_per_second": batches * args.batch / learn_seconds,
    }


# --- the table ------------------------------------------------------------------------------------

LABEL = "measurement (for add, a batch is a block)"
HEADER = f"{'':2}{LABEL:<58}{'batches/s':>11}{'transitions/s':>15}{'us/batch':>10}"


def row(label: str, transitions_per_second: float, batch: int) -> str:
    batches = transitions_per_second / batch
    return (
        f"{'':2}{label:<58}{batches:>11,.1f}{transitions_per_second:>15,.0f}{1e6 / batches:>10,.0f}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from workbench.course.budget import budget_name
    from workbench.system import machine_info

    machine = machine_info()
    load_before = os.getloadavg()
    started = time.perf_counter()
    rng = np.random.default_rng(0)
    random.seed(0)
    print(
        f"machine: {machine.cpu_model}, {machine.cores} cores, load average {load_before[0]:.2f}; "
        f"capacity {args.capacity:,}, batch {args.batch}, adds of {args.block:,}, "
        f"{args.seconds:g} s per row ({args.seconds / 2:g} s for the plain Python trees)"
    )
    print(HEADER, flush=True)

    workbench = measure_replay("workbench", fill_workbench(args, rng), args, args.seconds, rng)
    plain = measure_replay("plain", fill_plain(args, rng), args, args.seconds / 2, rng)
    for result, label in (
        (workbench, "workbench PrioritizedReplay (vectorised)"),
        (plain, "plain per-item Python sum + min trees"),
    ):
        print(row(f"add, {label}", result["add_transitions_per_second"], args.block), flush=True)
    for result, label in (
        (workbench, "workbench PrioritizedReplay (vectorised)"),
        (plain, "plain per-item Python sum + min trees"),
    ):
        print(
            row(
                f"sample+update, {label}",
                result["sample_update_transitions_per_second"],
                args.batch,
            ),
            flush=True,
        )

    atari = measure_atari(args, args.seconds, rng)
    label = f"Atari FrameStorage {atari['capacity']:,}, {atari['num_envs']} envs, n=3"
    print(row(f"add, {label}", atari["add_transitions_per_second"], args.block))
    print(row(f"sample+update, {label}", atari["sample_update_transitions_per_second"], args.batch))
    print(
        f"\n  bytes per Atari transition: {atari['replay_bytes_per_transition']:,.0f} "
        "(frames stored once; "
        f"storage {atari['storage_bytes_per_transition']:,.0f} + trees and priorities) against "
        f"{atari['obs_and_next_obs_bytes_per_transition']:,} for obs and next_obs stacks "
        f"(at capacity {atari['capacity']:,})"
    )

    ratios = {
        "vs_python_tree": workbench["sample_update_transitions_per_second"]
        / plain["sample_update_transitions_per_second"],
        "add_vs_python_tree": workbench["add_transitions_per_second"]
        / plain["add_transitions_per_second"],
        "bytes_per_transition": atari["replay_bytes_per_transition"],
    }
    report = {
        **record.provenance("replay_throughput"),
        "budget_seconds": args.seconds,
        "capacity": args.capacity,
        "batch": args.batch,
        "block": args.block,
        "workbench_budget": budget_name(),
        "machine": dataclasses.asdict(machine),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "workbench": workbench,
        "plain_python_trees": plain,
        "atari": atari,
        "ratios": ratios,
        "wall_seconds": time.perf_counter() - started,
    }
    record.write(report, args.out)
    print(
        f"\nwrote {args.out} ({report['wall_seconds']:.0f} s; load average after "
        f"{report['load_average_after'][0]:.2f}); "
        f"add: {ratios['add_vs_python_tree']:.1f}x the plain trees"
    )
    print(
        f"ratios: vs_python_tree={ratios['vs_python_tree']:.1f} "
        f"bytes_per_transition={ratios['bytes_per_transition']:.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
