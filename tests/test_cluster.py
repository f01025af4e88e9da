"""Ray that stays private (``workbench.cluster``): a Ray instance the workbench starts listens on
loopback only, never joins a cluster a stale address file names, and leaves no process behind
however its owner ends (a clean stop, a normal exit, SIGKILL of the kernel), for Ape-X and SEED;
joining a cluster happens only when asked, and a dead address is a clear error in seconds.

Processes of one instance are found by the marker they all carry in their environment
(``WORKBENCH_RAY_INSTANCE``), which survives Ray renaming them ``ray::...``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from processes import start_private_ray

ray = pytest.importorskip("ray", reason='Ray needs pip install "workbench[distributed]"')

from workbench import cluster  # noqa: E402
from workbench.reaper import marked_processes  # noqa: E402

HOLDER = Path(__file__).parent / "scripts" / "hold_ray_run.py"
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
GONE_WITHIN = 10.0  # seconds for every process of an instance to end after its owner


@pytest.fixture
def local_instance():
    """A private local instance for one test (each test here starts and ends its own)."""
    yield start_private_ray(cluster.local_ray, num_cpus=2)
    cluster.shutdown()


def listening(processes: list[psutil.Process]) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening socket of ``processes``."""
    found = []
    for process in processes:
        try:
            for connection in process.net_connections(kind="inet"):
                if connection.status == psutil.CONN_LISTEN:
                    found.append((process.name(), connection.laddr.ip, connection.laddr.port))
        except psutil.NoSuchProcess:
            pass
    return found


def wait_for_processes(marker: str, at_least: int, seconds: float = 30.0) -> list[psutil.Process]:
    """The instance's processes once there are ``at_least`` (Ray starts its agents lazily)."""
    deadline = time.monotonic() + seconds
    while len(found := marked_processes(marker)) < at_least and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def wait_for_listening(
    marker: str, names: set[str], at_least: int, seconds: float = 30.0
) -> list[tuple[str, str, int]]:
    """The listening sockets of the instance's processes and of this driver, once they are
    ``at_least`` and processes named ``names`` are among them (a process binds its ports a while
    after it starts, an agent after Ray starts it lazily)."""
    deadline = time.monotonic() + seconds
    while True:
        found = listening([*marked_processes(marker), psutil.Process()])
        enough = names <= {name for name, _, _ in found} and len(found) >= at_least
        if enough or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)


def wait_none_left(marker: str, seconds: float = GONE_WITHIN) -> list[str]:
    """Names of the instance's processes still alive after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while (left := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    names = []
    for process in left:
        try:
            names.append(f"{process.pid} {' '.join(process.cmdline())[:80]}")
        except psutil.NoSuchProcess:
            pass
    return names


def test_a_private_instance_listens_on_loopback_only(local_instance):
    """Every socket that any process of the instance listens on (GCS, raylet, agents, an actor's
    worker, and this driver's own core worker) is bound to a loopback address."""
    instance = local_instance

    @ray.remote(num_cpus=0)
    class Probe:
        def pid(self) -> int:
            return os.getpid()

    probe = Probe.remote()
    worker = ray.get(probe.pid.remote(), timeout=60)
    processes = wait_for_processes(instance.marker, at_least=5)
    pids = {p.pid for p in processes}
    assert worker in pids, "the actor's worker does not carry the instance's marker"
    sockets = wait_for_listening(instance.marker, {"gcs_server", "raylet"}, at_least=6)
    names = {name for name, _, _ in sockets}
    assert {"gcs_server", "raylet"} <= names and len(sockets) >= 6, sockets
    assert [s for s in sockets if s[1] not in LOOPBACK] == [], sockets
    ray.kill(probe)


# A simulated two-node cluster on loopback only (a raylet per node, no socket off loopback, the
# driver's own included) is notebook 10's checked cell (Cells 1-3).


def test_a_local_instance_ignores_a_stale_address_file_and_shutdown_ends_all_of_it(
    tmp_path, monkeypatch
):
    """A ``ray_current_cluster`` file naming a dead address (what a killed ``Cluster`` or kernel
    leaves in Ray's temp folder) must not make a run try to join it; and ``cluster.shutdown()``
    ends every process of the instance, its reaper and its folder (one Ray start for both)."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    stale = tmp_path / "ray" / "ray_current_cluster"
    stale.parent.mkdir()
    stale.write_text("127.0.0.1:9")  # nothing listens there
    started = time.monotonic()
    instance = cluster.local_ray(num_cpus=1)
    try:
        assert ray.is_initialized() and time.monotonic() - started < 60
        assert ray.get_runtime_context().gcs_address != "127.0.0.1:9"
        assert len(wait_for_processes(instance.marker, at_least=3)) >= 3
    finally:
        cluster.shutdown()
    assert os.environ["RAY_TMPDIR"] == str(tmp_path)  # restored to what it was
    assert wait_none_left(instance.marker) == []
    assert not os.path.exists(instance.temp_dir)
    assert instance.reaper.poll() is not None, "the reaper outlived a clean shutdown"
    assert cluster.private_ray() is None


def test_joining_a_dead_address_is_a_clear_error_within_seconds():
    """In a fresh process (joining a cluster must come before any private instance)."""
    code = "from workbench import cluster; cluster.connect('127.0.0.1:9', timeout=3)"
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "ConnectionError: no Ray cluster answers at 127.0.0.1:9" in result.stderr
    assert "ray start --head --port=9" in result.stderr
    assert time.monotonic() - started < 30


def test_a_process_that_loaded_ray_for_a_private_instance_cannot_join_a_cluster():
    with pytest.raises(RuntimeError, match="restart the kernel and call workbench.cluster.connect"):
        cluster.connect("127.0.0.1:6379")


def start_holder(kind: str, mode: str, runs_dir: Path) -> tuple[subprocess.Popen, dict]:
    process = subprocess.Popen(
        [sys.executable, str(HOLDER), kind, mode, str(runs_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HOLDER.parents[2],
    )
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(240)
    if not (box and box[0]):
        process.kill()
        pytest.fail(f"the holder printed nothing in 240 s: {process.stderr.read()[-3000:]}")
    info = json.loads(box[0])
    assert len(info["ray"]) >= 3, info  # GCS, raylet, workers: the instance was found
    return process, info


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "kind"),
    # A kill (the reaper's clean-up, the same for both engines: it ends every process carrying
    # the instance's marker), a stop for each engine (each stops its own actors), one normal
    # exit, whose clean-up is the instance's (workbench.cluster's exit hook), not the engine's.
    [("kill", "seed"), ("stop", "apex"), ("stop", "seed"), ("exit", "seed")],
)
def test_no_ray_process_outlives_its_run(mode, kind, tmp_path):
    """A run on Ray that started its own instance: SIGKILL of its process (a kernel restart), a
    normal exit with the run going, or a clean stop of the run leave none of the instance's
    processes (agents included) and none of its files."""
    process, info = start_holder(kind, "hold" if mode == "kill" else mode, tmp_path)
    try:
        if mode == "kill":
            process.send_signal(signal.SIGKILL)
            process.wait(10)
        elif mode == "exit":
            assert process.wait(120) == 0, process.stderr.read()[-3000:]
        else:
            assert json.loads(process.stdout.readline()) == {"stopped": "stopped"}
            assert process.poll() is None  # the run stopped; its process lives on
        assert wait_none_left(info["marker"]) == []
        deadline = time.monotonic() + GONE_WITHIN
        while os.path.exists(info["temp_dir"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not os.path.exists(info["temp_dir"])
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
