"""The gradient noise scale of PPO along a run: the batch past which a larger batch stops paying.

    .venv/bin/python benchmarks/noise_scale.py --recipes ppo-cartpole ppo-pong-fast

McCandlish et al. (2018, Eq. 2.8 and App. A.1) predict the critical batch from the simple noise
scale ``B_simple = tr(Σ) / |G|²``: below it a doubled batch nearly halves the steps a run needs,
far above it the extra samples buy almost nothing. This trains each recipe as it is
(``studies.noise_scale.ppo_noise_scale``: every ``--every``-th rollout, before the learner's update
on it, the gradient of PPO's loss at two batch sizes, ``--small`` and the whole rollout) and reports
``B_simple`` over the run's thirds (the paper finds it grows as the loss falls) and over all of
it, against the recipe's own batch ``T x B``.

It prints a table, writes ``--out`` (JSON: command, commit, machine, date; per recipe its batch,
the noise scale per third and overall, and every estimate with its env steps) and ends with
``ratios: <recipe>_noise_scale_vs_batch=<x>`` (the whole run's ``B_simple`` over the recipe's
batch). Samplers may spawn workers, which re-import this script: all work is in functions.
"""

from __future__ import annotations

import argparse
import sys

import record  # this folder is sys.path[0] when the script runs

STEPS = {"ppo-cartpole": 100_000, "ppo-pong-fast": 500_000}
EVERY = {"ppo-cartpole": 1, "ppo-pong-fast": 4}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=list(STEPS))
    parser.add_argument(
        "--steps", type=int, default=None, help="env steps per recipe (default: STEPS)"
    )
    parser.add_argument(
        "--every", type=int, default=None, help="measure every N-th rollout (default: EVERY)"
    )
    parser.add_argument("--small", type=int, default=64, help="the small batch of the estimate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="data/noise_scale.json")
    args = parser.parse_args(argv)
    from workbench.runs.recipes import RECIPES

    unknown = [name for name in args.recipes if name not in RECIPES]
    if unknown:
        parser.error(f"unknown recipe(s) {unknown}; PPO recipes: {sorted(RECIPES)}")
    return args


def thirds(count: int) -> list[tuple[int, int]]:
    """Row ranges of a run's first, middle and last third (at least one row each)."""
    edges = [round(count * k / 3) for k in range(4)]
    return [(a, max(b, a + 1)) for a, b in zip(edges, edges[1:])]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from workbench.runs.recipes import RECIPES
    from workbench.studies.noise_scale import ppo_noise_scale

    recording = record.Recording("noise_scale")
    results, ratios = {}, {}
    print(f"{'recipe':<16}{'batch':>7}{'points':>7}  B_simple: first   middle     last      all")
    for name in args.recipes:
        recipe = RECIPES[name]
        steps = args.steps or STEPS.get(name, 100_000)
        every = args.every or EVERY.get(name, 1)
        trace = ppo_noise_scale(recipe, steps, small=args.small, every=every, seed=args.seed)
        by_third = [trace.noise_scale(a, b) for a, b in thirds(len(trace.points))]
        overall = trace.noise_scale()
        results[name] = {
            "batch": trace.batch,
            "small": trace.small,
            "env_steps": steps,
            "every": every,
            "seed": args.seed,
            "noise_scale_by_third": by_third,
            "noise_scale": overall,
            "points": trace.points,
        }
        ratios[f"{name.replace('-', '_')}_noise_scale_vs_batch"] = overall / trace.batch
        shown = "".join(f"{v:>9,.0f}" for v in [*by_third, overall])
        print(f"{name:<16}{trace.batch:>7,}{len(trace.points):>7}  {shown}", flush=True)
    recording.finish({"recipes": results}, ratios, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
