"""What one learner step of each SEED Pong recipe costs, by precision: why R2D2 makes few updates.

    .venv/bin/python benchmarks/learner_updates.py --repeats 5

One ``update`` of the learner of ``seed-r2d2-pong-fast`` (R2D2: 16 sequences of 10 burn-in, 40
trained and 5 bootstrap rows through the CNN and a 256-unit LSTM, online and target) and of
``seed-vtrace-pong-fast`` (IMPALA's V-trace: 12 unrolls of 21 rows) on random 42x42 Pong frames, in
each precision the recipes choose from at start (``learners.Precision``: float32 or bfloat16
autocast, contiguous or channels-last), timed in interleaved passes (``--repeats``, each the median
of ``--updates`` updates after two warm-ups), the best pass kept. A row gives the seconds an update
takes, the rows it trains per second, and the updates a 90-minute run could make with the learner
alone on one core (the actors and the server share the other): the ceiling a two-core R2D2 run
lives under. Writes ``--out`` (default ``data/learner_updates.json``, on another device
``data/learner_updates_<device>.json``) with command, commit and machine, and ends with ``ratios:``
``r2d2_fastest_vs_float32`` (the precision lever on this CPU) and ``r2d2_vs_vtrace`` (seconds per
update, each in its fastest precision).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import record  # this folder is sys.path[0] when the script runs

PRECISIONS = (
    ("float32", None, False),
    ("float32/channels_last", None, True),
    ("bfloat16", "bfloat16", False),
    ("bfloat16/channels_last", "bfloat16", True),
)
RUN_SECONDS = 90 * 60  # the R2D2 record's length (issue 25)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved passes (best kept)")
    parser.add_argument("--updates", type=int, default=5, help="timed updates per pass (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the recipes': 1)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if min(args.repeats, args.updates, args.threads) < 1:
        parser.error("--repeats, --updates and --threads must be >= 1")
    if args.out is None:
        suffix = "" if args.device == "cpu" else f"_{args.device.split(':')[0]}"
        args.out = f"data/learner_updates{suffix}.json"
    return args


def recipe_learner(recipe_name: str, precision: tuple, device: str):
    """The learner of a SEED Pong recipe, in ``precision``, and its config."""
    from workbench.seed.recipes import SEED_RECIPES

    recipe = SEED_RECIPES[recipe_name]
    _, autocast, channels_last = precision
    learner_config = dataclasses.replace(
        recipe.config.learner, autocast=autocast, channels_last=channels_last
    )
    model = recipe.make_model((4, 42, 42), 6)
    return recipe.config.algorithm_class.learner_class(
        model, learner_config, device=device
    ), learner_config


def r2d2_batch(learner_config, lstm_size: int, rng) -> dict:
    import numpy as np

    L, B = learner_config.stored_length, learner_config.batch_size
    return {
        "obs": rng.integers(0, 256, size=(L, B, 4, 42, 42), dtype=np.uint8),
        "actions": rng.integers(0, 6, size=(L, B)),
        "rewards": rng.choice(np.float32([-1.0, 0.0, 1.0]), size=(L, B), p=[0.01, 0.98, 0.01]),
        "terminated": np.zeros((L, B), dtype=bool),
        "truncated": np.zeros((L, B), dtype=bool),
        "first": np.zeros((L, B), dtype=bool),
        "state_h": np.zeros((B, lstm_size), dtype=np.float32),
        "state_c": np.zeros((B, lstm_size), dtype=np.float32),
    }


def vtrace_batch(learner_config, rng) -> dict:
    import numpy as np

    T, B = learner_config.unroll_length + 1, learner_config.batch_size
    frames = rng.integers(0, 256, size=(T, B, 4, 42, 42), dtype=np.uint8)
    return {
        "obs": frames,
        "final_obs": frames,
        "actions": rng.integers(0, 6, size=(T, B)),
        "logp": np.full((T, B), np.log(1 / 6), np.float32),
        "rewards": rng.choice(np.float32([-1.0, 0.0, 1.0]), size=(T, B), p=[0.01, 0.98, 0.01]),
        "terminated": np.zeros((T, B), dtype=bool),
        "truncated": np.zeros((T, B), dtype=bool),
    }


def median_update_seconds(learner, batch, updates: int, device: str) -> float:
    import torch

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    for _ in range(2):  # warm-up: allocator, oneDNN primitives, cuDNN choice
        learner.update(batch)
    sync()
    seconds = []
    for _ in range(updates):
        started = time.perf_counter()
        learner.update(batch)
        sync()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recording = record.Recording("learner_updates")
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    setups = {}
    for precision in PRECISIONS:  # every one on every device: the recipes measure them all
        learner, config = recipe_learner("seed-r2d2-pong-fast", precision, args.device)
        lstm = learner.model.lstm_size
        setups[("r2d2", precision[0])] = (learner, r2d2_batch(config, lstm, rng), config)
        learner, config = recipe_learner("seed-vtrace-pong-fast", precision, args.device)
        setups[("vtrace", precision[0])] = (learner, vtrace_batch(config, rng), config)
    best: dict = {}
    for repeat in range(args.repeats):
        for key, (learner, batch, _) in setups.items():
            seconds = median_update_seconds(learner, batch, args.updates, args.device)
            best[key] = min(best.get(key, float("inf")), seconds)
            print(
                f"pass {repeat + 1}: {key[0]:>6} {key[1]:>22}: {1000 * seconds:8.1f} ms", flush=True
            )
    rows = []
    for (learner_name, precision), seconds in best.items():
        config = setups[(learner_name, precision)][2]
        if learner_name == "r2d2":
            rows_per_update = config.batch_size * config.stored_length
            trained = config.batch_size * config.sequence_length
        else:
            rows_per_update = trained = config.batch_size * config.unroll_length
        rows.append(
            {
                "learner": learner_name,
                "recipe": f"seed-{learner_name}-pong-fast",
                "precision": precision,
                "ms_per_update": 1000 * seconds,
                "updates_per_second": 1 / seconds,
                "rows_per_update": rows_per_update,
                "trained_rows_per_update": trained,
                "trained_rows_per_second": trained / seconds,
                "updates_in_90_minutes": int(RUN_SECONDS / seconds),
            }
        )
    header = ("learner", "precision", "ms/update", "updates/s", "90-min updates")
    print("\n{:>7} {:>22} {:>10} {:>10} {:>15}".format(*header))
    for row in rows:
        print(
            f"{row['learner']:>7} {row['precision']:>22} {row['ms_per_update']:>10.1f} "
            f"{row['updates_per_second']:>10.2f} {row['updates_in_90_minutes']:>15,}"
        )

    def fastest(name: str) -> dict:
        return min((r for r in rows if r["learner"] == name), key=lambda r: r["ms_per_update"])

    r2d2_float32 = next(r for r in rows if r["learner"] == "r2d2" and r["precision"] == "float32")
    ratios = {
        "r2d2_fastest_vs_float32": r2d2_float32["ms_per_update"] / fastest("r2d2")["ms_per_update"],
        "r2d2_vs_vtrace": fastest("r2d2")["ms_per_update"] / fastest("vtrace")["ms_per_update"],
    }
    figures = {
        "device": args.device,
        "torch_threads": args.threads,
        "repeats": args.repeats,
        "updates": args.updates,
        "rows": rows,
        "fastest": {name: fastest(name)["precision"] for name in ("r2d2", "vtrace")},
    }
    recording.finish(figures, ratios, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
