"""Hold a SEED run (env-only actor processes) until killed: the subject of
test_inference.py::test_killing_the_kernel_ends_every_env_actor.

``python hold_seed.py [RUNS_DIR]`` starts a V-trace run in a background thread (as a notebook
does), its folder under ``RUNS_DIR`` (default: a new temporary folder), waits until the server
answers its actors, prints ``{"holder": pid, "actors": [pids]}`` as one JSON line, then sleeps
while the run goes on.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time


def main() -> None:
    from workbench.seed import Seed, SeedConfig

    runs_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="hold-seed-")
    seed = Seed(SeedConfig(env_id="CartPole-v1", num_actors=2), runs_dir=runs_dir, log_interval=0.5)
    seed.start(seconds=3600)
    while not any(row.get("charts/env_steps") for row in seed.metrics if "event" not in row):
        time.sleep(0.2)
    print(json.dumps({"holder": os.getpid(), "actors": sorted(seed.actor_pids())}), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
