"""The package's imports point downward only.

The layer table lives in the docstring of ``loaderx/__init__.py``; every
module of the package, those of its subpackages included (named
``store._native``, ``loader.dataloader`` ...), must appear in it, and each
module may import only modules from rows below its own (type-checking and
function-local imports included, relative imports resolved against the
importing module's package), and never a private name of a public module.
A subpackage's own ``__init__`` is not a row: it holds a docstring and
imports nothing, so importing one submodule costs only that submodule.
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


def is_package_module(module: str) -> bool:
    """``__init__`` (the package) or ``store.__init__`` (a subpackage)."""
    return module.rsplit(".", 1)[-1] == "__init__"


def package_of(module: str) -> list[str]:
    """The package a module's relative imports start from, as parts below
    loaderx: ``[]`` for ``cli``, ``["store"]`` for ``store._native`` and for
    ``store.__init__``."""
    return module.split(".")[:-1]


def imports_of(tree: ast.Module, modules: set[str], importer: str = "") -> list[tuple[int, str, list[str]]]:
    """``(line, imported loaderx module, names taken from it)`` for every
    import of a loaderx module in ``tree``, wherever it stands; relative
    imports resolve against the package of ``importer``. A name taken from a
    package that is one of ``modules`` (``from loaderx.store import _native``)
    counts as an import of that module, any other name as an import from the
    package module (``__init__``, or ``store.__init__``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "loaderx" and len(parts) > 1:
                    target = ".".join(parts[1:])
                    if target not in modules and f"{target}.__init__" in modules:
                        target = f"{target}.__init__"
                    found.append((node.lineno, target, []))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_of(importer)
                if node.level > 1:
                    base = base[: len(base) - (node.level - 1)]
                base = base + (node.module.split(".") if node.module else [])
            else:
                parts = (node.module or "").split(".")
                if parts[0] != "loaderx":
                    continue
                base = parts[1:]
            dotted = ".".join(base)
            if dotted and dotted in modules:
                found.append((node.lineno, dotted, [alias.name for alias in node.names]))
                continue
            for alias in node.names:
                name = ".".join([*base, alias.name])
                if name in modules:
                    found.append((node.lineno, name, []))
                else:
                    found.append((node.lineno, ".".join([*base, "__init__"]), [alias.name]))
    return found


def violations(sources: dict[str, str], rows: list[list[str]]) -> list[str]:
    """Every breach of the layer rules in ``sources`` (module -> source)."""
    rank = {name: len(rows) - k for k, row in enumerate(rows) for name in row}
    modules = set(sources) | set(rank)
    problems = []
    for module, source in sorted(sources.items()):
        for line, target, names in imports_of(ast.parse(source), modules, module):
            where = f"loaderx/{module.replace('.', '/')}.py:{line}"
            if not is_package_module(target) and not target.rsplit(".", 1)[-1].startswith("_"):
                private = [n for n in names if n.startswith("_")]
                if private:
                    problems.append(f"{where} imports private {', '.join(private)} from public {target}")
            if module == "__init__":
                continue  # the package module re-exports from every layer
            if is_package_module(target):
                owner = "the package module" if target == "__init__" else f"the package module of {target[:-9]}"
                problems.append(f"{where} imports {', '.join(names) or target} from {owner}")
            elif target not in rank:
                problems.append(f"{where} imports {target}, which is not in the layer table")
            elif is_package_module(module):
                problems.append(f"{where}: the package module {module} imports {target}; it holds only a docstring")
            elif module not in rank:
                continue  # table_problems reports the module itself
            elif rank[target] >= rank[module]:
                problems.append(f"{where}: {module} imports {target}, which is not in a lower row")
    return problems


def table_problems(sources: dict[str, str], rows: list[list[str]]) -> list[str]:
    """Modules listed twice, missing from the table, or listed but absent."""
    listed = [name for row in rows for name in row]
    modules = {name for name in sources if not is_package_module(name)}
    problems = [f"{name} is listed twice" for name in sorted({n for n in listed if listed.count(n) > 1})]
    problems += [f"{name} is not in the layer table" for name in sorted(modules - set(listed))]
    problems += [f"{name} is in the layer table but not in the package" for name in sorted(set(listed) - modules)]
    return problems


def module_name(path: Path) -> str:
    """``cli`` for loaderx/cli.py, ``store._native`` for loaderx/store/_native.py."""
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


def package_sources() -> dict[str, str]:
    """Every module of the package and of its subpackages (directories with
    an ``__init__.py``; ``lib/`` holds the native library)."""
    paths = list(PACKAGE.glob("*.py"))
    for init in PACKAGE.glob("*/__init__.py"):
        paths += init.parent.glob("*.py")
    return {module_name(path): path.read_text() for path in paths}


def package_rows() -> list[list[str]]:
    return layer_table(ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text())) or "")


def test_every_module_is_in_the_layer_table():
    sources = package_sources()
    assert {"store._native", "loader.dataloader", "io.arrow", "integrations.torch"} <= set(sources)
    assert table_problems(sources, package_rows()) == []


def test_imports_point_downward():
    assert violations(package_sources(), package_rows()) == []


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
        # subpackages: relative imports resolve against the importer's package
        ("sub._low", "from .mid import Thing\n", "sub._low imports sub.mid, which is not in a lower row"),
        ("sub._low", "from . import mid\n", "sub._low imports sub.mid, which is not in a lower row"),
        ("sub._low", "from ..top import thing\n", "sub._low imports top, which is not in a lower row"),
        ("sub._low", "from .. import dataset\n", "sub._low imports dataset, which is not in a lower row"),
        ("sub.mid", "from loaderx.sub import mid2\n", "sub.mid imports sub.mid2, which is not in a lower row"),
        ("low", "import loaderx.sub.mid\n", "low imports sub.mid, which is not in a lower row"),
        ("top", "from loaderx.sub.mid import _helper\n", "imports private _helper from public sub.mid"),
        ("top", "from .sub.mid import _helper\n", "imports private _helper from public sub.mid"),
        ("top", "from loaderx.sub import Thing\n", "imports Thing from the package module of sub"),
        ("top", "import loaderx.sub.elsewhere\n", "imports sub.elsewhere, which is not in the layer table"),
        ("sub.__init__", "from .mid import Thing\n", "the package module sub.__init__ imports sub.mid"),
    ],
)
def test_the_checker_catches(importer, source, complaint):
    rows = [["top", "dataset"], ["sub.mid", "sub.mid2"], ["low", "low2", "sub._low"]]
    problems = violations({importer: source}, rows)
    assert len(problems) == 1 and complaint in problems[0], problems


def test_the_checker_allows_downward_imports():
    rows = [["top"], ["mid", "sub.mid"], ["_low", "sub._low"]]
    sources = {
        "top": "from loaderx.mid import Thing\nfrom loaderx._low import helper\nfrom .sub.mid import Other\n",
        "mid": "from ._low import helper\nfrom loaderx import _low\nfrom loaderx.sub import _low as low\n",
        "_low": "import numpy\n",
        "sub.mid": "from ._low import helper\nfrom .. import _low\nfrom .._low import thing\nimport loaderx.sub._low\n",
        "sub._low": "from __future__ import annotations\n",
        "sub.__init__": '"""A docstring only."""\n',
    }
    assert violations(sources, rows) == []


def test_the_table_check_catches():
    rows = [["top", "sub.mid"], ["sub._low", "gone"], ["top"]]
    sources = {"top": "", "sub.mid": "", "sub._low": "", "sub.new": "", "sub.__init__": ""}
    assert table_problems(sources, rows) == [
        "top is listed twice",
        "sub.new is not in the layer table",
        "gone is in the layer table but not in the package",
    ]
