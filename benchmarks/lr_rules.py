"""Learning-rate rules at large batch: env steps and seconds to the target under each rule.

    .venv/bin/python benchmarks/lr_rules.py  # ppo-cartpole at 32x32 128x32 512x32, seeds 0 1 2

One recipe, tuned at its own ``B x T``, trained at each ``--shapes`` batch under the rules
``none`` (its tuned learning rate), ``sqrt`` and ``linear`` (``kernels.scaled_learning_rate``;
Stooke & Abbeel 2018, Sec. 4), once per seed, each run to the recipe's target or
``--total-steps`` (``workbench.studies.lr_rules``). It prints every run and the per-rule summary
(median and range over seeds), writes ``--out`` (JSON: command, commit, machine, date, every run
and the summary) and ends with ``ratios: <rule>_reached_at_<largest batch>=<x> ...`` (the share
of seeds that reached the target at the largest batch) and ``<rule>_vs_none_at_<largest>=<y>``:
the median env steps to the target under ``none`` over each rule's (above 1: sooner).

Sampler workers are spawned processes, which re-import this script: so the top of the file
imports only the standard library, and all the work happens in functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import record  # this folder is sys.path[0] when the script runs


def shape(text: str) -> tuple[int, int]:
    try:
        num_envs, horizon = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not BxT, e.g. 128x32") from None
    if num_envs < 1 or horizon < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: B and T must be positive")
    return num_envs, horizon


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="ppo-cartpole", help="a PPO or A2C recipe")
    parser.add_argument("--shapes", type=shape, nargs="+", default=[(32, 32), (128, 32), (512, 32)])
    parser.add_argument("--rules", nargs="+", default=["none", "sqrt", "linear"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--total-steps", type=int, default=500_000, help="env steps per run")
    parser.add_argument("--out", default=None, help="default data/lr_rules_<recipe>.json")
    args = parser.parse_args(argv)
    if args.total_steps < 1:
        parser.error("--total-steps must be positive.")
    if args.out is None:
        args.out = f"data/lr_rules_{args.recipe.replace('-', '_')}.json"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from workbench.studies.lr_rules import lr_rules_study, rules_summary

    torch.set_num_threads(1)
    recording = record.Recording("lr_rules")
    machine = recording.machine
    print(f"machine: {machine.cpu_model}, {machine.cores} cores; {args.recipe}, rules {args.rules}")
    runs = lr_rules_study(
        args.recipe,
        args.shapes,
        total_steps=args.total_steps,
        rules=args.rules,
        seeds=args.seeds,
    )
    for run in runs:
        reached = "never" if run.steps_to_target is None else f"{run.steps_to_target:,}"
        print(
            f"{run.rule:>6} {run.num_envs:>4}x{run.horizon:<3} seed {run.seed}: lr "
            f"{run.learning_rate:.2e}, target at {reached} steps, best {run.best_return:.0f}"
        )
    summary = rules_summary(runs)
    for row in summary:
        median = "never" if row["median_steps"] is None else f"{row['median_steps']:,.0f}"
        print(
            f"{row['rule']:>6} batch {row['batch_size']:>6}: {row['reached']}/{row['runs']} "
            f"reached, median {median} steps"
        )
    largest = max(r["batch_size"] for r in summary)
    at = {r["rule"]: r["median_steps"] for r in summary if r["batch_size"] == largest}
    ratios = {
        f"{r['rule']}_reached_at_{largest}": r["reached"] / r["runs"]
        for r in summary
        if r["batch_size"] == largest
    }
    ratios.update(
        {
            f"{rule}_vs_none_at_{largest}": at["none"] / steps
            for rule, steps in at.items()
            if rule != "none" and steps and at.get("none")
        }
    )
    figures = {
        "recipe": args.recipe,
        "total_steps": args.total_steps,
        "runs": [dataclasses.asdict(r) for r in runs],
        "summary": summary,
    }
    recording.finish(figures, ratios, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
