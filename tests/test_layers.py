"""The package's imports point downward only.

The layer table lives in the docstring of ``loaderx/__init__.py``; every
module of the package must appear in it, and each module may import only
modules from rows below its own (type-checking and function-local imports
included), and never a private name of a public module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import loaderx

PACKAGE = Path(loaderx.__file__).resolve().parent  # the package under test, checkout or installed
MARKER = "Layers, top to bottom"


def layer_table(doc: str) -> list[list[str]]:
    """The rows of the literal block that follows MARKER, top row first."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(MARKER))
    while not lines[start].rstrip().endswith("::"):
        start += 1
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if not line.strip():
            if rows:
                break
            continue
        if not line.startswith("    "):
            break
        rows.append(line.split())
    return rows


def imports_of(tree: ast.Module, modules: set[str]) -> list[tuple[int, str, list[str]]]:
    """``(line, imported loaderx module, names taken from it)`` for every
    import of a loaderx module in ``tree``, wherever it stands (relative
    imports resolve to the package: it is flat). A name taken from the package
    that is one of its ``modules`` counts as an import of that module, any
    other name as an import from ``__init__``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "loaderx" and len(parts) > 1:
                    found.append((node.lineno, parts[1], []))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = ["loaderx"] + (node.module.split(".") if node.module else [])
            else:
                parts = (node.module or "").split(".")
            if parts[0] != "loaderx":
                continue
            names = [alias.name for alias in node.names]
            if len(parts) > 1:
                found.append((node.lineno, parts[1], names))
            else:
                for name in names:
                    if name in modules:
                        found.append((node.lineno, name, []))
                    else:
                        found.append((node.lineno, "__init__", [name]))
    return found


def violations(sources: dict[str, str], rows: list[list[str]]) -> list[str]:
    """Every breach of the layer rules in ``sources`` (module -> source)."""
    rank = {name: len(rows) - k for k, row in enumerate(rows) for name in row}
    modules = set(sources) | set(rank)
    problems = []
    for module, source in sorted(sources.items()):
        for line, target, names in imports_of(ast.parse(source), modules):
            where = f"loaderx/{module}.py:{line}"
            if not target.startswith("_"):
                private = [n for n in names if n.startswith("_")]
                if private:
                    problems.append(f"{where} imports private {', '.join(private)} from public {target}")
            if module == "__init__":
                continue  # the package module re-exports from every layer
            if target == "__init__":
                problems.append(f"{where} imports {', '.join(names)} from the package module")
            elif target not in rank:
                problems.append(f"{where} imports {target}, which is not in the layer table")
            elif rank[target] >= rank[module]:
                problems.append(f"{where}: {module} imports {target}, which is not in a lower row")
    return problems


def package_sources() -> dict[str, str]:
    return {path.stem: path.read_text() for path in PACKAGE.glob("*.py")}


def test_every_module_is_in_the_layer_table():
    rows = layer_table(ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text())) or "")
    listed = [name for row in rows for name in row]
    assert len(listed) == len(set(listed)), f"a module is listed twice: {rows}"
    modules = {stem for stem in package_sources() if stem != "__init__"}
    assert set(listed) == modules


def test_imports_point_downward():
    rows = layer_table(ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text())) or "")
    assert violations(package_sources(), rows) == []


@pytest.mark.parametrize(
    ("importer", "source", "complaint"),
    [
        ("low", "from loaderx.dataset import DenseDataset\n", "not in a lower row"),
        ("low", "def f():\n    import loaderx.top\n", "not in a lower row"),
        ("low", "from . import low2\n", "not in a lower row"),  # same row
        ("low", "if TYPE_CHECKING:\n    from loaderx import top\n", "not in a lower row"),
        ("top", "from loaderx.low import _helper\n", "imports private _helper from public low"),
        ("low", "from loaderx import set_num_threads\n", "from the package module"),
        ("low", "import loaderx.elsewhere\n", "not in the layer table"),
    ],
)
def test_the_checker_catches(importer, source, complaint):
    rows = [["top", "dataset"], ["low", "low2"]]
    problems = violations({importer: source}, rows)
    assert len(problems) == 1 and complaint in problems[0], problems


def test_the_checker_allows_downward_imports():
    rows = [["top"], ["mid"], ["_low"]]
    sources = {
        "top": "from loaderx.mid import Thing\nfrom loaderx._low import helper\n",
        "mid": "from ._low import helper\nfrom loaderx import _low\n",
        "_low": "import numpy\n",
    }
    assert violations(sources, rows) == []
