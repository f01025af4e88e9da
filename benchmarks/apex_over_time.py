"""Ape-X: return against wall time at each number of actors, on this machine (Horgan et al. 2018).

    .venv/bin/python benchmarks/apex_over_time.py --actors 1 2 4 8 --seconds 240

Ape-X's Fig. 5 asks whether more actors learn faster in wall time. One Ape-X DQN run on
CartPole-v1 per actor count (``workbench.studies.apex_studies.return_over_time``: the notebook's
config, local transport), each for ``--seconds`` of wall time, all in one invocation so the rows
are side by side: the return of the actor exploring least over time, the seconds to ``--target``
and the replay ratio each run ends at (samples trained per transition added).

It prints a table, writes ``--out`` (JSON: command, commit, machine, date, load averages, every
run with its curve) and ends with ``ratios: replay_ratio_<max>_vs_<min>=<x>``.

Actors and the replay are spawned processes, which re-import this script: so the top of the file
imports only the standard library, and all the work happens in functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import record  # this folder is sys.path[0] when the script runs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--seconds", type=float, default=240.0, help="wall seconds per run")
    parser.add_argument("--target", type=float, default=475.0, help="the return to time")
    parser.add_argument("--out", default="data/apex_over_time.json")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.actors) or not args.seconds > 0:
        parser.error("--actors and --seconds must be positive.")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from workbench.studies.apex_studies import apex_cartpole_config, return_over_time

    torch.set_num_threads(1)
    recording = record.Recording("apex_over_time")
    machine = recording.machine
    config = apex_cartpole_config(max_actors=max(16, *args.actors))
    print(f"machine: {machine.cpu_model}, {machine.cores} cores; {args.seconds:g} s per run")
    runs = return_over_time(args.actors, args.seconds, target=args.target, config=config)
    print(f"{'actors':>7}{'final return':>14}{'to target s':>13}{'replay ratio':>14}")
    for run in runs:
        final = run.returns[-1] if run.returns else float("nan")
        reached = "never" if run.seconds_to_target is None else f"{run.seconds_to_target:.0f}"
        print(f"{run.num_actors:>7}{final:>14.0f}{reached:>13}{run.replay_ratio:>14.2f}")
    first, last = runs[0], runs[-1]
    ratios = {
        f"replay_ratio_{last.num_actors}_vs_{first.num_actors}": last.replay_ratio
        / max(first.replay_ratio, 1e-9)
    }
    figures = {
        "seconds": args.seconds,
        "target": args.target,
        "config": {"env_id": config.env_id, "learner": dataclasses.asdict(config.learner)},
        "runs": [{**dataclasses.asdict(r), "replay_ratio": r.replay_ratio} for r in runs],
    }
    recording.finish(figures, ratios, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
