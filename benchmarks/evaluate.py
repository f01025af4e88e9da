"""An evaluation that does not trust the training curve: a recorded run's final checkpoint plays.

    .venv/bin/python benchmarks/evaluate.py --recipe ppo-pong-fast --seed 0 --games 10 \\
        --animation data/ppo_pong_fast.gif --policy data/ppo_pong_fast_seed0.pt

Reads the run of ``--seed`` from ``--data`` (default ``data/learning_<recipe>.json``, written by
``benchmarks/learning.py``), loads the ``checkpoint.pt`` in its ``run_dir``, plays ``--games``
whole games on envs seeded apart from training's (``runs.evaluation.EVALUATION_SEED``) twice: with
greedy actions (the policy's most likely action, as Stable-Baselines3's ``evaluate_policy`` plays by
default), and with actions sampled from the policy as in training (a Q-network's, DQN's, Ape-X's
and R2D2's: epsilon-greedy at ``models.EVALUATION_EPSILON``). It writes their raw scores into
that run's entry (``evaluation``: greedy; ``evaluation_sampled``; each with returns, mean, seed,
command, commit). With ``--animation`` one more greedy game is saved as a GIF (under 3 MB); with
``--policy`` the weights alone are kept (``runs.evaluation.export_policy``), for ``lab.watch`` in
notebook 09. Prints both means and exits 1 when the greedy one is below the recipe's target.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import record  # this folder is sys.path[0] when the script runs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--seed", type=int, required=True, help="the recorded run's seed")
    parser.add_argument("--games", type=int, default=10)
    parser.add_argument("--data", default=None, help="default data/learning_<recipe>.json")
    parser.add_argument("--checkpoint", default=None, help="default: the run's run_dir")
    parser.add_argument("--animation", default=None, help="save one game as a GIF here")
    parser.add_argument("--policy", default=None, help="save the weights alone here")
    args = parser.parse_args(argv)
    if args.data is None:
        args.data = f"data/learning_{args.recipe.replace('-', '_')}.json"
    if args.games < 1:
        parser.error("--games must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from workbench.apex import APEX_RECIPES
    from workbench.models import EVALUATION_EPSILON, QPolicy, RecurrentQPolicy
    from workbench.runs.evaluation import (
        evaluate,
        export_policy,
        load_policy,
        play,
        save_animation,
    )
    from workbench.runs.recipes import RECIPES
    from workbench.seed import SEED_RECIPES

    torch.set_num_threads(1)
    # SEED's V-trace recipes play as a Run's do (an ActorCritic and its weights), R2D2's as a
    # RecurrentQPolicy, Ape-X DQN's as a DQN Run's (a QPolicy); Ape-X DPG's recipes say they are
    # not played here (their make_model refuses).
    known = {**RECIPES, **SEED_RECIPES, **APEX_RECIPES}
    if args.recipe not in known:
        sys.exit(f"unknown recipe {args.recipe!r}; choose one of {', '.join(known)}")
    recipe = known[args.recipe]
    if not os.path.exists(args.data):
        sys.exit(f"no {args.data}: run benchmarks/learning.py --recipes {args.recipe} first")
    with open(args.data) as f:
        report = json.load(f)
    runs = report["recipes"].get(args.recipe, {}).get("runs", [])
    entry = next((run for run in runs if run["seed"] == args.seed), None)
    if entry is None:
        sys.exit(f"{args.data} holds no run of {args.recipe} at seed {args.seed}")
    checkpoint = args.checkpoint or entry.get("run_dir")
    if not checkpoint or not os.path.exists(checkpoint):
        sys.exit(
            f"the run's checkpoint {checkpoint!r} is not on this machine; pass --checkpoint PATH"
        )
    try:
        model = load_policy(recipe, checkpoint)
    except ValueError as error:
        sys.exit(str(error))
    options = dict(recipe.env_options)
    q_policy = isinstance(model, (QPolicy, RecurrentQPolicy))
    explored = f"epsilon {EVALUATION_EPSILON}" if q_policy else "sampled"
    results = {}
    for key, deterministic in (("evaluation", True), ("evaluation_sampled", False)):
        result = evaluate(
            model, recipe.env_id, games=args.games, env_options=options, deterministic=deterministic
        )
        print(
            f"{args.recipe} seed {args.seed}, {'greedy' if deterministic else explored} actions: "
            f"{args.games} games, mean {result.mean:+.1f} (std {result.std:.1f}), "
            f"returns {[int(r) for r in result.returns]}"
        )
        entry[key] = {**record.provenance("evaluate"), **result.to_dict()}
        results[key] = result
    result = results["evaluation"]
    if args.animation:
        frames = list(play(model, recipe.env_id, env_options=options, deterministic=True))
        path = save_animation(frames, args.animation)
        final = frames[-1].score
        entry["animation"] = {
            "path": args.animation,
            "bytes": path.stat().st_size,
            "agent_steps": frames[-1].step,
            "score": {"agent": final[1], "opponent": final[0]},
        }
        print(
            f"wrote {args.animation}: agent {final[1]} : {final[0]} opponent, "
            f"{path.stat().st_size:,} bytes"
        )
    if args.policy:
        export_policy(checkpoint, args.policy)
        entry["policy"] = args.policy
        print(f"wrote {args.policy}")
    record.write(report, args.data)
    print(f"wrote {args.data}")
    return 0 if result.mean >= recipe.target_return else 1


if __name__ == "__main__":
    sys.exit(main())
