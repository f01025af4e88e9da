"""``benchmarks/lever_rows.py``: the lever benchmarks' rows, interleaved over passes."""

import os
import sys

import pytest

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

from lever_rows import ROWS, interleaved_passes, lever_ratios  # noqa: E402


def test_every_other_pass_measures_the_rows_in_reverse_and_each_row_keeps_its_best_pass():
    order, rates = [], {"eager/1": [5.0, 7.0], "eager/2": [6.0, 5.5], "compiled/1": [9.0, 8.0]}
    rates["compiled/2"] = [9.5, 9.0]

    def measure(forward, threads):
        order.append((forward, threads))
        name = f"{forward}/{threads}"
        return {"updates_per_second": rates[name][len(order) > len(ROWS)], "pass": len(order)}

    passes, best = interleaved_passes(2, measure)
    assert order == [*ROWS, *reversed(ROWS)]
    assert [row["updates_per_second"] for row in passes["eager/1"]] == [5.0, 7.0]
    assert best["eager/1"]["updates_per_second"] == 7.0
    assert best["compiled/2"]["updates_per_second"] == 9.5


def test_the_ratios_compare_compiled_with_eager_and_two_threads_with_one():
    best = {
        name: {"updates_per_second": rate}
        for name, rate in {"eager/1": 20.0, "eager/2": 25.6, "compiled/1": 25.6}.items()
    }
    best["compiled/2"] = {"updates_per_second": 25.3}
    ratios = lever_ratios(best)
    assert ratios["compiled_vs_eager_one_thread"] == pytest.approx(1.28)
    assert ratios["two_threads_vs_one_compiled"] == pytest.approx(25.3 / 25.6)
    assert ratios["best_vs_eager_one_thread"] == pytest.approx(1.28)
