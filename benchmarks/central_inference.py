"""SEED against IMPALA: env steps/s against the number of actors here (Espeholt et al. 2020).

    .venv/bin/python benchmarks/central_inference.py --actors 1 2 4 8 16 --seconds 10 --repeats 2

Each actor steps one env (``make_vector_env(env, 1)``: Pong with the default preprocessing) and the
policy is the NatureCNN ``ActorCritic``, the same parameters on both sides:

* SEED: env-only actor processes (no torch) and one central ``InferenceServer`` in this process
  answering all of them with batched forward passes (``workbench.seed.LocalActors``);
* IMPALA-style: every actor process runs its own copy of the model, one batch-1 forward pass per
  step on one torch thread (``workbench.measure.impala_actors.impala_actor_main``).

At each actor count the two run one after the other (which goes first alternates), each measured
for ``--seconds`` after its warm-up (every actor started and stepping; start-up is not counted).
With ``--repeats`` the counts are measured in interleaved passes and each side keeps its best pass
(every pass is recorded). The table gives env steps/s of both, their ratio, SEED's action latency
(request sent -> action back: queue wait + forward, p50/p99 ms) and mean batch, IMPALA's own
forward time per step, and the CPU time per step and memory per actor of both. It writes ``--out``
(JSON: command, commit, machine, date, load averages, settings, every row and pass) and ends with
``ratios: seed_vs_impala=<x> actors=<n> p99_ms=<x>`` at the largest actor count (p99: SEED's
latency).

Then SEED's two transports side by side (``--transports local ray``), with actors that step
several envs each (``--layouts 2x16 2x16/8 4x8 ...``: actors x envs per actor, ``/8``: eight envs
per request while the others step, local only): env steps/s, the
server's mean batch and latency, CPU time per step, and for Ray the actors' round trip and its
excess over the server's latency, the per-request overhead of the hop. Beside them the machine's
limit, measured in the same run as ``sampler_throughput.py`` measures it (env stepping alone and
inference alone, each at its best). ``ratios`` adds ``local_vs_limit`` (the best local layout over
the limit), ``ray_vs_local`` (best against best) and ``ray_overhead_ms`` (at Ray's best layout).
``--skip-impala`` measures only the transports.

Actors are spawned processes, which re-import this script: so the top of the file imports only the
standard library (a SEED actor must stay torch-free), and all the work happens in functions.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import record  # this folder is sys.path[0] when the script runs

HEADER = (
    f"{'actors':>7}{'SEED steps/s':>14}{'IMPALA steps/s':>16}{'ratio':>7}{'SEED p50 ms':>13}"
    f"{'SEED p99 ms':>13}{'mean batch':>12}{'IMPALA fwd p50 ms':>19}{'CPU ms/step S/I':>17}"
    f"{'MB/actor S/I':>14}"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--actors",
        type=int,
        nargs="+",
        default=[1, 2, 4, 8, 16],
        help="actor counts, one SEED and one IMPALA run each (default 1 2 4 8 16)",
    )
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="seconds measured per run (default 10)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="interleaved passes over the counts; each side keeps its best pass (default 1)",
    )
    parser.add_argument("--env", default="ALE/Pong-v5", help="environment id (default ALE/Pong-v5)")
    parser.add_argument(
        "--device",
        default="cpu",
        help="where SEED's server runs its forward pass: cpu, cuda, auto (default cpu); "
        "IMPALA actors always use their own CPU",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=1.0,
        help="seconds between every actor stepping and the window's start (default 1)",
    )
    parser.add_argument(
        "--out", default="data/central_inference.json", help="where to write the JSON results"
    )
    parser.add_argument(
        "--transports",
        nargs="*",
        default=["local", "ray"],
        choices=["local", "ray"],
        help="SEED transports measured at each --layouts (default: local ray; none: skip)",
    )
    parser.add_argument(
        "--layouts",
        nargs="+",
        default=["2x16", "2x16/8", "1x32/16", "4x8", "4x8/4", "8x4", "16x1"],
        help="actors x envs per actor of the transports' rows, /N: N envs per request, the "
        "others stepping meanwhile (local transport only; default 2x16 2x16/8 1x32/16 4x8 4x8/4 "
        "8x4 16x1)",
    )
    parser.add_argument(
        "--skip-impala", action="store_true", help="measure only the transports and the limit"
    )
    args = parser.parse_args(argv)
    if any(count < 1 for count in args.actors):
        parser.error("--actors must be positive integers.")
    if not args.seconds > 0 or args.repeats < 1 or args.warmup < 0:
        parser.error("--seconds and --repeats must be positive, --warmup >= 0.")
    try:
        args.layouts = [parse_layout(text) for text in args.layouts]
    except ValueError:
        parser.error("--layouts are ACTORSxENVS or ACTORSxENVS/BATCH, e.g. 2x16 or 2x16/8")
    return args


def parse_layout(text: str) -> tuple[int, int, int | None]:
    """``"2x16"`` -> (2, 16, None); ``"2x16/8"`` -> (2, 16, 8): 8 envs per request."""
    layout, _, batch = text.partition("/")
    actors, envs = (int(n) for n in layout.split("x"))
    per_request = int(batch) if batch else None
    if min(actors, envs) < 1 or (per_request is not None and not 1 <= per_request <= envs):
        raise ValueError(text)
    return actors, envs, per_request


TRANSPORT_HEADER = (
    f"{'transport':>10}{'layout':>8}{'steps/s':>10}{'of limit':>10}{'mean batch':>12}"
    f"{'server p50/p99 ms':>19}{'round trip p50 ms':>19}{'overhead ms':>13}{'CPU ms/step':>13}"
)


def transport_row(result, limit: float) -> str:
    trip = "-" if result.round_trip_p50_ms is None else f"{result.round_trip_p50_ms:.2f}"
    extra = "-" if result.request_overhead_ms is None else f"{result.request_overhead_ms:.2f}"
    latency = f"{result.latency_p50_ms:.2f}/{result.latency_p99_ms:.2f}"
    return (
        f"{result.transport:>10}{result.layout:>8}{result.steps_per_second:>10,.0f}"
        f"{result.steps_per_second / limit:>10.2f}{result.mean_batch_size:>12.1f}{latency:>19}"
        f"{trip:>19}{extra:>13}{result.cpu_ms_per_step:>13.2f}"
    )


def measure_transports(args, settings) -> dict:
    """The limit, then every transport at every layout (passes interleaved, best kept)."""
    from workbench import cluster
    from workbench.measure import seed_transports as transports
    from workbench.measure.central_inference import make_model

    model = make_model(args.env)
    limit = transports.machine_limit(args.env, model, args.seconds)
    rate = limit["limit_steps_per_second"]
    print(f"\nmachine limit (env stepping alone + inference alone): {rate:,.0f} steps/s")
    passes: dict = {}
    if "ray" in args.transports:
        cluster.local_ray()
    try:
        for _ in range(args.repeats):
            for kind in args.transports:
                for actors, envs, per_request in args.layouts:
                    if kind == "ray" and per_request not in (None, envs):
                        continue  # Ray env actors send all their envs in one request
                    result = transports.measure_transport(
                        kind,
                        args.env,
                        actors,
                        envs,
                        args.seconds,
                        settings=dataclasses.replace(settings, actor_batch=per_request),
                        warmup=args.warmup,
                        model=model,
                    )
                    passes.setdefault((kind, result.layout), []).append(result)
                    print(f"  {transport_row(result, rate)}", flush=True)
    finally:
        cluster.shutdown()
    best = {key: max(found, key=lambda r: r.steps_per_second) for key, found in passes.items()}
    print(TRANSPORT_HEADER)
    for result in best.values():
        print(transport_row(result, rate))
    fastest = {
        kind: max(
            (r for r in best.values() if r.transport == kind), key=lambda r: r.steps_per_second
        )
        for kind in args.transports
    }
    ratios = {}
    if "local" in fastest:
        ratios["local_vs_limit"] = fastest["local"].steps_per_second / rate
        ratios["local_layout"] = fastest["local"].layout
    if "ray" in fastest:
        ratios["ray_overhead_ms"] = fastest["ray"].request_overhead_ms
        ratios["ray_layout"] = fastest["ray"].layout
    if {"local", "ray"} <= set(fastest):
        ratios["ray_vs_local"] = fastest["ray"].steps_per_second / fastest["local"].steps_per_second
    return {
        "limit": limit,
        "rows": [r.to_dict() for r in best.values()],
        "passes": {
            f"{kind} {layout}": [r.steps_per_second for r in found]
            for (kind, layout), found in passes.items()
        },
        "ratios": ratios,
    }


def table_row(row) -> str:
    seed, impala = row.seed, row.impala
    return (
        f"{row.num_actors:>7}{seed.steps_per_second:>14,.0f}{impala.steps_per_second:>16,.0f}"
        f"{row.ratio:>7.2f}"
        f"{seed.latency.get('latency_p50_ms', float('nan')):>13.2f}"
        f"{seed.latency.get('latency_p99_ms', float('nan')):>13.2f}"
        f"{seed.latency.get('mean_batch_size', float('nan')):>12.1f}"
        f"{impala.latency.get('latency_p50_ms', float('nan')):>19.2f}"
        f"{f'{seed.cpu_ms_per_step:.2f}/{impala.cpu_ms_per_step:.2f}':>17}"
        f"{f'{seed.actor_rss_mb:.0f}/{impala.actor_rss_mb:.0f}':>14}"
    )


def progress_line(result) -> str:
    p50 = result.latency.get("latency_p50_ms", float("nan"))
    p99 = result.latency.get("latency_p99_ms", float("nan"))
    return (
        f"  {result.system:<6} {result.num_actors:>3} actors: "
        f"{result.steps_per_second:>7,.0f} steps/s, p50/p99 {p50:.2f}/{p99:.2f} ms, "
        f"{result.cpu_ms_per_step:.2f} CPU ms/step, warm-up {result.warmup_seconds:.1f} s"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from workbench.course.budget import budget_name
    from workbench.measure import (
        central_inference as study,
    )  # workbench first: it sets OMP_WAIT_POLICY
    from workbench.system import machine_info

    machine = machine_info()
    load_before = os.getloadavg()
    started = time.perf_counter()
    settings = study.SeedSettings(device=args.device)
    print(
        f"machine: {machine.cpu_model}, {machine.cores} cores, load average {load_before[0]:.2f}; "
        f"{args.env}, one env per actor, NatureCNN ActorCritic; {args.seconds:g} s measured per "
        f"run after its warm-up, {args.repeats} pass(es); SEED server on {args.device}",
        flush=True,
    )
    rows, ratios = [], {}
    if not args.skip_impala:
        rows = study.central_inference_study(
            args.actors,
            args.seconds,
            args.env,
            args.repeats,
            settings=settings,
            warmup=args.warmup,
            progress=lambda r: print(progress_line(r), flush=True),
        )
        print(HEADER)
        for row in rows:
            print(table_row(row))
        last = max(rows, key=lambda r: r.num_actors)
        ratios = {
            "seed_vs_impala": last.ratio,
            "actors": last.num_actors,
            "p99_ms": last.seed.latency.get("latency_p99_ms", float("nan")),
        }
    transports = measure_transports(args, settings) if args.transports else None
    if transports:
        ratios.update(transports["ratios"])
    report = {
        **record.provenance("central_inference"),
        "seconds": args.seconds,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "env_id": args.env,
        "workbench_budget": budget_name(),
        "machine": dataclasses.asdict(machine),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "seed_settings": dataclasses.asdict(settings),
        "rows": [row.as_dict() for row in rows],
        "transports": transports,
        "ratios": ratios,
        "ratios_by_actors": {str(row.num_actors): row.ratio for row in rows},
        "wall_seconds": time.perf_counter() - started,
    }
    record.write(report, args.out)
    print(
        f"\nwrote {args.out} ({report['wall_seconds']:.0f} s; load average after "
        f"{report['load_average_after'][0]:.2f})"
    )
    shown = " ".join(
        f"{key}={value:.2f}" if isinstance(value, float) else f"{key}={value}"
        for key, value in ratios.items()
    )
    print(f"ratios: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
