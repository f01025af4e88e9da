"""It learns: every recipe (workbench.recipes) at several seeds, against its target and budget.

    .venv/bin/python benchmarks/learning.py                 # all recipes, seeds 0 1 2
    .venv/bin/python benchmarks/learning.py --recipes ppo-cartpole --seeds 0 1 2 3 4

The CI tests run each recipe at one seed; this checks all of them. It prints a table (steps to the
target per seed, wall time) and a last line ``learning: <solved>/<runs> solved``, writes
``--out`` (JSON) with command, commit, machine and date, and exits 1 if any run missed its target.
Later algorithms (the DQN family, Ape-X, SEED learners) join by adding a recipe.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import record  # this folder is sys.path[0] when the script runs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from workbench.recipes import RECIPES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", default="data/learning.json", help="where to write the JSON results")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from workbench.recipes import RECIPES
    from workbench.system import machine_info

    torch.set_num_threads(1)  # small MLPs: one thread is fastest and deterministic
    report = {**record.provenance("learning"), "machine": dataclasses.asdict(machine_info()), "recipes": {}}
    print(f"{'recipe':<16}{'seed':>5}{'target':>9}{'budget':>10}{'steps to target':>17}{'seconds':>9}")
    solved = runs = 0
    for name in args.recipes:
        recipe = RECIPES[name]
        rows = []
        for seed in args.seeds:
            started = time.perf_counter()
            result = recipe.run(seed)
            seconds = time.perf_counter() - started
            steps = result["steps_to_target"]
            ok = steps is not None and steps <= recipe.total_steps
            solved, runs = solved + ok, runs + 1
            shown = f"{steps:,}" if steps is not None else "not reached"
            print(f"{name:<16}{seed:>5}{recipe.target_return:>9g}{recipe.total_steps:>10,}{shown:>17}{seconds:>9.1f}",
                  flush=True)
            rows.append({"seed": seed, "steps_to_target": steps, "solved": ok, "seconds": seconds,
                         "final_mean_return": result["history"][-1][1] if result["history"] else None})
        report["recipes"][name] = {
            "env_id": recipe.env_id, "algorithm": recipe.algorithm.__name__,
            "config": dataclasses.asdict(recipe.config), "num_envs": recipe.num_envs,
            "horizon": recipe.horizon, "total_steps": recipe.total_steps,
            "target_return": recipe.target_return, "runs": rows,
        }
    record.write(report, args.out)
    print(f"wrote {args.out}")
    print(f"learning: {solved}/{runs} solved")
    return 0 if solved == runs else 1


if __name__ == "__main__":
    sys.exit(main())
