"""What each part of a deep-RL system costs on this machine: the inputs of a performance model.

    .venv/bin/python benchmarks/component_costs.py                  # the CPU, 1 and <cores> threads
    .venv/bin/python benchmarks/component_costs.py --device cuda    # a GPU's inference and learning

Stooke & Abbeel's samplers, Ape-X and SEED differ in where they spend the same few costs, so those
are measured one at a time, side by side in one run, for the two Atari networks of this package
(the ``ppo-pong-fast`` recipe's ``UniverseCNN`` on 42x42 frames, and the NatureCNN on 84x84):

* inference: observations/s of ``model.act`` against the batch size (``measure.throughput
  .measure_inference``): a server's forward pass at each batch it may form;
* learning: samples/s of a gradient step (forward, backward, Adam) against the minibatch size, in
  float32 and under bfloat16 autocast (``learners.precision.update_rate``);
* env stepping (CPU only): Pong steps/s of ale_py's ``AtariVectorEnv`` (16 envs) at each thread
  count, at both frame sizes (``measure.throughput.measure_vector_env``);
* the host-to-device copy (a GPU only): seconds per batch of uint8 observations, and per byte.

Every figure is a rate at saturation on the named threads or device; the seconds a batch takes are
``batch / rate``. It prints the tables, writes ``--out`` (JSON: command, commit, machine with its
instruction sets, date, load averages, every row) and ends with ``ratios:
inference_<net>_best_vs_batch1=<x> learning_<net>_bf16_vs_fp32=<y>`` (at the largest minibatch).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import record  # this folder is sys.path[0] when the script runs

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

NETWORKS = {
    "universe-42": ((4, 42, 42), {"trunk": "cnn-universe"}),
    "nature-84": ((4, 84, 84), {}),
}
INFERENCE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MINIBATCHES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
CPU_LIMIT = 256  # the largest batch measured on a CPU (beyond it the rate is flat and slow)
PONG_ACTIONS = 6


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=None,
        help="torch and env thread counts measured on the CPU (default: 1 and one per core)",
    )
    parser.add_argument("--seconds", type=float, default=0.5, help="seconds per figure")
    parser.add_argument("--out", default=None, help="default data/component_costs_<device>.json")
    args = parser.parse_args(argv)
    if not args.seconds > 0 or (args.threads and min(args.threads) < 1):
        parser.error("--seconds and --threads must be positive.")
    return args


def inference_rows(
    device, threads: list[int], seconds: float, networks: tuple[str, ...] = tuple(NETWORKS)
) -> list[dict]:
    from workbench.measure.throughput import measure_inference
    from workbench.models import ActorCritic

    rows = []
    for net in networks:
        shape, options = NETWORKS[net]
        model = ActorCritic(shape, PONG_ACTIONS, **options).eval()
        for thread_count in threads:
            for batch in INFERENCE_BATCHES:
                if device.type == "cpu" and batch > CPU_LIMIT:
                    break
                measured = measure_inference(
                    model, shape, batch, seconds, device, num_threads=thread_count
                )
                rows.append(
                    {
                        "network": net,
                        "threads": thread_count,
                        "batch": batch,
                        "obs_per_second": measured.steps_per_second,
                        "ms_per_batch": 1000 * batch / measured.steps_per_second,
                    }
                )
                print(
                    f"inference {net:>12} threads {thread_count:>2} batch {batch:>5}: "
                    f"{measured.steps_per_second:>11,.0f} obs/s "
                    f"{rows[-1]['ms_per_batch']:>8.3f} ms/batch",
                    flush=True,
                )
    return rows


def learning_rows(
    device, threads: list[int], seconds: float, networks: tuple[str, ...] = tuple(NETWORKS)
) -> list[dict]:
    import torch

    from workbench.learners.precision import update_rate
    from workbench.measure.throughput import torch_threads
    from workbench.models import ActorCritic

    rows = []
    for net in networks:
        shape, options = NETWORKS[net]
        model = ActorCritic(shape, PONG_ACTIONS, **options)
        for thread_count in threads:
            for autocast in (None, "bfloat16"):
                for minibatch in MINIBATCHES:
                    if device.type == "cpu" and minibatch > CPU_LIMIT:
                        break
                    with torch_threads(thread_count):
                        rate = update_rate(
                            model,
                            shape,
                            minibatch,
                            autocast=autocast,
                            channels_last=device.type == "cpu",
                            seconds=seconds,
                            device=device,
                        )
                    rows.append(
                        {
                            "network": net,
                            "threads": thread_count,
                            "precision": autocast or "float32",
                            "minibatch": minibatch,
                            "samples_per_second": rate,
                            "ms_per_step": 1000 * minibatch / rate,
                        }
                    )
                    print(
                        f"learning  {net:>12} threads {thread_count:>2} {autocast or 'float32':>9}"
                        f" minibatch {minibatch:>5}: {rate:>10,.0f} samples/s "
                        f"{rows[-1]['ms_per_step']:>8.2f} ms/step",
                        flush=True,
                    )
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def env_rows(threads: list[int], seconds: float, least: float = 2.0) -> list[dict]:
    from workbench.measure.throughput import measure_vector_env

    rows = []
    # 16 envs on each thread count (a sampler's vector env), and one env on one thread (an
    # IMPALA or SEED actor's: the per-call overhead is not shared by 16 envs).
    layouts = [(16, t) for t in threads] + [(1, 1)]
    for screen in (42, 84):
        for num_envs, thread_count in layouts:
            measured = measure_vector_env(
                "ALE/Pong-v5",
                num_envs,
                max(seconds, least),
                num_threads=thread_count,
                env_options={"screen_size": screen, "repeat_action_probability": 0.0},
            )
            rows.append(
                {
                    "screen_size": screen,
                    "num_envs": num_envs,
                    "threads": thread_count,
                    "steps_per_second": measured.steps_per_second,
                    "steps_per_second_per_thread": measured.steps_per_second / thread_count,
                }
            )
            print(
                f"env Pong {screen}x{screen} {num_envs:>2} envs, {thread_count:>2} threads: "
                f"{measured.steps_per_second:>9,.0f} steps/s",
                flush=True,
            )
    return rows


def transport_row(seconds: float) -> dict:
    """What one request to SEED's inference server costs through the local transport (a pipe
    write each way, the observation in shared memory, the server's batching, a process waking):
    one env-only actor on Pong served by the real transport, less what the actor's env step
    costs alone (one env, one thread) and what a batch-1 forward pass costs alone (``model.act``
    on one thread, as the inference rows measure it): ``request = (cycle - t_env1 - t_forward) /
    2``, and the same of the CPU every process spent per step. What the server does beyond the
    forward pass for a request (its batching, sampling the action) is the request's cost. One
    actor, so nothing waits for another; the model's SEED row at one actor matches by
    construction and is the calibration point."""
    import torch

    from workbench.measure.central_inference import SeedSettings, make_model, measure_seed
    from workbench.measure.throughput import measure_inference, measure_vector_env

    options = {"screen_size": 84, "repeat_action_probability": 0.0}
    alone = measure_vector_env(
        "ALE/Pong-v5", 1, max(seconds, 1.0), num_threads=1, env_options=options
    )
    env_seconds = 1 / alone.steps_per_second
    model = make_model("ALE/Pong-v5")
    forward = measure_inference(model, (4, 84, 84), 1, seconds, num_threads=1)
    forward_seconds = 1 / forward.steps_per_second
    with torch.no_grad():
        served = measure_seed(
            "ALE/Pong-v5", 1, max(seconds, 1.0), settings=SeedSettings(timeout=0.0), warmup=0.5
        )
    cycle = 1 / served.steps_per_second
    cpu = served.cpu_ms_per_step / 1000  # every process's CPU per step: the actor's, the server's
    row = {
        "env": "ALE/Pong-v5",
        "env_seconds": env_seconds,
        "forward_seconds": forward_seconds,
        "server_forward_p50_seconds": served.latency["forward_p50_ms"] / 1000,
        "served_steps_per_second": served.steps_per_second,
        "cycle_seconds": cycle,
        "cpu_seconds_per_step": cpu,
        "request_seconds": max((cycle - env_seconds - forward_seconds) / 2, 0.0),
        "request_cpu_seconds": max((cpu - env_seconds - forward_seconds) / 2, 0.0),
    }
    print(
        f"transport local: Pong env {1e6 * env_seconds:.0f} us, forward "
        f"{1e6 * forward_seconds:.0f} us, served {served.steps_per_second:,.0f} steps/s: "
        f"{1e6 * row['request_seconds']:.1f} us per request at each end "
        f"({1e6 * row['request_cpu_seconds']:.1f} us of CPU)",
        flush=True,
    )
    return row


def cartpole_env_seconds(seconds: float) -> float:
    """Seconds of one CartPole step (gymnasium, one env): small beside any sampler's own work."""
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
        steps += 1
    return (time.perf_counter() - started) / steps


SAMPLER_LAYOUTS = {
    "serial": {"num_envs": 64},
    "parallel": {"num_workers": 2, "num_envs": 64},
    "batched": {"num_workers": 2, "num_envs": 64},
    "alternating": {"num_workers": 2, "num_envs": 64},
}
"""The layouts whose coordination is measured (sampler_throughput.py's, at 64 envs)."""


def sampler_rows(
    seconds: float,
    env_seconds: float,
    horizon: int = 64,
    kinds: tuple[str, ...] = tuple(SAMPLER_LAYOUTS),
) -> list[dict]:
    """What each sampler layout costs beyond stepping and inference: measured on CartPole, whose
    env step (``env_seconds``: ``cartpole_env_seconds``) and forward pass are small and are taken
    out, so what remains per env step is the layout's own work (handing actions and observations
    between processes, writing the rollout), which an Atari sampler pays too."""
    from workbench.measure import throughput
    from workbench.measure.central_inference import make_model
    from workbench.sampling import make_sampler

    model = make_model("CartPole-v1")
    rows = []
    for kind in kinds:
        settings = SAMPLER_LAYOUTS[kind]
        envs, workers = settings["num_envs"], settings.get("num_workers", 1)
        per_worker = envs // workers if kind == "parallel" else envs
        forward = measure_inference_seconds(model, per_worker, seconds)
        with make_sampler(kind, "CartPole-v1", horizon=horizon, seed=0, **settings) as sampler:
            measured = throughput.measure_sampler(sampler, model, max(seconds, 1.0), num_threads=1)
        cycle = envs / measured.steps_per_second  # seconds per time step of every env
        if kind == "parallel":  # each worker steps and infers its share, side by side
            work = per_worker * env_seconds + forward
        else:
            work = envs * env_seconds / (1 if kind == "serial" else workers) + forward
        rows.append(
            {
                "sampler": kind,
                **settings,
                "cartpole_steps_per_second": measured.steps_per_second,
                "overhead_seconds_per_step": max(cycle - work, 0.0) / envs,
            }
        )
        print(
            f"sampler {kind:>12} on CartPole: {measured.steps_per_second:>9,.0f} steps/s, "
            f"{1e6 * rows[-1]['overhead_seconds_per_step']:.1f} us per env step beyond its work",
            flush=True,
        )
    return rows


def measure_inference_seconds(model, batch: int, seconds: float) -> float:
    from workbench.measure.throughput import measure_inference

    measured = measure_inference(model, (4,), batch, seconds, num_threads=1)
    return batch / measured.steps_per_second


def copy_rows(device, seconds: float) -> list[dict]:
    import time

    import torch

    rows = []
    for shape_name, (shape, _) in NETWORKS.items():
        for batch in (1, 16, 256):
            for pinned in (False, True):
                host = torch.randint(0, 256, (batch, *shape), dtype=torch.uint8)
                if pinned:
                    host = host.pin_memory()
                for _ in range(3):
                    host.to(device, non_blocking=pinned)
                torch.cuda.synchronize(device)
                copies, started = 0, time.perf_counter()
                while time.perf_counter() - started < seconds:
                    host.to(device, non_blocking=pinned)
                    torch.cuda.synchronize(device)
                    copies += 1
                per_copy = (time.perf_counter() - started) / copies
                rows.append(
                    {
                        "network": shape_name,
                        "batch": batch,
                        "pinned": pinned,
                        "us_per_copy": 1e6 * per_copy,
                        "gb_per_second": host.numel() / per_copy / 1e9,
                    }
                )
                print(
                    f"copy to {device} {shape_name} batch {batch:>4} pinned={pinned!s:>5}: "
                    f"{1e6 * per_copy:>8.1f} us, {rows[-1]['gb_per_second']:>6.2f} GB/s",
                    flush=True,
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from workbench.system import resolve_device, usable_cores

    device = resolve_device(args.device)
    cores = usable_cores()
    threads = args.threads or sorted({1, cores})
    recording = record.Recording("component_costs")
    torch_thread_counts = threads if device.type == "cpu" else [1]
    figures = {
        "device": str(device),
        "inference": inference_rows(device, torch_thread_counts, args.seconds),
        "learning": learning_rows(device, torch_thread_counts, args.seconds),
    }
    if device.type == "cpu":
        figures["env"] = env_rows(threads, args.seconds)
        figures["transport"] = transport_row(args.seconds)
        figures["samplers"] = sampler_rows(args.seconds, cartpole_env_seconds(args.seconds))
    else:
        figures["copy"] = copy_rows(device, args.seconds)
    ratios = {}
    for net in NETWORKS:
        inference = [r for r in figures["inference"] if r["network"] == net]
        batch1 = max(r["obs_per_second"] for r in inference if r["batch"] == 1)
        ratios[f"inference_{net}_best_vs_batch1"] = (
            max(r["obs_per_second"] for r in inference) / batch1
        )
        learning = [r for r in figures["learning"] if r["network"] == net]
        largest = max(r["minibatch"] for r in learning)
        best = {
            precision: max(
                r["samples_per_second"]
                for r in learning
                if r["precision"] == precision and r["minibatch"] == largest
            )
            for precision in ("float32", "bfloat16")
        }
        ratios[f"learning_{net}_bf16_vs_fp32"] = best["bfloat16"] / best["float32"]
    out = args.out or f"data/component_costs_{device.type}.json"
    recording.finish(figures, ratios, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
