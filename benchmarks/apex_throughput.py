"""Ape-X throughput against the number of actors, on this machine (Horgan et al. 2018).

    .venv/bin/python benchmarks/apex_throughput.py --actors 1 2 4 8 --seconds 20 --repeats 2

One Ape-X DQN run on CartPole-v1 per actor count
(``workbench.studies.apex_studies.apex_cartpole_config``: 3-step double Q, dueling MLP 64x64, batch
64,
the learner running freely on one torch thread; local transport: one process per actor, one replay
process, the learner in this one), all in one invocation so the rows are side by side. Each run is
measured for ``--seconds`` after its warm-up (every actor has sent a block and the learner is
updating; the processes' start-up is not counted): transitions/s into the central replay (all
actors together), learner updates/s and samples trained/s (updates x 64), and how many samples each
transition is trained on (the replay ratio that results).

On a 2-core machine every actor, the replay and the learner share the same two cores; actors run
at a lower CPU priority (``apex.transports.local.ACTOR_NICENESS``) so the learner keeps its core.
The study shows how far more actors still add data here, and what they take from the learner; the
paper's answer (Fig. 5: more actors, more data, faster learning) assumes actors on their own
machines. Other jobs on the machine move these figures: the load average before and after is
recorded.

With ``--repeats`` the counts are measured in interleaved passes (1 2 4 8 1 2 4 8 ...) and each
count keeps its pass with the most transitions/s. It prints a table, writes ``--out`` (JSON:
command, commit, machine, date, load averages, the config and every row) and ends with
``ratios: transitions_<max>_vs_1=<x> updates_<max>_vs_1=<y>``: the transitions/s and the learner
updates/s at the most actors over those at the fewest.

Actors and the replay are spawned processes, which re-import this script: so the top of the file
imports only the standard library, and all the work happens in functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import record  # this folder is sys.path[0] when the script runs

HEADER = (
    f"{'actors':>7}{'transitions/s':>15}{'env steps/s':>13}{'updates/s':>11}{'samples/s':>11}"
    f"{'samples/transition':>20}{'warm-up s':>11}{'measured s':>12}"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--actors",
        type=int,
        nargs="+",
        default=[1, 2, 4, 8],
        help="actor counts, one run each (default 1 2 4 8)",
    )
    parser.add_argument(
        "--seconds", type=float, default=25.0, help="seconds measured per run (default 25)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="passes over the actor counts, interleaved; each count keeps its pass with the most "
        "transitions/s (a busy machine only ever slows a pass; default 1)",
    )
    parser.add_argument(
        "--warmup-timeout",
        type=float,
        default=180.0,
        help="seconds a run may take to warm up before it counts as failed (default 180)",
    )
    parser.add_argument(
        "--out", default="data/apex_throughput.json", help="where to write the JSON results"
    )
    args = parser.parse_args(argv)
    if any(count < 1 for count in args.actors):
        parser.error("--actors must be positive integers.")
    if not args.seconds > 0 or args.repeats < 1:
        parser.error("--seconds and --repeats must be positive.")
    return args


def table_row(result) -> str:
    return (
        f"{result.num_actors:>7}{result.transitions_per_second:>15,.0f}"
        f"{result.env_steps_per_second:>13,.0f}{result.updates_per_second:>11,.0f}"
        f"{result.samples_per_second:>11,.0f}{result.replay_ratio:>20.1f}"
        f"{result.warmup_seconds:>11.1f}{result.seconds:>12.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from workbench.apex.transports import local as local_transport
    from workbench.course.budget import budget_name
    from workbench.studies import apex_studies
    from workbench.system import machine_info

    torch.set_num_threads(1)
    machine = machine_info()
    load_before = os.getloadavg()
    started = time.perf_counter()
    config = apex_studies.apex_cartpole_config(max_actors=max(16, *args.actors))
    print(
        f"machine: {machine.cpu_model}, {machine.cores} cores, load average {load_before[0]:.2f}; "
        f"Ape-X DQN on {config.env_id}, batch {config.learner.batch_size}, "
        f"{args.seconds:g} s measured per row after each run's warm-up"
    )
    print(HEADER, flush=True)
    passes: list[list] = []
    for repeat in range(args.repeats):
        if args.repeats > 1:
            print(f"pass {repeat + 1} of {args.repeats}", flush=True)
        passes.append([])
        for count in args.actors:
            (result,) = apex_studies.apex_throughput(
                (count,),
                seconds=args.seconds,
                config=config,
                warmup_timeout=args.warmup_timeout,
                progress=False,
            )
            passes[-1].append(result)
            print(table_row(result), flush=True)
    results = [max(runs, key=lambda r: r.transitions_per_second) for runs in zip(*passes)]
    if args.repeats > 1:
        print(f"best of {args.repeats} passes per actor count (by transitions/s)")
        print(HEADER)
        for result in results:
            print(table_row(result))

    first, last = results[0], results[-1]
    ratios = {
        f"transitions_{last.num_actors}_vs_{first.num_actors}": last.transitions_per_second
        / first.transitions_per_second,
        f"updates_{last.num_actors}_vs_{first.num_actors}": last.updates_per_second
        / first.updates_per_second,
    }
    report = {
        **record.provenance("apex_throughput"),
        "seconds": args.seconds,
        "workbench_budget": budget_name(),
        "machine": dataclasses.asdict(machine),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "config": {
            "env_id": config.env_id,
            "learner": dataclasses.asdict(config.learner),
            "model_options": config.model_options,
            "block_steps": config.block_steps,
            "envs_per_actor": config.envs_per_actor,
            "learning_starts": config.learning_starts,
            "publish_interval": config.publish_interval,
            "parameter_sync_frames": config.parameter_sync_frames,
            "max_replay_ratio": config.max_replay_ratio,
            "learner_threads": config.learner_threads,
            "actor_niceness": local_transport.ACTOR_NICENESS,
            "transport": "local",
        },
        "repeats": args.repeats,
        "rows": [{**dataclasses.asdict(r), "replay_ratio": r.replay_ratio} for r in results],
        "passes": [
            [{**dataclasses.asdict(r), "replay_ratio": r.replay_ratio} for r in runs]
            for runs in passes
        ],
        "ratios": ratios,
        "wall_seconds": time.perf_counter() - started,
    }
    record.write(report, args.out)
    print(
        f"\nwrote {args.out} ({report['wall_seconds']:.0f} s; load average after "
        f"{report['load_average_after'][0]:.2f})"
    )
    print("ratios: " + " ".join(f"{key}={value:.2f}" for key, value in ratios.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
