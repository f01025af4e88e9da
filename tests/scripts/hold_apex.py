"""Hold an Ape-X run (local transport) until killed: the subject of test_apex_orphans.py.

``python hold_apex.py`` starts a run in a background thread (as a notebook does), waits until its
actors feed the replay, prints ``{"holder": pid, "actors": [pids]}`` as one JSON line, then sleeps
while the run goes on. The run's folder goes to ``$WORKBENCH_RUNS_DIR`` (else a temporary one).
"""

from __future__ import annotations

import json
import os
import tempfile
import time


def fed(apex) -> bool:
    """Whether the replay has taken a block (the last metric row counts some transitions)."""
    rows = [row for row in apex.metrics if "event" not in row]
    return bool(rows) and rows[-1]["apex/transitions_added"] > 0


def main() -> None:
    from workbench.apex import Apex, ApexConfig
    from workbench.learners import DQNConfig

    config = ApexConfig(
        env_id="CartPole-v1",
        learner=DQNConfig(batch_size=32),
        model_options=dict(hidden=(32, 32)),
        num_actors=2,
        learning_starts=200,
    )
    runs_dir = os.environ.get("WORKBENCH_RUNS_DIR") or tempfile.mkdtemp(prefix="hold-apex-")
    apex = Apex(config, runs_dir=runs_dir, log_interval=0.5).start(seconds=3600)
    while not fed(apex):
        if apex.status in ("failed", "finished", "stopped"):
            raise SystemExit(f"the Ape-X run ended ({apex.status}): {apex.error}")
        time.sleep(0.2)
    print(
        json.dumps({"holder": os.getpid(), "actors": sorted(apex.actor_pids().values())}),
        flush=True,
    )
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
