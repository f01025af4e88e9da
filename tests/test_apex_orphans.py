"""An Ape-X run leaves nothing behind when its kernel dies (every child process dies with its
parent: ``docs/architecture.md``, "Contracts every part keeps"): the holder runs Ape-X in a
background thread, as a notebook does, and is killed with SIGKILL; its actors and its replay
process must end within 5 s."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from processes import wait_gone

HOLDER = Path(__file__).parent / "scripts" / "hold_apex.py"


@pytest.mark.slow
def test_killing_the_kernel_ends_every_apex_process():
    process = subprocess.Popen(
        [sys.executable, str(HOLDER)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HOLDER.parents[2],
    )
    try:
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(180)
        assert box and box[0], (
            "the holder printed nothing in 180 s: "
            f"{process.stderr.read() if process.poll() is not None else ''}"
        )
        info = json.loads(box[0])
        descendants = [p.pid for p in psutil.Process(process.pid).children(recursive=True)]
        assert len(info["actors"]) == 2 and set(info["actors"]) <= set(descendants)
        assert len(descendants) >= 3  # two actors and the replay (and the resource tracker)
        process.kill()
        process.wait(10)
        assert wait_gone(descendants, 5.0) == [], "an Ape-X process outlived its kernel"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
