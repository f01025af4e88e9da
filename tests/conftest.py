"""Fixtures shared by the test modules."""

from __future__ import annotations

import os

import pytest
import torch
from processes import start_private_ray

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


def pytest_sessionstart(session):
    """Python's own SIGINT handler, whatever the launcher left: a shell that starts the suite in the
    background (``cmd &``) hands it SIGINT ignored, and the Ctrl-C tests need the handler a kernel
    has."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)


RAY_FILES = {
    "test_apex_transports.py",
    "test_central_inference.py",
    "test_cluster.py",
    "test_scale_out.py",
    "test_seed.py",
    "test_seed_ray.py",
    "test_seed_transports.py",
}
"""Test files that start Ray or count its processes machine-wide (``processes.ray_actor_pids``):
two of them side by side would see each other's actors."""


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to under ``bin/test``'s two workers: its file, or "ray" for
    every file of ``RAY_FILES``."""
    path = nodeid.split("::", 1)[0]
    return "ray" if path.rsplit("/", 1)[-1] in RAY_FILES else path


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """With ``-n 2 --dist loadfile`` (``bin/test``'s unit-test phase) a file runs whole on one
    worker (its module fixtures, such as one Ray start, set up once), and the Ray files run one
    after another on the same worker (``scope_of``). A scheduler, through pytest-xdist's own hook:
    ``--dist loadgroup``'s marks silently stopped grouping under pytest 9.2, whose structured node
    ids ignore the suffix pytest-xdist 3.8 writes (pytest-dev/pytest-xdist#1386), and two Ray
    files ran side by side."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RayFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return RayFilesTogether(config, log)


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
