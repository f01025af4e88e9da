"""Notebook 03 in a real browser: JupyterLab on a loopback port, headless Chromium by playwright.

The module's fixture starts ``jupyter lab`` (this environment's) on a temporary copy of
``notebooks/``, with ``WORKBENCH_BUDGET=ci`` and the runs written to a temporary folder, opens
``03_a2c_ppo_large_batch.ipynb`` in Debian's chromium, and runs its cells from the top through the
one marked ``# live panel``, which starts a run and shows its ``workbench.lab.run_panel.RunPanel``.
The cells after it are not run: an executing cell holds back the widgets' messages, and the next
one waits for the run to end.

Then, while the run goes, each test checks one thing a learner does with the panel, in this order:
move the workers slider (the run applies it: an event in its metrics, and the charts go on
drawing), press Stop (the run stops at an iteration boundary, keeps its checkpoint and ends its
workers), and shut the kernel and JupyterLab down (no process of the session remains).

``bin/test`` installs what this needs (playwright from the ``test`` extra, Debian's ``chromium``).
On a failure the message names a screenshot and the server's log (kernel output included) in
pytest's temporary folder.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from browser import CHROMIUM, Browser, Lab, NotebookPage, code_cell_indices, describe, metrics_rows
from processes import wait_gone

from workbench.runs.lifecycle import ENDED  # the panel's status line starts with run.status

pytestmark = pytest.mark.slow

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOK = "03_a2c_ppo_large_batch.ipynb"
LIVE_PANEL = "# live panel"
START_WITHIN = 240.0  # seconds: JupyterLab, chromium, the kernel and the first cells (2 busy cores)
APPLY_WITHIN = 90.0  # seconds for the run to apply a change, or to stop, or for charts to draw
SHUTDOWN_WITHIN = 90.0  # seconds for kernel, workers and server to end
INSTALL_CHROMIUM = (
    "run bin/test, which installs Debian's chromium, or: "
    "sudo apt-get install --no-install-recommends chromium"
)


@dataclass
class Session:
    lab: Lab
    browser: Browser
    page: NotebookPage
    runs_dir: Path

    def live_run_dir(self) -> Path:
        """The folder of the run the live-panel cell started (the newest under ``runs_dir``)."""
        folders = self.page.wait_for(
            f"a run folder with metrics.jsonl under {self.runs_dir}",
            lambda: sorted(
                self.runs_dir.glob("*/metrics.jsonl"), key=lambda path: path.stat().st_mtime
            ),
            APPLY_WITHIN,
        )
        return folders[-1].parent

    def status_text(self) -> str:
        return self.page.page.locator(".workbench-status").first.inner_text(timeout=10_000)

    def evidence(self, live_cell: int) -> dict[str, Callable[[], str]]:
        """What a failure states besides the page: the panel's status line and the live cell's
        output (a stalled or failed run says so there), the rows the run wrote to disk (a run that
        goes on while the page stops drawing), and the processes of the session with their state."""

        def rows_on_disk() -> str:
            keys = ("event", "charts/iteration", "charts/env_steps", "charts/wall_seconds")
            found = {
                folder.name: (len(rows), {key: rows[-1][key] for key in keys if key in rows[-1]})
                for folder, rows in metrics_rows(self.runs_dir).items()
                if rows
            }
            return (
                "; ".join(
                    f"{name}: {count} rows, the last {last}"
                    for name, (count, last) in found.items()
                )
                or f"no rows under {self.runs_dir}"
            )

        def processes() -> str:
            lines = []
            for process in self.lab.note_processes():
                with contextlib.suppress(psutil.Error):
                    times = process.cpu_times()
                    lines.append(
                        f"{process.pid} {process.status()} cpu {times.user + times.system:.1f} s: "
                        f"{' '.join(process.cmdline())[:100]}"
                    )
            return "\n  " + "\n  ".join(lines)

        def machine() -> str:
            load = ", ".join(f"{x:.1f}" for x in psutil.getloadavg())
            return f"load average {load}; memory {psutil.virtual_memory().percent:.0f}% used"

        # stdout, stderr and errors only (the panel's own text is "the panel says")
        printed = (
            self.page.cells()
            .nth(live_cell)
            .locator(
                ".jp-OutputArea-output[data-mime-type*='application/vnd.jupyter.std'], "
                ".jp-OutputArea-output[data-mime-type*='error']"
            )
        )
        return {
            "the panel says": self.status_text,
            "the live cell printed": lambda: (
                "\n".join(printed.all_inner_texts())[-2000:] or "nothing"
            ),
            "the run's rows on disk": rows_on_disk,
            "the session's processes": processes,
            "the machine": machine,
        }

    def wait_drawing(
        self, what: str, predicate: Callable[[], Any], timeout: float = APPLY_WITHIN
    ) -> Any:
        """``page.wait_for(what, predicate, timeout)`` while the run goes: a run that ended (failed,
        say) fails the wait at once, with what the panel says."""

        def check() -> Any:
            try:
                status = self.status_text()
            except Exception:  # no panel drawn (yet): keep waiting; a timeout states the evidence
                status = ""
            if status.startswith(tuple(ENDED)):
                self.page.fail(
                    f"the run ended while waiting for {what}; the panel says: {status!r}"
                )
            return predicate()

        return self.page.wait_for(what, check, timeout)

    def require_running(self, doing: str) -> None:
        status = self.status_text()
        if not status.startswith("running"):
            self.page.fail(
                f"the run is no longer running before {doing} (ci budget too short for this "
                f"test?); the panel says: {status!r}"
            )


def workers(lab: Lab) -> list[psutil.Process]:
    """The run's worker processes (multiprocessing children of the kernel; not its resource
    tracker)."""
    return [p for p in lab.note_processes() if "spawn_main" in " ".join(p.cmdline())]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory):
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: {INSTALL_CHROMIUM}")
    home = tmp_path_factory.mktemp("browser")
    root = home / "notebooks"
    shutil.copytree(
        NOTEBOOKS, root, ignore=shutil.ignore_patterns("runs", ".ipynb_checkpoints", "__pycache__")
    )
    runs_dir = home / "runs"
    runs_dir.mkdir()
    lab = Lab(root, home, env={"WORKBENCH_BUDGET": "ci", "WORKBENCH_RUNS_DIR": str(runs_dir)})
    browser = None
    try:
        lab.start(timeout=START_WITHIN)
        browser = Browser(home / "chromium-profile")
        page = NotebookPage(lab, browser, NOTEBOOK, home)
        page.open(timeout=START_WITHIN)
        cells = code_cell_indices(root / NOTEBOOK, LIVE_PANEL)
        page.run_through(cells, timeout=START_WITHIN)
        session = Session(lab, browser, page, runs_dir)
        page.evidence.update(session.evidence(cells[-1]))
        yield session
    finally:
        if browser is not None:
            browser.close()
        lab.shutdown(timeout=SHUTDOWN_WITHIN)
        lab.kill()  # only what is left after a failure: this server's group and marked processes


def test_chromium_is_installed() -> None:
    """bin/test installs Debian's chromium; playwright drives it (no `playwright install`)."""
    assert CHROMIUM.is_file(), f"{CHROMIUM} is missing: {INSTALL_CHROMIUM}"
    import playwright.sync_api  # noqa: F401  (the test extra: pip install -e '.[test]')


def test_workers_slider_changes_the_running_run(session: Session) -> None:
    """One step right on the workers slider: the run applies it at an iteration boundary (a
    settings event in its metrics.jsonl), resizes its sampler, and the charts go on drawing, with
    the change marked."""
    page = session.page
    # The first point waits for the run's worker processes to start (torch's import in each):
    # a start-up, so START_WITHIN bounds it.
    session.wait_drawing(
        "the return chart's first point",
        lambda: (page.chart("workbench-chart-return")["points"] or 0) >= 1,
        START_WITHIN,
    )
    session.require_running("the slider moved")
    readout = page.page.locator(".workbench-workers .widget-readout").first
    before = int(readout.inner_text())
    handle = page.page.locator(".workbench-workers .noUi-handle").first
    handle.focus()
    handle.press("ArrowRight")
    page.wait_for(
        f"the workers readout to show {before + 1}",
        lambda: readout.inner_text().strip() == str(before + 1),
        20,
    )

    run_dir = session.live_run_dir()

    def applied() -> dict | None:
        rows = metrics_rows(session.runs_dir).get(run_dir, [])
        for row in rows:
            if row.get("event") == "settings_refused":
                page.fail(f"the run refused the change: {row}")
            if row.get("event") == "settings" and row["new"].get("num_workers") == before + 1:
                return row
        return None

    event = page.wait_for(
        f"a settings event with num_workers={before + 1} in {run_dir / 'metrics.jsonl'}",
        applied,
        APPLY_WITHIN,
    )
    assert event["old"]["num_workers"] == before, event
    # The sampler was resized: the kernel now has one worker more.
    page.wait_for(
        f"{before + 1} worker processes",
        lambda: len(workers(session.lab)) == before + 1,
        APPLY_WITHIN,
    )

    at_event = page.chart("workbench-chart-return")["points"]
    page.wait_for(
        "the return chart to draw points after the change",
        lambda: page.chart("workbench-chart-return")["points"] > at_event,
        APPLY_WITHIN,
    )
    page.wait_for(
        "the steps/s chart to draw past the change, with the change marked",
        lambda: (
            (speed := page.chart("workbench-chart-speed"))["shapes"] >= 1
            and (speed["last_x"] or 0) > event["charts/env_steps"]
        ),
        APPLY_WITHIN,
    )


def test_stop_button_stops_the_run_and_keeps_its_checkpoint(session: Session) -> None:
    """Stop: the run ends at an iteration boundary, the panel says stopped, its workers end, and
    checkpoint.pt holds the last iteration recorded in metrics.jsonl."""
    page = session.page
    session.wait_drawing(
        "the run to draw (it is running)",
        lambda: (page.chart("workbench-chart-speed")["points"] or 0) >= 1,
        START_WITHIN,
    )
    session.require_running("Stop was pressed")
    running_workers = workers(session.lab)
    assert running_workers, "the run has no worker processes to end"
    page.page.locator("button.workbench-stop").first.click(timeout=10_000)
    page.wait_for(
        "the panel to say stopped",
        lambda: session.status_text().startswith("stopped"),
        APPLY_WITHIN,
    )

    run_dir = session.live_run_dir()
    checkpoint = page.wait_for(
        f"{run_dir / 'checkpoint.pt'}",
        lambda: (run_dir / "checkpoint.pt").is_file() and run_dir / "checkpoint.pt",
        30,
    )
    left = wait_gone([p.pid for p in running_workers], 30)
    if left:
        page.fail(f"the run's workers outlived Stop:\n{describe(left)}")

    rows = metrics_rows(session.runs_dir)[run_dir]
    iterations = [
        row["charts/iteration"] for row in rows if "charts/iteration" in row and "event" not in row
    ]
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert iterations and saved["iteration"] == iterations[-1], (
        saved["iteration"],
        iterations[-3:],
    )
    time.sleep(2.0)  # stopped means stopped: no more rows
    assert len(metrics_rows(session.runs_dir)[run_dir]) == len(rows)


def test_shutdown_leaves_no_process(session: Session) -> None:
    """Shutting the kernel and JupyterLab down ends every process of the session: the server, the
    kernel, and the run's workers (this test also passes when run alone, with the run still
    going)."""
    lab = session.lab
    lab.note_processes()
    seen = dict(lab.seen)  # pid -> command line of every process of the session noted so far
    assert any("ipykernel" in command for command in seen.values()), seen
    session.browser.close()
    left = lab.shutdown(timeout=SHUTDOWN_WITHIN)
    assert left == [], (
        f"processes of the session outlived its shutdown (log: {lab.log_path}):\n{describe(left)}"
    )
    still = wait_gone(list(seen), 5)
    assert still == [], (
        f"noted processes still run: {[seen[pid] for pid in still]} (log: {lab.log_path})"
    )
