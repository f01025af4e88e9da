"""Specifications of the house itself (``docs/architecture.md``): read from the code's own syntax.

1. Every module of ``workbench/`` is readable in one sitting: at most 500 lines; every function
   in one screen: at most 60 lines of code (its docstring, comments and blank lines not counted).
2. No private name crosses a module: no ``from workbench.x import _y``, and no ``obj._name`` where
   ``_name`` is defined only in other modules of the package.
3. No import cycle between the package's modules (at run time: an import under ``if
   TYPE_CHECKING:`` only names a type in annotations, as a config names its algorithm's class).
4. No class hierarchy deeper than 2 (a class and its one workbench base).
5. Arrows go one way: kernels know no learner; learners know no sampler, run, system or screen;
   the core knows none of the course's floors (``course``, ``measure``, ``studies``, ``lab``);
   widgets live in ``lab`` alone, figures also in ``measure`` and ``studies``; Ray is imported only
   by the cluster module and the Ray transports;
   env-only processes (``envs``, ``seed.env_actors``) never import torch.
6. Nothing cites a file outside the repository (the design notes that stayed outside it).
7. An algorithm is chosen once, from its registry (``seed.algorithms``, ``apex.algorithms``): no
   code of the package or the benchmarks compares a config's ``algorithm`` or ``algo`` to a name.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "workbench"
MAX_LINES = 500
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), filename=str(path)) for name, path in MODULES.items()}


def type_only_imports(tree: ast.AST) -> set[int]:
    """The ids of the import statements under ``if TYPE_CHECKING:`` (never run)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            found.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return found


def imported_modules(name: str, *, runtime_only: bool = False) -> set[str]:
    """The workbench modules ``name`` imports (anywhere in it, functions included; with
    ``runtime_only``, not those imported for annotations alone)."""
    found = set()
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    skipped = type_only_imports(TREES[name]) if runtime_only else set()
    for node in ast.walk(TREES[name]):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + [base]
                ).strip(".")
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in MODULES else base)
    return {module for module in found if module in MODULES}


def private_defined(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, methods, attributes it assigns."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def test_every_module_is_at_most_500_lines():
    long = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {name: n for name, n in long.items() if n > MAX_LINES} == {}


def code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    """Lines of ``function``'s body that hold code: no docstring, comment or blank line."""
    body = function.body
    has_docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    start = body[0].end_lineno + 1 if has_docstring else body[0].lineno
    return sum(
        1
        for line in lines[start - 1 : function.end_lineno]
        if line.strip() and not line.strip().startswith("#")
    )


def test_every_function_fits_on_one_screen():
    long = {}
    for name, tree in TREES.items():
        lines = MODULES[name].read_text().splitlines()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count = code_lines(node, lines)
                if count > MAX_FUNCTION_LINES:
                    long[f"{name}.{node.name}:{node.lineno}"] = count
    assert long == {}


def test_no_private_name_is_imported_from_another_module():
    offending = []
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench"):
                offending += [
                    f"{name}: from {node.module} import {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_")
                ]
    assert offending == []


def test_no_private_attribute_crosses_a_module():
    defined = {name: private_defined(tree) for name, tree in TREES.items()}
    everywhere = set().union(*defined.values())
    offending = []
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in everywhere
                and node.attr not in defined[name]
            ):
                offending.append(f"{name}:{node.lineno} .{node.attr}")
    assert offending == []


def test_no_import_cycle():
    graph = {name: imported_modules(name, runtime_only=True) for name in MODULES}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    assert cycles == []


def test_no_class_hierarchy_deeper_than_two():
    classes: dict[str, list[str]] = {}  # "module.Class" -> its workbench bases, resolved
    for name, tree in TREES.items():
        imported = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench"):
                for alias in node.names:
                    imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases = []
                for base in node.bases:
                    if isinstance(base, ast.Name):
                        bases.append(imported.get(base.id, f"{name}.{base.id}"))
                classes[f"{name}.{node.name}"] = bases

    def resolve(qualified: str) -> str | None:
        if qualified in classes:
            return qualified
        module, _, attr = qualified.rpartition(".")  # re-exported by a package's __init__
        for candidate, _ in classes.items():
            if candidate.endswith(f".{attr}") and candidate.startswith(module):
                return candidate
        return None

    def depth(cls: str) -> int:
        bases = [resolved for resolved in map(resolve, classes[cls]) if resolved is not None]
        return 1 + max((depth(base) for base in bases), default=0)

    assert {cls: depth(cls) for cls in classes if depth(cls) > 2} == {}


# The course's floors, above the core: its tooling (``course``), what the benchmarks and notebooks
# measure (``measure``), the papers' studies (``studies``) and the interactive parts (``lab``). Each
# may use the floors below it; the core uses none of them.
COURSE_FLOORS = ("workbench.course", "workbench.measure", "workbench.studies", "workbench.lab")

LAYERS = {
    "workbench.kernels": (
        "workbench.learners",
        "workbench.sampling",
        "workbench.runs",
        "workbench.apex",
        "workbench.seed",
        "workbench.replay",
        *COURSE_FLOORS,
    ),
    "workbench.learners": (
        "workbench.sampling",
        "workbench.runs",
        "workbench.apex",
        "workbench.seed",
        *COURSE_FLOORS,
    ),
    "workbench.replay": (
        "workbench.learners",
        "workbench.sampling",
        "workbench.runs",
        "workbench.apex",
        "workbench.seed",
        *COURSE_FLOORS,
    ),
    "workbench.sampling": (
        "workbench.learners",
        "workbench.runs",
        "workbench.apex",
        "workbench.seed",
        *COURSE_FLOORS,
    ),
    "workbench.runs": ("workbench.apex", "workbench.seed", *COURSE_FLOORS),
    "workbench.apex": ("workbench.seed", "workbench.sampling", *COURSE_FLOORS),
    "workbench.seed": ("workbench.sampling", *COURSE_FLOORS),
    "workbench.envs": ("workbench.models", "workbench.learners", "workbench.kernels"),
    "workbench.course": ("workbench.measure", "workbench.studies", "workbench.lab"),
    "workbench.measure": ("workbench.studies", "workbench.lab"),
    "workbench.studies": ("workbench.lab",),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_arrows_go_one_way(layer):
    offending = []
    for name in MODULES:
        if name == layer or name.startswith(layer + "."):
            for target in imported_modules(name):
                if any(
                    target == banned or target.startswith(banned + ".") for banned in LAYERS[layer]
                ):
                    offending.append(f"{name} -> {target}")
    assert offending == []


# Widgets belong to the lab; figures (plotly) also to the floors that measure and study. The one
# exception is the tooling that stores a notebook's outputs: it reads the widgets' figures.
STORES_OUTPUTS = "workbench.course.stored_outputs"
WIDGET_HOMES = {
    "ipywidgets": ("workbench.lab", STORES_OUTPUTS),
    "IPython": ("workbench.lab",),
    "anywidget": ("workbench.lab",),
    "plotly": ("workbench.lab", "workbench.studies", "workbench.measure", STORES_OUTPUTS),
}


def test_widgets_live_in_the_lab_and_figures_on_the_course_floors():
    offending = []
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            modules = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for module in modules:
                homes = WIDGET_HOMES.get(module.split(".")[0])
                if homes and not any(name == h or name.startswith(h + ".") for h in homes):
                    offending.append(f"{name}: {module}")
    assert offending == []


def test_the_lab_holds_only_interactive_parts():
    """Every module of ``workbench.lab`` imports a widget or figure library: measurement, studies
    and the course's tooling live on their own floors."""
    plain = []
    for name, tree in TREES.items():
        if not name.startswith("workbench.lab."):
            continue
        modules = {
            (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        }
        if not modules & set(WIDGET_HOMES):
            plain.append(name)
    assert plain == []


ALGORITHM_REGISTRIES = {"workbench.seed.algorithms", "workbench.apex.algorithms"}


def names_an_algorithm(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return name in ("algorithm", "algo")


def test_no_algorithm_is_chosen_by_its_name_outside_the_registries():
    trees = dict(TREES)
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        trees[f"benchmarks.{path.stem}"] = ast.parse(path.read_text(), filename=str(path))
    offending = []
    for name, tree in trees.items():
        if name in ALGORITHM_REGISTRIES:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(map(names_an_algorithm, sides)) and any(
                    isinstance(side, ast.Constant) and isinstance(side.value, str) for side in sides
                ):
                    offending.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    assert offending == []


def test_one_metric_vocabulary_a_gradient_norm_is_a_loss_row_in_every_learner():
    # A learner's gradient norm is logged beside its losses (``losses/grad_norm``, DDPG's
    # ``losses/critic_grad_norm``), never under ``charts/``, so one chart reads every algorithm.
    keys = {
        node.value
        for name, tree in TREES.items()
        if name.startswith("workbench.learners")
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if node.value.endswith("grad_norm") and "/" in node.value
    }
    assert keys and {key.split("/")[0] for key in keys} == {"losses"}, keys


def test_ray_is_imported_only_by_the_cluster_module_and_the_ray_transports():
    allowed = {
        "workbench.cluster",
        "workbench.apex.transports.ray",
        "workbench.seed.transports.ray",
        "workbench.seed.transports.ray_server",
        "workbench.seed.transports.ray_learner",
    }
    offending = []
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            modules = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(m == "ray" or m.startswith("ray.") for m in modules) and name not in allowed:
                offending.append(name)
    assert offending == []


@pytest.mark.parametrize(
    "module",
    [
        "workbench.envs",
        "workbench.seed.env_actors",
        "workbench.seed.transports",
        "workbench.processes",
        "workbench.cluster",
        "workbench.reaper",
        "workbench.seed.transports.batching",
    ],
)
def test_env_only_modules_never_import_torch(module):
    code = f"import sys, json, {module}; print(json.dumps('torch' in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert json.loads(result.stdout) is False


def test_nothing_cites_a_file_outside_the_repository():
    outside = ("DESIGN.md", "NOTES.md", "STYLE.md")
    files = [
        *PACKAGE.rglob("*.py"),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "benchmarks").rglob("*.py"),
        *(ROOT / "notebooks").glob("*.ipynb"),
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
    ]
    citing = defaultdict(list)
    for path in files:
        if path == Path(__file__):
            continue
        text = path.read_text()
        for name in outside:
            if name in text:
                citing[str(path.relative_to(ROOT))].append(name)
    assert dict(citing) == {}
