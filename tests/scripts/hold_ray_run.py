"""Hold an Ape-X or SEED run on a private Ray instance that the run itself starts, for
tests/test_cluster.py: ``python hold_ray_run.py {apex|seed} {hold|exit|stop} RUNS_DIR``.

It starts the run in a background thread (as a notebook does), waits until the run has stepped
envs, prints ``{"holder": pid, "marker": ..., "temp_dir": ..., "ray": [pids]}`` (the marker
``WORKBENCH_RAY_INSTANCE`` of the instance's processes) as one JSON line, then:

* ``hold``: sleeps until killed (the test SIGKILLs it, as a kernel restart does);
* ``exit``: returns from ``main`` with the run still going (a script's normal end);
* ``stop``: stops the run, prints ``{"stopped": status}``, and sleeps until killed.
"""

from __future__ import annotations

import json
import os
import sys
import time


def start(kind: str, runs_dir: str):
    if kind == "apex":
        from workbench.apex import Apex
        from workbench.studies.apex_studies import apex_cartpole_config

        run = Apex(apex_cartpole_config(num_actors=2, transport="ray"), runs_dir=runs_dir)
    else:
        from workbench.seed import Seed, SeedConfig

        config = SeedConfig(env_id="CartPole-v1", num_actors=2, transport="ray")
        run = Seed(config, runs_dir=runs_dir, log_interval=0.5)
    run.start(seconds=3600)
    while not any(row.get("charts/env_steps") for row in run.metrics if "event" not in row):
        if run.status == "failed":
            raise SystemExit(f"the run failed: {run.error!r}")
        time.sleep(0.2)
    return run


def main() -> None:
    from workbench.cluster import private_ray

    kind, mode, runs_dir = sys.argv[1:4]
    run = start(kind, runs_dir)
    instance = private_ray()
    ray_pids = [p.pid for p in instance.processes()]
    info = {"holder": os.getpid(), "marker": instance.marker, "temp_dir": instance.temp_dir}
    print(json.dumps({**info, "ray": ray_pids}), flush=True)
    if mode == "exit":
        return
    if mode == "stop":
        print(json.dumps({"stopped": run.stop()}), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
