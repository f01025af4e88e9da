"""What the SEED V-trace learner's levers buy inside the whole pipeline: updates/s of
``seed-vtrace-pong-fast`` with its forward pass compiled or eager, on one torch thread or two.

    .venv/bin/python benchmarks/seed_levers.py --seconds 90 --repeats 1

On two cores the recipe's hour is bound by the learner's updates (about 60 env steps each: unrolls
of 20, each learned 4 times), not by the actors, so its learner's speed inside the pipeline (actor
processes and the inference server sharing the cores) is what counts. Each row is a ``Seed`` run of
the recipe at seed 0 with the precision measured on this CPU (``measured_learner``) and then
``compile`` and ``learner_threads`` set as the row says, trained for about ``--seconds`` after its
first update (actors' start-up, the measurement and the compiling excluded). Rows are interleaved
over ``--repeats`` passes and each keeps its best. The table gives updates/s, env steps/s, the
learner's milliseconds per update (its own clock, waiting for unrolls excluded) and the share of its
calls that found no unroll to learn from. Writes ``--out`` (command, commit, machine, every pass)
and ends with ``ratios: compiled_vs_eager_one_thread=<x> two_threads_vs_one_compiled=<x>
best_vs_eager_one_thread=<x>`` (eager on one thread: the settings of
``data/learning_seed_vtrace_pong_fast.json``'s seeds 0 and 1).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import record  # this folder is sys.path[0] when the script runs
from lever_rows import ROWS, interleaved_passes, lever_ratios

WARMUP_SECONDS = 30.0  # actors starting and the first update (compiling: about 20 s) before it


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="measured seconds per row")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved passes (best kept)")
    parser.add_argument("--out", default="data/seed_levers.json")
    args = parser.parse_args(argv)
    if not args.seconds > 0 or args.repeats < 1:
        parser.error("--seconds must be positive and --repeats at least 1")
    return args


def measure(recipe, measured, forward: str, threads: int, seconds: float) -> dict:
    """One row: a run of ``recipe`` with its ``measured`` learner config and these levers, timed
    after its first update."""
    from dataclasses import replace

    from workbench.seed import Seed

    config = replace(recipe.config, seed=0)
    learner = replace(measured, compile=forward == "compiled")
    config = replace(config, learner=learner, learner_threads=threads)
    run = Seed(config, device=recipe.device, runs_dir=tempfile.mkdtemp(), name="levers")
    learning = run.learning
    clock = {"update_seconds": 0.0, "updates": 0, "calls": 0, "empty": 0, "start": None}
    update, learn = learning.learner.update, learning.learn

    def timed_update(batch):
        started = time.perf_counter()
        metrics = update(batch)
        if clock["start"] is None:  # the first update (compiling, if any) is not timed
            clock["start"] = time.perf_counter()
        else:
            clock["update_seconds"] += time.perf_counter() - started
            clock["updates"] += 1
        return metrics

    def counted_learn(wait_seconds):
        metrics = learn(wait_seconds)
        if clock["start"] is not None:
            clock["calls"] += 1
            clock["empty"] += metrics is None
        return metrics

    learning.learner.update, learning.learn = timed_update, counted_learn
    # Rows come every second or so; the first with an update closes the start-up and compiling.
    run.run(seconds=seconds + WARMUP_SECONDS)
    rows = [row for row in run.metrics if "event" not in row]
    first = next(row for row in rows if row["charts/updates"] > 0)
    last = rows[-1]
    elapsed = last["charts/wall_seconds"] - first["charts/wall_seconds"]
    return {
        "forward": forward,
        "learner_threads": threads,
        "precision": f"{learner.autocast or 'float32'}/"
        f"{'channels_last' if learner.channels_last else 'contiguous'}",
        "seconds": elapsed,
        "updates_per_second": (last["charts/updates"] - first["charts/updates"]) / elapsed,
        "env_steps_per_second": (last["charts/env_steps"] - first["charts/env_steps"]) / elapsed,
        "ms_per_update": 1000 * clock["update_seconds"] / max(clock["updates"], 1),
        "empty_fraction": clock["empty"] / max(clock["calls"], 1),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recording = record.Recording("seed_levers")
    machine = recording.machine
    print(f"machine: {machine.cpu_model}, {machine.cores} cores, flags {machine.cpu_flags}")
    from dataclasses import replace

    from workbench.seed.recipes import SEED_RECIPES

    recipe = SEED_RECIPES["seed-vtrace-pong-fast"]
    measured = recipe.measured_learner(replace(recipe.config, seed=0))  # once: the same for each

    def row(forward: str, threads: int) -> dict:
        return measure(recipe, measured, forward, threads, args.seconds)

    passes, best = interleaved_passes(args.repeats, row)
    print(
        f"\n{'forward':<10}{'threads':>8}{'updates/s':>11}{'env steps/s':>13}"
        f"{'ms/update':>11}{'no unroll':>11}"
    )
    for (forward, threads), row in zip(ROWS, (best[f"{f}/{t}"] for f, t in ROWS)):
        print(
            f"{forward:<10}{threads:>8}{row['updates_per_second']:>11.2f}"
            f"{row['env_steps_per_second']:>13.0f}{row['ms_per_update']:>11.0f}"
            f"{row['empty_fraction']:>11.0%}"
        )
    ratios = lever_ratios(best)
    recording.finish(
        {"seconds": args.seconds, "repeats": args.repeats, "rows": best, "passes": passes},
        ratios,
        args.out,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
