"""Hold a run of one kind until killed, checkpointing every second: the subject of the resume
after SIGKILL tests (test_checkpoints.py).

``python hold_checkpointed_run.py KIND RUNS_DIR`` (KIND: ``run``, ``apex`` or ``seed``) starts a
small CartPole run named ``killed`` in a background thread, as a notebook does, with
``checkpoint_seconds=1``; once a timed checkpoint after its first update is on disk it prints
``{"holder": pid, "children": [pids]}`` as one JSON line, then sleeps while the run goes on.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace


def make_run(kind: str, runs_dir: str):
    if kind == "run":
        from workbench.learners import PPO, PPOConfig
        from workbench.models import ActorCritic
        from workbench.runs import Run, RunConfig, RunSettings

        config = RunConfig(
            total_steps=10**9, runs_dir=runs_dir, name="killed", checkpoint_seconds=1.0
        )
        settings = RunSettings(num_workers=1, num_envs=4, horizon=16, num_minibatches=2)
        algo = PPO(ActorCritic((4,), 2), PPOConfig(num_epochs=2, num_minibatches=2))
        return Run("CartPole-v1", algo, config=config, settings=settings)
    if kind == "apex":
        from workbench.apex import Apex, ApexConfig
        from workbench.learners import DQNConfig

        config = ApexConfig(
            env_id="CartPole-v1",
            learner=DQNConfig(batch_size=32),
            model_options=dict(hidden=(32, 32)),
            num_actors=1,
            learning_starts=200,
        )
        return Apex(
            config, runs_dir=runs_dir, name="killed", log_interval=0.3, checkpoint_seconds=1.0
        )
    if kind == "seed":
        from workbench.seed import SEED_RECIPES, Seed

        config = replace(SEED_RECIPES["seed-vtrace-cartpole"].config, num_actors=2)
        return Seed(
            config, runs_dir=runs_dir, name="killed", log_interval=0.3, checkpoint_seconds=1.0
        )
    raise SystemExit(f"unknown kind {kind!r}: run, apex or seed")


def main() -> None:
    kind, runs_dir = sys.argv[1], sys.argv[2]
    run = make_run(kind, runs_dir).start()
    while not any(  # a checkpoint of a run that has learned something
        row.get("event") == "checkpoint" and row["charts/updates"] > 0 for row in run.events
    ):
        if run.status in ("failed", "finished", "stopped"):
            raise SystemExit(f"the run ended ({run.status}): {run.error}")
        time.sleep(0.05)
    import psutil

    children = [p.pid for p in psutil.Process().children(recursive=True)]
    print(json.dumps({"holder": os.getpid(), "children": children}), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
