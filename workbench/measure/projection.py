"""The performance model on the papers' machines, beside the throughputs the papers published.

The model (``measure.performance_model``) is calibrated on the machine at hand; a projection
keeps what one core and one accelerator cost and changes how many there are, and where a paper's
environment stack is known to have been slower per core than ale_py's C++ vector env, it takes the
published per-core figure of that stack instead. Every input that is not measured here is a
published figure with its source; every configuration the papers do not state is an assumption,
written beside the row.

Frames are raw emulator frames, four per env step (frameskip 4), as the papers count them.

Sources (full texts read through stored copies; the exact cells are quoted in ``PUBLISHED``):

* CuLE: Dalton, Frosio & Garland, *Accelerating Reinforcement Learning through GPU Atari
  Emulation*, NeurIPS 2020, arXiv:1907.08467, Table 1 ("FPS are taken from the corresponding
  papers") and Sec. 4 (OpenAI Gym's peak emulation rate on a 12-core i7-5930K, "18K").
* Sample Factory: Petrenko et al., ICML 2020, arXiv:2006.11751, Table 1 (peak frames/s of several
  systems on one machine: a 36-core CPU and one RTX 2080 Ti, Atari Breakout at frameskip 4).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workbench.measure import performance_model as model
from workbench.measure.costs import MachineCosts, load_record, machine_costs

__all__ = [
    "FRAMESKIP",
    "Published",
    "Scenario",
    "SCENARIOS",
    "on_machine",
    "projection_rows",
    "recorded_costs",
]

FRAMESKIP = 4
"""Raw frames per env step in every figure below."""

GYM_FRAMES_PER_CORE = 18_000 / 12
"""OpenAI Gym's Atari emulation on the CPU, 2018-2019: peak 18K raw frames/s on a 12-core
i7-5930K (CuLE, Sec. 4: "the peak FPS for OpenAI Gym (18K)", System I of its Table 2): the
per-core cost of the environment stack Stooke & Abbeel, Ape-X and IMPALA stepped."""

SAMPLE_FACTORY_FRAMES_PER_CORE = 181_740 / 36
"""Sample Factory's "pure simulation" of Atari on its System #2 (a 36-core CPU): 181,740 raw
frames/s (Table 1), the per-core cost of the env stack its comparison ran."""


@dataclass(frozen=True)
class Published:
    """A throughput a paper (or a paper measuring it) published, with its words."""

    system: str
    hardware: str
    frames_per_second: float
    source: str
    quote: str


@dataclass(frozen=True)
class Scenario:
    """How the model meets one published figure: the machine (cores, accelerators, the env's
    per-core rate and where it comes from) and the system's layout, with what is assumed."""

    published: Published
    cores: int
    accelerators: int
    env_frames_per_core: float
    env_source: str
    predict: Callable[[MachineCosts], model.Prediction]
    assumptions: str


def on_machine(
    costs: MachineCosts, cores: int, accelerators: int, env_frames_per_core: float
) -> MachineCosts:
    """``costs`` with ``cores`` cores and ``accelerators`` accelerators, stepping an env stack
    that makes ``env_frames_per_core`` raw frames/s on one core."""
    step = FRAMESKIP / env_frames_per_core
    return replace(
        costs.with_hardware(cores=cores, accelerators=accelerators),
        env_seconds=step,
        env_all_seconds=step / cores,
        env_one_seconds=step,
    )


def _synchronous(sampling: model.Prediction, learning_seconds_per_step: float) -> float:
    """Env steps/s when sampling and learning take turns (a synchronous learner)."""
    return 1.0 / (1.0 / sampling.env_steps_per_second + learning_seconds_per_step)


def _stooke(costs: MachineCosts) -> model.Prediction:
    # The alternating GPU sampler on every core, then A2C's update on 8 GPUs (data-parallel).
    envs = 8 * 32
    sampling = model.alternating_sampler(costs, envs, costs.cores, on_accelerator=True)
    horizon = 5
    update = costs.accelerator.update(envs * horizon / costs.accelerators)
    rate = _synchronous(sampling, update / (envs * horizon))
    return replace(sampling, system="stooke", env_steps_per_second=rate)


def _apex(costs: MachineCosts) -> model.Prediction:
    return model.apex(costs, 360, minibatch=512, learner_on_accelerator=True)


def _impala(costs: MachineCosts) -> model.Prediction:
    return model.impala_actors(costs, costs.cores)


def _seed(costs: MachineCosts) -> model.Prediction:
    return model.seed(costs, costs.cores - 2, on_accelerator=True)


SCENARIOS: list[Scenario] = [
    Scenario(
        Published(
            "Stooke & Abbeel 2018 (A2C / DQN)",
            "DGX-1: 40 CPU cores, 8 GPUs",
            35_000,
            "CuLE, Table 1, row 'Stooke (A2C / DQN) [16]'",
            "FPS 35K; Resources: 40 CPUs, 8 GPUs (DGX-1)",
        ),
        40,
        8,
        GYM_FRAMES_PER_CORE,
        "OpenAI Gym, CuLE Sec. 4",
        _stooke,
        "alternating sampler, 256 envs on 40 cores, inference on the GPUs; A2C's update of "
        "256 x 5 samples split over 8 GPUs, taking turns with sampling",
    ),
    Scenario(
        Published(
            "Ape-X DQN (Horgan et al. 2018)",
            "376 cores, 1 GPU",
            50_000,
            "CuLE, Table 1, row 'Ape-X DQN [7]' (data from the Ape-X paper)",
            "FPS 50K; Resources: 376 cores, 1 GPU",
        ),
        376,
        1,
        GYM_FRAMES_PER_CORE,
        "OpenAI Gym, CuLE Sec. 4",
        _apex,
        "360 actors of one env each, batch-1 inference on their own core; the learner on the "
        "GPU at minibatch 512, free-running (it does not take the actors' cores)",
    ),
    Scenario(
        Published(
            "IMPALA (Espeholt et al. 2018)",
            "100-200 cores, 1 GPU",
            250_000,
            "CuLE, Table 1, row 'IMPALA (A2C + V-Trace) [5]'",
            "FPS 250K; Resources: 100-200 cores, 1 GPU",
        ),
        200,
        1,
        GYM_FRAMES_PER_CORE,
        "OpenAI Gym, CuLE Sec. 4",
        _impala,
        "one actor per core, batch-1 inference on it; the upper end of the cores stated",
    ),
    Scenario(
        Published(
            "SEED RL V-trace, measured by Sample Factory",
            "36-core CPU, 1 RTX 2080 Ti",
            39_726,
            "Sample Factory, Table 1, Atari column, row 'SeedRL V-trace'",
            "39726 (21.9%) of pure simulation's 181740",
        ),
        36,
        1,
        SAMPLE_FACTORY_FRAMES_PER_CORE,
        "Sample Factory, Table 1, pure simulation",
        _seed,
        "34 env-only actors and one server on the GPU (two cores for the server and learner)",
    ),
    Scenario(
        Published(
            "DeepMind IMPALA, measured by Sample Factory",
            "36-core CPU, 1 RTX 2080 Ti",
            9_961,
            "Sample Factory, Table 1, Atari column, row 'DeepMind IMPALA'",
            "9961 (5.3%)",
        ),
        36,
        1,
        SAMPLE_FACTORY_FRAMES_PER_CORE,
        "Sample Factory, Table 1, pure simulation",
        _impala,
        "one actor per core, batch-1 inference on it",
    ),
]
"""Each published figure and how the model meets it."""


def projection_rows(costs: MachineCosts) -> list[dict[str, Any]]:
    """For every scenario: the published frames/s, the model's, their ratio and the model's
    bottleneck, from this machine's per-core and per-accelerator costs (``costs`` must carry an
    accelerator's: ``machine_costs(..., gpu_record=...)``)."""
    if costs.accelerator is None:
        raise ValueError(
            "a projection needs an accelerator's costs: give machine_costs a GPU record "
            "(data/component_costs_cuda_h100.json)"
        )
    rows = []
    for scenario in SCENARIOS:
        machine = on_machine(
            costs, scenario.cores, scenario.accelerators, scenario.env_frames_per_core
        )
        prediction = scenario.predict(machine)
        predicted = prediction.env_steps_per_second * FRAMESKIP
        rows.append(
            {
                "system": scenario.published.system,
                "hardware": scenario.published.hardware,
                "published_fps": scenario.published.frames_per_second,
                "predicted_fps": predicted,
                "predicted_vs_published": predicted / scenario.published.frames_per_second,
                "bottleneck": prediction.bottleneck,
                "source": scenario.published.source,
                "quote": scenario.published.quote,
                "env_frames_per_core": scenario.env_frames_per_core,
                "env_source": scenario.env_source,
                "assumptions": scenario.assumptions,
            }
        )
    return rows


def recorded_costs(data_dir: "str | Path", network: str = "nature-84") -> MachineCosts:
    """This machine's costs as ``data/performance_model_cpu.json`` recorded them (its first pass)
    with a lent H100's (``data/component_costs_cuda_h100.json``), for ``network``: what the
    notebooks' "on the papers' machines" cells project from."""
    data_dir = Path(data_dir)
    cpu = load_record(data_dir / "performance_model_cpu.json")["passes"][0]["costs"]
    gpu = load_record(data_dir / "component_costs_cuda_h100.json")
    return machine_costs(cpu, network, gpu_record=gpu)
