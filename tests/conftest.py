"""Fixtures shared by the test modules."""

from __future__ import annotations

import os
import time

import pytest
import torch

from workbench.cluster import LOOPBACK_SWITCH

# Ray reads its loopback switch when it is first imported, and test modules import Ray themselves
# (pytest.importorskip): importing workbench.cluster above set it, so private instances stay on
# loopback whichever module imports Ray first.
assert os.environ.get(LOOPBACK_SWITCH) == "0", "workbench.cluster did not set Ray's loopback switch"


@pytest.fixture
def one_thread():
    """One torch thread in this process for the test: samplers' workers and learners get the other
    core, and a busy 2-core machine does not oversubscribe (two busy threads on one core run
    slower than one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def no_gpu(monkeypatch):
    """This process sees no GPU, whatever the machine has: the errors a CPU machine gives for a
    GPU asked for are checked on every machine."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def pytest_report_header(config):
    """Which CPU ran the suite: its timings and the levers recipes choose depend on it."""
    from workbench.system import machine_info

    m = machine_info()
    flags = " ".join(m.cpu_flags) or "none of note"
    caps = f", caps {' '.join(m.isa_caps)}" if m.isa_caps else ""
    return (
        f"machine: {m.cpu_model}, {m.cores} cores, {m.memory_gib} GiB; CPU flags: {flags}; "
        f"torch {m.torch} kernels: {m.torch_cpu_capability}{caps}"
    )


def pytest_sessionstart(session):
    """Python's own SIGINT handler, whatever the launcher left: a shell that starts the suite in the
    background (``cmd &``) hands it SIGINT ignored, and the Ctrl-C tests need the handler a kernel
    has."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)


class FileSeconds:
    """Where the suite's time went, per test file and notebook (setup, call and teardown), printed
    after the run: the figures each CPU's suite time is cut by (``docs/long_checks.md``). A plugin
    of its own, not conftest hooks, so that it also sees the notebooks' items."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report) -> None:
        path = report.nodeid.split("::")[0]
        self.seconds[path] = self.seconds.get(path, 0.0) + report.duration

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.seconds:
            return
        terminalreporter.section("seconds per file")
        for path, seconds in sorted(self.seconds.items(), key=lambda item: -item[1]):
            terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
        terminalreporter.write_line(f"{sum(self.seconds.values()):8.1f} s  in all")
        # CI's log should say which CPU these seconds come from: the same suite takes 1.5x as
        # long on an AVX2-only EPYC as on an AVX-512 bf16 one.
        from workbench.system import machine_info

        info = machine_info()
        terminalreporter.write_line(
            f"on {info.cpu_model}, {info.cores} cores, CPU flags {' '.join(info.cpu_flags)}, "
            f"torch kernels {info.torch_cpu_capability}"
        )


def pytest_configure(config):
    config.pluginmanager.register(FileSeconds(), "workbench-file-seconds")


def start_private_ray(start, **options):
    """``start(**options)`` (``cluster.local_ray`` or ``cluster.simulated_cluster``), once more if
    the raylet missed Ray's fixed start window on a loaded machine."""
    from workbench import cluster

    for attempt in range(2):
        try:
            return start(**options)
        except Exception as error:
            cluster.shutdown()
            if attempt or "timed out" not in str(error).lower():
                raise
            time.sleep(2)


@pytest.fixture(scope="module")
def local_ray():
    """A private local Ray instance (2 CPUs, loopback) for every Ray case of a module."""
    ray = pytest.importorskip("ray", reason='Ray needs pip install "workbench[distributed]"')
    from workbench import cluster

    start_private_ray(cluster.local_ray, num_cpus=2)
    yield ray
    cluster.shutdown()


@pytest.fixture(scope="module")
def two_nodes():
    """A private Ray cluster of two nodes on this machine (``cluster.simulated_cluster``): a head
    and a worker, each with its own raylet, as two machines would have."""
    pytest.importorskip("ray", reason='Ray needs pip install "workbench[distributed]"')
    from workbench import cluster

    instance = start_private_ray(cluster.simulated_cluster, nodes=2)
    yield instance
    cluster.shutdown()
