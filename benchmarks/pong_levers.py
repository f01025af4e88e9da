"""Which lever bought what: PPO on Pong end to end, from CleanRL's settings to ``ppo-pong-fast``.

    .venv/bin/python benchmarks/pong_levers.py --seconds 40 --repeats 2

Each row is a ``Run`` of the ``ppo-pong-fast`` recipe (``workbench.runs.recipes``) with some of its
levers undone, trained for ``--seconds`` after its first iteration (env start-up, the precision
measurement and the first update excluded); rows are interleaved over ``--repeats`` passes and the
best pass is kept. The ladder adds one lever at a time:

1. CleanRL's ``ppo_atari.py`` as this package runs it: NatureCNN on 84x84, float32, 8 envs x 128
   steps, collect then learn;
2. + the learner's precision measured on this CPU (``learners.choose_precision``: bfloat16 on the
   AMD EPYC, where it is 2-3x faster per minibatch);
3. + 42x42 frames and the universe-starter-agent's CNN (``models.UniverseCNN``);
4. + 16 envs x 64 steps (the same 1,024 steps per update);
5. + async: the next batch is collected (C++ env threads, one core) while the learner learns on
   the other (one torch thread);
6. + the learner's forward pass compiled where ``torch.compile`` measured 10% faster;
7. + the learner's torch threads chosen by measurement (2 where the learner is much the slower
   half: ``runs.levers``) = the recipe.

Rows 6 and 7 choose per CPU, at start, as the recipe does; each row records what it chose.
Run with ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` (and a ``TORCHINDUCTOR_CACHE_DIR``
of its own) it measures the levers as an AVX2-only CPU runs torch's kernels; the record's
``machine.isa_caps`` says so. Then single changes to the recipe, each measured beside it: two torch
threads always, the first
``ppo-pong-fast``'s network and frames (Mnih et al. 2013's small CNN on 84x84), sticky actions
0.25. ``minutes_to_0`` / ``minutes_to_18`` project the recipe's recorded env steps to those
returns (``data/learning_ppo_pong_fast.json``, the median over its seeds) at each row's speed:
exact for levers that leave learning per sample alone (precision, threads, async up to a policy
lag of one update), a projection for those that change the network, the frames or the envs. What
those bought in learning per sample is recorded apart, as whole learning runs
(``data/learning_ppo_pong_fast_v1.json``: the first settings, CleanRL's learning rate and the
small CNN at 84x84, still at -11 after 21 minutes). Writes ``--out`` with command, commit and
machine, and ends with ``ratios: recipe_vs_cleanrl=<x>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time

import record  # this folder is sys.path[0] when the script runs

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

CLEANRL = {
    "trunk": "cnn",
    "screen_size": 84,
    "num_envs": 8,
    "horizon": 128,
    "mode": "sync",
    "compile": False,
    "threads": 1,
}
LADDER = [
    ("CleanRL settings (NatureCNN 84x84, float32, sync)", {**CLEANRL, "precision": None}),
    ("+ precision measured on this CPU", {**CLEANRL}),
    (
        "+ 42x42 frames, universe-starter-agent CNN",
        {"num_envs": 8, "horizon": 128, "mode": "sync", "compile": False, "threads": 1},
    ),
    ("+ 16 envs x 64 steps", {"mode": "sync", "compile": False, "threads": 1}),
    ("+ async collection", {"compile": False, "threads": 1}),
    ("+ compiled learner where measured faster", {"threads": 1}),
    ("+ learner threads measured (= ppo-pong-fast)", {}),
]
BESIDE = [
    ("recipe, 2 torch threads always", {"threads": 2}),
    ("recipe, small CNN at 84x84 (the first settings)", {"trunk": "cnn-small", "screen_size": 84}),
    ("recipe, sticky actions 0.25", {"sticky": 0.25}),
]


def variant(recipe, changes: dict):
    """``recipe`` with ``changes`` (keys of LADDER / BESIDE) applied; ``compile`` and ``threads``
    absent: measured at start, as the recipe does."""
    options = dict(recipe.env_options)
    if "screen_size" in changes:
        options["screen_size"] = changes["screen_size"]
    if "sticky" in changes:
        options["repeat_action_probability"] = changes["sticky"]
    new = dataclasses.replace(
        recipe,
        env_options=tuple(options.items()),
        mode=changes.get("mode", recipe.mode),
        num_envs=changes.get("num_envs", recipe.num_envs),
        horizon=changes.get("horizon", recipe.horizon),
        model_options=(("trunk", changes.get("trunk", dict(recipe.model_options)["trunk"])),),
        measure_compile=recipe.measure_compile and "compile" not in changes,
        measure_threads=recipe.measure_threads and "threads" not in changes,
    )
    if changes.get("precision", "measured") is None:
        new = dataclasses.replace(
            new,
            measure_precision=False,
            config=dataclasses.replace(new.config, autocast=None, channels_last=False),
        )
    return new


def measure(recipe, seconds: float, threads: int, runs_dir: str) -> dict:
    import torch

    torch.set_num_threads(threads)
    run = recipe.make_run(0, runs_dir=runs_dir)
    rows: list[dict] = []
    run.on_row(lambda row: rows.append(row) if "event" not in row else None)
    deadline: list[float] = []

    def stop_after_window(row: dict) -> None:
        if "event" in row:
            return
        if not deadline:
            deadline.append(row["charts/wall_seconds"] + seconds)
        elif row["charts/wall_seconds"] >= deadline[0]:
            run.stop(wait=False)  # from the loop's own thread: do not wait for itself

    run.on_row(stop_after_window)
    run.run()
    if len(rows) < 2:
        raise RuntimeError(f"{recipe.name}: fewer than two iterations in {seconds} s")
    first, last = rows[0], rows[-1]
    steps = last["charts/env_steps"] - first["charts/env_steps"]
    wall = last["charts/wall_seconds"] - first["charts/wall_seconds"]
    config = run.learner.config
    return {
        "steps_per_second": steps / wall,
        "env_steps": steps,
        "seconds": wall,
        "autocast": config.autocast,
        "channels_last": config.channels_last,
        "compile": config.compile,
        "threads": torch.get_num_threads(),  # the recipe may have chosen them (runs.levers)
    }


def recorded_steps_to(path: str, level: float) -> float | None:
    """Median env steps at which the recorded runs' return first reached ``level``."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        runs = json.load(f)["recipes"].get("ppo-pong-fast", {}).get("runs", [])
    found = []
    for run in runs:
        hit = next(
            (
                p["env_steps"]
                for p in run["curve"]
                if p["mean_return"] is not None and p["mean_return"] >= level
            ),
            None,
        )
        if hit is not None:
            found.append(hit)
    return statistics.median(found) if found else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--curves", default="data/learning_ppo_pong_fast.json")
    parser.add_argument("--out", default="data/pong_levers.json")
    args = parser.parse_args(argv)
    if not args.seconds > 0 or args.repeats < 1:
        parser.error("--seconds must be positive and --repeats at least 1")

    from workbench.runs.recipes import RECIPES
    from workbench.system import machine_info

    recipe = RECIPES["ppo-pong-fast"]
    rows = [(label, changes, "ladder") for label, changes in LADDER]
    rows += [(label, changes, "beside") for label, changes in BESIDE]
    machine = machine_info()
    print(
        f"machine: {machine.cpu_model}, {machine.cores} cores; {args.repeats} x {args.seconds:g} s"
    )
    measured: dict[str, list[dict]] = {label: [] for label, _, _ in rows}
    with tempfile.TemporaryDirectory() as runs_dir:
        for _ in range(args.repeats):
            for label, changes, _ in rows:
                threads = changes.get("threads", recipe.torch_threads or 1)  # or measured
                result = measure(variant(recipe, changes), args.seconds, threads, runs_dir)
                measured[label].append(result)
                print(f"  {label:<52}{result['steps_per_second']:>8,.0f} steps/s", flush=True)
    to_zero = recorded_steps_to(args.curves, 0.0)
    to_target = recorded_steps_to(args.curves, recipe.target_return)
    table = []
    baseline = previous = None
    recipe_rate = None
    for label, changes, group in rows:
        best = max(measured[label], key=lambda r: r["steps_per_second"])
        rate = best["steps_per_second"]
        baseline = baseline or rate
        if label.endswith("(= ppo-pong-fast)"):
            recipe_rate = rate
        reference = previous if group == "ladder" else recipe_rate
        table.append(
            {
                "lever": label,
                "group": group,
                "changes": changes,
                **best,
                "gain": rate / reference if reference else 1.0,
                "vs_cleanrl": rate / baseline,
                "minutes_to_0": to_zero / rate / 60 if to_zero else None,
                "minutes_to_18": to_target / rate / 60 if to_target else None,
                "passes": [r["steps_per_second"] for r in measured[label]],
            }
        )
        if group == "ladder":
            previous = rate
    print(f"\n{'lever':<52}{'steps/s':>9}{'gain':>7}{'vs 1':>7}{'min to 0':>10}{'min to 18':>11}")
    for row in table:
        m0 = "-" if row["minutes_to_0"] is None else f"{row['minutes_to_0']:.1f}"
        m18 = "-" if row["minutes_to_18"] is None else f"{row['minutes_to_18']:.1f}"
        print(
            f"{row['lever']:<52}{row['steps_per_second']:>9,.0f}{row['gain']:>6.2f}x"
            f"{row['vs_cleanrl']:>6.2f}x{m0:>10}{m18:>11}"
        )
    report = {
        **record.provenance("pong_levers"),
        "machine": dataclasses.asdict(machine),
        "seconds": args.seconds,
        "repeats": args.repeats,
        "recorded_steps_to_0": to_zero,
        "recorded_steps_to_18": to_target,
        "rows": table,
        "ratios": {"recipe_vs_cleanrl": recipe_rate / baseline},
    }
    record.write(report, args.out)
    print(f"wrote {args.out}")
    print(f"ratios: recipe_vs_cleanrl={recipe_rate / baseline:.2f}")
    return 0


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"{time.perf_counter() - started:.0f} s")
    sys.exit(code)
