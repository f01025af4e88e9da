"""Hold a SEED run (env-only actor processes) until killed: the subject of
test_inference.py::test_killing_the_kernel_ends_every_env_actor.

``python hold_seed.py`` starts a V-trace run in a background thread (as a notebook does), waits
until the server answers its actors, prints ``{"holder": pid, "actors": [pids]}`` as one JSON
line, then sleeps while the run goes on.
"""

from __future__ import annotations

import json
import os
import time


def main() -> None:
    from workbench.seed import Seed, SeedConfig

    seed = Seed(SeedConfig(env_id="CartPole-v1", num_actors=2)).start(max_seconds=3600, log_interval=0.5)
    while not seed.metrics or seed.metrics[-1]["env_steps"] == 0:
        time.sleep(0.2)
    print(json.dumps({"holder": os.getpid(), "actors": sorted(seed.actor_pids())}), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
