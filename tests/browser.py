"""Helpers for tests/test_browser.py: JupyterLab on a loopback port, driven by headless Chromium.

:class:`Lab` starts ``jupyter lab`` from this Python's environment in a process group of its own,
with every Jupyter directory (config, data, runtime, settings, workspaces) inside the test's
temporary folder, so neither the machine's Jupyter set-up nor the repository is touched. Every
process it starts, kernels and their workers included, carries a marker in its environment;
:meth:`Lab.processes` finds them all, even one that left the process group or was orphaned.

:class:`Browser` is Debian's chromium (``/usr/bin/chromium``) driven by playwright with
``executable_path``: no ``playwright install`` (it downloads, and fails here). :class:`NotebookPage`
holds the JupyterLab quirks a real browser shows: the kernel shows "idle" before its websocket is
open, and an execution sent then is dropped silently.

Every wait is bounded; :meth:`NotebookPage.fail` saves a screenshot and names it, with the
server's log, in the assertion message.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
MARKER = "WORKBENCH_BROWSER_TEST"
"""Environment variable that every process of one :class:`Lab` (or :class:`Browser`) carries."""

# JupyterLab settings for a test: every cell attached to the page (the default windowing leaves
# cells outside the viewport out of the DOM) and nothing that would reach for the network.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/extensionmanager-extension/plugin.jupyterlab-settings": {"enabled": False},
}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (JupyterLab is told not to try others)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.25) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned) or ``timeout`` seconds pass
    (None)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value or None
        time.sleep(interval)


def marked_processes(marker: str) -> list[psutil.Process]:
    """Running processes (zombies left out) whose environment has ``MARKER=marker``."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get(MARKER) == marker and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass
    return found


def describe(processes: list[psutil.Process] | list[int]) -> str:
    """One line per process (a Process or a pid): its pid and command line."""
    lines = []
    for process in processes:
        pid = process if isinstance(process, int) else process.pid
        try:
            process = psutil.Process(pid) if isinstance(process, int) else process
            lines.append(f"{pid}: {' '.join(process.cmdline())[:150]}")
        except psutil.Error:
            lines.append(f"{pid}: gone")
    return "\n".join(lines) or "none"


def kill_marked(marker: str) -> None:
    """SIGKILL every process that carries this test's marker (clean-up after a failure)."""
    for process in marked_processes(marker):
        with contextlib.suppress(psutil.Error):
            process.kill()


class Lab:
    """``jupyter lab`` serving ``root_dir`` on a free loopback port with a random token.

    Args:
        root_dir: the folder it serves (a temporary copy of the notebooks).
        home: a temporary folder for its log and its Jupyter directories.
        env: more environment variables for the server and its kernels.
    """

    def __init__(self, root_dir: Path, home: Path, env: dict[str, str] | None = None) -> None:
        self.root_dir = Path(root_dir)
        self.home = Path(home)
        self.token = secrets.token_hex(16)
        self.marker = f"lab-{secrets.token_hex(8)}"
        self.log_path = self.home / "jupyter.log"
        self.extra_env = dict(env or {})
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.seen: dict[int, str] = {}  # pid -> command line, of every marked process seen

    # --- life cycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> "Lab":
        """Start the server and wait until its API answers; a port taken in between is retried."""
        dirs = {
            name: self.home / name
            for name in ("config", "data", "runtime", "settings", "workspaces", "ipython")
        }
        for path in dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        for name, values in LAB_SETTINGS.items():
            path = dirs["settings"] / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = {
            **os.environ,
            **self.extra_env,
            MARKER: self.marker,
            "JUPYTER_CONFIG_DIR": str(dirs["config"]),
            "JUPYTER_DATA_DIR": str(dirs["data"]),
            "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
            "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
            "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
            "IPYTHONDIR": str(dirs["ipython"]),
            "PYTHONUNBUFFERED": "1",
        }
        deadline = time.monotonic() + timeout
        for _ in range(3):
            self.port = free_port()
            command = [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--allow-root",
                "--ip=127.0.0.1",
                f"--port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root_dir}",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            ]
            with open(self.log_path, "ab") as log:
                log.write(f"$ {' '.join(command)}\n".encode())
                log.flush()
                self.process = subprocess.Popen(
                    command,
                    cwd=self.root_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            while time.monotonic() < deadline and self.process.poll() is None:
                with contextlib.suppress(OSError, ValueError):
                    if self.api("GET", "/api/status", timeout=5) is not None:
                        self.note_processes()
                        return self
                time.sleep(0.5)
            if self.process.poll() is None or "already in use" not in self.log():
                break
        self.kill()
        raise AssertionError(
            f"JupyterLab did not answer on port {self.port} within {timeout:.0f} s "
            f"(exit code {self.process.poll()}); log: {self.log_path}\n{self.log()[-3000:]}"
        )

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def api(self, method: str, path: str, timeout: float = 20.0) -> Any:
        """Call the server's REST API with the token; the decoded JSON answer (None when empty)."""
        request = urllib.request.Request(
            self.url(path), method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            body = answer.read()
        return json.loads(body) if body.strip() else None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # --- processes --------------------------------------------------------------------------------

    def processes(self) -> list[psutil.Process]:
        """Every running process of this server: itself, its kernels, their workers."""
        return marked_processes(self.marker)

    def note_processes(self) -> list[psutil.Process]:
        """Remember the processes running now (for the final check), and return them."""
        processes = self.processes()
        for process in processes:
            with contextlib.suppress(psutil.Error):
                self.seen.setdefault(process.pid, " ".join(process.cmdline())[:150])
        return processes

    def shutdown(self, timeout: float = 90.0) -> list[psutil.Process]:
        """Shut every kernel down through the API, then the server (``/api/shutdown``), and wait
        for every process of this server to end. Returns those still running after ``timeout``."""
        self.note_processes()
        deadline = time.monotonic() + timeout
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                for kernel in self.api("GET", "/api/kernels") or []:
                    self.api(
                        "DELETE",
                        f"/api/kernels/{kernel['id']}",
                        timeout=max(5.0, deadline - time.monotonic()),
                    )
            with contextlib.suppress(OSError, ValueError):
                self.api("POST", "/api/shutdown", timeout=10)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(max(1.0, deadline - time.monotonic()))
        wait_until(lambda: not self.processes(), max(1.0, deadline - time.monotonic()))
        return self.processes()

    def kill(self) -> None:
        """Clean-up after a failure: SIGKILL the server's process group and every marked process."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
        kill_marked(self.marker)


class Browser:
    """Headless Debian chromium through playwright's sync API, with a fresh user-data dir."""

    def __init__(self, user_data_dir: Path) -> None:
        from playwright.sync_api import sync_playwright

        self.marker = f"chromium-{secrets.token_hex(8)}"
        self._playwright = sync_playwright().start()
        try:
            self.context = self._playwright.chromium.launch_persistent_context(
                str(user_data_dir),
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_FLAGS,
                env={**os.environ, MARKER: self.marker},
                viewport={"width": 1400, "height": 1000},
                timeout=120_000,
            )
        except BaseException:
            self._playwright.stop()
            raise

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.context.close()
        with contextlib.suppress(Exception):
            self._playwright.stop()
        if wait_until(lambda: not marked_processes(self.marker), 15) is None:
            kill_marked(self.marker)


class NotebookPage:
    """One notebook open in JupyterLab in a browser page.

    Args:
        lab: the server.
        browser: the browser.
        notebook: the notebook's path under the server's root.
        artifacts: folder for the screenshot taken when a check fails.
    """

    def __init__(self, lab: Lab, browser: Browser, notebook: str, artifacts: Path) -> None:
        self.lab = lab
        self.notebook = notebook
        self.artifacts = Path(artifacts)
        self.page = browser.context.new_page()
        self.page.set_default_timeout(30_000)
        self.channels: list[Any] = []  # the kernel websockets (…/api/kernels/<id>/channels)
        self.frames_received = 0
        self.console: list[str] = []
        # What else a failure's message states (name -> a callable that describes it): the test
        # adds what tells a stalled run from a page that stopped drawing.
        self.evidence: dict[str, Callable[[], str]] = {}
        self.page.on("websocket", self._on_websocket)
        self.page.on(
            "console", lambda message: self.console.append(f"{message.type}: {message.text}")
        )
        self.page.on("pageerror", lambda error: self.console.append(f"pageerror: {error}"))

    def _on_websocket(self, websocket: Any) -> None:
        if "/channels" in websocket.url:
            self.channels.append(websocket)
            websocket.on("framereceived", self._on_frame)

    def _on_frame(self, _frame: Any) -> None:
        self.frames_received += 1

    # --- failing with evidence --------------------------------------------------------------------

    def fail(self, message: str) -> None:
        """Raise AssertionError with ``message``, a screenshot's path and the server log's path."""
        screenshot = self.artifacts / f"failure-{time.strftime('%H%M%S')}.png"
        try:
            self.page.screenshot(path=str(screenshot), full_page=True, timeout=20_000)
        except Exception as error:  # the page may be gone: say so, keep the original message
            screenshot = Path(f"(no screenshot: {type(error).__name__}: {error})")
        console = self.artifacts / "browser-console.log"
        with contextlib.suppress(OSError):
            console.write_text("\n".join(self.console))
        errors = [line for line in self.console if line.startswith(("error", "pageerror"))]
        message += f"\nbrowser console errors: {len(errors)}" + "".join(
            f"\n  {line[:300]}" for line in errors[-8:]
        )
        for name, describe_it in self.evidence.items():
            try:
                message += f"\n{name}: {describe_it()}"
            except Exception as error:  # evidence is best effort: the original message stays
                message += f"\n{name}: (unavailable: {type(error).__name__}: {error})"
        raise AssertionError(
            f"{message}\nscreenshot: {screenshot}\njupyter log: {self.lab.log_path}\n"
            f"browser console: {console}\nlast lines of the jupyter log:\n"
            f"{self.lab.log()[-2500:]}"
        )

    def wait_for(
        self,
        what: str,
        predicate: Callable[[], Any],
        timeout: float,
        interval: float = 0.25,
        quiet: bool = False,
    ) -> Any:
        """Poll ``predicate`` until it returns something truthy (returned); after ``timeout``
        seconds fail with ``what`` and the evidence (``quiet``: a bare AssertionError)."""
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            if time.monotonic() > deadline:
                if quiet:
                    raise AssertionError(what)
                self.fail(f"timed out after {timeout:.0f} s waiting for {what}")
            self.idle(interval)
        return value

    def idle(self, seconds: float) -> None:
        """Wait ``seconds`` inside playwright: its sync API delivers events (websocket frames,
        console lines) only while one of its calls runs, never during ``time.sleep``."""
        self.page.wait_for_timeout(seconds * 1000)

    # --- the notebook -----------------------------------------------------------------------------

    def open(self, timeout: float = 180.0) -> "NotebookPage":
        """Open the notebook and wait until its kernel can really execute: its websocket has
        received frames and the status bar says Idle (JupyterLab 4.6 shows idle before the socket
        is open)."""
        self.page.goto(
            self.lab.url(f"lab/tree/{self.notebook}?token={self.lab.token}"),
            timeout=timeout * 1000,
            wait_until="domcontentloaded",
        )
        self.wait_for("the notebook's cells", lambda: self.cells().count() > 0, timeout)
        self.wait_for(
            "the kernel's websocket (/channels) to receive",
            lambda: self.frames_received > 0,
            timeout,
        )
        self.wait_for(
            "the status bar to show the kernel Idle",
            lambda: self.kernel_status() == "idle",
            timeout,
        )
        return self

    def kernel_status(self) -> str:
        """The kernel's state in the status bar ("Python 3 (ipykernel) | Idle"): idle, busy,
        starting, ... ('' while not shown)."""
        return self.page.evaluate("""() => {
            for (const item of document.querySelectorAll('.jp-StatusBar-TextItem')) {
                const match = /\\|\\s*(\\w+)\\s*$/.exec(item.textContent || '');
                if (match) return match[1].toLowerCase();
            }
            return '';
        }""")

    def cells(self) -> Any:
        return self.page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")

    def prompt(self, index: int) -> str:
        """The input prompt of cell ``index``: '[ ]:', '[*]:' or '[3]:' ('' for markdown)."""
        try:
            return (
                self.cells()
                .nth(index)
                .locator(".jp-InputPrompt")
                .first.inner_text(timeout=5000)
                .strip()
            )
        except Exception:
            return ""

    def execute(self, index: int) -> None:
        """Select cell ``index`` (a click on its prompt: command mode) and press Shift+Enter."""
        cell = self.cells().nth(index)
        cell.scroll_into_view_if_needed(timeout=10_000)
        cell.locator(".jp-InputPrompt").first.click(timeout=10_000)
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("Shift+Enter")

    def run_through(
        self,
        code_cells: list[int],
        *,
        first_timeout: float = 60.0,
        attempts: int = 3,
        timeout: float = 300.0,
    ) -> None:
        """Execute the code cells ``code_cells`` (DOM indices, in order) and wait until the last one
        has run. The first is retried until its prompt shows it was taken (an execution sent before
        the kernel's socket opened is dropped silently)."""
        first, rest = code_cells[0], code_cells[1:]
        before = self.prompt(first)
        for _ in range(attempts):
            self.execute(first)
            with contextlib.suppress(AssertionError):
                self.wait_for(
                    f"cell #{first} to start",
                    lambda: self.prompt(first) not in (before, ""),
                    first_timeout / attempts,
                    quiet=True,
                )
                break
        else:
            self.fail(f"the first code cell (#{first}) never started: its prompt stayed {before!r}")
        for index in rest:
            self.execute(index)
        deadline = time.monotonic() + timeout
        for index in code_cells:
            self.wait_for(
                f"cell #{index} to finish (prompt [n]:)",
                lambda index=index: _finished_prompt(self.prompt(index)),
                max(1.0, deadline - time.monotonic()),
            )
            errors = (
                self.cells().nth(index).locator(".jp-OutputArea-output[data-mime-type*='error']")
            )
            if errors.count():
                self.fail(f"cell #{index} raised:\n{errors.first.inner_text()[-3000:]}")

    # --- widgets and charts -----------------------------------------------------------------------

    def chart(self, box_class: str) -> dict:
        """The plotly chart inside ``.<box_class>``: ``points`` of its first trace
        (``.data[0].x.length``; None before the chart exists), that trace's ``last_x``, and
        ``shapes`` (lines drawn on it, such as event markers)."""
        return self.page.evaluate(
            """(selector) => {
                const plot = document.querySelector(selector);
                if (!plot || !plot.data || !plot.data.length)
                    return {points: null, last_x: null, shapes: 0};
                const x = plot.data[0].x || [];
                return {points: x.length, last_x: x.length ? x[x.length - 1] : null,
                        shapes: ((plot.layout || {}).shapes || []).length};
            }""",
            f".{box_class} .js-plotly-plot",
        )


def _finished_prompt(prompt: str) -> bool:
    return prompt.startswith("[") and prompt.strip("[]: ").isdigit()


def code_cell_indices(notebook: Path, through: str) -> list[int]:
    """Indices (in the notebook, which is the page's order) of its code cells from the top through
    the first one whose source contains ``through``."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    indices = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        indices.append(index)
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if through in source:
            return indices
    raise AssertionError(f"{notebook} has no code cell containing {through!r}")


def metrics_rows(runs_dir: Path) -> dict[Path, list[dict]]:
    """Every run folder's metrics rows under ``runs_dir`` (a line being written is skipped)."""
    found = {}
    for path in sorted(Path(runs_dir).glob("*/metrics.jsonl")):
        rows = []
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                with contextlib.suppress(json.JSONDecodeError):
                    rows.append(json.loads(line))
        found[path.parent] = rows
    return found
