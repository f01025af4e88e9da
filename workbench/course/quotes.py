"""Numbers the course's text quotes, tied to the outputs and records they describe.

A figure in a notebook's prose or worked answers is either printed by a code cell or carries a
reference, an HTML comment right after it (hidden where Jupyter or GitHub render the markdown), that
names where the number comes from; ``tests/test_course.py`` checks every reference against the
stored notebook and ``data/`` without running anything, so the words cannot drift from the run
they describe (``docs/quoting.md`` says how an author writes them):

    SEED's actors stay near 48 MB<!--out:costs "16" #2--> against 273 MB<!--out:costs "16" #5-->
    the batch study's 512 x 32 run reached 500<!--out:batches "512x32" >=-->
    seed 0 reached 18 after 1,583,104 env steps<!--data:learning_ppo_pong_fast.json
    recipes.ppo-pong-fast.runs[seed=0].steps_to_target-->

``out:TAG`` reads the text outputs of the code cell whose metadata ``tags`` hold ``TAG``;
``"label"`` picks the first output line holding it and the first number after it (``#N``: the N-th).
Without a label the quote must equal some number the cell printed. ``data:FILE PATH`` reads a JSON
record in ``data/``: dotted keys, ``[i]`` an index, ``[key=value,...]`` the first row that matches.

A divisor after the path scales the value to the quote's unit (``/1e6`` for "1.48M"). The quote
must equal the value at the quote's precision (2.3 stands for 2.25 to 2.35), unless a comparison
follows: ``~P%`` (within P percent: "about"), or ``<``, ``<=``, ``>``, ``>=`` (the
value against the quote: "never reaches 475" is ``max <`` 475).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Quote", "QuoteError", "check_notebook", "quotes", "resolve", "unreferenced"]

# "1.00e-03" is one number; the 99 of "p99" is none.
NUMBER = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
REFERENCE = re.compile(
    r"(?P<number>[-+−]?\d[\d,]*(?:\.\d+)?)[^<\d\n]{0,24}?"  # the figure, then its unit
    r"<!--\s*(?P<kind>out|data):(?P<spec>(?:(?!-->).)*?)-->",
    re.S,
)
COMPARISON = re.compile(r"\s+(?P<op>~\d+(?:\.\d+)?%|<=|>=|<|>)\s*$")
SCALE = re.compile(r"\s+/(?P<divisor>\d+(?:\.\d+)?(?:e\d+)?)$")


# A number with the unit of a measurement: a rate, a size, a time, a share, a ratio, a count of
# env steps or updates. "4×84×84" and "128 × 32" are shapes, not ratios: "×" or "x" counts only
# where no digit follows.
RESULT = re.compile(
    r"(?<![\w.,/=])(?<![A-Za-z]-)(?P<number>\d[\d,]*(?:\.\d+)?)(?:\s?[kKM])?[\s\u00a0]?"
    r"(?P<unit>(?:env |learner )?steps/s|(?:env )?steps per second|samples/s|transitions/s|"
    r"updates/s|obs/s|observations/s|frames/s|requests/s|MB\b|GB\b|GiB\b|MiB\b|KB\b|kB\b|ms\b|"
    r"µs\b|s\b|seconds\b|min\b|minutes\b|h\b|hours\b|%|[×x](?!\s?\d)(?!\w)|env steps\b|"
    r"(?:learner )?updates\b)"
)
# The numbers listed before a unit share it: "1,918, 1,607 and 1,049 env steps/s", "803 to 1,510",
# "1,350-1,600 steps/s".
CHAINED = re.compile(
    r"(?<![\w.])(?P<number>\d[\d,]*(?:\.\d+)?)(?:\s?[kKM])?\s*"
    r"(?:,\s*and\s|,\s|\sand\s|\sto\s|\sagainst\s|\sor\s|\s?[-–]\s?)\s*$"
)
# Not a result of this project: a cited source's figure, a setting (a hyperparameter, a budget's
# size, a definition), or a figure derived from two referenced ones in the same paragraph (checked).
MARK = re.compile(
    r"<!--\s*(?P<kind>out|data|cite|setting|derived)\b(?P<spec>(?:(?!-->).)*?)-->", re.S
)
HIDDEN = re.compile(r"<!--.*?-->|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$|\]\([^)]*\)|https?://\S+", re.S)
DERIVATIONS = (
    lambda a, b: a / b,
    lambda a, b: 100 * (a / b - 1),
    lambda a, b: 100 * (1 - a / b),
    lambda a, b: a - b,
)


class QuoteError(ValueError):
    """A reference that names no stored output or record: it says which and how to fix it."""


@dataclass(frozen=True)
class Quote:
    """One referenced number in a markdown cell."""

    cell: int
    text: str  # the number as the reader sees it, e.g. "1,547,264"
    kind: str  # "out" or "data"
    spec: str  # what follows "out:" or "data:", the comparison and scale removed
    op: str  # "=" or "~P%" or "<", "<=", ">", ">="
    divisor: float = 1.0  # "/1e6": the text quotes millions

    @property
    def value(self) -> float:
        return as_number(self.text)

    @property
    def decimals(self) -> int:
        return len(self.text.split(".")[1]) if "." in self.text else 0


def as_number(text: str) -> float:
    return float(text.replace(",", "").replace("−", "-"))


def quotes(cells: list[Any]) -> list[Quote]:
    """Every referenced number in the markdown cells of a notebook (nbformat cells)."""
    found = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        for match in REFERENCE.finditer(cell["source"]):
            spec, op = match["spec"].strip(), "="
            comparison = COMPARISON.search(" " + spec)
            if comparison:
                op = comparison["op"]
                spec = (" " + spec)[: comparison.start()].strip()
            divisor = 1.0
            scale = SCALE.search(" " + spec)
            if scale:
                divisor = float(scale["divisor"])
                spec = (" " + spec)[: scale.start()].strip()
            found.append(Quote(index, match["number"], match["kind"], spec, op, divisor))
    return found


def cell_text(cell: Any) -> str:
    """What a reader sees printed under a code cell: its streams and text results."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append("".join(output.get("text", "")))
        elif "text/plain" in output.get("data", {}) and "image/png" not in output["data"]:
            parts.append("".join(output["data"]["text/plain"]))
    return "".join(parts)


def walk(record: Any, path: str) -> Any:
    """``a.b[2].c[key=value].d`` in a JSON record."""
    value = record
    for key, selector in re.findall(r"([^.\[\]]+)?(?:\[([^\]]+)\])?\.?", path):
        if key:
            value = value[key]
        if selector and "=" in selector:
            wanted = dict(pair.split("=", 1) for pair in selector.split(","))
            value = next(
                row for row in value if all(str(row.get(k)) == v for k, v in wanted.items())
            )
        elif selector:
            value = value[int(selector)]
    return value


def resolve(quote: Quote, cells: list[Any], data_dir: Path) -> list[float]:
    """The values ``quote`` may stand for: one, or (an unlabelled ``out``) every number printed."""
    if quote.kind == "data":
        file, _, path = " ".join(quote.spec.split()).partition(" ")
        record_path = data_dir / file
        if not record_path.exists():
            raise QuoteError(f"cell {quote.cell}: no record data/{file}; name a file in data/")
        try:
            return [float(walk(json.loads(record_path.read_text()), path.strip()))]
        except (KeyError, IndexError, StopIteration, TypeError, ValueError) as error:
            raise QuoteError(
                f"cell {quote.cell}: data/{file} has no number at {path.strip()!r} ({error!r})"
            ) from None
    parsed = re.fullmatch(
        r'(?P<tag>[\w.-]+)(?:\s+"(?P<label>[^"]+)")?(?:\s+#(?P<n>\d+))?', quote.spec
    )
    if not parsed:
        raise QuoteError(f'cell {quote.cell}: write out:TAG, out:TAG "label" or out:TAG "label" #N')
    tagged = [c for c in cells if parsed["tag"] in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        raise QuoteError(
            f"cell {quote.cell}: {len(tagged)} code cells are tagged {parsed['tag']!r}; tag the one"
            " whose output the text quotes (cell metadata 'tags')"
        )
    text = cell_text(tagged[0])
    if not parsed["label"]:
        return [as_number(n) for n in NUMBER.findall(text)]
    line = next((line for line in text.splitlines() if parsed["label"] in line), None)
    if line is None:
        raise QuoteError(
            f"cell {quote.cell}: no output line of {parsed['tag']!r} holds {parsed['label']!r}"
        )
    after = NUMBER.findall(line[line.index(parsed["label"]) + len(parsed["label"]) :])
    n = int(parsed["n"] or 1)
    if len(after) < n:
        raise QuoteError(
            f"cell {quote.cell}: {parsed['label']!r} is followed by {len(after)} number(s) in"
            f" {line.strip()!r}, not {n}"
        )
    return [as_number(after[n - 1])]


def holds(quote: Quote, value: float) -> bool:
    """Whether the quoted number is true of ``value``."""
    q = quote.value
    if quote.op == "=":
        return abs(value - q) <= 0.5 * 10.0**-quote.decimals + 1e-9 * max(1.0, abs(q))
    if quote.op.startswith("~"):
        return abs(value - q) <= float(quote.op[1:-1]) / 100 * abs(value)
    return {"<": value < q, "<=": value <= q, ">": value > q, ">=": value >= q}[quote.op]


def check_notebook(cells: list[Any], data_dir: Path) -> list[str]:
    """Every referenced number that its stored output or record does not support, as a message."""
    wrong = []
    for quote in quotes(cells):
        values = [value / quote.divisor for value in resolve(quote, cells, data_dir)]
        if not any(holds(quote, value) for value in values):
            shown = ", ".join(f"{v:g}" for v in values[:8]) + (" ..." if len(values) > 8 else "")
            source = f"{quote.kind}:{quote.spec}"
            wrong.append(f"cell {quote.cell}: {quote.text} ({quote.op}) but {source} gives {shown}")
    return wrong


def _masked(text: str) -> str:
    """``text`` with comments, code spans, math, link targets and URLs blanked (same length)."""
    return HIDDEN.sub(lambda m: " " * len(m.group()), text)


def _paragraphs(source: str) -> list[tuple[int, int]]:
    """Spans of the paragraphs (and list items' runs of lines) of a markdown text, less the
    expected-time lines (estimates that ``test_course`` checks on their own)."""
    spans = [m.span() for m in re.finditer(r"(?:[^\n]|\n(?!\s*\n))+", source)]
    return [(a, b) for a, b in spans if not source[a:b].lstrip().startswith("*Expected time")]


def _results(masked: str, start: int, end: int) -> list[tuple[str, str, int]]:
    """Each result of ``masked[start:end]``, a ``RESULT`` and the numbers ``CHAINED`` before it:
    what the reader sees, the number, and where its reference must start (after the unit, or after
    a listed number)."""
    found = []
    for match in RESULT.finditer(masked, start, end):
        found.append((match.group(), match["number"], match.end()))
        before = match.start()
        while chained := CHAINED.search(masked, start, before):
            found.append((chained["number"], chained["number"], chained.end("number")))
            before = chained.start()
    return sorted(found, key=lambda item: item[2])


def _derivable(number: str, referenced: list[float]) -> bool:
    """Whether two of ``referenced`` give ``number`` (at its precision) as a ratio, a percent
    change or a difference."""
    quote = Quote(-1, number, "derived", "", "=")
    return any(
        holds(quote, abs(f(a, b)))
        for a in referenced
        for b in referenced
        if a != b and b
        for f in DERIVATIONS
    )


def unreferenced(cells: list[Any]) -> list[str]:
    """Numbers with a measurement's unit in the markdown (``RESULT``) that carry no reference
    (``out:``, ``data:``), no ``cite:SOURCE`` and no ``setting`` mark; and numbers marked
    ``derived`` that no two referenced numbers of their paragraph give. The glossary, which
    defines rather than reports, is left out."""
    found = []
    for index, cell in enumerate(cells):
        source = cell["source"]
        if cell["cell_type"] != "markdown" or source.lstrip().startswith("## Glossary"):
            continue
        masked = _masked(source)
        for start, end in _paragraphs(source):
            referenced = [
                as_number(ref.group(1))
                for ref in re.finditer(
                    r"(" + NUMBER.pattern + r")[^<\d\n]{0,24}?<!--\s*(?:out|data):",
                    source[start:end],
                )
            ]
            for shown, number, at in _results(masked, start, end):
                tail = source[at : at + 600]  # a reference may run over lines
                mark = re.match(r"[^<\d\n]{0,24}?" + MARK.pattern, tail, re.S)
                seen = " ".join(masked[max(start, at - 60) : min(end, at + 20)].split())
                if mark is None or (mark["kind"] == "cite" and not mark["spec"].strip(": ")):
                    found.append(f"cell {index}: {shown!r} has no reference: ...{seen}...")
                elif mark["kind"] == "derived" and not _derivable(number, referenced):
                    given = ", ".join(f"{v:g}" for v in referenced)
                    found.append(
                        f"cell {index}: {number} is marked derived, but no two referenced"
                        f" numbers of its paragraph ({given}) give it"
                    )
    return found
