"""Sampler throughput on Atari: the workbench's four samplers against two baselines and the limit.

    .venv/bin/python benchmarks/sampler_throughput.py --seconds 5

For each game (Pong, the target, and Breakout) it measures, in one run, with the NatureCNN
ActorCritic (stochastic: actions are sampled):

* naive:  one gymnasium env (AtariPreprocessing + FrameStackObservation), batch-1 forward per step;
* vector: gymnasium AsyncVectorEnv(8) of those envs, one batched forward per step;
* limit:  env stepping alone (ale_py's AtariVectorEnv, 16 envs) and inference alone (batch 32 and
          128), each at its best, combined by ``limit_steps_per_second``: the most any sampler can
          do on these cores;
* every workbench sampler (serial, parallel, batched, alternating) at several sizes, with the
          sampler's own process at 1 and at <cores> torch threads (parallel workers: 1 each).

It prints a table (steps/s, frames/s, and each stage as a fraction of the wall clock), the ratios
of the best sampler to each reference, and writes everything to ``--out`` (JSON) with the machine,
command line, git commit and date. The last line is ``ratios: naive=<x> vector=<x> limit=<x>``
for Pong.

Samplers start workers with 'spawn', which re-imports this script in every worker: so the top of
the file imports only the standard library, and all the work happens under ``__main__``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import record  # this folder is sys.path[0] when the script runs

# Idle OpenMP threads must sleep, not spin on the cores the env workers need (measured on the
# 2-core machine: +20-28% end to end).
# libgomp reads this when torch loads, so it is set before anything imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

GAMES = {"pong": "ALE/Pong-v5", "breakout": "ALE/Breakout-v5"}
TARGET_GAME = "pong"

#: (sampler kind, constructor arguments). Serial, batched and alternating are measured at 1 and at
#: <cores> torch threads in the sampler's process; parallel workers always use one thread each.
SAMPLER_SETTINGS: list[tuple[str, dict]] = [
    ("serial", {"num_envs": 16}),
    ("serial", {"num_envs": 64}),
    ("parallel", {"num_workers": 2, "num_envs": 32}),
    ("parallel", {"num_workers": 2, "num_envs": 64}),
    ("parallel", {"num_workers": 4, "num_envs": 64}),
    ("batched", {"num_workers": 2, "num_envs": 32}),
    ("batched", {"num_workers": 2, "num_envs": 64}),
    ("alternating", {"num_workers": 2, "num_envs": 32}),
    ("alternating", {"num_workers": 2, "num_envs": 64}),
]

VECTOR_ENV_SETTINGS = [{"num_envs": 16, "batch_size": 8}, {"num_envs": 16, "batch_size": 16}]
INFERENCE_BATCHES = (32, 128)
GYM_VECTOR_ENVS = 8


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="seconds per measurement (default 5)"
    )
    parser.add_argument(
        "--games",
        default="pong,breakout",
        help=f"comma-separated, of {', '.join(GAMES)} (default pong,breakout)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="measurements per row, best kept: noise only ever slows a run (default 3)",
    )
    parser.add_argument("--horizon", type=int, default=64, help="T, steps per collect (default 64)")
    parser.add_argument(
        "--out", default="data/sampler_throughput.json", help="where to write the JSON results"
    )
    args = parser.parse_args(argv)
    args.games = [g.strip().lower() for g in args.games.split(",") if g.strip()]
    unknown = [g for g in args.games if g not in GAMES]
    if unknown or not args.games:
        parser.error(f"unknown game(s) {unknown}; choose from {', '.join(GAMES)}.")
    if not args.seconds > 0:
        parser.error("--seconds must be positive.")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1.")
    return args


# --- the table ------------------------------------------------------------------------------------

HEADER = f"{'':2}{'measurement':<44}{'steps/s':>9}{'frames/s':>10}{'env':>6}{'infer':>6}{'wait':>6}"


def row(measured) -> str:
    fractions = measured.stage_fractions()
    return (
        f"{'':2}{measured.label:<44}{measured.steps_per_second:>9,.0f}"
        f"{measured.frames_per_second:>10,.0f}"
        f"{fractions['env']:>6.2f}{fractions['inference']:>6.2f}{fractions['wait']:>6.2f}"
    )


def show(measured) -> None:
    print(row(measured), flush=True)


# --- one game -------------------------------------------------------------------------------------


def best_of(repeats: int, measure):
    """The fastest of ``repeats`` calls of ``measure()``: every row, references and the limit's
    parts included, gets the same chance, so the ratios compare like with like."""
    return max((measure() for _ in range(repeats)), key=lambda m: m.steps_per_second)


def measure_game(game: str, *, seconds: float, horizon: int, cores: int, repeats: int) -> dict:
    """Every measurement for one game; returns them with the best sampler and the ratios."""
    import torch

    from workbench.envs import env_spaces
    from workbench.measure import baselines, throughput
    from workbench.models import ActorCritic
    from workbench.sampling import make_sampler

    env_id = GAMES[game]
    obs_space, action_space = env_spaces(env_id)
    obs_shape = tuple(obs_space.shape)
    torch.manual_seed(0)
    model = ActorCritic(obs_shape, int(action_space.n))  # stochastic: act() samples
    model.eval()

    print(
        f"\n{env_id}  (obs {obs_shape}, {int(action_space.n)} actions, {cores} cores)", flush=True
    )
    print(HEADER, flush=True)
    results: dict = {
        "env_id": env_id,
        "naive": None,
        "vector": None,
        "env_only": [],
        "inference": [],
        "samplers": [],
    }

    # (a) naive and (b) gymnasium's vector env: the references, with torch on every core.
    with throughput.torch_threads(cores):
        naive = best_of(
            repeats,
            lambda: baselines.naive_loop(
                env_id, model, seconds, label=f"naive: 1 gym env, batch 1, torch={cores}"
            ),
        )
        show(naive)
        vector = best_of(
            repeats,
            lambda: baselines.gym_vector_loop(
                env_id,
                GYM_VECTOR_ENVS,
                model,
                seconds,
                mode="async",
                label=f"vector: gym AsyncVectorEnv({GYM_VECTOR_ENVS}), torch={cores}",
            ),
        )
        show(vector)
    results["naive"], results["vector"] = naive.to_dict(), vector.to_dict()

    # (c) the limit: each half alone at its best.
    env_only = []
    for setting in VECTOR_ENV_SETTINGS:
        measured = best_of(
            repeats,
            lambda setting=setting: throughput.measure_vector_env(
                env_id,
                setting["num_envs"],
                seconds,
                batch_size=setting["batch_size"],
                num_threads=cores,
                label=f"env only: B={setting['num_envs']} batch={setting['batch_size']} "
                f"threads={cores}",
            ),
        )
        show(measured)
        env_only.append(measured)
    inference = []
    for batch in INFERENCE_BATCHES:
        measured = best_of(
            repeats,
            lambda batch=batch: throughput.measure_inference(
                model,
                obs_shape,
                batch,
                seconds,
                device="cpu",
                num_threads=cores,
                label=f"inference only: batch {batch}, torch={cores}",
            ),
        )
        show(measured)
        inference.append(measured)
    best_env = max(env_only, key=lambda m: m.steps_per_second)
    best_inference = max(inference, key=lambda m: m.steps_per_second)
    limit = throughput.limit_steps_per_second(best_env, best_inference, cores)
    frameskip = best_env.frames_per_second / best_env.steps_per_second
    print(
        f"{'':2}{'limit: best env only + best inference only':<44}{limit:>9,.0f}"
        f"{limit * frameskip:>10,.0f}",
        flush=True,
    )
    results["env_only"] = [m.to_dict() for m in env_only]
    results["inference"] = [m.to_dict() for m in inference]
    results["limit_steps_per_second"] = limit
    results["limit_from"] = {"env": best_env.label, "inference": best_inference.label}

    # (d) the workbench samplers.
    samplers = []
    for kind, kwargs in SAMPLER_SETTINGS:
        thread_counts = [1] if kind == "parallel" else sorted({1, cores})
        workers = f"{kwargs['num_workers']}w x " if "num_workers" in kwargs else ""
        with make_sampler(kind, env_id, horizon=horizon, seed=0, **kwargs) as sampler:
            for threads in thread_counts:
                who = "workers" if kind == "parallel" else "torch"
                label = f"{kind}: {workers}B={kwargs['num_envs']} T={horizon} {who}={threads}"
                measured = best_of(
                    repeats,
                    lambda label=label, threads=threads: throughput.measure_sampler(
                        sampler, model, seconds, label=label, num_threads=threads
                    ),
                )
                measured.details["kind"] = kind
                show(measured)
                samplers.append(measured)
    results["samplers"] = [m.to_dict() for m in samplers]

    best = max(samplers, key=lambda m: m.steps_per_second)
    results["best_sampler"] = best.label
    results["ratios"] = {
        "naive": best.steps_per_second / naive.steps_per_second,
        "vector": best.steps_per_second / vector.steps_per_second,
        "limit": best.steps_per_second / limit,
    }
    print(f"{'':2}best: {best.label} at {best.steps_per_second:,.0f} steps/s", flush=True)
    return results


def ratios_line(ratios: dict) -> str:
    return f"naive={ratios['naive']:.2f} vector={ratios['vector']:.2f} limit={ratios['limit']:.2f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch  # after OMP_WAIT_POLICY is set

    from workbench.course.budget import budget_name
    from workbench.system import machine_info

    machine = machine_info()
    cores = machine.cores
    started = time.perf_counter()
    report = {
        **record.provenance("sampler_throughput"),
        "budget_seconds": args.seconds,
        "repeats": args.repeats,
        "workbench_budget": budget_name(),
        "horizon": args.horizon,
        "machine": dataclasses.asdict(machine),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "torch_threads_default": torch.get_num_threads(),
        "games": {},
    }
    print(
        f"machine: {machine.cpu_model}, {cores} cores, torch {machine.torch}, "
        f"best of {args.repeats} x {args.seconds:g} s per row"
    )
    print(
        "env / infer / wait: seconds in each stage as a fraction of the wall clock (parallel: "
        "mean\nper worker; alternating: both env groups summed, so env + infer can pass 1 when "
        "they overlap)"
    )
    try:
        # Pong last, so that its ratios are the last line.
        order = sorted(args.games, key=lambda g: g == TARGET_GAME)
        for game in order:
            report["games"][game] = measure_game(
                game, seconds=args.seconds, horizon=args.horizon, cores=cores, repeats=args.repeats
            )
    except KeyboardInterrupt:
        print("\ninterrupted: every sampler and env was closed; nothing written.", file=sys.stderr)
        return 130
    report["wall_seconds"] = time.perf_counter() - started

    record.write(report, args.out)
    print(f"\nwrote {args.out} ({report['wall_seconds']:.0f} s)")
    for game in order:
        ratios = report["games"][game]["ratios"]
        if game == order[-1]:
            print(f"ratios: {ratios_line(ratios)}")
        else:
            print(f"ratios ({game}): {ratios_line(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
