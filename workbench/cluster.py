"""Ray, when a run is asked to use it: one place that imports it, starts a local instance, and
places actors over a cluster's nodes. Only the Ray transports import this module; it never imports
torch (Ray env actors run without it).

* ``import_ray()``: Ray, or an ImportError that names the install.
* ``ensure_ray()``: a ``ray.init()`` on this machine when none is running yet (no dashboard, no
  log forwarding); with ``ray.init(address=...)`` called first, the cluster it joined.
* ``node_for(index)``: a hard affinity to the ``index``-th live node, round-robin: actors with
  ``num_cpus=0`` are not spread by Ray's default or SPREAD policies, and a soft affinity may still
  put them all on the head node.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ensure_ray", "import_ray", "node_for", "node_strategy"]


def import_ray() -> Any:
    """Ray, or an ImportError naming the fix."""
    try:
        import ray
    except ImportError:
        raise ImportError(
            'the Ray transports need Ray: pip install "workbench[distributed]" (or use the local '
            "transport on one machine)."
        ) from None
    return ray


def ensure_ray() -> Any:
    """Ray, initialised: the instance already running in this process, else a new local one."""
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    return ray


def node_strategy(node_id: str) -> Any:
    """A hard scheduling affinity to ``node_id``."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def node_for(index: int) -> Any:
    """The scheduling strategy of the ``index``-th actor: the live nodes in turn (a restarted actor
    goes to a live one)."""
    ray = import_ray()
    nodes = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
    return node_strategy(nodes[index % len(nodes)])
