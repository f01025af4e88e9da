"""Figures a reader can tell apart (``workbench.lab.plots``)."""

from __future__ import annotations

from workbench.lab import plots
from workbench.lab.curves import LearningCurve
from workbench.lab.throughput import Throughput


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
