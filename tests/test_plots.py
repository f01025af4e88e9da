"""Figures a reader can tell apart (``workbench.lab.plots``)."""

from __future__ import annotations

from workbench.lab import plots
from workbench.measure.throughput import Throughput
from workbench.studies.curves import LearningCurve


def test_seven_curves_ordered_by_size_get_seven_colors():
    curves = [LearningCurve(f"batch {2**i}", [0, 1], [0.0, 1.0], [0.0, 1.0]) for i in range(7)]
    figure = plots.learning_curves(curves)
    colors = [trace.line.color for trace in figure.data if trace.showlegend]
    assert len(colors) == 7 and len(set(colors)) == 7


def test_a_log_axis_labels_the_sizes_measured_not_plotlys_minor_ticks():
    sizes = [1, 2, 4, 8, 16, 32, 64]
    rows = [Throughput(f"{n} envs", n * 100.0, n * 400.0, 1.0, n * 100) for n in sizes]
    figure = plots.throughput_vs(sizes, rows, "envs")
    assert list(figure.layout.xaxis.tickvals) == sizes


def test_the_latency_figure_keeps_one_line_per_timeout_on_each_axis():
    from workbench.measure.seed_latency import latency_figure

    rows = [
        dict(
            timeout_ms=t,
            max_batch_size=b,
            latency_p50_ms=1.0 + b,
            latency_p99_ms=2.0 + b,
            steps_per_second=100.0 * b,
        )
        for t in (0.0, 1.0, 2.0, 5.0)
        for b in (1, 2, 4, 8)
    ]
    figure = latency_figure(rows, recorded=rows)
    per_axis = {}
    for trace in figure.data:
        per_axis[(trace.xaxis, trace.yaxis)] = per_axis.get((trace.xaxis, trace.yaxis), 0) + 1
    assert len(per_axis) == 4 and max(per_axis.values()) == 4  # this run and the record apart
    assert sum(bool(t.showlegend) for t in figure.data) == 4  # one legend entry per timeout
    assert list(figure.data[0].error_y.array) == [1.0] * 4  # the bar reaches the p99
