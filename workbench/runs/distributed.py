"""A recipe's run as one replica of a data-parallel learner group spread over machines.

    torchrun --nnodes=2 --nproc-per-node=1 --node-rank=<0|1> --master-addr=<rank 0's address> \\
        --master-port=29500 -m workbench.runs.distributed --recipe ppo-cartpole

Each process (``torchrun`` sets ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``; see
``learners.rendezvous``) runs the recipe's sampler on its own environments (seeded by rank) and
its own replica of the learner, made with the recipe's seed on every rank, so that every replica
draws the same minibatches of the joined batch. ``join_learner_group`` copies rank 0's learner to
the others and sums every update's statistics and gradients over the group: the replicas stay
identical, and together they learn as one learner on ``WORLD_SIZE`` times the batch (Stooke &
Abbeel 2018, Sec. 3.2). Each rank writes its own run folder (``<name>-rank<r>``); ``--report``
writes what it ended with (updates, env steps, return, a checksum of the parameters) as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch

from workbench.learners.rendezvous import Rendezvous, join_learner_group, leave_learner_group

__all__ = ["main", "run_replica"]


def run_replica(
    recipe: Any,
    rendezvous: Rendezvous,
    *,
    env_steps: int | None = None,
    seed: int = 0,
    runs_dir: str | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """Join the group as ``rendezvous.rank`` and run ``recipe`` to ``env_steps`` (default: its
    budget) on this replica's envs; returns what it ended with."""
    if recipe.mode != "sync":
        raise ValueError(
            f"{recipe.name} collects asynchronously; a learner group needs every replica to update "
            "in step: use a sync recipe (mode='sync')"
        )
    learner = recipe.make_learner(seed)
    join_learner_group(learner, rendezvous)
    try:
        run = recipe.make_run(
            seed,
            runs_dir=runs_dir,
            name=f"{name or recipe.name}-rank{rendezvous.rank}",
            learner=learner,
            env_seed=seed + 1000 * rendezvous.rank,
        )
        run.run(env_steps=env_steps or recipe.total_steps)
        rows = [row for row in run.metrics if "event" not in row]
        flat = torch.cat([p.detach().reshape(-1).double() for p in learner.model.parameters()])
        return {
            "rank": rendezvous.rank,
            "world_size": rendezvous.world_size,
            "status": run.status,
            "updates": run.updates,
            "env_steps": run.env_steps,
            "mean_return": rows[-1].get("charts/mean_return") if rows else None,
            "parameter_sum": float(flat.sum()),
            "parameter_norm": float(flat.norm()),
        }
    finally:
        leave_learner_group()


def main(argv: list[str] | None = None) -> int:
    from workbench.runs.recipes import RECIPES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", required=True, choices=sorted(RECIPES))
    parser.add_argument("--env-steps", type=int, default=None, help="per replica")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs-dir", default=None)
    parser.add_argument("--report", default=None, help="write the outcome here (JSON)")
    args = parser.parse_args(argv)
    torch.set_num_threads(RECIPES[args.recipe].torch_threads or 1)
    outcome = run_replica(
        RECIPES[args.recipe],
        Rendezvous.from_environment(),
        env_steps=args.env_steps,
        seed=args.seed,
        runs_dir=args.runs_dir,
    )
    print(json.dumps(outcome), flush=True)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(outcome, f)
    return 0 if outcome["status"] == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
