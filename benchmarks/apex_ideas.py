"""Ape-X's two ideas measured: actor-computed initial priorities and the per-actor epsilon ladder.

    .venv/bin/python benchmarks/apex_ideas.py --seeds 0 1 2

Horgan et al. (2018, Sec. 3 and 4.1) give every actor its own epsilon (``0.4 ** (1 + 7 i / (N-1))``)
and have each actor compute the priorities of its new transitions, where prioritized replay
(Schaul et al. 2016) gives new data the largest priority seen. Each row here is the recipe
``apex-dqn-cartpole`` (4 actors, local transport) with one idea switched off, at each seed, all
in one invocation so the rows are side by side:

* ``paper``: the recipe as it is;
* ``max priority``: ``initial_priorities=False``;
* ``one annealed epsilon``: ``exploration_schedule="annealed"`` (every actor 1.0 -> 0.01 over
  the first 20k env steps of all actors, as single-process DQN explores).

It prints, per variant and seed, the env steps, learner updates and seconds to the recipe's
target (475, the actor exploring least) within its 200k env steps, writes ``--out`` (JSON:
command, commit, machine, date, every run with its curve) and ends with
``ratios: <variant>_steps_vs_paper=<median ratio>``. Actors and the replay are spawned processes,
which re-import this script, so everything happens in functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

import record  # this folder is sys.path[0] when the script runs

VARIANTS = {
    "paper": {},
    "max priority": {"initial_priorities": False},
    "one annealed epsilon": {"exploration_schedule": "annealed"},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out", default="data/apex_ideas.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from workbench.apex.recipes import APEX_RECIPES

    torch.set_num_threads(1)
    recording = record.Recording("apex_ideas")
    base = APEX_RECIPES["apex-dqn-cartpole"]
    runs = []
    print(f"{'variant':<22}{'seed':>5}{'env steps':>11}{'updates':>9}{'seconds':>9}  stopped")
    for name in args.variants:
        recipe = dataclasses.replace(
            base, config=dataclasses.replace(base.config, **VARIANTS[name])
        )
        for seed in args.seeds:
            result = recipe.run(seed)
            curve = [{k: v for k, v in p.items() if k != "run"} for p in result["curve"]]
            reached = next((p for p in curve if p["env_steps"] == result["steps_to_target"]), None)
            row = {
                "variant": name,
                "seed": seed,
                "changes": VARIANTS[name],
                "steps_to_target": result["steps_to_target"],
                "updates_to_target": reached["updates"] if reached else None,
                "seconds_to_target": reached["seconds"] if reached else None,
                "stopped": result["stopped"],
                "final_return": result["final_return"],
                "curve": curve,
            }
            runs.append(row)
            shown = [row["steps_to_target"], row["updates_to_target"], row["seconds_to_target"]]
            cells = "".join(
                f"{'-' if v is None else format(v, ',.0f'):>{w}}" for v, w in zip(shown, (11, 9, 9))
            )
            print(f"{name:<22}{seed:>5}{cells}  {result['stopped']}", flush=True)
    ratios = {}
    paper = {r["seed"]: r["steps_to_target"] for r in runs if r["variant"] == "paper"}
    for name in args.variants:
        if name == "paper":
            continue
        pairs = [
            r["steps_to_target"] / paper[r["seed"]]
            for r in runs
            if r["variant"] == name and r["steps_to_target"] and paper.get(r["seed"])
        ]
        key = name.replace(" ", "_")
        ratios[f"{key}_steps_vs_paper"] = statistics.median(pairs) if pairs else float("nan")
        ratios[f"{key}_reached"] = sum(
            1 for r in runs if r["variant"] == name and r["steps_to_target"]
        ) / len(args.seeds)
    recording.finish(
        {
            "recipe": base.name,
            "target": base.target_return,
            "budget": base.total_steps,
            "runs": runs,
        },
        ratios,
        args.out,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
