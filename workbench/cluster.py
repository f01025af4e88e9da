"""Ray, when a run is asked to use it: one place that imports it, starts a private local instance or
joins a cluster the user names, ends what it started, and places actors over a cluster's nodes.
Only the Ray transports and this module import Ray; it never imports torch.

Which Ray instance a run uses:

* one the user started or joined (``ray.init(...)``, ``connect(address)``,
  ``simulated_cluster``): runs use it and leave it running;
* else a **private local instance** that the run starts (``acquire_ray``) and shuts down when it
  ends (``release_ray``). It never joins anything: it starts afresh in its own temp folder, so a
  stale ``ray_current_cluster`` file of an earlier instance cannot point it at a dead address.

A private instance (``local_ray``, ``simulated_cluster``) is private in two ways. Its processes
listen on 127.0.0.1 only: Ray binds its GCS, raylets and workers to loopback when its node address
is 127.0.0.1, which it allows when ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (Ray's own switch, read
when Ray is imported; set here unless a cluster was asked for first). The dashboard is off. And it
ends with its owner: a reaper process (``workbench.reaper``) kills every process of the instance
when this process dies however it dies (Ray's dashboard and runtime-env agents outlived a
SIGKILLed kernel otherwise), and ``shutdown`` does the same on a clean end. Ray's token
authentication stays as Ray sets it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from workbench.checks import positive_int
from workbench.reaper import INSTANCE_ENV, kill_marked, marked_processes

__all__ = [
    "LOOPBACK_SWITCH",
    "PrivateRay",
    "acquire_ray",
    "connect",
    "end_killed_actors",
    "ensure_ray",
    "import_ray",
    "live_nodes",
    "local_ray",
    "node_for",
    "node_left",
    "node_strategy",
    "pinned_node",
    "private_ray",
    "release_ray",
    "shutdown",
    "simulated_cluster",
    "this_node",
]

LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch, read at import: "0" makes a node's address 127.0.0.1, so it listens on loopback."""

CONNECT_TIMEOUT = 5.0
"""Seconds ``connect`` waits for a cluster's head to answer before it says so."""

# Ray reads the switch once, when it is first imported, possibly by the user's own ``import ray``
# after this module: set it now, unless Ray is loaded already (``connect`` unsets it again for a
# process that joins a real cluster before anything imports Ray).
if "ray" not in sys.modules:
    os.environ.setdefault(LOOPBACK_SWITCH, "0")


def import_ray(*, for_cluster: bool = False) -> Any:
    """Ray, or an ImportError naming the fix. The first import decides whether a local instance can
    be private (loopback only): it can unless ``for_cluster``."""
    if "ray" not in sys.modules:
        if for_cluster:
            os.environ.pop(LOOPBACK_SWITCH, None)
        else:
            os.environ.setdefault(LOOPBACK_SWITCH, "0")
    try:
        import ray
    except ImportError:
        raise ImportError(
            'the Ray transports need Ray: pip install "workbench[distributed]" (or use the local '
            "transport on one machine)."
        ) from None
    return ray


@dataclass
class PrivateRay:
    """A Ray instance this process started here (``local_ray``, ``simulated_cluster``)."""

    temp_dir: str
    """Its folder: Ray's sessions, sockets and logs (removed when it ends)."""
    marker: str
    """The value of ``WORKBENCH_RAY_INSTANCE`` in the environment of each of its processes."""
    reaper: subprocess.Popen
    cluster: Any = None
    """The ``ray.cluster_utils.Cluster`` of a simulated cluster."""
    started_by_run: bool = False
    """Started by ``ensure_ray`` for a run (which ends it), not by the user."""
    users: int = 0
    saved_env: dict = field(default_factory=dict)
    node_options: dict = field(default_factory=dict)
    """The options a simulated cluster's nodes started with."""

    def add_node(self) -> Any:
        """Another worker node of a simulated cluster, started as its first ones were (a machine
        that joins); returns ``ray.cluster_utils``' node (its ``node_id``)."""
        if self.cluster is None:
            raise ValueError("add_node needs a simulated cluster (cluster.simulated_cluster)")
        with _marking(self):
            node = self.cluster.add_node(**self.node_options)
        self.cluster.wait_for_nodes()
        return node

    def processes(self) -> list:
        """Its live processes (``psutil.Process``): GCS, raylets, agents, workers."""
        return marked_processes(self.marker)

    @property
    def nodes(self) -> int:
        return 1 if self.cluster is None else 1 + len(self.cluster.worker_nodes)


_instances: list[PrivateRay] = []  # the private instance of this process (at most one)


def private_ray() -> PrivateRay | None:
    """The private instance this process started, if it runs."""
    return _instances[0] if _instances else None


def _begin_private() -> PrivateRay:
    """A temp folder, a marker and a reaper for a new private instance (before Ray starts)."""
    ray = import_ray()
    if ray.is_initialized():
        raise RuntimeError(
            "Ray is already initialised in this process; call workbench.cluster.shutdown() (or "
            "ray.shutdown()) first, or use the instance that runs."
        )
    if os.environ.get(LOOPBACK_SWITCH) != "0":
        print(
            f"workbench: Ray was imported before workbench with {LOOPBACK_SWITCH} unset, so this "
            "local instance listens on every interface (token authentication on); import "
            "workbench first, or set that variable to 0, to keep it on loopback.",
            file=sys.stderr,
        )
    temp_dir = tempfile.mkdtemp(prefix="wb-ray-", dir="/tmp")  # short: Unix socket paths
    marker = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    reaper = subprocess.Popen(
        [sys.executable, "-m", "workbench.reaper", str(os.getpid()), marker, temp_dir],
        stdin=subprocess.PIPE,
        start_new_session=True,  # a kill of the kernel's process group must not take it along
    )
    instance = PrivateRay(temp_dir=temp_dir, marker=marker, reaper=reaper)
    # Ray's default temp folder (and its ray_current_cluster file) moves into the private folder
    # while the instance lives.
    instance.saved_env["RAY_TMPDIR"] = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = temp_dir
    _instances.append(instance)
    atexit.register(shutdown)
    return instance


@contextlib.contextmanager
def _marking(instance: PrivateRay) -> Iterator[None]:
    """The processes Ray starts meanwhile (GCS, raylets, and what raylets start later: agents,
    workers) carry the instance's marker; processes this one starts afterwards do not."""
    before = os.environ.get(INSTANCE_ENV)
    os.environ[INSTANCE_ENV] = instance.marker
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(INSTANCE_ENV, None)
        else:
            os.environ[INSTANCE_ENV] = before


def local_ray(num_cpus: int | None = None) -> PrivateRay:
    """Start a private Ray instance on this machine (module docstring): one node, loopback only,
    no dashboard, ended by ``shutdown`` or with this process. ``num_cpus``: what Ray schedules by
    (None: the machine's cores; the workbench's actors ask for none)."""
    instance = _begin_private()
    try:
        with _marking(instance):
            import_ray().init(
                address="local",
                num_cpus=num_cpus,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                _temp_dir=os.path.join(instance.temp_dir, "ray"),
            )
    except BaseException:
        shutdown()
        raise
    return instance


def simulated_cluster(nodes: int = 2, cpus_per_node: int = 1) -> PrivateRay:
    """A private Ray cluster of ``nodes`` nodes on this machine (``ray.cluster_utils.Cluster``):
    a head and ``nodes - 1`` workers, each with its own raylet, as separate machines would have,
    all on loopback; this process joins it. Runs place actors over its nodes as over a real
    cluster's. Ended by ``shutdown`` or with this process."""
    positive_int(nodes, "nodes")
    instance = _begin_private()
    try:
        from ray.cluster_utils import Cluster

        options = dict(
            node_ip_address="127.0.0.1",
            num_cpus=cpus_per_node,
            include_dashboard=False,
            temp_dir=os.path.join(instance.temp_dir, "ray"),
        )
        instance.node_options = options
        with _marking(instance):
            instance.cluster = Cluster(initialize_head=True, head_node_args=options)
            for _ in range(nodes - 1):
                instance.cluster.add_node(**options)
        import_ray().init(
            address=instance.cluster.address, log_to_driver=False, configure_logging=False
        )
    except BaseException:
        shutdown()
        raise
    return instance


def connect(address: str, *, timeout: float = CONNECT_TIMEOUT) -> Any:
    """Join the Ray cluster whose head's GCS listens at ``address`` (``"host:port"``; ``ray start
    --head --port=6379`` prints it). A head that does not answer within ``timeout`` seconds is a
    ``ConnectionError`` naming the fix, not a hang or a crash."""
    host, _, port = str(address).rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be 'host:port' of the cluster's head, got {address!r}")
    if "ray" in sys.modules and os.environ.get(LOOPBACK_SWITCH) == "0":
        raise RuntimeError(
            "this process loaded Ray for a private local instance (loopback only), which cannot "
            "join a cluster; restart the kernel and call workbench.cluster.connect(address) "
            "before any run uses Ray."
        )
    ray = import_ray(for_cluster=True)
    if ray.is_initialized():
        raise RuntimeError(
            "Ray is already initialised in this process; call workbench.cluster.shutdown() first"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as error:
        raise ConnectionError(
            f"no Ray cluster answers at {address} ({error}); start its head there with "
            f"`ray start --head --port={port}`, open that port to this machine, or check the "
            "address."
        ) from None
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    return ray


def ensure_ray() -> Any:
    """Ray, initialised: the instance this process uses, else a new private local one (which lives
    until ``shutdown`` or the end of this process)."""
    ray = import_ray()
    if not ray.is_initialized():
        local_ray()
    return ray


def acquire_ray() -> Any:
    """Ray for a run (Ape-X, SEED on Ray): the instance this process uses, else a new private one
    that the run owns: ``release_ray`` at the run's end shuts it down, so a stopped run leaves no
    Ray process behind."""
    ray = import_ray()
    started = not ray.is_initialized()
    ensure_ray()
    instance = private_ray()
    if instance is not None:
        instance.started_by_run = instance.started_by_run or started
        instance.users += 1
    return ray


def release_ray() -> None:
    """A run is done with Ray: a private instance a run started ends with its last run."""
    instance = private_ray()
    if instance is None:
        return
    instance.users = max(0, instance.users - 1)
    if instance.started_by_run and instance.users == 0:
        shutdown()


KILLED_ACTOR_GRACE = 5.0
"""Seconds a killed actor's process of a private instance gets to end before it is SIGKILLed."""


def end_killed_actors(pids: Sequence[int], grace: float = KILLED_ACTOR_GRACE) -> list[int]:
    """Wait until the processes of actors just ``ray.kill``-ed end, up to ``grace`` seconds, then
    SIGKILL the ones still there; returns their pids. ``ray.kill`` returns before the actor's
    process ends, and on a loaded machine one lingered for 16 s (an env actor restarted during a
    measurement). Only processes of this process's private instance (``local_ray``,
    ``simulated_cluster``: marked, on this machine) are touched; on a cluster Ray ends its own."""
    instance = private_ray()
    wanted = set(pids)
    if instance is None or not wanted:
        return []
    processes = [p for p in instance.processes() if p.pid in wanted]
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=grace)
    return [process.pid for process in alive]


def shutdown() -> None:
    """Disconnect from Ray; end the private instance, if this process started one: every process
    of it (its agents ignore SIGTERM: they get SIGKILL), its reaper, its folder."""
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    if not _instances:
        return
    instance = _instances.pop()
    try:
        if instance.cluster is not None:
            instance.cluster.shutdown()
    finally:
        kill_marked(instance.marker)
        instance.reaper.stdin.close()  # end of file: the reaper finds nothing left and exits
        try:
            instance.reaper.wait(timeout=10)
        except subprocess.TimeoutExpired:
            instance.reaper.kill()
        shutil.rmtree(instance.temp_dir, ignore_errors=True)
        for key, value in instance.saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# --- placement ------------------------------------------------------------------------------------


def node_strategy(node_id: str) -> Any:
    """A hard scheduling affinity to ``node_id``."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def this_node() -> str:
    """The id of the node this process runs on (the learner's, by default)."""
    return import_ray().get_runtime_context().get_node_id()


def live_nodes() -> list[str]:
    """The ids of the cluster's live nodes, sorted (a stable round-robin order)."""
    return sorted(node["NodeID"] for node in import_ray().nodes() if node["Alive"])


def pinned_node(node_id: str | None, setting: str) -> str:
    """The node a role is pinned to: ``node_id``, or this process's when None. A node that is not
    live is refused with an error naming ``setting``: Ray would wait for it forever (a resumed
    run's saved config may name a node that has since left the cluster)."""
    if node_id is None:
        return this_node()
    live = live_nodes()
    if node_id not in live:
        field = setting.rsplit(".", 1)[-1]
        raise ValueError(
            f"{setting} {node_id!r} is not a live node of this Ray cluster (live: {live}). Name "
            f"one of them, or None for this process's node; a run continued from a checkpoint "
            f"keeps its saved config, so pass config=dataclasses.replace(config, {field}=None) to "
            "from_checkpoint."
        )
    return node_id


def node_left(node_id: str | None) -> bool:
    """Whether ``node_id`` has left the cluster (False when None: not known)."""
    return node_id is not None and node_id not in live_nodes()


def node_for(index: int) -> Any:
    """The scheduling strategy of the ``index``-th actor: the live nodes in turn (a restarted actor
    goes to a live one). Actors with ``num_cpus=0`` are not spread by Ray's default or SPREAD
    policies, and a soft affinity may still put them all on the head node: hence a hard one."""
    nodes = live_nodes()
    return node_strategy(nodes[index % len(nodes)])
