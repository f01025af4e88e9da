"""The performance model on this machine: calibrate it, measure the systems it predicts, compare.

    .venv/bin/python benchmarks/performance_model.py                # about 14 minutes, alone
    .venv/bin/python benchmarks/performance_model.py --seconds 0.2 --actors 1 2 --out /tmp/x.json

One run, side by side on one machine:

1. **Calibrate**: what each part costs here (``component_costs.py``'s rows: a forward pass and a
   gradient step against their batch on 1 and <cores> torch threads, Pong stepping on 1 and
   <cores> threads, one request through SEED's local transport (one actor on Pong, its env step
   and the server's forward pass taken out: SEED's one-actor row is this calibration point, not
   a prediction), each sampler layout's own work per env step measured on CartPole), for the
   NatureCNN on 84x84 Pong.
2. **Measure** the systems the model predicts, with the package's own measurement code: the
   samplers of ``benchmarks/sampler_throughput.py`` (serial, parallel, batched, alternating on
   Pong), SEED against IMPALA-style actors at each actor count
   (``measure.central_inference``, as ``benchmarks/central_inference.py``), Ape-X DQN on CartPole
   at each ``--apex-actors`` count (``benchmarks/apex_throughput.py``'s runs; its roles, an
   actor, the replay and the learner, timed alone just before by
   ``measure.process_costs.apex_role_costs``) and PPO's update on Pong with ``--learners``
   data-parallel learners (``benchmarks/learner_scaling.py``; a gloo all-reduce of the network's
   gradient timed just before by ``measure.process_costs.all_reduce_costs``).
   Everything runs ``--repeats`` times, calibration and systems together in each pass, and each
   pass's systems are predicted from that pass's costs: on a shared machine whose speed drifts
   from minute to minute, costs measured at a fast moment would flatter the model against
   systems measured at a slow one.
3. **Predict** each system from step 1's costs alone (``measure.performance_model``) and state
   the error of every figure (``measure.model_validation``): env steps/s (a learner's samples/s),
   Ape-X's updates/s, and SEED's server mean batch and latency.

Writes ``--out`` (JSON: command, commit, machine with its instruction sets, the costs, the
systems, the validation rows) and ends with ``ratios: worst_error=<x> within_20pct=<y>`` (the
largest |predicted / measured - 1| of the throughputs, ``model_validation.THROUGHPUTS``, and the
share of them within 20%; the calibration point left out).
"""

from __future__ import annotations

import argparse
import os
import sys

import component_costs  # this folder is sys.path[0] when the script runs
import record

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

NETWORK = "nature-84"
ENV_ID = "ALE/Pong-v5"
SAMPLERS: list[tuple[str, dict, int]] = [
    ("serial", {"num_envs": 16}, 1),
    ("serial", {"num_envs": 64}, 2),
    ("parallel", {"num_workers": 2, "num_envs": 64}, 1),
    ("parallel", {"num_workers": 4, "num_envs": 64}, 1),
    ("batched", {"num_workers": 2, "num_envs": 64}, 2),
    ("alternating", {"num_workers": 2, "num_envs": 64}, 1),
]
"""(kind, settings, torch threads of the sampling process): sampler_throughput.py's layouts."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per system figure")
    parser.add_argument(
        "--cost-seconds", type=float, default=0.5, help="seconds per component figure"
    )
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="passes of everything, each predicted from its own calibration",
    )
    parser.add_argument("--horizon", type=int, default=64, help="the samplers' rollout length")
    parser.add_argument(
        "--apex-actors",
        type=int,
        nargs="*",
        default=[1, 2, 4, 8],
        help="Ape-X actor counts (CartPole, local transport; none: Ape-X is left out)",
    )
    parser.add_argument(
        "--learners",
        type=int,
        nargs="*",
        default=[1, 2, 4],
        help="data-parallel learner counts (PPO, gloo; none: left out)",
    )
    parser.add_argument(
        "--learner-recipe",
        default="ppo-pong",
        choices=["ppo-pong", "ppo-pong-fast", "ppo-cartpole"],
        help="the PPO recipe whose update the data-parallel learners make (default ppo-pong)",
    )
    parser.add_argument(
        "--samplers",
        nargs="+",
        default=list(component_costs.SAMPLER_LAYOUTS),
        choices=list(component_costs.SAMPLER_LAYOUTS),
        help="the sampler layouts to calibrate and measure (default: all four)",
    )
    parser.add_argument(
        "--networks",
        nargs="+",
        default=list(component_costs.NETWORKS),
        choices=list(component_costs.NETWORKS),
        help="the networks whose forward pass and gradient step are measured (default: both)",
    )
    parser.add_argument(
        "--env-seconds", type=float, default=2.0, help="seconds per env-stepping figure (at least)"
    )
    parser.add_argument("--out", default=None, help="default data/performance_model_cpu.json")
    args = parser.parse_args(argv)
    counts = args.actors + args.apex_actors + args.learners
    if not (args.seconds > 0 and args.cost_seconds > 0) or min(counts) < 1:
        parser.error(
            "--seconds and --cost-seconds must be positive; --actors, --apex-actors and "
            "--learners at least 1."
        )
    if args.repeats < 1:
        parser.error("--repeats must be at least 1.")
    return args


def calibrate(
    seconds: float,
    cores: int,
    env_seconds: float = 2.0,
    networks: tuple[str, ...] = tuple(component_costs.NETWORKS),
) -> dict:
    """The components every system uses (the network's forward pass and gradient step, env
    stepping), in the shape ``measure.costs.machine_costs`` reads; each group of systems measures
    its own parts just before it runs (``main``), so the two are as close in time as they can be
    on a host whose speed drifts."""
    import torch

    threads = sorted({1, cores})
    device = torch.device("cpu")
    return {
        "device": "cpu",
        "seconds": seconds,
        "machine": {"cores": cores, "cpu_model": record_machine().cpu_model},
        "inference": component_costs.inference_rows(device, threads, seconds, networks),
        "learning": component_costs.learning_rows(device, threads, seconds, networks),
        "env": component_costs.env_rows(threads, seconds, env_seconds),
    }


def record_machine():
    from workbench.system import machine_info

    return machine_info()


def measure_samplers(seconds: float, horizon: int, kinds: tuple[str, ...]) -> list[dict]:
    from workbench.measure import throughput
    from workbench.measure.central_inference import make_model
    from workbench.sampling import make_sampler

    model = make_model(ENV_ID)
    rows = []
    for kind, settings, threads in SAMPLERS:
        if kind not in kinds:
            continue
        with make_sampler(kind, ENV_ID, horizon=horizon, seed=0, **settings) as sampler:
            measured = throughput.measure_sampler(sampler, model, seconds, num_threads=threads)
        setting = ", ".join(f"{k}={v}" for k, v in settings.items()) + f", torch={threads}"
        rows.append(
            {
                "system": kind,
                "setting": setting,
                "settings": {**settings, "torch_threads": threads, "horizon": horizon},
                "steps_per_second": measured.steps_per_second,
            }
        )
        print(f"{kind:>12} {setting:<40} {measured.steps_per_second:>9,.0f} steps/s", flush=True)
    return rows


def measure_central_inference(seconds: float, actors: list[int], repeats: int) -> list[dict]:
    from workbench.measure.central_inference import SeedSettings, central_inference_study

    settings = SeedSettings()
    rows = []
    studies = central_inference_study(actors, seconds, ENV_ID, repeats, settings=settings)
    for study in studies:
        n = study.num_actors
        for result in (study.seed, study.impala):
            row = {
                "system": result.system,
                "setting": f"{n} actors",
                "settings": {"num_actors": n},
                "steps_per_second": result.steps_per_second,
                "cpu_ms_per_step": result.cpu_ms_per_step,
            }
            if result.system == "seed":
                row["settings"]["timeout"] = settings.timeout_for(n)
                row["mean_batch_size"] = result.latency.get("mean_batch_size")
                row["latency_p50_ms"] = result.latency.get("latency_p50_ms")
            row["passes"] = study.seed_passes if result.system == "seed" else study.impala_passes
            rows.append(row)
            print(
                f"{result.system:>12} {n:>3} actors {result.steps_per_second:>9,.0f} steps/s",
                flush=True,
            )
    return rows


def measure_apex(seconds: float, actors: list[int], costs: dict) -> list[dict]:
    """Ape-X DQN on CartPole at each actor count (``benchmarks/apex_throughput.py``'s runs), its
    roles timed alone into ``costs["apex"]`` just before."""
    from workbench.apex.transports.local import ACTOR_NICENESS
    from workbench.measure.process_costs import apex_role_costs
    from workbench.studies import apex_studies

    config = apex_studies.apex_cartpole_config(max_actors=max(16, *actors))
    costs["apex"] = apex_role_costs(config, costs["seconds"])
    rows = []
    for n in actors:
        (result,) = apex_studies.apex_throughput(
            (n,), seconds=seconds, config=config, progress=False
        )
        rows.append(
            {
                "system": "apex",
                "setting": f"{n} actors",
                "settings": {"num_actors": n, "actor_nice": ACTOR_NICENESS},
                "steps_per_second": result.env_steps_per_second,
                "updates_per_second": result.updates_per_second,
                # What each role cost inside the system (its cores over its rate), beside what
                # it cost alone in costs["apex"]: the evidence for where the model misses.
                "in_system": in_system_costs(result),
            }
        )
        print(
            f"{'apex':>12} {n:>3} actors {result.env_steps_per_second:>9,.0f} steps/s "
            f"{result.updates_per_second:>7,.0f} updates/s",
            flush=True,
        )
    return rows


def in_system_costs(result) -> dict[str, float]:
    """CPU-seconds per unit of each Ape-X role inside a measured run (``role_cores``: cores
    busy in the window), in ``apex_role_costs``' terms; empty where the transport has none."""
    cores = result.role_cores
    if not cores or not result.env_steps_per_second or not result.updates_per_second:
        return {}
    return {
        "actor_step_seconds": cores["actors"] / result.env_steps_per_second,
        "learner_update_seconds": cores["learner"] / result.updates_per_second,
        "replay_seconds_per_update": cores["replay"] / result.updates_per_second,
        "cores_busy": sum(cores.values()),
    }


def measure_learners(counts: list[int], costs: dict, recipe_name: str = "ppo-pong") -> list[dict]:
    """``recipe_name``'s PPO update with 1..k data-parallel learners
    (``benchmarks/learner_scaling.py``), the learner's own update on each replica's shard and the
    gloo all-reduce of its network's gradient timed into ``costs["data_parallel"]`` just before."""
    from workbench.measure.learner_scaling import learner_scaling
    from workbench.measure.process_costs import all_reduce_costs, learner_update_costs
    from workbench.runs.recipes import RECIPES
    from workbench.sampling import SerialSampler
    from workbench.system import usable_cores

    recipe = RECIPES[recipe_name].with_measured_levers()
    learner = recipe.make_learner(0)
    with SerialSampler(
        recipe.env_id,
        num_envs=recipe.num_envs,
        horizon=recipe.horizon,
        seed=0,
        env_options=dict(recipe.env_options),
    ) as sampler:
        rollout = sampler.collect(learner.model)
    cores = usable_cores()
    layouts = [(k, max(1, cores // k)) for k in counts]
    parameters = sum(p.numel() for p in learner.model.parameters())
    costs["data_parallel"] = {
        **all_reduce_costs(parameters, costs["seconds"]),
        "updates": learner_update_costs(learner, rollout, layouts),
    }
    samples = recipe.num_envs * recipe.horizon
    config = recipe.config
    rows = []
    for row in learner_scaling(tuple(counts), recipe=recipe, updates=2, warmup=1):
        rows.append(
            {
                "system": "learners",
                "quantity": "samples/s",
                "setting": f"{row.learners} learners",
                "settings": {
                    "recipe": recipe_name,
                    "learners": row.learners,
                    "minibatch": samples // config.num_minibatches,
                    "gradient_steps": config.num_epochs * config.num_minibatches,
                    "samples_per_update": samples,
                    # PPO's update per gradient step (learners/ppo.py): the advantages'
                    # normalisation (2 sums) and 5 minibatch means, besides the gradients
                    "small_collectives": 7,
                },
                "steps_per_second": row.samples_per_second,
            }
        )
        print(
            f"{'learners':>12} {row.learners:>3} {row.samples_per_second:>9,.0f} samples/s",
            flush=True,
        )
    return rows


def show(rows) -> None:
    print(f"\n{'system':>12} {'setting':<40} {'quantity':<12} {'measured':>10} {'model':>10} error")
    for row in rows:
        print(
            f"{row.system:>12} {row.setting:<40} {row.quantity:<12} {row.measured:>10,.1f} "
            f"{row.predicted:>10,.1f} {row.error:+.0%} ({row.bottleneck})"
            + (" calibration point" if row.calibration_point else ""),
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from workbench.measure.model_validation import THROUGHPUTS, TOLERANCE, validation_rows
    from workbench.system import usable_cores

    recording = record.Recording("performance_model")
    cores = usable_cores()
    passes, tested = [], []
    for number in range(1, args.repeats + 1):
        print(f"\npass {number} of {args.repeats}", flush=True)
        samplers, networks = tuple(args.samplers), tuple(args.networks)
        costs = calibrate(args.cost_seconds, cores, args.env_seconds, networks)
        costs["samplers"] = component_costs.sampler_rows(
            args.cost_seconds,
            component_costs.cartpole_env_seconds(args.cost_seconds),
            kinds=samplers,
        )
        systems = measure_samplers(args.seconds, args.horizon, samplers)
        costs["transport"] = component_costs.transport_row(args.cost_seconds)
        systems += measure_central_inference(args.seconds, args.actors, 1)
        if args.apex_actors:
            systems += measure_apex(2 * args.seconds, args.apex_actors, costs)
        if args.learners:
            systems += measure_learners(args.learners, costs, args.learner_recipe)
        rows = validation_rows(costs, systems, NETWORK)
        show(rows)
        passes.append(
            {"costs": costs, "systems": systems, "validation": [row.as_dict() for row in rows]}
        )
        tested += [r for r in rows if r.quantity in THROUGHPUTS and not r.calibration_point]
    ratios = {
        "worst_error": max(abs(row.error) for row in tested),
        "within_20pct": sum(abs(row.error) <= TOLERANCE for row in tested) / len(tested),
    }
    figures = {"network": NETWORK, "env_id": ENV_ID, "passes": passes}
    recording.finish(figures, ratios, args.out or "data/performance_model_cpu.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
