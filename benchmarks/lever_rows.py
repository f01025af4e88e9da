"""The rows both lever benchmarks measure (``seed_levers.py``, ``apex_levers.py``): a learner eager
or compiled, on one torch thread or two, each row timed inside its whole pipeline, interleaved
over passes so that a machine's drift touches every row alike."""

from __future__ import annotations

from collections.abc import Callable

ROWS = (("eager", 1), ("eager", 2), ("compiled", 1), ("compiled", 2))


def interleaved_passes(
    repeats: int, measure: Callable[[str, int], dict]
) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """``measure(forward, threads)`` for every row, ``repeats`` times, every other pass in reverse
    order; returns every pass (``"<forward>/<threads>"`` -> rows) and each row's best pass (by
    ``updates_per_second``)."""
    passes: dict[str, list[dict]] = {}
    for repeat in range(repeats):
        order = ROWS if repeat % 2 == 0 else tuple(reversed(ROWS))
        for forward, threads in order:
            row = measure(forward, threads)
            passes.setdefault(f"{forward}/{threads}", []).append(row)
            print(
                f"pass {repeat + 1}: {forward}, {threads} thread(s): "
                f"{row['updates_per_second']:.2f} updates/s",
                flush=True,
            )
    best = {name: max(rows, key=lambda r: r["updates_per_second"]) for name, rows in passes.items()}
    return passes, best


def lever_ratios(best: dict[str, dict]) -> dict[str, float]:
    """What compiling and a second learner thread buy, in updates/s of the best passes."""
    rate = {name: row["updates_per_second"] for name, row in best.items()}
    return {
        "compiled_vs_eager_one_thread": rate["compiled/1"] / rate["eager/1"],
        "two_threads_vs_one_compiled": rate["compiled/2"] / rate["compiled/1"],
        "best_vs_eager_one_thread": max(rate.values()) / rate["eager/1"],
    }
