"""Notebook 10's measurements: SEED over simulated nodes, and what real machines would change.

* :func:`throughput_over_nodes`: SEED's Ray transport on simulated clusters of 1, 2, 3 ... nodes
  (``cluster.simulated_cluster``: one raylet per node, all on this machine's cores), at several
  layouts of actors x envs per actor (``seed_transports.measure_transport``). Nodes here add Ray's
  machinery, not cores: the figure separates what placement costs from what hardware buys.
* :func:`wire_costs`: what crosses the network per second when actors sit on other machines,
  from one env step's bytes (SEED streams observations and actions; an IMPALA-style actor receives
  the parameters at each refresh and sends its trajectories) and a measured rate.
* :func:`nodes_figure`: env steps/s against node count, a line per layout.
* :func:`step_costs`: SEED's cost argument from a recorded ``benchmarks/central_inference.py``
  run: CPU per env step, memory per actor and CPU hours per million frames, both systems.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from workbench.envs import env_spaces
from workbench.measure.seed_transports import TransportResult, measure_transport
from workbench.progress import each

__all__ = ["nodes_figure", "step_costs", "throughput_over_nodes", "wire_costs"]


def throughput_over_nodes(
    node_counts: Sequence[int],
    layouts: Sequence[tuple[int, int]],
    seconds: float,
    *,
    env_id: str = "CartPole-v1",
    warmup: float = 0.5,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """SEED's Ray transport at each node count and layout: a fresh simulated cluster per count
    (shut down after it); one row per point: ``nodes``, the nodes the actors used, and the
    ``TransportResult``'s fields."""
    from workbench import cluster

    rows = []
    for nodes in each(node_counts, "node counts", unit="cluster"):
        cluster.simulated_cluster(nodes=nodes)
        try:
            for actors, envs in layouts:
                result: TransportResult = measure_transport(
                    "ray", env_id, actors, envs, seconds, warmup=warmup
                )
                row = {"nodes": nodes, **result.to_dict()}
                rows.append(row)
                if progress is not None:
                    progress(row)
        finally:
            cluster.shutdown()
    return rows


def nodes_figure(rows: Sequence[dict[str, Any]], *, title: str | None = None) -> go.Figure:
    """Env steps/s against simulated node count, a line per layout (actors x envs)."""
    figure = go.Figure()
    for layout in dict.fromkeys(row["layout"] for row in rows):
        mine = [row for row in rows if row["layout"] == layout]
        figure.add_trace(
            go.Scatter(
                x=[row["nodes"] for row in mine],
                y=[row["steps_per_second"] for row in mine],
                mode="lines+markers",
                name=f"{layout} (actors x envs)",
            )
        )
    figure.update_layout(
        title=title,
        xaxis_title="simulated nodes (one raylet each, the same 2 cores)",
        yaxis_title="env steps per second",
        xaxis=dict(dtick=1),
        height=360,
    )
    return figure


def parameter_bytes(model: Any) -> int:
    """Bytes of a model's parameters in float32: what one parameter refresh sends an actor."""
    return int(sum(p.numel() for p in model.parameters()) * 4)


def wire_costs(
    env_id: str,
    model: Any,
    steps_per_second: float,
    *,
    env_options: dict | None = None,
    refresh_steps: int = 100,
    unroll_length: int = 20,
) -> dict[str, Any]:
    """Bytes per second on the network at ``steps_per_second`` env steps of actors on other
    machines.

    SEED: every env step sends one observation to the server and one action back (with the reward
    and flags, a few bytes). IMPALA-style (a model in every actor): each actor receives the
    parameters every ``refresh_steps`` of its env steps and sends its unrolls (observations,
    actions, rewards, behaviour log-probabilities) to the learner. The observation bytes are the
    same on both; the parameters are IMPALA's alone, and grow with the model (the IMPALA paper's
    actors refresh at the start of each unroll; 100 steps is Ape-X's 400 frames)."""
    observation_space, _ = env_spaces(env_id, **(env_options or {}))
    obs_bytes = int(np.prod(observation_space.shape)) * np.dtype(observation_space.dtype).itemsize
    step_reply = 8 + 4 + 1  # action (int64), reward (float32), flags
    params = parameter_bytes(model)
    seed = steps_per_second * (obs_bytes + step_reply)
    unroll = unroll_length * (obs_bytes + 8 + 4 + 1 + 4)  # obs, action, reward, flags, logp
    impala_trajectories = steps_per_second / unroll_length * unroll
    impala_parameters = steps_per_second / refresh_steps * params
    return {
        "env_id": env_id,
        "steps_per_second": steps_per_second,
        "observation_bytes": obs_bytes,
        "parameter_bytes": params,
        "seed_mb_per_s": seed / 1e6,
        "impala_trajectory_mb_per_s": impala_trajectories / 1e6,
        "impala_parameter_mb_per_s": impala_parameters / 1e6,
        "requests_per_second": steps_per_second,
    }


def step_costs(rows: Sequence[dict[str, Any]], frames_per_step: int = 4) -> list[dict[str, Any]]:
    """Per actor count of a recorded SEED-against-IMPALA study (``central_inference.json``'s
    ``rows``): each system's env steps/s, CPU ms per env step (every process of the system),
    resident MB per actor process, and CPU hours per million frames (``frames_per_step`` frames
    per agent step: Atari's frame skip). Espeholt et al. (2020, Sec. 4.4) price a run by the
    machines it holds; on one machine the CPU spent per frame is that price."""
    costs = []
    for row in sorted(rows, key=lambda r: r["num_actors"]):
        entry: dict[str, Any] = {"num_actors": row["num_actors"]}
        for system in ("seed", "impala"):
            result = row[system]
            entry[system] = {
                "steps_per_second": result["steps_per_second"],
                "cpu_ms_per_step": result["cpu_ms_per_step"],
                "mb_per_actor": result["actor_rss_mb"],
                "cpu_hours_per_million_frames": result["cpu_ms_per_step"]
                * (1e6 / frames_per_step)
                / 3.6e6,
            }
        entry["cpu_ratio"] = entry["impala"]["cpu_ms_per_step"] / entry["seed"]["cpu_ms_per_step"]
        costs.append(entry)
    return costs
