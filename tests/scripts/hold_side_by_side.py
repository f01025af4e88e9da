"""Hold a study's side-by-side children busy until ended: the subject of tests/test_side_by_side.py.

Prints ``{"holder": pid}`` as one JSON line, then runs two jobs that sleep ten minutes each on two
child processes (``run_side_by_side(time.sleep, ...)``), in the main thread, until SIGKILL (a
kernel restart) or SIGINT (an interrupted cell) ends it.
"""

from __future__ import annotations

import json
import os
import time

if __name__ == "__main__":  # spawned children import this file as __mp_main__
    from workbench.studies.side_by_side import run_side_by_side

    print(json.dumps({"holder": os.getpid()}), flush=True)
    run_side_by_side(time.sleep, [(600.0,), (600.0,)], processes=2)
