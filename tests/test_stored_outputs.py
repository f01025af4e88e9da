"""What a notebook keeps in the repository (``workbench.course.stored_outputs``): nbval's checked
outputs from the ci budget, printed text, and every figure as a PNG that GitHub can show,
including a live panel's figure in its final state."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys

import nbformat
import pytest

from workbench.course import stored_outputs

pytest.importorskip("kaleido")

CELLS = [
    "# NBVAL_CHECK_OUTPUT\nprint(6 * 7)",
    "import os\nprint('budget', os.environ['WORKBENCH_BUDGET'])",
    "import plotly.graph_objects as go\n"
    "go.Figure(go.Bar(x=[1, 2], y=[3, 4]), layout_title_text='bars')",
    "import ipywidgets as w\nlive = go.FigureWidget(go.Scatter(x=[1, 2], y=[2, 1]))\n"
    "w.VBox([w.HTML('a panel'), live])",
    "live.data[0].y = [5, 6]  # the run goes on after the panel is shown",
    "import sys\nprint('noise', file=sys.stderr)",
]


def write_tiny(folder) -> str:
    """The notebook of ``CELLS`` as ``folder/tiny.ipynb``, never run; its path."""
    path = folder / "tiny.ipynb"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    nbformat.write(notebook, str(path))
    return str(path)


@pytest.fixture
def notebook_path(tmp_path):
    return write_tiny(tmp_path)


@pytest.fixture(scope="module")
def refreshed(tmp_path_factory):
    """The tiny notebook refreshed once at ``ci`` for the module, and what ``refresh`` counted.
    Read it in place; copy it (``refreshed_copy``) before changing it."""
    path = write_tiny(tmp_path_factory.mktemp("refreshed"))
    counts = stored_outputs.refresh(path, "ci", timeout=120)
    return path, counts


def refreshed_copy(refreshed, tmp_path) -> str:
    """A copy of the module's refreshed notebook in this test's own folder (same name)."""
    path, _ = refreshed
    return str(shutil.copy(path, tmp_path / "tiny.ipynb"))


def test_the_kernel_runs_at_the_asked_budget_and_a_live_figure_is_snapshotted_in_its_final_state(
    notebook_path,
):
    # One execution at "full": the kernel sees the budget asked for while this process keeps its
    # own environment, and the live panel's figure is snapshotted as the run left it.
    before = dict(os.environ)
    notebook = nbformat.read(notebook_path, as_version=4)
    cells, snapshot = stored_outputs.execute(notebook, "full", notebook_path, timeout=120)
    panel_figures = stored_outputs.figures_in(cells[3].outputs, snapshot)
    assert len(panel_figures) == 1
    assert list(panel_figures[0]["data"][0]["y"]) == [5, 6]
    assert cells[1].outputs[0]["text"] == "budget full\n"
    assert dict(os.environ) == before


def test_refresh_keeps_checked_outputs_text_and_each_figure_as_a_png(refreshed):
    notebook_path, counts = refreshed
    assert counts == {"checked": 1, "figures": 2, "text": 1, "slow_cells": {}}
    cells = nbformat.read(notebook_path, as_version=4).cells
    checked, printed, bars, panel, update, noise = cells
    assert checked.execution_count is not None and checked.outputs[0]["text"] == "42\n"
    assert printed.outputs[0]["text"] == "budget ci\n"
    for cell in (bars, panel):
        (image,) = cell.outputs
        assert base64.b64decode(image["data"]["image/png"]).startswith(b"\x89PNG")
    assert bars.outputs[0]["data"]["text/plain"] == "<figure: bars>"
    assert update.outputs == [] and noise.outputs == []  # no stderr, no widget state
    stored = nbformat.read(notebook_path, as_version=4).metadata
    assert "widgets" not in stored and stored["workbench"]["outputs"]["budget"] == "ci"


def test_nbval_passes_a_refreshed_notebook_and_still_checks_its_checked_cells(refreshed, tmp_path):
    notebook_path = refreshed_copy(refreshed, tmp_path)
    nbval = [sys.executable, "-m", "pytest", notebook_path, "--nbval-lax", "--nbval-current-env"]
    nbval += ["-p", "no:cacheprovider", "-q"]
    env = {**os.environ, "WORKBENCH_BUDGET": "ci"}
    passed = subprocess.run(nbval, capture_output=True, text=True, timeout=300, env=env)
    assert passed.returncode == 0, passed.stdout[-3000:]
    notebook = nbformat.read(notebook_path, as_version=4)
    notebook.cells[0].outputs[0]["text"] = "41\n"  # a wrong reference value must fail
    nbformat.write(notebook, notebook_path)
    failed = subprocess.run(nbval, capture_output=True, text=True, timeout=300, env=env)
    assert failed.returncode == 1 and "tiny.ipynb::Cell 0" in failed.stdout, failed.stdout[-3000:]


def test_a_long_print_is_cut_and_says_so():
    output = nbformat.v4.new_output("stream", name="stdout", text="x\n" * 100)
    (kept,) = stored_outputs.kept_text([output])
    lines = kept["text"].splitlines()
    assert len(lines) == stored_outputs.MAX_TEXT_LINES + 1
    assert lines[-1] == f"... ({100 - stored_outputs.MAX_TEXT_LINES} more lines)"


def test_keep_checked_keeps_stored_checked_outputs_and_runs_once_at_the_figures_budget(
    refreshed, tmp_path
):
    notebook_path = refreshed_copy(refreshed, tmp_path)
    notebook = nbformat.read(notebook_path, as_version=4)
    notebook.cells[0].outputs[0]["text"] = "stored\n"  # what nbval passed; an execution prints 42
    nbformat.write(notebook, notebook_path)
    stored_outputs.refresh(notebook_path, "full", timeout=120, keep_checked=True)
    cells = nbformat.read(notebook_path, as_version=4).cells
    assert cells[0].outputs[0]["text"] == "stored\n"
    assert cells[1].outputs[0]["text"] == "budget full\n"


def test_keep_checked_refuses_a_checked_cell_without_a_stored_output(notebook_path):
    with pytest.raises(ValueError, match="without keep_checked"):
        stored_outputs.refresh(notebook_path, "full", timeout=120, keep_checked=True)


def test_refresh_reports_how_long_each_slow_cell_ran(tmp_path, monkeypatch):
    path = str(tmp_path / "slow.ipynb")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("*Expected time: about a second.*"),
        nbformat.v4.new_code_cell("print('quick')"),
        nbformat.v4.new_code_cell("import time\ntime.sleep(1.6)"),
    ]
    nbformat.write(notebook, path)
    monkeypatch.setattr(stored_outputs, "SLOW_CELL_SECONDS", 1.0)
    counts = stored_outputs.refresh(path, "ci", timeout=120)
    assert list(counts["slow_cells"]) == [1]  # nbval's numbering: code cells only
    assert 2 <= counts["slow_cells"][1] <= 4


def test_refresh_cells_runs_the_set_up_and_those_cells_and_stores_only_theirs(tmp_path):
    path = str(tmp_path / "records.ipynb")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("RECORD = 'new'"),  # the set-up
        nbformat.v4.new_markdown_cell("A chart of the records:"),
        nbformat.v4.new_code_cell("raise RuntimeError('a study that must not rerun')"),
        nbformat.v4.new_code_cell(
            "import plotly.graph_objects as go\nprint('record', RECORD)\n"
            "go.Figure(go.Bar(x=[1], y=[RECORD.count('e')]), layout_title_text='records')"
        ),
    ]
    study = nbformat.v4.new_output("stream", name="stdout", text="stored study\n")
    notebook.cells[2].outputs = [study]
    nbformat.write(notebook, path)
    counts = stored_outputs.refresh_cells(path, [2], "ci", timeout=120)
    cells = nbformat.read(path, as_version=4).cells
    assert counts == {"figures": 1, "text": 1}
    assert cells[2].outputs[0]["text"] == "stored study\n"  # left as it was, not executed
    assert cells[3].outputs[0]["text"] == "record new\n"
    assert cells[3].outputs[1]["data"]["text/plain"] == "<figure: records>"
    assert cells[3].metadata["workbench"]["outputs"]["budget"] == "ci"
    assert cells[0].outputs == []  # the set-up ran, its outputs are not stored


def test_refresh_cells_refuses_a_checked_cell_and_a_cell_out_of_range(tmp_path):
    path = str(tmp_path / "checked.ipynb")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in ("x = 1", *CELLS[:2])]
    nbformat.write(notebook, path)
    with pytest.raises(ValueError, match="checked by nbval"):
        stored_outputs.refresh_cells(path, [1, 2], "ci")
    with pytest.raises(ValueError, match="must name code cells 1-2"):
        stored_outputs.refresh_cells(path, [3], "ci")
