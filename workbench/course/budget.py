"""Run sizes for the whole course, chosen in one place.

``WORKBENCH_BUDGET=ci`` (the default) keeps every notebook and test to minutes on 2 CPU cores;
``full`` makes the same cells real experiments. Notebooks and tests read sizes from here only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

BUDGETS = ("ci", "full")


@dataclass(frozen=True)
class Budget:
    name: str
    measure_seconds: float
    """Seconds per throughput measurement (notebooks 01-02)."""
    env_counts: tuple[int, ...]
    """num_envs values swept in the many-simulators study (notebook 01)."""
    sampler_envs: int
    """Envs per sampler in the side-by-side comparison (notebook 02)."""
    sampler_horizon: int
    """Steps per collect (T of the [T, B] rollout) in notebook 02."""
    sampler_workers: int
    """Worker processes for the parallel samplers in notebook 02."""
    repeats: int
    """Short measurements per figure; the best is kept (a busy machine only ever slows one)."""
    inference_batch_sizes: tuple[int, ...]
    """Batch sizes of the inference study (notebook 01)."""
    live_steps: int
    """Env steps of the live, steerable PPO CartPole run (notebooks 03-04)."""
    learner_counts: tuple[int, ...]
    """Data-parallel learner counts of notebook 04's scaling study (1: one learner, no group)."""
    learner_scaling_updates: int
    """Timed PPO updates per learner count in that study (one more runs untimed first)."""
    batch_shapes: tuple[tuple[int, int], ...]
    """``(B, T)`` of the PPO batch-size study (notebook 03); B x T is the batch."""
    batch_study_steps: int
    """Env steps per run of the PPO batch-size study."""
    lr_rules_shapes: tuple[tuple[int, int], ...]
    """(B, T) of notebook 03's learning-rate rules study (the recipe's own 8 x 32 needs no rule)."""
    lr_rules_seeds: tuple[int, ...]
    """Seeds of that study, each rule and batch once per seed."""
    lr_rules_steps: int
    """Env-step budget of each run of that study (it stops at the recipe's target)."""
    a2c_batch_shapes: tuple[tuple[int, int], ...]
    """``(B, T)`` of the A2C batch-size study (notebook 03)."""
    a2c_study_steps: int
    """Env steps per run of the A2C batch-size study."""
    async_iterations: int
    """Iterations of PPO on Pong per mode in the sync-against-async comparison (notebook 04)."""
    dqn_variant_steps: int
    """Env steps per member of the DQN family on CartPole (notebook 05)."""
    dqn_batch_sizes: tuple[int, ...]
    """Batch sizes of the large-batch DQN study (notebook 05)."""
    dqn_batch_steps: int
    """Env steps per run of the large-batch DQN study."""
    apex_actor_counts: tuple[int, ...]
    """Actor counts of the Ape-X throughput study (notebook 06)."""
    apex_measure_seconds: float
    """Seconds measured per actor count in that study, after each run's warm-up."""
    apex_over_time_counts: tuple[int, ...]
    """Actor counts of notebook 06's return-against-wall-time study (Ape-X's Fig. 5 question)."""
    apex_over_time_seconds: float
    """Wall seconds of each run of that study."""
    apex_target_return: float
    """Return the Ape-X CartPole run of notebook 06 must reach (its actor exploring least)."""
    apex_max_seconds: float
    """Wall-clock limit of that run."""
    apex_live_seconds: float
    """Wall-clock limit of notebook 06's live Ape-X run (its cells stop it sooner)."""
    apex_pong_live_seconds: float
    """Wall-clock bound of notebook 06's live Pong continuation: its claim is in env steps
    (``studies.pong_studies.level_claim``), so this only stops a machine too slow for it."""
    seed_actor_counts: tuple[int, ...]
    """Actor counts of notebook 07's SEED-against-IMPALA throughput plot (Pong, NatureCNN)."""
    seed_measure_seconds: float
    """Seconds each point of that plot is measured."""
    seed_latency_actors: int
    """Actors of notebook 07's sweep of the server's batch size and timeout (Pong)."""
    seed_latency_batches: tuple[int, ...]
    """``max_batch_size`` values of that sweep (each at most ``seed_latency_actors``)."""
    seed_latency_timeouts: tuple[float, ...]
    """Server timeouts of that sweep, seconds."""
    seed_vtrace_steps: int
    """Env-step budget of notebook 07's V-trace run on CartPole through the server."""
    seed_vtrace_target: float
    """The return notebook 07 asserts that run reaches: ``ci`` 200, which every recorded seed of
    the ``seed-vtrace-cartpole`` recipe passed long before its 475 (``data/``), so CI's check is
    half the run; ``full`` the recipe's 475."""
    seed_r2d2_steps: int
    """Env-step budget of notebook 08's memory experiment (R2D2 against feed-forward DQN; R2D2's
    recipe reaches 300 within 80k; DQN then runs the env steps R2D2 took)."""
    r2d2_drift_updates: int
    """Learner updates between the actors' network and the learner's in notebook 08's study of
    R2D2's four state strategies (the stored states' staleness)."""
    seed_live_seconds: float
    """Wall-clock limit of notebook 08's live SEED run (its cells stop it sooner)."""
    watch_fps: float
    """Frames per second of notebook 09's live game (``lab.watch``): 60 for a reader, four times
    real time; faster under the tests, where no one watches."""
    pong_random_games: int
    """Games of random play, the score notebook 09's agents must beat."""
    pong_eval_games: int
    """Games the recorded ``ppo-pong-fast`` agent plays again in notebook 09 (10 in ``data/``)."""
    atari_live_from: str | None
    """``ci``: the ``data/`` checkpoint notebook 09's live ``ppo-pong-fast`` run continues: a
    recorded run stopped where its return first reached -18, the foot of Pong's climb (its first
    ~500k env steps show nothing); its claim is sized to the machine from the record of that
    checkpoint's continuations (``studies.pong_studies.live_claim``). ``full``: None, the run starts
    from scratch."""
    atari_live_seconds: float | None
    """``ci``: the wall seconds that live run's env steps are sized to, at the speed its first
    ``atari_live_measure_seconds`` measured (a slow CPU runs fewer steps for a lower claim, never
    fewer than the claim needs). ``full``: None (the target and step limit below)."""
    atari_live_measure_seconds: float
    """Seconds of the live run's start that measure this machine's env steps per second."""
    atari_live_target: float | None
    """``full``: the return the from-scratch live run must reach, the recipe's 18 (``ci``: None,
    the claim comes from the recorded continuations)."""
    atari_live_steps: int | None
    """``full``: env-step limit of that live run (it stops at the target); ``ci``: None."""
    seed_pong_live_seconds: float
    """The wall seconds notebook 07's live ``seed-vtrace-pong-fast`` run is sized to, as
    ``atari_live_seconds`` sizes notebook 09's: it continues ``data/seed_vtrace_pong_fast_climb.pt``
    at both budgets, never fewer env steps than its claim needs nor more than were recorded.
    ``ci`` 80 s, ``full`` 120 s: on a CPU fast enough to afford more than the claim's least
    steps, ``ci`` claims less and ends sooner; a slow one runs the least at both."""
    scale_out_target: float
    """Return SEED V-trace on CartPole must reach on notebook 10's simulated cluster."""
    scale_out_seconds: float
    """Wall-clock limit of each live run of notebook 10 (SEED and Ape-X on the cluster)."""
    scale_out_nodes: tuple[int, ...]
    """Simulated node counts of notebook 10's throughput study."""
    scale_out_layouts: tuple[tuple[int, int], ...]
    """(actors, envs per actor) of that study."""
    scale_out_measure_seconds: float
    """Seconds measured per point of that study, after its warm-up."""


_BUDGETS = {
    "ci": Budget(
        name="ci",
        measure_seconds=1.0,
        env_counts=(1, 8, 16),
        sampler_envs=8,
        sampler_horizon=16,
        sampler_workers=2,
        repeats=3,
        inference_batch_sizes=(1, 8, 32),
        live_steps=60_000,
        learner_counts=(1, 2),
        learner_scaling_updates=2,
        batch_shapes=((8, 32), (32, 32), (128, 32)),
        batch_study_steps=120_000,
        lr_rules_shapes=((128, 32),),
        lr_rules_seeds=(0,),
        lr_rules_steps=120_000,
        a2c_batch_shapes=((8, 5), (32, 5), (128, 5)),
        a2c_study_steps=60_000,
        async_iterations=4,
        dqn_variant_steps=8_000,
        dqn_batch_sizes=(64, 2048),
        dqn_batch_steps=12_000,
        apex_actor_counts=(1, 4),
        apex_measure_seconds=3.0,
        apex_over_time_counts=(4,),
        apex_over_time_seconds=20.0,
        apex_target_return=200.0,
        apex_max_seconds=300.0,
        apex_live_seconds=120.0,
        apex_pong_live_seconds=900.0,
        seed_actor_counts=(1, 4),
        seed_measure_seconds=2.0,
        seed_latency_actors=4,
        seed_latency_batches=(1, 4),
        seed_latency_timeouts=(0.0, 0.002),
        seed_vtrace_steps=300_000,
        seed_vtrace_target=200.0,
        seed_r2d2_steps=80_000,
        r2d2_drift_updates=50,
        seed_live_seconds=40.0,
        watch_fps=600.0,
        pong_random_games=16,
        pong_eval_games=2,
        atari_live_from="ppo_pong_fast_climb.pt",
        atari_live_seconds=120.0,
        atari_live_measure_seconds=30.0,
        atari_live_target=None,
        atari_live_steps=None,
        seed_pong_live_seconds=80.0,
        scale_out_target=200.0,
        scale_out_seconds=150.0,
        scale_out_nodes=(2,),
        scale_out_layouts=((2, 4), (4, 1)),
        scale_out_measure_seconds=3.0,
    ),
    "full": Budget(
        name="full",
        measure_seconds=5.0,
        env_counts=(1, 2, 4, 8, 16, 32, 64),
        sampler_envs=32,
        sampler_horizon=64,
        sampler_workers=2,
        repeats=3,
        inference_batch_sizes=(1, 8, 32, 128),
        live_steps=300_000,
        learner_counts=(1, 2, 4),
        learner_scaling_updates=5,
        batch_shapes=((8, 32), (32, 32), (128, 32), (512, 32)),
        batch_study_steps=500_000,
        lr_rules_shapes=((32, 32), (128, 32), (512, 32)),
        lr_rules_seeds=(0, 1, 2),
        lr_rules_steps=500_000,
        a2c_batch_shapes=((8, 5), (32, 5), (128, 5), (512, 5)),
        a2c_study_steps=400_000,
        async_iterations=20,
        dqn_variant_steps=100_000,
        dqn_batch_sizes=(32, 64, 128, 256, 512, 1024, 2048),
        dqn_batch_steps=100_000,
        apex_actor_counts=(1, 2, 4, 8, 16),
        apex_measure_seconds=20.0,
        apex_over_time_counts=(1, 2, 4, 8),
        apex_over_time_seconds=240.0,
        apex_target_return=475.0,
        apex_max_seconds=900.0,
        apex_live_seconds=900.0,
        apex_pong_live_seconds=900.0,
        seed_actor_counts=(1, 2, 4, 8, 16),
        seed_measure_seconds=10.0,
        seed_latency_actors=8,
        seed_latency_batches=(1, 2, 4, 8),
        seed_latency_timeouts=(0.0, 0.001, 0.002, 0.005),
        seed_vtrace_steps=300_000,
        seed_vtrace_target=475.0,
        seed_r2d2_steps=200_000,
        r2d2_drift_updates=200,
        seed_live_seconds=600.0,
        watch_fps=60.0,
        pong_random_games=32,
        pong_eval_games=10,
        atari_live_from=None,
        atari_live_seconds=None,
        atari_live_measure_seconds=30.0,
        atari_live_target=18.0,
        atari_live_steps=4_000_000,
        seed_pong_live_seconds=120.0,
        scale_out_target=475.0,
        scale_out_seconds=600.0,
        scale_out_nodes=(1, 2, 3),
        scale_out_layouts=((2, 8), (4, 4), (8, 1)),
        scale_out_measure_seconds=10.0,
    ),
}


def budget_name() -> str:
    """The active budget's name, from ``WORKBENCH_BUDGET`` (default ``ci``)."""
    name = os.environ.get("WORKBENCH_BUDGET", "ci").strip().lower()
    if name not in _BUDGETS:
        raise ValueError(
            f"WORKBENCH_BUDGET={name!r} is not a budget; set it to one of {', '.join(BUDGETS)}."
        )
    return name


def current() -> Budget:
    """The sizes for the active budget."""
    return _BUDGETS[budget_name()]


def named(name: str) -> Budget:
    """The sizes of budget ``name`` (``ci`` or ``full``), whichever is active."""
    if name not in _BUDGETS:
        raise ValueError(f"{name!r} is not a budget; choose one of {', '.join(BUDGETS)}.")
    return _BUDGETS[name]
