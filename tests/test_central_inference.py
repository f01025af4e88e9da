"""The SEED-against-IMPALA study (``workbench.measure.central_inference``) on tiny settings: both
sides run and report rates and latencies, the IMPALA actors run their own copy of the model (and the
SEED actors none), and nothing outlives a measurement, even one that is interrupted. No timing
is asserted: the figures belong to ``benchmarks/central_inference.py``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from processes import live_children, wait_gone

from workbench.measure import central_inference as study
from workbench.seed.server import InferenceServer, SampledPolicy
from workbench.seed.transports.local import LocalActors

ENV = "CartPole-v1"


def maps_torch(pid: int) -> bool:
    """Whether process ``pid`` has torch's library mapped (it imported torch)."""
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_study_measures_both_sides_and_leaves_no_process():
    before = live_children()
    seen: list[study.ThroughputResult] = []
    rows = study.central_inference_study(
        (1, 2), seconds=0.5, env_id=ENV, warmup=0.2, progress=seen.append
    )
    assert [r.num_actors for r in rows] == [1, 2]
    assert sorted((r.system, r.num_actors) for r in seen) == [
        ("impala", 1),
        ("impala", 2),
        ("seed", 1),
        ("seed", 2),
    ]
    for row in rows:
        for result in (row.seed, row.impala):
            assert result.num_actors == row.num_actors
            assert result.steps > 0 and result.steps_per_second > 0 and result.seconds >= 0.5
            assert result.cpu_ms_per_step > 0 and result.actor_rss_mb > 0
            assert 0 < result.latency["latency_p50_ms"] <= result.latency["latency_p99_ms"]
        assert row.seed.system == "seed" and row.impala.system == "impala"
        assert 1.0 <= row.seed.latency["mean_batch_size"] <= row.num_actors
        assert row.seed.settings["max_batch_size"] == row.num_actors
        assert row.ratio == pytest.approx(row.seed.steps_per_second / row.impala.steps_per_second)
        assert len(row.seed_passes) == len(row.impala_passes) == 1
        assert row.as_dict()["seed_vs_impala"] == row.ratio
    assert study.ratio(rows) == rows[1].ratio and study.ratio(rows, 1) == rows[0].ratio
    assert wait_gone(list(live_children() - before)) == []


def test_impala_actor_runs_its_own_model_and_seed_actors_none():
    # A policy that always pushes right: only a process running this model chooses action 1 every
    # time.
    model = study.make_model(ENV)
    with torch.no_grad():
        model.policy_head.weight.zero_()
        model.policy_head.bias.copy_(torch.tensor([-30.0, 30.0]))
    before = live_children()
    with study.ImpalaActors(ENV, 2, model) as actors:
        pids = actors.pids
        wait_for(lambda: (actors.arrays["steps"] >= 50).all())
        actors.check()
        counts = actors.arrays["actions"].copy()
        assert all(maps_torch(pid) for pid in pids)
    assert counts[:, 0].sum() == 0 and (counts[:, 1] >= 50).all()
    assert wait_gone(pids) == []

    server = InferenceServer(SampledPolicy(model), max_batch_size=2, timeout=0.002)
    with LocalActors(server, ENV, 2) as seed_actors:
        wait_for(lambda: seed_actors.steps >= 20)
        seed_pids = seed_actors.pids
        assert len(seed_pids) == 2 and not any(maps_torch(pid) for pid in seed_pids)
    assert wait_gone(seed_pids) == []
    assert wait_gone(list(live_children() - before)) == []


@pytest.mark.parametrize(
    "measure", [study.measure_seed, study.measure_impala], ids=["seed", "impala"]
)
def test_an_interrupted_measurement_leaves_no_process(measure, monkeypatch):
    started: list[int] = []

    def interrupted(*args, **kwargs):
        started.extend(live_children() - before)
        raise KeyboardInterrupt  # Ctrl-C while the actors step

    monkeypatch.setattr(study, "measure_window", interrupted)
    before = live_children()
    with pytest.raises(KeyboardInterrupt):
        measure(ENV, 2, 1.0)
    assert len(started) >= 2  # the actors were running when the interrupt came
    assert wait_gone(started) == [] and wait_gone(list(live_children() - before)) == []


def test_a_window_stays_open_until_every_actor_has_stepped_in_it():
    # Two actors starved through the window's first 0.3 s: a 0.05 s window would count 0 steps.
    opened: list[float] = []

    def read_steps() -> int:
        if not opened:
            return 10  # warmed up: more than 5 steps an actor
        return 10 + (2 if time.perf_counter() - opened[0] > 0.3 else 0)

    steps, window, _, _ = study.measure_window(
        read_steps,
        lambda: None,
        2,
        0.05,
        0.0,
        time.perf_counter(),
        [],
        on_open=lambda: opened.append(time.perf_counter()),
    )
    assert steps == 2 and window > 0.3


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="num_actors"):
        study.measure_seed(ENV, 0, 1.0)
    with pytest.raises(ValueError, match="seconds"):
        study.measure_impala(ENV, 1, 0.0)
    with pytest.raises(ValueError, match="actor_counts"):
        study.central_inference_study((1, 0), 1.0, ENV)
    with pytest.raises(ValueError, match="continuous"):
        study.make_model("Pendulum-v1")
    with pytest.raises(ValueError, match="no rows"):
        study.ratio([])
    assert (
        study.SeedSettings().timeout_for(4) == 0.002 and study.SeedSettings().timeout_for(8) == 0.0
    )
    assert study.SeedSettings(timeout=0.005).timeout_for(16) == 0.005
    assert study.SeedSettings(max_batch_size=4).batch_size_for(8) == 4
    assert study.SeedSettings().batch_size_for(3) == 3


# --- SEED's transports side by side (measure.seed_transports) -------------------------------------
# (What a request costs on the Ray transport beyond serving: tests/test_seed_ray.py, on that
# module's Ray instance.)


def test_the_local_transport_is_measured_with_several_envs_per_actor():
    from workbench.measure.seed_transports import measure_transport

    before = live_children()
    result = measure_transport("local", ENV, 2, 3, seconds=0.5, warmup=0.2)
    assert (result.transport, result.num_actors, result.envs_per_actor) == ("local", 2, 3)
    assert result.layout == "2x3" and result.steps > 0 and result.steps_per_second > 0
    assert result.settings["max_batch_size"] == 6  # a batch may hold every env
    assert 1.0 <= result.mean_batch_size <= 6 and result.cpu_ms_per_step > 0
    assert result.round_trip_p50_ms is None and result.request_overhead_ms is None
    assert wait_gone(list(live_children() - before)) == []


def test_an_asynchronous_layout_is_measured_and_named_with_its_batch():
    from workbench.measure.seed_transports import measure_transport

    settings = study.SeedSettings(actor_batch=2)
    result = measure_transport(
        "local", "ALE/Pong-v5", 1, 4, seconds=0.5, warmup=0.2, settings=settings
    )
    assert result.layout == "1x4/2" and result.settings["actor_batch"] == 2
    # one request carries the two envs whose step ended, never all four at once
    assert result.steps > 0 and 1.0 <= result.mean_batch_size <= 2.0


def test_ray_env_actors_refuse_an_actor_batch():
    from workbench.measure.seed_transports import measure_transport

    with pytest.raises(ValueError, match="actor_batch is for the local transport"):
        measure_transport(
            "ray", "ALE/Pong-v5", 1, 4, 1.0, settings=study.SeedSettings(actor_batch=2)
        )


def test_a_transport_measurement_checks_its_arguments():
    from workbench.measure.seed_transports import measure_transport

    with pytest.raises(ValueError, match="transport must be one of"):
        measure_transport("grpc", ENV, 1, 1, 1.0)
    with pytest.raises(ValueError, match="envs_per_actor"):
        measure_transport("local", ENV, 1, 0, 1.0)
