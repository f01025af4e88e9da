"""Hold an Ape-X run (local back end) until killed: the subject of test_apex_orphans.py.

``python hold_apex.py`` starts a run in a background thread (as a notebook does), waits until its
actors feed the replay, prints ``{"holder": pid, "actors": [pids]}`` as one JSON line, then sleeps
while the run goes on.
"""

from __future__ import annotations

import json
import os
import time


def main() -> None:
    from workbench.algos.dqn import DQNConfig
    from workbench.apex import Apex, ApexConfig

    config = ApexConfig(env_id="CartPole-v1", agent=DQNConfig(batch_size=32, replay_capacity=10_000),
                        model_options=dict(hidden=(32, 32)), num_actors=2, learning_starts=200)
    apex = Apex(config).start(max_seconds=3600, log_interval=0.5)
    while not apex.metrics or apex.metrics[-1]["transitions_added"] == 0:
        time.sleep(0.2)
    print(json.dumps({"holder": os.getpid(), "actors": sorted(apex.actor_pids().values())}), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
