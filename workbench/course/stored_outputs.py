"""What a notebook keeps in the repository: the outputs nbval checks, and what a reader should see.

GitHub shows a notebook's stored outputs but runs none of its JavaScript, so a plotly figure, or a
live panel's ``FigureWidget``, is invisible there unless it is stored as an image. ``refresh``
executes a notebook and rewrites its outputs:

- cells marked ``# NBVAL_CHECK_OUTPUT`` keep the outputs of an execution at the ci budget, the
  reference values nbval compares (``--nbval-lax`` compares those cells only);
- every other cell keeps what an execution at ``figures_budget`` printed (stdout, plain results)
  and each figure it drew as a PNG: a figure shown as a cell's result, and the final state of
  every ``FigureWidget`` inside a panel, drawn after the whole notebook has run;
- nothing else: no widget state, no plotly JSON, no stderr.

With ``figures_budget="ci"`` one execution serves both. PNGs are drawn by kaleido through the
system's Chromium (/usr/bin/chromium, the one tests/test_browser.py drives); nothing downloads.
The notebook's metadata records the budget, commit and machine its figures came from.
``refresh_cells`` executes a few cells alone (a chart of the records, after a new record), each
such cell's metadata recording where its outputs came from.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CHECKED = "# NBVAL_CHECK_OUTPUT"
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PNG_WIDTH, PNG_HEIGHT = 900, 450
MAX_TEXT_LINES = 40  # a longer print is cut, the cut said in its last line
SLOW_CELL_SECONDS = 10.0  # refresh reports the cells that ran longer (at the figures budget)
SNAPSHOT_MARK = "workbench-figure-snapshot:"

# Cells the kernel runs before and after the notebook: the first hears of every widget built,
# the last prints each live figure's final state and each box's children.
_BEFORE = "from workbench.course.stored_outputs import watch_widgets\nwatch_widgets()"
_AFTER = "from workbench.course.stored_outputs import print_snapshot\nprint_snapshot()"
_widgets: list[Any] = []


def watch_widgets() -> None:
    """(In the kernel) remember every ipywidget built from now on
    (``Widget.on_widget_constructed``)."""
    import ipywidgets

    ipywidgets.Widget.on_widget_constructed(_widgets.append)


def print_snapshot() -> None:
    """(In the kernel) print, on one line, every open ``FigureWidget``'s figure as plotly JSON and
    every open box's children, by widget model id."""
    import plotly.graph_objects as go

    figures, children = {}, {}
    for widget in _widgets:
        model_id = getattr(getattr(widget, "comm", None), "comm_id", None)
        if model_id is None:
            continue  # closed
        if isinstance(widget, go.FigureWidget):
            figures[model_id] = go.Figure(widget).to_plotly_json()
        elif hasattr(widget, "children"):
            children[model_id] = [child.model_id for child in widget.children if child.comm]
    payload = {"figures": figures, "children": children}
    print(SNAPSHOT_MARK + json.dumps(payload, default=_plain))


def _plain(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars inside figure data
    if tolist is None:
        raise TypeError(f"{type(value).__name__} is not JSON serializable")
    return tolist()


def execute(notebook: Any, budget: str, path: str, timeout: float) -> tuple[list[Any], dict]:
    """Run a copy of ``notebook`` at ``budget``; its code cells (executed) and the snapshot."""
    import nbformat
    from nbclient import NotebookClient

    copy = nbformat.from_dict(json.loads(json.dumps(notebook)))
    copy.cells = [
        nbformat.v4.new_code_cell(_BEFORE),
        *copy.cells,
        nbformat.v4.new_code_cell(_AFTER),
    ]
    # The kernel gets the budget in its own environment; bars are not outputs to keep; the runs'
    # metrics and checkpoints go to a folder removed afterwards (unless the caller named one).
    env = {**os.environ, "WORKBENCH_BUDGET": budget}
    env.setdefault("WORKBENCH_PROGRESS", "0")
    with tempfile.TemporaryDirectory(prefix="workbench-refresh-runs-") as runs_dir:
        env.setdefault("WORKBENCH_RUNS_DIR", runs_dir)
        NotebookClient(
            copy,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": os.path.dirname(path) or "."}},
        ).execute(env=env)
    last = copy.cells[-1].outputs
    printed = "".join(o.get("text", "") for o in last if o.output_type == "stream")
    line = next(x for x in printed.splitlines() if x.startswith(SNAPSHOT_MARK))
    snapshot = json.loads(line[len(SNAPSHOT_MARK) :])
    return [c for c in copy.cells[1:-1] if c.cell_type == "code"], snapshot


def figures_in(outputs: list[Any], snapshot: dict) -> list[dict]:
    """The plotly figures (as dicts) a cell's outputs drew, in order: figures shown as results,
    then the live figures inside each widget it displayed (depth first, as laid out)."""
    found = []

    def walk(model_id: str) -> None:
        if model_id in snapshot["figures"]:
            found.append(snapshot["figures"][model_id])
        for child in snapshot["children"].get(model_id, []):
            walk(child)

    for output in outputs:
        data = output.get("data", {})
        if PLOTLY in data:
            found.append(data[PLOTLY])
        elif WIDGET_VIEW in data:
            walk(data[WIDGET_VIEW]["model_id"])
    return found


def png_output(figure: dict) -> dict:
    """A display_data output holding ``figure`` drawn as a PNG (kaleido)."""
    import nbformat
    import plotly.io as pio

    layout = figure.get("layout", {})
    image = pio.to_image(
        figure,
        format="png",
        width=layout.get("width") or PNG_WIDTH,
        height=layout.get("height") or PNG_HEIGHT,
    )
    title = layout.get("title", {})
    title = title.get("text", "") if isinstance(title, dict) else str(title)
    return nbformat.v4.new_output(
        "display_data",
        data={
            "image/png": base64.b64encode(image).decode("ascii"),
            "text/plain": f"<figure: {title or 'untitled'}>",
        },
    )


def kept_text(outputs: list[Any]) -> list[Any]:
    """A cell's stdout and plain results, each cut to MAX_TEXT_LINES lines."""
    import nbformat

    kept = []
    for output in outputs:
        if output.output_type == "stream" and output.name == "stdout":
            text = output.text
        elif output.output_type == "execute_result" and set(output.data) == {"text/plain"}:
            text = output.data["text/plain"]
        else:
            continue
        lines = text.splitlines()
        if len(lines) > MAX_TEXT_LINES:
            cut = len(lines) - MAX_TEXT_LINES
            text = "\n".join([*lines[:MAX_TEXT_LINES], f"... ({cut} more lines)"]) + "\n"
        kept.append(nbformat.v4.new_output("stream", name="stdout", text=text))
    return kept


def refresh(
    path: str, figures_budget: str = "ci", timeout: float = 7200, keep_checked: bool = False
) -> dict:
    """Execute the notebook at ``path`` and store its outputs as the module docstring says.

    ``keep_checked``: checked cells keep the outputs they have (they passed nbval since the code
    last changed), so a refresh at ``full`` executes the notebook once instead of twice.
    Returns counts: checked cells kept, figures drawn, cells with text, and ``slow_cells``: the
    seconds each code cell (nbval's numbering) of at least ``SLOW_CELL_SECONDS`` ran at the
    figures budget."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    if keep_checked:
        unrun = [i for i, cell in enumerate(code) if is_checked(cell) and not cell.outputs]
        if unrun:
            raise ValueError(
                f"{path}: checked code cell(s) {unrun} have no stored output to keep; "
                "refresh without keep_checked (--keep-checked) to execute them at ci"
            )
    ci_run = None
    if figures_budget == "ci" or not keep_checked:
        ci_run = execute(notebook, "ci", path, timeout)
    if figures_budget == "ci":
        figure_cells, snapshot = ci_run
    else:
        figure_cells, snapshot = execute(notebook, figures_budget, path, timeout)
    checked_cells = code if keep_checked else ci_run[0]
    counts = {"checked": 0, "figures": 0, "text": 0, "slow_cells": {}}
    for index, (cell, checked, drawn) in enumerate(zip(code, checked_cells, figure_cells)):
        cell.metadata.pop("execution", None)
        cell.metadata.pop("workbench", None)  # a cell refreshed alone before: now the notebook's
        seconds = cell_seconds(drawn)
        if seconds >= SLOW_CELL_SECONDS:  # what the "Expected time" line above it should say
            counts["slow_cells"][index] = round(seconds)
        if is_checked(cell):
            # nbval compares a cell only if it has outputs and an execution count
            cell.outputs, cell.execution_count = checked.outputs, checked.execution_count
            counts["checked"] += 1
            continue
        figures, printed = store_drawn(cell, drawn, snapshot)
        counts["figures"] += figures
        counts["text"] += printed
    notebook.metadata.pop("widgets", None)  # a run's widget state, useless without its kernel
    notebook.metadata["workbench"] = {"outputs": provenance(figures_budget)}
    _, notebook = nbformat.validator.normalize(notebook)  # every cell gets its id
    nbformat.write(nbformat.from_dict(notebook), path)
    return counts


def refresh_cells(
    path: str, cells: "list[int]", figures_budget: str = "ci", timeout: float = 1800
) -> dict:
    """Execute the notebook's first code cell (its set-up: imports, budget, paths) and code cells
    ``cells`` (nbval's numbering) alone, in order, and store those cells' outputs as ``refresh``
    does; the other cells keep theirs.

    For cells whose outputs follow from ``data/`` and the package alone (a chart or a table of
    the records), after a new record: a whole refresh would rerun every study. Each refreshed
    cell's metadata records its own budget, commit and machine (``provenance``), beside the
    notebook's. A cell that needs a variable made by a cell left out fails with its NameError;
    a checked cell is refused (its reference outputs come from a whole execution at ci)."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    wanted = sorted(set(cells) - {0})
    out_of_range = [i for i in wanted if not 0 < i < len(code)]
    if not wanted or out_of_range:
        raise ValueError(
            f"{path}: cells {sorted(cells)} must name code cells 1-{len(code) - 1} (nbval's "
            "numbering; cell 0, the set-up, always runs)"
        )
    checked = [i for i in wanted if is_checked(code[i])]
    if checked:
        raise ValueError(
            f"{path}: cell(s) {checked} are checked by nbval; refresh the whole notebook "
            "(refresh, bin/refresh-outputs) for their reference outputs"
        )
    part = nbformat.v4.new_notebook(metadata=notebook.metadata)
    part.cells = [code[0], *(code[i] for i in wanted)]
    executed, snapshot = execute(part, figures_budget, path, timeout)
    counts = {"figures": 0, "text": 0}
    stamp = provenance(figures_budget)
    for index, drawn in zip(wanted, executed[1:]):
        cell = code[index]
        figures, printed = store_drawn(cell, drawn, snapshot)
        cell.metadata.pop("execution", None)
        cell.metadata["workbench"] = {"outputs": stamp}
        counts["figures"] += figures
        counts["text"] += printed
    nbformat.write(notebook, path)
    return counts


def store_drawn(cell: Any, drawn: Any, snapshot: dict) -> tuple[int, bool]:
    """Give ``cell`` what its execution ``drawn`` printed and each figure it drew as a PNG; the
    figures stored, and whether it printed."""
    text = kept_text(drawn.outputs)
    images = [png_output(figure) for figure in figures_in(drawn.outputs, snapshot)]
    # nbval refuses stored outputs without an execution count ("Unrun reference cell")
    cell.outputs = text + images
    cell.execution_count = drawn.execution_count if cell.outputs else None
    return len(images), bool(text)


def cell_seconds(cell: Any) -> float:
    """How long an executed cell ran, from the timestamps nbclient records in its metadata."""
    from datetime import datetime

    timing = cell.metadata.get("execution", {})
    began, ended = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (began and ended):
        return 0.0

    def parse(stamp: str) -> datetime:  # nbclient ends its stamps in "Z", which 3.10 refuses
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    return (parse(ended) - parse(began)).total_seconds()


def is_checked(cell: Any) -> bool:
    """Whether nbval compares this cell's outputs (``--nbval-lax`` compares marked cells only)."""
    return cell.source.lstrip().startswith(CHECKED)


def provenance(budget: str) -> dict:
    """Where stored outputs came from: budget, commit, machine (what data/ records say too)."""
    from workbench.system import machine_info

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    machine = machine_info()
    devices = ", ".join(machine.cuda_devices) or "no GPU"
    return {
        "budget": budget,
        "commit": commit,
        "machine": f"{machine.cpu_model}, {machine.cores} cores, {devices}",
    }
