"""What the Ape-X DQN learner's levers buy inside the whole pipeline: updates/s of
``apex-dqn-pong-fast`` with its loss compiled or eager, on one torch thread or two.

    .venv/bin/python benchmarks/apex_levers.py --seconds 90 --repeats 1

The recipe holds every env step to 8 samples trained (``min_replay_ratio`` = ``max_replay_ratio``):
the actors wait for the learner, so on two cores its updates per second set the pace of the whole
run (env steps/s = updates/s x 64 / 8). Each row is an ``Apex`` run of the recipe at seed 0 with the
fastest eager or compiled precision measured on this CPU (``choose_precision``: compiling may prefer
the other memory layout) and the row's ``learner_threads``, timed for about ``--seconds`` after its
first update (the actors' start-up, the replay's first 20,000 env steps and the compiling excluded).
Rows are interleaved over ``--repeats`` passes and each keeps its best. The table gives updates/s,
env steps/s, the samples trained per env step and the learner's milliseconds per update (its own
clock, waiting for batches excluded). Writes ``--out`` (command, commit, machine, every pass) and
ends with ``ratios: compiled_vs_eager_one_thread=<x> two_threads_vs_one_compiled=<x>
best_vs_eager_one_thread=<x>``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import record  # this folder is sys.path[0] when the script runs
from lever_rows import ROWS, interleaved_passes, lever_ratios

WARMUP_SECONDS = 60.0  # actors starting, learning_starts' env steps and the compiling before it


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="measured seconds per row")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved passes (best kept)")
    parser.add_argument("--out", default="data/apex_levers.json")
    args = parser.parse_args(argv)
    if not args.seconds > 0 or args.repeats < 1:
        parser.error("--seconds must be positive and --repeats at least 1")
    return args


def fastest(rates: dict[str, float], compiled: bool) -> dict:
    """The ``DQNConfig`` precision fields of the fastest eager (or compiled) label of
    ``choose_precision``'s rates: compiling may prefer the other memory layout."""
    names = [name for name in rates if name.endswith("/compiled") == compiled]
    autocast, layout = max(names, key=rates.get).split("/")[:2]
    return {
        "autocast": None if autocast == "float32" else autocast,
        "channels_last": layout == "channels_last",
        "compile": compiled,
    }


def measure(recipe, precision: dict, threads: int, seconds: float) -> dict:
    """One row: a run of ``recipe`` with these precision fields and learner threads, timed from its
    first update on."""
    from dataclasses import replace

    from workbench.apex import Apex

    forward = "compiled" if precision["compile"] else "eager"
    learner = replace(recipe.config.learner, **precision)
    config = replace(recipe.config, seed=0, learner=learner, learner_threads=threads)
    run = Apex(config, device=recipe.device, runs_dir=tempfile.mkdtemp(), name="levers")
    clock = {"update_seconds": 0.0, "updates": 0, "first": None}
    update = run.learner.update

    def timed_update(batch):
        started = time.perf_counter()
        metrics = update(batch)
        if clock["first"] is None:  # the first update (compiling, if any) is not timed
            clock["first"] = time.perf_counter()
        else:
            clock["update_seconds"] += time.perf_counter() - started
            clock["updates"] += 1
        return metrics

    run.learner.update = timed_update
    deadline = None
    run.start()
    try:
        while deadline is None or time.monotonic() < deadline:
            if deadline is None and clock["first"] is not None:
                deadline = time.monotonic() + seconds
            status = run.wait(timeout=0.5)  # raises the loop's error if it failed
            if status != "running":
                raise RuntimeError(f"the run ended before it was timed ({status})")
    finally:
        run.stop()
    rows = [row for row in run.metrics if "event" not in row and "charts/updates" in row]
    first = next(row for row in rows if row["charts/updates"] > 1)
    last = rows[-1]
    elapsed = last["charts/wall_seconds"] - first["charts/wall_seconds"]
    steps = last["charts/env_steps"] - first["charts/env_steps"]
    trained = last["apex/samples_trained"] - first["apex/samples_trained"]
    return {
        "forward": forward,
        "learner_threads": threads,
        "precision": f"{learner.autocast or 'float32'}/"
        f"{'channels_last' if learner.channels_last else 'contiguous'}",
        "seconds": elapsed,
        "updates_per_second": (last["charts/updates"] - first["charts/updates"]) / elapsed,
        "env_steps_per_second": steps / elapsed,
        "samples_per_env_step": trained / max(steps, 1),
        "ms_per_update": 1000 * clock["update_seconds"] / max(clock["updates"], 1),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recording = record.Recording("apex_levers")
    machine = recording.machine
    print(f"machine: {machine.cpu_model}, {machine.cores} cores, flags {machine.cpu_flags}")
    from workbench.apex.recipes import APEX_RECIPES
    from workbench.envs import env_spaces
    from workbench.learners import choose_precision
    from workbench.models import QNetwork

    recipe = APEX_RECIPES["apex-dqn-pong-fast"]
    config = recipe.config
    observation_space, action_space = env_spaces(config.env_id, **config.env_options)
    shape = observation_space.shape
    network = QNetwork(shape, int(action_space.n), **config.model_options)
    # once: each row's precision is the fastest eager or compiled one measured here
    choice = choose_precision(network, shape, config.learner.batch_size, try_compile=True)
    print(f"learner samples/s {choice.describe()}", flush=True)
    precision = {forward: fastest(choice.rates, forward == "compiled") for forward, _ in ROWS}

    def row(forward: str, threads: int) -> dict:
        return measure(recipe, precision[forward], threads, args.seconds)

    passes, best = interleaved_passes(args.repeats, row)
    print(
        f"\n{'forward':<10}{'threads':>8}{'updates/s':>11}{'env steps/s':>13}"
        f"{'samples/step':>14}{'ms/update':>11}"
    )
    for forward, threads in ROWS:
        row = best[f"{forward}/{threads}"]
        print(
            f"{forward:<10}{threads:>8}{row['updates_per_second']:>11.2f}"
            f"{row['env_steps_per_second']:>13.0f}{row['samples_per_env_step']:>14.1f}"
            f"{row['ms_per_update']:>11.0f}"
        )
    ratios = lever_ratios(best)
    recording.finish(
        {
            "seconds": args.seconds,
            "repeats": args.repeats,
            "learner_samples_per_second": choice.rates,
            "rows": best,
            "passes": passes,
        },
        ratios,
        args.out,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
