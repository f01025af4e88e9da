"""``bin/test``'s unit-test phase on two workers (``tests/conftest.py``): a file runs whole on one
worker, and the Ray files one after another on the same worker, whatever pytest and pytest-xdist
do with their own grouping marks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")

RECORD = """
import os

def test_{n}():
    with open(os.environ["WORKERS_OUT"], "a") as f:
        f.write(f"{{__name__}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
"""


def test_ray_files_share_a_worker_and_every_file_stays_whole(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    # tests/conftest.py's scheduler hook and its RAY_FILES, loaded under another name
    (tree / "conftest.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('suite_conftest', {str(CONFTEST)!r})\n"
        "suite = importlib.util.module_from_spec(spec)\n"
        f"import sys; sys.path.insert(0, {str(CONFTEST.parent)!r})\n"
        "spec.loader.exec_module(suite)\n"
        "pytest_xdist_make_scheduler = suite.pytest_xdist_make_scheduler\n"
    )
    ray_files = ["test_seed_ray", "test_seed_transports", "test_cluster"]
    other_files = ["test_a", "test_b", "test_c", "test_d"]
    for name in ray_files + other_files:
        (tree / f"{name}.py").write_text("".join(RECORD.format(n=i) for i in range(4)))
    out = tmp_path / "workers.txt"
    command = [sys.executable, "-m", "pytest", str(tree), "-n", "2", "--dist", "loadfile"]
    command += ["-p", "no:cacheprovider", "-q"]
    environment = dict(os.environ, WORKERS_OUT=str(out))
    done = subprocess.run(
        command, cwd=tree, env=environment, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    workers: dict[str, set[str]] = {}
    for line in out.read_text().splitlines():
        module, worker = line.split()
        workers.setdefault(module, set()).add(worker)
    assert sorted(workers) == sorted(ray_files + other_files)
    assert all(len(seen) == 1 for seen in workers.values()), workers  # each file whole
    assert len(set().union(*(workers[name] for name in ray_files))) == 1, workers
