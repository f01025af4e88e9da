"""The course as a reader meets it: the tour's map lists every notebook, and every notebook ends
with exercises, their worked answers folded, and the glossary entries it uses (``docs/glossary.md``
holds each definition once)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from workbench.course.quotes import check_notebook, unreferenced

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ENTRY = re.compile(r"^- \*\*(?P<term>[^*]+)\*\*: ", re.MULTILINE)


def entries(markdown: str) -> dict[str, str]:
    """Glossary entries of a markdown text: term -> its whole entry, continuation lines joined."""
    starts = list(ENTRY.finditer(markdown))
    found = {}
    for match, following in zip(starts, starts[1:] + [None]):
        end = following.start() if following else len(markdown)
        found[match["term"]] = " ".join(markdown[match.start() : end].split())
    return found


GLOSSARY = entries((ROOT / "docs" / "glossary.md").read_text())


def cells(path: Path) -> list[nbformat.NotebookNode]:
    return nbformat.read(path, as_version=4).cells


def test_the_course_has_its_notebooks_and_the_glossary_its_terms():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{n:02d}" for n in range(len(NOTEBOOKS))]
    assert len(NOTEBOOKS) >= 11 and len(GLOSSARY) >= 20


def test_the_tour_maps_every_notebook_in_order():
    tour = next(c.source for c in cells(NOTEBOOKS[0]) if "The path through the course" in c.source)
    rows = re.findall(r"^\| \*\*(\d\d) ", tour, re.MULTILINE)
    assert rows == [p.name[:2] for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_ends_with_exercises_answers_and_glossary(path):
    exercises, answers, glossary = (c.source for c in cells(path)[-3:])
    assert exercises.startswith("## Exercises"), exercises[:80]
    numbered = re.findall(r"^(\d+)\. ", exercises, re.MULTILINE)
    assert 3 <= len(numbered) <= 5 and numbered == [str(i + 1) for i in range(len(numbered))]
    assert answers.lstrip().startswith("<details>") and answers.rstrip().endswith("</details>")
    assert re.findall(r"^(\d+)\. ", answers, re.MULTILINE) == numbered  # one answer each
    assert glossary.startswith("## Glossary")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_glossary_entry_is_the_course_glossary_s_own(path):
    used = entries(cells(path)[-1].source)
    assert used, "a glossary with no entries"
    assert {term: text for term, text in used.items() if GLOSSARY.get(term) != text} == {}


# Calls that take more than a few seconds at the ci budget: a study, a live run's wait, a sweep.
LONG_CALLS = re.compile(
    r"\b(\w+_study|memory_matters|return_over_time|apex_throughput|latency_sweep|learner_scaling"
    r"|throughput_over_nodes|measure_vector_env|measure_sampler|measure_inference|naive_loop"
    r"|sync_vs_async|simulated_cluster|communicate)\(|\.wait\(|wait_for_row\("
)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_long_call_has_its_expected_time_in_the_text_above(path):
    """The reader knows before running a cell whether it takes seconds or a quarter of an hour."""
    text_above, missing = "", []
    for cell in cells(path)[:-3]:  # the exercises run nothing
        if cell.cell_type == "markdown":
            text_above = cell.source
        elif LONG_CALLS.search(cell.source) and "*Expected time" not in text_above:
            missing.append(cell.source.splitlines()[0])
        elif cell.cell_type == "code" and LONG_CALLS.search(cell.source):
            text_above = ""  # one statement per long cell: a second needs its own
    assert not missing, missing


# A code cell whose result is a figure or a panel: its last line names one, or draws one.
DRAWS = re.compile(r"^(figure|\w*panel|plots\.\w+\(.*|\w+_figure\(.*|\w+\.figure)$")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_is_stored_as_an_image_a_reader_sees_without_running(path):
    """GitHub runs no JavaScript: a figure shows there only as a stored PNG
    (bin/refresh-outputs)."""
    notebook = nbformat.read(path, as_version=4)
    assert {"budget", "commit", "machine"} <= set(notebook.metadata["workbench"]["outputs"])
    missing = []
    for cell in notebook.cells:
        lines = cell.source.strip().splitlines()
        if cell.cell_type != "code" or not lines or not DRAWS.match(lines[-1]):
            continue
        if not any("image/png" in output.get("data", {}) for output in cell.outputs):
            missing.append(lines[-1])
    assert not missing, f"no stored image; run bin/refresh-outputs {path.name}: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_referenced_number_holds_for_the_stored_run(path):
    """A number the text quotes with a reference (docs/quoting.md) is true of the stored output or
    the record it names (workbench.course.quotes; tests/test_quotes.py shows it failing)."""
    assert check_notebook(cells(path), ROOT / "data") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_measured_number_in_the_text_says_where_it_comes_from(path):
    """A number with a measurement's unit (steps/s, MB, ms, s, %, a ratio, env steps, updates) in
    prose or an answer carries a reference to the stored output or record it describes, or names
    its source (``cite:``: a paper, another project), or is a setting (``setting``), or is derived
    from two referenced numbers beside it (``derived``, checked). docs/quoting.md."""
    assert unreferenced(cells(path)) == []


MACHINE_PATH = re.compile(r"(/tmp/|/work/|/home/|/root/|/opt/|\.venv/|site-packages)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_stored_output_shows_a_folder_of_the_machine_that_ran_it(path):
    """A reader's machine has other folders: outputs name runs and records relative to the repo."""
    found = []
    for index, cell in enumerate(cells(path)):
        for output in cell.get("outputs", []):
            texts = ["".join(output.get("text", ""))]
            data = output.get("data", {})
            texts += ["".join(v) for k, v in data.items() if k.startswith("text/")]
            found += [f"cell {index}: {m.group()}" for t in texts for m in MACHINE_PATH.finditer(t)]
    assert found == [], f"refresh with paths relative to the repository: {found}"


IMAGE = re.compile(r"!\[[^\]]*\]\((?P<path>[^)\s]+)\)")
DIAGRAMS = {  # each system's architecture, drawn where the course first builds it
    "02_batched_sampler": "samplers.svg",
    "06_ape_x": "apex.svg",
    "07_seed_central_inference": "seed_vs_impala.svg",
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_image_the_text_shows_is_in_the_repository(path):
    """GitHub and JupyterLab both show a relative image; a missing file shows as a broken link."""
    linked = [
        m["path"]
        for c in cells(path)
        if c.cell_type == "markdown"
        for m in IMAGE.finditer(c.source)
    ]
    assert [p for p in linked if not (path.parent / p).is_file()] == []


@pytest.mark.parametrize("stem, figure", sorted(DIAGRAMS.items()))
def test_each_systems_architecture_is_drawn_where_it_is_first_built(stem, figure):
    import xml.etree.ElementTree as ElementTree

    opening = cells(ROOT / "notebooks" / f"{stem}.ipynb")[0].source
    assert f"../docs/figures/{figure}" in opening
    svg = ElementTree.parse(ROOT / "docs" / "figures" / figure).getroot()
    assert svg.tag.endswith("svg") and svg.find("{http://www.w3.org/2000/svg}title").text


def test_apex_algorithms_1_and_2_name_code_that_exists():
    """Notebook 06 maps each line of Horgan et al.'s Algorithms 1 and 2 to the code doing it; a
    renamed function must not leave the table pointing at nothing."""
    import importlib

    table = next(
        c.source
        for c in cells(ROOT / "notebooks" / "06_ape_x.ipynb")
        if "Algorithms 1 and 2" in c.source
    )
    assert len(re.findall(r"^\| [12]", table, re.MULTILINE)) >= 12  # every line of both
    missing = []
    for name in sorted(set(re.findall(r"`(workbench(?:\.\w+)+)`", table))):
        parts = name.split(".")
        for cut in range(len(parts), 1, -1):  # the longest importable module, then attributes
            try:
                target = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attribute in parts[cut:]:
                target = getattr(target, attribute, None)
            if target is None:
                missing.append(name)
            break
        else:
            missing.append(name)  # not even its package imports
    assert missing == []


def term_patterns(term: str) -> list[re.Pattern]:
    """How a glossary term shows in a notebook: either side of 'a / b', '_' or '-' as a space, a
    plural; not inside a longer name."""
    patterns = []
    for part in term.split(" / "):
        spellings = {part, part.replace("_", " "), part.replace("-", " "), part.replace("z", "s")}
        if part.endswith("y"):
            spellings.add(part[:-1] + "ies")
        words = "|".join(re.escape(s) for s in sorted(spellings))
        patterns.append(re.compile(rf"(?<![\w.])({words})(s|es)?(?!\w)", re.IGNORECASE))
    return patterns


def terms_used(notebook_cells: list) -> list[str]:
    """The glossary's terms a notebook's text or code uses, in the glossary's order (not the hidden
    references' record paths, which a reader never sees)."""
    text = re.sub(r"<!--.*?-->", " ", "\n".join(c.source for c in notebook_cells[:-1]), flags=re.S)
    return [t for t in GLOSSARY if any(p.search(text) for p in term_patterns(t))]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_s_glossary_lists_exactly_the_terms_it_uses(path):
    """A reader looks a term up at the end of the notebook that uses it, and finds no padding."""
    notebook_cells = cells(path)
    assert list(entries(notebook_cells[-1].source)) == terms_used(notebook_cells)
