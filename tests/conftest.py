"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest
import torch


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
