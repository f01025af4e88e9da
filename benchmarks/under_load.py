"""Many actors on two cores for minutes: no deadlock, no unbounded queue, memory that levels off.

    .venv/bin/python benchmarks/under_load.py --minutes 4

Runs, one after the other, the Pong recipes of SEED V-trace with ``--seed-actors`` env-only actor
processes (default 64, one env each) and of Ape-X DQN with ``--apex-actors`` actor processes
(default 16; its replay held to 30,000 transitions, so that it is full after the first minute and
memory after it is the system's own), each for ``--minutes``. Every ``--every`` seconds it
samples the run's whole process tree (resident memory, summed over the learner's process and every
child), the run's counters and its queues (SEED: unrolls assembled and not yet learned; Ape-X:
the replay's size against its capacity). What it reports per system:

* ``rows_gap_max``: the longest wait between two of the run's rows (a deadlock shows as a run that
  stops writing rows);
* ``queue_max``: the largest queue seen (SEED's must stay bounded: its learner holds the server
  when it falls behind);
* ``rss_mb``: memory at each sample, and ``rss_growth_mb_per_min``: the slope over the second half
  of the run (after the replay and the actors' start-up), the figure that must stay near 0.

Writes ``--out`` (JSON: machine, command, commit) and ends with ``ratios:
seed_growth_mb_per_min=<x> apex_growth_mb_per_min=<y>``. Exits 1 when a system's growth passes
``--bound`` MB a minute (default 10: 600 MB an hour, a day and a half to fill this 23 GB machine; a
leak of a frame per step would pass it within the minute) or Ape-X's replay its capacity.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time

import psutil
import record  # this folder is sys.path[0] when the script runs

APEX_REPLAY = 30_000  # transitions held by the load test's Ape-X replay


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=4.0, help="minutes per system")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--seed-actors", type=int, default=64)
    parser.add_argument("--apex-actors", type=int, default=16)
    parser.add_argument("--bound", type=float, default=10.0, help="MB/min of growth allowed")
    parser.add_argument("--out", default="data/under_load.json")
    args = parser.parse_args(argv)
    if not args.minutes > 0 or not args.every > 0 or args.seed_actors < 1 or args.apex_actors < 1:
        parser.error("--minutes and --every must be positive, the actor counts at least 1")
    return args


def tree_rss_mb() -> float:
    """Resident memory of this process and all its children, MB."""
    total = 0
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 1e6


def seed_run(actors: int, runs_dir: str):
    from workbench.seed import SEED_RECIPES, Seed

    recipe = SEED_RECIPES["seed-vtrace-pong-fast"]
    config = dataclasses.replace(
        recipe.config, num_actors=actors, max_actors=actors, envs_per_actor=1, actor_batch=None
    )
    run = Seed(config, runs_dir=runs_dir, log_interval=2.0)
    return run, lambda: run.learning.assembler.queued


def apex_run(actors: int, runs_dir: str):
    from workbench.apex import APEX_RECIPES, Apex

    recipe = APEX_RECIPES["apex-dqn-pong-fast"]
    # A replay that fills within the first minute, so that what memory does after it is the
    # system's, not the replay's filling (at the recipe's 400k frames it fills for 15 minutes).
    config = dataclasses.replace(
        recipe.config,
        num_actors=actors,
        max_actors=actors,
        replay_capacity=APEX_REPLAY,
        learning_starts=5_000,
    )
    run = Apex(config, runs_dir=runs_dir, log_interval=2.0)

    def queue() -> int:
        rows = [row for row in run.metrics if "event" not in row]
        return int(rows[-1]["apex/replay_size"]) if rows else 0

    return run, queue


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB), per minute."""
    n = len(points)
    if n < 2:
        return float("nan")
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    num = sum((t - mean_t) * (y - mean_y) for t, y in points)
    den = sum((t - mean_t) ** 2 for t, _ in points) or 1e-9
    return num / den * 60.0


def measure(name: str, make, actors: int, minutes: float, every: float) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"under-load-{name}-") as runs_dir:
        run, queue = make(actors, runs_dir)
        run.start(seconds=minutes * 60 + 60)
        started = time.monotonic()
        samples = []
        try:
            while time.monotonic() - started < minutes * 60:
                time.sleep(every)
                if run.status != "running":
                    raise SystemExit(f"{name}: the run ended ({run.status}): {run.error}")
                rows = [row for row in run.metrics if "event" not in row]
                samples.append(
                    {
                        "seconds": time.monotonic() - started,
                        "rss_mb": tree_rss_mb(),
                        "queue": queue(),
                        "env_steps": run.env_steps,
                        "updates": run.updates,
                        "rows": len(rows),
                        "last_row_wall": rows[-1]["charts/wall_seconds"] if rows else None,
                    }
                )
                last = samples[-1]
                print(
                    f"{name} {last['seconds']:6.0f} s: {last['rss_mb']:8.0f} MB, queue "
                    f"{last['queue']:>7}, {last['env_steps']:>9,} env steps, "
                    f"{last['updates']:>6,} updates",
                    flush=True,
                )
        finally:
            run.stop(timeout=120)
        walls = [row["charts/wall_seconds"] for row in run.metrics if "event" not in row]
    second_half = [(s["seconds"], s["rss_mb"]) for s in samples if s["seconds"] >= minutes * 30]
    return {
        "system": name,
        "actors": actors,
        "minutes": minutes,
        "samples": samples,
        "rows_gap_max": max((b - a for a, b in zip(walls, walls[1:])), default=None),
        "queue_max": max(s["queue"] for s in samples),
        "rss_growth_mb_per_min": slope(second_half),
        "env_steps": samples[-1]["env_steps"],
        "updates": samples[-1]["updates"],
        "status_after_stop": run.status,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recording = record.Recording("under_load")
    results = [
        measure("seed", seed_run, args.seed_actors, args.minutes, args.every),
        measure("apex", apex_run, args.apex_actors, args.minutes, args.every),
    ]
    for r in results:
        print(
            f"{r['system']:<5} {r['actors']:>3} actors: rows at most {r['rows_gap_max']:.1f} s "
            f"apart, queue at most {r['queue_max']:,}, memory "
            f"{r['samples'][-1]['rss_mb']:.0f} MB at the end, "
            f"{r['rss_growth_mb_per_min']:+.1f} MB/min over the second half",
            flush=True,
        )
    bounded = all(r["rss_growth_mb_per_min"] <= args.bound for r in results) and all(
        r["queue_max"] <= APEX_REPLAY for r in results if r["system"] == "apex"
    )
    recording.finish(
        {"runs": results, "bound_mb_per_min": args.bound, "within_bounds": bounded},
        {f"{r['system']}_growth_mb_per_min": r["rss_growth_mb_per_min"] for r in results},
        args.out,
    )
    return 0 if bounded else 1


if __name__ == "__main__":
    sys.exit(main())
