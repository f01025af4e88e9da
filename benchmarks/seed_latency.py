"""SEED's inference server: request latency and throughput against its batch size and timeout.

    .venv/bin/python benchmarks/seed_latency.py  # --actors 8 --batches 1 2 4 8 --timeouts 0 1 2 5

One SEED measurement per (``max_batch_size``, ``timeout``) at each of ``--actors`` counts of
env-only actor processes (one Pong env each, the Nature CNN served in this process:
``workbench.measure.seed_latency.latency_sweep``; a batch larger than a count is left out for it),
all in one invocation so the rows are side by side.
The server answers when ``max_batch_size`` requests wait or when the oldest has waited
``timeout``; each row keeps the server's p50/p99 of a request's time from arrival to answer (queue
wait plus forward pass), the mean batch it formed, env steps/s and the CPU per step. Notebook 07
draws the record beside its own small sweep.

It prints a table, writes ``--out`` (JSON: command, commit, machine, date, load averages, every
row) and ends with ``ratios: steps_best_vs_batch1=<x> p50_at_best_vs_batch1=<y>``: the best row's
env steps/s and p50 latency over the batch-1 greedy row's, at the largest actor count.

Actors are spawned processes, which re-import this script: so the top of the file imports only the
standard library, and all the work happens in functions.
"""

from __future__ import annotations

import argparse
import sys

import record  # this folder is sys.path[0] when the script runs

HEADER = (
    f"{'batch':>6}{'timeout ms':>12}{'mean batch':>12}{'p50 ms':>9}{'p99 ms':>9}"
    f"{'steps/s':>10}{'CPU ms/step':>13}"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--actors",
        type=int,
        nargs="+",
        default=[8],
        help="env-only actor counts, a sweep each (default 8)",
    )
    parser.add_argument(
        "--batches", type=int, nargs="+", default=[1, 2, 4, 8], help="max_batch_size values"
    )
    parser.add_argument(
        "--timeouts", type=float, nargs="+", default=[0, 1, 2, 5], help="timeouts in ms"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds measured per row")
    parser.add_argument("--env", default="ALE/Pong-v5", help="the actors' env (default Pong)")
    parser.add_argument("--out", default="data/seed_latency.json", help="the JSON record")
    args = parser.parse_args(argv)
    if min(args.actors) < 1 or any(b < 1 for b in args.batches):
        parser.error("--actors and --batches must be positive integers.")
    if min(args.batches) > min(args.actors):
        parser.error(f"no batch of {args.batches} fills from {min(args.actors)} actors.")
    if any(t < 0 for t in args.timeouts) or not args.seconds > 0:
        parser.error("--timeouts must be >= 0 and --seconds positive.")
    return args


def table_row(row: dict) -> str:
    return (
        f"{row['max_batch_size']:>6}{row['timeout_ms']:>12g}{row['mean_batch_size']:>12.2f}"
        f"{row['latency_p50_ms']:>9.2f}{row['latency_p99_ms']:>9.2f}"
        f"{row['steps_per_second']:>10,.0f}{row['cpu_ms_per_step']:>13.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from workbench.measure.seed_latency import latency_sweep

    torch.set_num_threads(1)
    recording = record.Recording("seed_latency")
    machine = recording.machine
    print(
        f"machine: {machine.cpu_model}, {machine.cores} cores; "
        f"SEED on {args.env}, {args.actors} actors, {args.seconds:g} s per row"
    )
    rows = []
    for count in args.actors:  # batches that can fill from this many one-env actors
        rows += latency_sweep(
            count,
            [b for b in args.batches if b <= count],
            [t / 1000.0 for t in args.timeouts],
            args.seconds,
            env_id=args.env,
        )
    print(f"{'actors':>6}" + HEADER)
    for row in rows:
        print(f"{row['num_actors']:>6}" + table_row(row))
    largest = [r for r in rows if r["num_actors"] == max(args.actors)]
    first = next(
        (r for r in largest if r["max_batch_size"] == 1 and r["timeout_ms"] == 0), largest[0]
    )
    best = max(largest, key=lambda r: r["steps_per_second"])
    ratios = {
        "steps_best_vs_batch1": best["steps_per_second"] / first["steps_per_second"],
        "p50_at_best_vs_batch1": best["latency_p50_ms"] / first["latency_p50_ms"],
    }
    figures = {
        "env_id": args.env,
        "num_actors": max(args.actors),
        "actor_counts": args.actors,
        "seconds": args.seconds,
        "rows": rows,
        "best": {"max_batch_size": best["max_batch_size"], "timeout_ms": best["timeout_ms"]},
    }
    recording.finish(figures, ratios, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
