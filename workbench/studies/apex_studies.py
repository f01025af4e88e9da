"""The Ape-X studies of notebook 06: a CartPole run, throughput against the number of actors, and
the paper's own question, return against wall time at each number of actors."""

from __future__ import annotations

import dataclasses
import itertools
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
import psutil

from workbench.apex import Apex, ApexConfig
from workbench.apex.recipes import APEX_CARTPOLE_LEARNER
from workbench.learners import DQNConfig
from workbench.progress import each
from workbench.studies.curves import study_dir

__all__ = [
    "ActorsOverTime",
    "ApexThroughput",
    "apex_cartpole_config",
    "apex_throughput",
    "ideas_figure",
    "ideas_summary",
    "return_over_time",
]


def apex_cartpole_config(**changes: Any) -> ApexConfig:
    """An ``apex.ApexConfig`` for Ape-X DQN on CartPole-v1: ``APEX_CARTPOLE_LEARNER``, a dueling MLP
    (64, 64), 1,000 transitions before learning; ``changes`` replace any ``ApexConfig`` field
    (``num_actors=4``, ``max_replay_ratio=32.0``, ``model_options=...``)."""
    values: dict[str, Any] = dict(
        env_id="CartPole-v1",
        learner=DQNConfig(**APEX_CARTPOLE_LEARNER),
        model_options=dict(dueling=True, hidden=(64, 64)),
        num_actors=2,
        max_actors=16,
        learning_starts=1_000,
        seed=0,
    )
    values.update(changes)
    return ApexConfig(**values)


@dataclass
class ApexThroughput:
    """One Ape-X run measured after its warm-up: how fast data goes in and how fast it is learned.

    Rates are differences of the run's counters between the first row at which every actor had
    sent a block and the learner was updating, and the last row, over the wall time between them.
    """

    num_actors: int
    transitions_per_second: float
    """n-step transitions added to the central replay per second (all actors together)."""
    env_steps_per_second: float
    """Env steps per second, all actors together (about the transitions: one per step)."""
    updates_per_second: float
    """Learner updates (gradient steps) per second."""
    samples_per_second: float
    """Transitions trained on per second: updates x batch size."""
    seconds: float
    """Wall seconds measured (the window between the two rows)."""
    warmup_seconds: float
    """Seconds from ``train()`` to the window's first row: processes started, replay warmed up."""
    per_actor_transitions: dict[int, int] = field(default_factory=dict)
    """Transitions each actor sent within the window."""
    role_cores: dict[str, float] = field(default_factory=dict)
    """Cores each role kept busy in the window (CPU seconds over wall seconds): ``learner`` (this
    process), ``replay`` and ``actors`` (all together); local transport only, else empty."""

    @property
    def replay_ratio(self) -> float:
        """Samples trained per transition added: how often each transition is replayed."""
        return self.samples_per_second / max(self.transitions_per_second, 1e-9)


def with_actor_counts(
    config: ApexConfig, actor_counts: Sequence[int], study: str
) -> dict[int, ApexConfig]:
    """``config`` once per actor count (``max_actors`` raised where needed), every count checked
    before any run starts."""
    for count in actor_counts:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"{study}: actor counts must be positive ints, got {count!r}.")
    return {
        count: dataclasses.replace(
            config, num_actors=count, max_actors=max(config.max_actors, count)
        )
        for count in actor_counts
    }


def apex_throughput(
    actor_counts: Sequence[int] = (1, 2, 4),
    *,
    seconds: float = 5.0,
    config: ApexConfig | None = None,
    warmup_timeout: float = 120.0,
    log_interval: float = 0.5,
    progress: bool = True,
    runs_dir: str | None = None,
) -> list[ApexThroughput]:
    """Ape-X throughput against the number of actors (Horgan et al. 2018, Fig. 5's question on
    this machine): one run per count, each measured for ``seconds`` after its warm-up.

    Each run is ``config`` (default :func:`apex_cartpole_config`: CartPole, a free-running
    learner) with ``num_actors`` set, run in this thread until ``seconds`` have passed since the
    first row at which every actor had sent a block and the learner was updating; then stopped
    (its processes end). Returns one :class:`ApexThroughput` per count, in order.

    Raises TimeoutError if a run does not warm up within ``warmup_timeout`` seconds.
    """
    if not seconds > 0:
        raise ValueError(f"apex_throughput: seconds must be > 0, got {seconds!r}.")
    config = config or apex_cartpole_config()
    runs_dir = runs_dir or study_dir("workbench-apex-throughput-")
    results = []
    configs = with_actor_counts(config, actor_counts, "apex_throughput")
    for count in each(actor_counts, "Ape-X actor counts", unit="run"):
        apex = Apex(
            configs[count],
            log_interval=log_interval,
            runs_dir=runs_dir,
            name=f"apex-throughput-{count}-actors",
        )
        first, last, role_cores = measured_window(apex, count, seconds, warmup_timeout)
        result = throughput_between(count, first, last, role_cores)
        results.append(result)
        if progress:
            print(
                f"{count:>3} actor(s): {result.transitions_per_second:8,.0f} transitions/s "
                f"into replay, {result.updates_per_second:6,.0f} learner updates/s "
                f"({result.samples_per_second:8,.0f} samples/s), "
                f"{result.seconds:.1f} s measured after {result.warmup_seconds:.1f} s of warm-up",
                flush=True,
            )
    return results


def role_cpu_seconds(apex: Apex) -> dict[str, float]:
    """CPU seconds (user + system) each role of a local Ape-X run has used so far: ``learner``
    (this process), ``replay``, ``actors`` (the live ones together); empty for another transport."""
    replay = getattr(apex.transport, "replay", None)
    if getattr(replay, "pid", None) is None:
        return {}

    def seconds(pid: int) -> float:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:  # ended between the listing and the reading
            return 0.0
        return times.user + times.system

    return {
        "learner": seconds(os.getpid()),
        "replay": seconds(replay.pid),
        "actors": sum(seconds(pid) for pid in apex.actor_pids().values()),
    }


def measured_window(
    apex: Apex, count: int, seconds: float, warmup_timeout: float
) -> tuple[dict, dict, dict[str, float]]:
    """Run ``apex`` in this thread and return the rows that open and close its measured window:
    the first row at which all ``count`` actors had sent a block and the learner was updating,
    and the first one ``seconds`` later at which the actors had stepped and the learner updated
    since (the run is stopped there), with the cores each role kept busy between them
    (``role_cpu_seconds``). Raises TimeoutError when it does not warm up within
    ``warmup_timeout`` seconds."""
    window: dict[str, dict] = {}
    cpu: dict[str, dict[str, float]] = {}

    def moved(start: dict, row: dict) -> bool:
        # A short window on a loaded machine can close before a starved actor (nice 10) sends a
        # block: it stays open until the actors and the learner have each made progress.
        return all(row[key] > start[key] for key in ("charts/env_steps", "charts/updates"))

    def watch(row: dict) -> None:
        if "event" in row:
            return
        if "start" not in window:
            if row["charts/updates"] > 0 and len(row["apex/per_actor"]) >= count:
                window["start"] = row
                cpu["start"] = role_cpu_seconds(apex)
            elif row["charts/wall_seconds"] > warmup_timeout:
                apex.stop(wait=False)
        elif row["charts/wall_seconds"] - window["start"]["charts/wall_seconds"] >= seconds and (
            moved(window["start"], row)
        ):
            window["end"] = row
            cpu["end"] = role_cpu_seconds(apex)
            apex.stop(wait=False)

    apex.on_row(watch)
    apex.run(seconds=warmup_timeout + seconds + 30.0)
    if "start" not in window:
        raise TimeoutError(
            f"apex_throughput: the run with {count} actor(s) did not warm up within "
            f"{warmup_timeout:g} s (every actor sending, the learner updating); the machine "
            "may be overloaded, or raise warmup_timeout."
        )
    rows = [row for row in apex.metrics if "event" not in row]
    end = window.get("end", rows[-1])
    elapsed = max(end["charts/wall_seconds"] - window["start"]["charts/wall_seconds"], 1e-9)
    cores = {}
    if cpu.get("start") and cpu.get("end"):
        cores = {k: (cpu["end"][k] - cpu["start"][k]) / elapsed for k in cpu["start"]}
    return window["start"], end, cores


def throughput_between(
    count: int, first: dict, last: dict, role_cores: dict[str, float] | None = None
) -> ApexThroughput:
    """The rates between two metric rows of a run with ``count`` actors."""
    elapsed = max(last["charts/wall_seconds"] - first["charts/wall_seconds"], 1e-9)

    def rate(key: str) -> float:
        return (last[key] - first[key]) / elapsed

    before = first["apex/per_actor"]
    return ApexThroughput(
        num_actors=count,
        transitions_per_second=rate("apex/transitions_added"),
        env_steps_per_second=rate("charts/env_steps"),
        updates_per_second=rate("charts/updates"),
        samples_per_second=rate("apex/samples_trained"),
        seconds=elapsed,
        warmup_seconds=first["charts/wall_seconds"],
        per_actor_transitions={
            i: actor["transitions"] - before.get(i, {}).get("transitions", 0)
            for i, actor in sorted(last["apex/per_actor"].items())
        },
        role_cores=dict(role_cores or {}),
    )


@dataclass
class ActorsOverTime:
    """One run of :func:`return_over_time`: its learning curve against wall time and the replay
    ratio it ended at."""

    num_actors: int
    seconds: list[float]
    """Wall seconds of each row since ``run()`` (process start-up included, as a user waits it)."""
    returns: list[float]
    """The return of the actor exploring least (``apex/return_least_exploring``) at each row."""
    transitions: int
    """Transitions added to the central replay over the run."""
    samples_trained: int
    """Transitions trained on over the run (updates x batch size)."""
    seconds_to_target: float | None

    @property
    def replay_ratio(self) -> float:
        """Samples trained per transition added, over the whole run."""
        return self.samples_trained / max(self.transitions, 1)


def return_over_time(
    actor_counts: Sequence[int],
    seconds: float,
    *,
    target: float | None = None,
    config: ApexConfig | None = None,
    runs_dir: str | None = None,
) -> list[ActorsOverTime]:
    """Ape-X's Fig. 5 question on this machine (Horgan et al. 2018: more actors, faster learning in
    wall time): one run of ``config`` (default :func:`apex_cartpole_config`) per actor count, each
    for ``seconds`` of wall time; the first row at which the actor exploring least reached
    ``target`` (when given) is kept, the run goes on to the end of its time."""
    if not seconds > 0:
        raise ValueError(f"return_over_time: seconds must be > 0, got {seconds!r}.")
    config = config or apex_cartpole_config()
    runs_dir = runs_dir or study_dir("workbench-apex-over-time-")
    results = []
    configs = with_actor_counts(config, actor_counts, "return_over_time")
    for count in each(actor_counts, "Ape-X actor counts", unit="run"):
        apex = Apex(configs[count], runs_dir=runs_dir, name=f"apex-{count}-actors")
        apex.run(seconds=seconds)
        rows = [r for r in apex.metrics if "event" not in r]
        points = [r for r in rows if r.get("apex/return_least_exploring") is not None]
        reached = next(
            (
                r["charts/wall_seconds"]
                for r in points
                if target is not None and r["apex/return_least_exploring"] >= target
            ),
            None,
        )
        last = rows[-1] if rows else {}
        results.append(
            ActorsOverTime(
                num_actors=count,
                seconds=[r["charts/wall_seconds"] for r in points],
                returns=[r["apex/return_least_exploring"] for r in points],
                transitions=int(last.get("apex/transitions_added", 0)),
                samples_trained=int(last.get("apex/samples_trained", 0)),
                seconds_to_target=reached,
            )
        )
    return results


# One colour per variant of benchmarks/apex_ideas.py: the paper's design first.
IDEA_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def ideas_summary(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per variant of a ``benchmarks/apex_ideas.py`` record (its ``runs``), in the record's order:
    the seeds that reached the target, how many ran, and the median env steps and seconds to it
    over those that reached it (None when none did)."""
    variants: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        variants.setdefault(run["variant"], []).append(run)
    rows = []
    for name, group in variants.items():
        reached = [r for r in group if r["steps_to_target"] is not None]
        rows.append(
            {
                "variant": name,
                "reached": len(reached),
                "seeds": len(group),
                "median_steps": median_or_none([r["steps_to_target"] for r in reached]),
                "median_seconds": median_or_none([r["seconds_to_target"] for r in reached]),
            }
        )
    return rows


def ideas_figure(
    runs: Sequence[dict[str, Any]], *, target: float | None = None, title: str | None = None
) -> go.Figure:
    """Return of the actor exploring least against env steps, one colour per variant of a
    ``benchmarks/apex_ideas.py`` record and one line per seed, the target dashed: the paper's
    design against each idea switched off (Horgan et al. 2018, Sec. 3)."""
    figure = go.Figure()
    names = list(dict.fromkeys(run["variant"] for run in runs))
    for name, color in zip(names, itertools.cycle(IDEA_COLORS)):
        for index, run in enumerate(r for r in runs if r["variant"] == name):
            points = [p for p in run["curve"] if p["mean_return"] is not None]
            figure.add_trace(
                go.Scatter(
                    x=[p["env_steps"] for p in points],
                    y=[p["mean_return"] for p in points],
                    mode="lines",
                    name=name,
                    legendgroup=name,
                    showlegend=index == 0,
                    line=dict(color=color, width=1.5),
                    hovertext=f"{name}, seed {run['seed']}",
                )
            )
    if target is not None:
        figure.add_hline(y=target, line_dash="dash", line_color="#7f7f7f")
    figure.update_xaxes(title_text="env steps (all actors)")
    figure.update_yaxes(title_text="return, actor exploring least")
    figure.update_layout(title=title, height=380)
    return figure
