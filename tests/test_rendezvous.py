"""Specifications for data-parallel learners across machines (``learners.rendezvous``,
``runs.distributed``): processes that meet through torch.distributed's standard environment
(``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, as torchrun sets them), here two
processes joining over a TCP store on 127.0.0.1 as two machines would.

The key property is Stooke & Abbeel's (2018, Sec. 3.2), as for ``DataParallelLearner``: two
replicas, each updating on its own half of the environments, end with the parameters one learner
reaches on the joined batch; and a replica that started from other weights takes rank 0's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_data_parallel import PPO_CONFIG, cartpole_like_rollout, make_model

from workbench import system
from workbench.learners import PPO, Rendezvous

SCRIPTS = Path(__file__).parent / "scripts"
TIMEOUT = 180  # seconds for two processes to import torch, meet and train on a busy machine


def environment(rank: int, world_size: int, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(world_size),
        "RANK": str(rank),
        "OMP_NUM_THREADS": "1",
    }


def run_group(command: list[str], world_size: int = 2) -> list[subprocess.CompletedProcess]:
    """``python command`` once per rank (``{rank}`` in an argument becomes the rank), every rank
    with its own environment; all must succeed."""
    port = system.free_port()
    processes = [
        subprocess.Popen(
            [sys.executable, *(part.replace("{rank}", str(rank)) for part in command)],
            env=environment(rank, world_size, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world_size)
    ]
    results = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=TIMEOUT)
            results.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    finally:
        for process in processes:
            process.kill()
    for rank, result in enumerate(results):
        assert result.returncode == 0, f"rank {rank} failed:\n{result.stderr[-3000:]}"
    return results


def test_rendezvous_reads_torchruns_variables():
    found = Rendezvous.from_environment(
        {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "4", "RANK": "3"}
    )
    assert found == Rendezvous("10.0.0.1", 29500, 4, 3, local_rank=0)


def test_missing_variables_name_torchrun():
    with pytest.raises(RuntimeError, match="MASTER_PORT, RANK not set: start each learner"):
        Rendezvous.from_environment({"MASTER_ADDR": "10.0.0.1", "WORLD_SIZE": "2"})


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"RANK": "2"}, "RANK must be in 0..WORLD_SIZE-1"),
        ({"RANK": "-1"}, "RANK must be a non-negative integer"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT must be a TCP port"),
    ],
)
def test_a_bad_variable_is_named(variables, message):
    environ = {"MASTER_ADDR": "h", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "0"}
    with pytest.raises(ValueError, match=message):
        Rendezvous.from_environment({**environ, **variables})


def test_two_replicas_joined_over_tcp_update_as_one_learner_on_the_joined_batch(tmp_path):
    """Each replica (tests/scripts/rendezvous_replica.py) makes two PPO updates on its half of the
    environments; rank 1 started from other weights."""
    run_group([str(SCRIPTS / "rendezvous_replica.py"), str(tmp_path / "rank{rank}.pt")])
    rank0, rank1 = (torch.load(tmp_path / f"rank{rank}.pt") for rank in (0, 1))
    single = PPO(make_model(0), PPO_CONFIG, seed=0)
    for seed in (1, 2):
        single.update(cartpole_like_rollout(make_model(0), seed))
    for name, expected in single.model.state_dict().items():
        assert torch.equal(rank0[name], rank1[name]), f"the replicas differ in {name}"
        torch.testing.assert_close(rank0[name], expected, atol=1e-5, rtol=0)


def test_a_recipe_runs_as_two_replicas_that_stay_identical(tmp_path):
    """``python -m workbench.runs.distributed``, as torchrun would start it on two machines: both
    replicas step their own CartPoles, make the same updates and end with the same weights."""
    command = ["-m", "workbench.runs.distributed", "--recipe", "ppo-cartpole"]
    command += ["--env-steps", "2560", "--runs-dir", str(tmp_path)]
    run_group([*command, "--report", str(tmp_path / "report{rank}.json")])
    reports = [tmp_path / f"report{rank}.json" for rank in (0, 1)]
    first, second = (json.loads(path.read_text()) for path in reports)
    assert first["updates"] == second["updates"] == 10  # 2,560 steps / (8 envs x 32 steps)
    assert first["parameter_sum"] == second["parameter_sum"]
    assert first["parameter_norm"] == second["parameter_norm"]
    assert (tmp_path / "ppo-cartpole-rank0").is_dir() and (tmp_path / "ppo-cartpole-rank1").is_dir()
