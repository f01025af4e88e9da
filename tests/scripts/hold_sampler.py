"""Hold samplers with live workers until killed: the subject of tests/test_orphans.py.

Usage: ``python hold_sampler.py MODE`` where MODE is

* ``main``: make a BatchedSampler and a ParallelSampler (CartPole-v1, 2 workers each) in the main
  thread, collect once with each, print the pids as one JSON line, then start a collect that
  never ends (the ParallelSampler's workers sleep an hour per step, so they are busy, not waiting
  on their pipe, when the holder dies: only a parent-death mechanism can end them);
* ``thread``: the same from a background thread that stays alive (a notebook run executes in a
  background thread), the main thread sleeping;
* ``interrupt``: the same samplers; after a line on stdin, collect in a loop until SIGINT (a
  kernel interrupt) raises KeyboardInterrupt inside ``collect``; it propagates and the interpreter
  exits without closing the samplers. The line ``collecting`` is printed once the loop starts.

The JSON line: ``{"holder": pid, "batched": [pids], "parallel": [pids]}``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

# torch and workbench are imported inside functions: spawned workers re-import this file as
# __mp_main__, and env-only workers should stay without torch, as they are in a notebook.


def make_and_collect():
    import torch
    from holder_policy import SleepyActorCritic  # this file's folder is sys.path[0]

    from workbench.sampling import BatchedSampler, ParallelSampler

    torch.manual_seed(0)
    policy = SleepyActorCritic((4,), 2)
    batched = BatchedSampler("CartPole-v1", num_envs=2, horizon=8, num_workers=2, device="cpu")
    parallel = ParallelSampler("CartPole-v1", num_envs=2, horizon=8, num_workers=2)
    batched.collect(policy)
    parallel.collect(policy)
    info = {"holder": os.getpid(), "batched": batched.worker_pids, "parallel": parallel.worker_pids}
    print(json.dumps(info), flush=True)
    return batched, parallel, policy


def hold() -> None:
    batched, parallel, policy = make_and_collect()
    policy.delay.fill_(3600.0)
    parallel.collect(policy)  # the workers now sleep inside policy.act until they are killed


def main(mode: str) -> None:
    if mode == "main":
        hold()
    elif mode == "thread":
        threading.Thread(target=hold, daemon=True).start()
        while True:
            time.sleep(3600)
    elif mode == "interrupt":
        batched, parallel, policy = make_and_collect()
        sys.stdin.readline()
        print("collecting", flush=True)
        while True:
            batched.collect(policy)
            parallel.collect(policy)
    else:
        raise SystemExit(f"unknown mode {mode!r}; use main, thread or interrupt")


if __name__ == "__main__":
    main(sys.argv[1])
