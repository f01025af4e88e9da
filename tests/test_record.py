"""``benchmarks/record.py``: the header every record carries names no folder of its machine."""

from __future__ import annotations

import os
import sys

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
)

import record  # noqa: E402  (the benchmarks folder, as when a benchmark runs)


def test_an_interpreter_inside_the_repository_is_named_relative_to_it():
    inside = os.path.join(record.ROOT, ".venv", "bin", "python")
    assert record.shown_interpreter(inside) == os.path.join(".venv", "bin", "python")


def test_an_interpreter_elsewhere_is_named_by_its_file_alone():
    assert record.shown_interpreter("/opt/torch/.venv/bin/python3") == "python3"


def test_a_record_s_command_holds_no_absolute_path(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["benchmarks/seed_latency.py", "--actors", "4"])
    command = record.provenance("seed_latency")["command"]
    assert command.endswith("benchmarks/seed_latency.py --actors 4")
    assert not command.startswith("/"), command
