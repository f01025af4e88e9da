"""Data-parallel learners: time per update and samples/s against their number.

    .venv/bin/python benchmarks/learner_scaling.py --learners 1 2 4 --updates 5
    .venv/bin/python benchmarks/learner_scaling.py --learners 1 2 4 8 --device cuda  # on GPUs

The same PPO update of ``--recipe``'s learner (default ``ppo-pong``: CleanRL's settings, Nature CNN
on 84x84 frames, 8 envs x 128 steps) on one rollout, with one learner in this process and with
groups of ``DataParallelLearner`` replicas (gloo on CPU "devices", NCCL on GPUs), all from the
same parameters (``workbench.measure.learner_scaling``), in one invocation so the rows are side by
side. Stooke & Abbeel (2018, Sec. 3) split Atari's large batches over up to 8 GPUs this way.

It prints a table, writes ``--out`` (JSON: command, commit, machine, date, load averages, every
row) and ends with ``ratios: samples_<N>_vs_1=<x> ...``: each group's samples/s over one
learner's.

Learners are spawned processes, which re-import this script: so the top of the file imports only
the standard library, and all the work happens in functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import record  # this folder is sys.path[0] when the script runs

HEADER = f"{'learners':>9}{'threads each':>14}{'s / update':>12}{'samples/s':>11}  devices"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--updates", type=int, default=5, help="timed updates per count")
    parser.add_argument("--warmup", type=int, default=2, help="untimed updates first")
    parser.add_argument("--recipe", default="ppo-pong", help="a PPO or A2C recipe")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", default=None, help="default data/learner_scaling[_cuda].json")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.learners) or args.updates < 1 or args.warmup < 0:
        parser.error("--learners and --updates must be positive, --warmup >= 0.")
    if args.out is None:
        suffix = "" if args.device == "cpu" else f"_{args.device}"
        args.out = f"data/learner_scaling{suffix}.json"
    return args


def table_row(row) -> str:
    return (
        f"{row.learners:>9}{row.threads_per_learner:>14}{row.seconds_per_update:>12.3f}"
        f"{row.samples_per_second:>11,.0f}  {', '.join(row.devices)}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from workbench.measure.learner_scaling import learner_scaling

    recording = record.Recording("learner_scaling")
    machine = recording.machine
    print(
        f"machine: {machine.cpu_model}, {machine.cores} cores, GPUs {machine.cuda_devices or 0}; "
        f"{args.recipe}'s update, {args.updates} timed per count"
    )
    rows = learner_scaling(
        tuple(args.learners),
        recipe=args.recipe,
        updates=args.updates,
        warmup=args.warmup,
        device_kind=args.device,
    )
    print(HEADER)
    for row in rows:
        print(table_row(row))
    base = next((r for r in rows if r.learners == 1), rows[0])
    ratios = {
        f"samples_{r.learners}_vs_{base.learners}": r.samples_per_second / base.samples_per_second
        for r in rows
        if r is not base
    }
    figures = {
        "recipe": args.recipe,
        "device": args.device,
        "updates": args.updates,
        "warmup": args.warmup,
        "rows": [dataclasses.asdict(r) for r in rows],
    }
    recording.finish(figures, ratios, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
