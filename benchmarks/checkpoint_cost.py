"""What a checkpoint on a timer costs, per system, on Pong; and what saving Ape-X's replay would.

    .venv/bin/python benchmarks/checkpoint_cost.py

For each Pong recipe (``ppo-pong-fast``, ``apex-dqn-pong-fast``, ``seed-vtrace-pong-fast``,
``seed-r2d2-pong-fast``) it makes the recipe's run (continuing the recorded checkpoint in
``data/`` where there is one, so that the optimizer's moments are in it; not started) and writes
its checkpoint ``--repeats`` times (a recipe without one: a fresh learner, whose optimizer has
no moments yet) the way the timer does (``runs.checkpoints``: a temporary file
flushed to disk, the previous one kept): the median seconds and the bytes, and that time as a
share of ``CHECKPOINT_SECONDS``, the default period.

Ape-X's and R2D2's replays are not in a checkpoint: the actors refill them on resume. What saving
Ape-X's would cost instead is measured on a real one: ``ReplayServer`` takes actor blocks of Pong
until its arrays are allocated, and the figures are their bytes at the recipe's capacity and the
seconds a write of the whole replay (pickled, flushed to disk) takes.

It prints a table, writes ``--out`` and ends with ``ratios: period_over_write_<recipe>=<x> ...``
(the default period over the median write: how many writes' time the timer leaves between two).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

import record  # this folder is sys.path[0] when the script runs
import torch

from workbench.runs.checkpoints import CHECKPOINT_SECONDS

ROOT = Path(__file__).resolve().parent.parent
RECORDED = {  # the recorded checkpoints each recipe's run continues (data/README.md)
    "ppo-pong-fast": "ppo_pong_fast_climb.pt",
    "apex-dqn-pong-fast": "apex_dqn_pong_fast_climb.pt",
    "seed-vtrace-pong-fast": "seed_vtrace_pong_fast_climb.pt",
    "seed-r2d2-pong-fast": None,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="writes per recipe (default 5)")
    parser.add_argument("--out", default="data/checkpoint_cost.json")
    parser.add_argument(
        "--recipes", nargs="+", default=list(RECORDED), choices=list(RECORDED), metavar="RECIPE"
    )
    parser.add_argument(
        "--without-replay", action="store_true", help="skip Ape-X's replay (a minute or two)"
    )
    return parser.parse_args(argv)


def find_recipe(name: str):
    from workbench.apex import APEX_RECIPES
    from workbench.runs.recipes import RECIPES
    from workbench.seed import SEED_RECIPES

    for table in (RECIPES, APEX_RECIPES, SEED_RECIPES):
        if name in table:
            return table[name]
    raise SystemExit(f"unknown recipe {name!r}")


def checkpoint_cost(name: str, repeats: int, runs_dir: str) -> dict:
    recipe = find_recipe(name)
    recorded = RECORDED[name]
    resume = ROOT / "data" / recorded if recorded else None
    if resume is not None and not resume.is_file():
        resume = None
    if resume is None and getattr(recipe, "measure_precision", False):
        off = {"measure_precision": False}  # the precision changes no saved byte
        if hasattr(recipe, "measure_compile"):
            off["measure_compile"] = False
        recipe = dataclasses.replace(recipe, **off)
    run = recipe.make_run(0, runs_dir=runs_dir, resume_from=resume)
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        run.save_checkpoint()
        seconds.append(time.perf_counter() - started)
    median = statistics.median(seconds)
    return {
        "recipe": name,
        "continues": f"data/{recorded}" if resume is not None else None,
        "bytes": run.checkpoint_path.stat().st_size,
        "seconds_median": median,
        "seconds_max": max(seconds),
        "share_of_period": median / CHECKPOINT_SECONDS,
        "holds": sorted(torch.load(run.checkpoint_path, weights_only=True)["state"]),
    }


def apex_replay_cost(runs_dir: str) -> dict:
    """Ape-X's Pong replay, allocated by real actor blocks: its bytes and a write of it."""
    from workbench.apex import APEX_RECIPES, ApexActor, ReplayServer

    config = APEX_RECIPES["apex-dqn-pong-fast"].config
    server = ReplayServer(config)
    actor = ApexActor(config, index=0, exploration=1.0)
    while server.replay.storage.nbytes == 0:
        server.add_block(actor.collect())
    nbytes = server.replay.storage.nbytes
    path = Path(runs_dir) / "replay.pickle"
    started = time.perf_counter()
    with open(path, "wb") as f:  # the whole replay: frames, trees, priorities
        pickle.dump(server.replay, f, protocol=5)
        f.flush()
        os.fsync(f.fileno())
    seconds = time.perf_counter() - started
    return {
        "recipe": "apex-dqn-pong-fast",
        "replay_capacity": config.replay_capacity,
        "bytes": nbytes,
        "file_bytes": path.stat().st_size,
        "save_seconds": seconds,
        "refill_env_steps": config.learning_starts,
    }


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    recording = record.Recording("checkpoint_cost")
    rows = []
    with tempfile.TemporaryDirectory(prefix="checkpoint-cost-") as runs_dir:
        for name in args.recipes:
            rows.append(checkpoint_cost(name, args.repeats, runs_dir))
            row = rows[-1]
            print(
                f"{name:<22} {row['bytes'] / 1e6:7.2f} MB  {row['seconds_median'] * 1000:7.1f} ms "
                f"(max {row['seconds_max'] * 1000:.1f})  {row['share_of_period']:.2e} of "
                f"{CHECKPOINT_SECONDS:g} s; continues {row['continues']}",
                flush=True,
            )
        replay = None if args.without_replay else apex_replay_cost(runs_dir)
    if replay is not None:
        print(
            f"apex-dqn-pong-fast replay at {replay['replay_capacity']:,}: "
            f"{replay['bytes'] / 1e6:.0f} MB in memory, {replay['file_bytes'] / 1e6:.0f} MB "
            f"written in {replay['save_seconds']:.1f} s; not saved: refilled over "
            f"{replay['refill_env_steps']:,} env steps on resume",
            flush=True,
        )
    ratios = {  # how many times the default period is the write's time
        f"period_over_write_{row['recipe']}": CHECKPOINT_SECONDS / row["seconds_median"]
        for row in rows
    }
    recording.finish(
        {"checkpoint_seconds": CHECKPOINT_SECONDS, "runs": rows, "apex_replay": replay},
        ratios,
        args.out,
    )


if __name__ == "__main__":
    sys.exit(main())
