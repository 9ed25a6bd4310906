"""Every ```python block of README.md and of the documentation site's pages
(docs/**/*.md) runs as pasted.

The unit a reader pastes in order is a README ``## `` section, or a whole
docs page. The blocks of one unit run in order in one fresh interpreter, in
one namespace, inside an empty temporary directory, so a later block may use
names and files an earlier block of the same unit made (the Reading block of
the README opens the store its Quick start wrote). Units start from nothing.
Each block is compiled under its file's name with its own line numbers, so a
failure's traceback points at the line that broke. A unit that imports torch,
jax, pyarrow, ml_dtypes or ray is skipped, with the reason, where that
framework is not installed (the Ray one starts a local cluster of its own). A
unit that names ``s3://my-bucket`` runs against the session's S3 test server
(tests/s3server.py), with its endpoint and credentials in the ``AWS_*``
variables, as a user's would be, the bucket ``my-bucket`` made, and the cache
in the temporary directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import loaderx

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\S*)\s*$")

# Pages whose ```sh blocks run too, after their python blocks, with bash in the same
# directory, `loaderx` being this checkout's command line (python -m loaderx).
SHELL_PAGES = {"docs/guides/cli.md"}

# Runs in the child: argv[1] is the file name, argv[2] a JSON list of [first line, source] blocks.
# A block whose first line reads "# NAME.py: run with python3 NAME.py" is a script
# of its own (worker processes import it by name): it is written to NAME.py and
# run so, with a failure's traceback pointing at the page's line.
DRIVER = """
import json, os, re, subprocess, sys
namespace = {"__name__": "__main__"}
for line, source in json.loads(sys.argv[2]):
    if source.startswith("#!sh\\n"):
        shell = 'set -euo pipefail\\nloaderx() { "$LOADERX_PYTHON" -m loaderx "$@"; }\\n' + source[4:]
        proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True,
                              env={**os.environ, "LOADERX_PYTHON": sys.executable})
        sys.stdout.write(proc.stdout)
        if proc.returncode:
            sys.exit(f"{sys.argv[1]}, the sh block of line {line} exited {proc.returncode}:\\n{proc.stdout[-2000:]}{proc.stderr}")
        continue
    script = re.match(r"# (\\w+\\.py): run with python3 \\1\\n", source)
    if script:
        with open(script.group(1), "w") as f:
            f.write("\\n" * (line - 1) + source)
        proc = subprocess.run([sys.executable, script.group(1)], capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        if proc.returncode:
            sys.exit(f"{sys.argv[1]}, the script {script.group(1)} of line {line}:\\n{proc.stderr}")
        continue
    exec(compile("\\n" * (line - 1) + source, sys.argv[1], "exec"), namespace)
"""


def python_blocks(text: str, by_section: bool = True) -> dict[str, list[tuple[int, str]]]:
    """{section heading: [(line of the block's first code line, code), ...]} for
    every ```python block, in file order; sections without one are left out.
    With ``by_section=False`` the whole file is one section, ``(page)``."""
    sections: dict[str, list[tuple[int, str]]] = {}
    heading = "(top)" if by_section else "(page)"
    lang: str | None = None
    start, body = 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        fence = FENCE.match(line)
        if lang is None:
            if fence:
                lang, start, body = fence.group(1), number + 1, []
            elif by_section and line.startswith("## "):
                heading = line[3:].strip()
        elif fence and not fence.group(1):
            if lang == "python":
                sections.setdefault(heading, []).append((start, "\n".join(body) + "\n"))
            lang = None
        else:
            body.append(line)
    assert lang is None, f"the ``` block opened on line {start - 1} is never closed"
    return sections


def shell_blocks(text: str) -> list[tuple[int, str]]:
    """[(line of the first code line, code), ...] of every ```sh block."""
    out, lang, start, body = [], None, 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        fence = FENCE.match(line)
        if lang is None and fence:
            lang, start, body = fence.group(1), number + 1, []
        elif lang is not None and fence and not fence.group(1):
            if lang == "sh":
                out.append((start, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    return out


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def units() -> dict[str, tuple[Path, list[tuple[int, str]]]]:
    """{test id: (file, blocks)}: README sections, then one unit per docs page."""
    out: dict[str, tuple[Path, list[tuple[int, str]]]] = {}
    for page in pages():
        rel = page.relative_to(ROOT).as_posix()
        found = python_blocks(page.read_text(encoding="utf-8"), by_section=page == README)
        for section, blocks in found.items():
            out[f"{rel}: {section}" if page == README else rel] = (page, blocks)
        if rel in SHELL_PAGES:  # marked for the driver; they run after the python blocks
            sh = [(line, "#!sh\n" + src) for line, src in shell_blocks(page.read_text(encoding="utf-8"))]
            assert sh, f"{rel} has no sh block"
            out[rel] = (page, [*out.get(rel, (page, []))[1], *sh])
    return out


UNITS = units()


def test_every_python_block_is_found() -> None:
    total = 0
    for page in pages():
        total += len(re.findall(r"^```python\s*$", page.read_text(encoding="utf-8"), re.M))
    assert total >= 20, "the README and the docs pages hold the project's examples"
    ran = sum(1 for _, blocks in UNITS.values() for _, src in blocks if not src.startswith("#!sh\n"))
    assert ran == total


def test_every_guide_has_an_example() -> None:
    guides = sorted(p.relative_to(ROOT).as_posix() for p in (DOCS / "guides").glob("*.md"))
    assert len(guides) >= 12
    without = [g for g in guides if g not in UNITS]
    assert not without, f"guides without a tested python example: {without}"


def test_extracts_blocks_by_section() -> None:
    text = "# t\n\n```python\na = 1\n```\n\n## One\n\n```sh\nls\n```\n```python\nb = a\n\nc = b\n```\n\n## Two\n"
    assert python_blocks(text) == {"(top)": [(4, "a = 1\n")], "One": [(13, "b = a\n\nc = b\n")]}
    assert python_blocks(text, by_section=False) == {"(page)": [(4, "a = 1\n"), (13, "b = a\n\nc = b\n")]}


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_example_runs(unit: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    page, blocks = UNITS[unit]
    env = dict(os.environ)
    if any("s3://my-bucket" in src for _, src in blocks):
        server = request.getfixturevalue("s3server")
        server.make_bucket("my-bucket")
        env.update(server.env())
        env["LOADERX_CACHE_DIR"] = str(tmp_path / "cache")
    # the loaderx these tests import, whether installed or from the source tree
    package_root = str(Path(loaderx.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    # a unit that imports an optional framework runs where it is installed
    for module in sorted({m for _, src in blocks for m in re.findall(r"^import (torch|jax|pyarrow|ml_dtypes|ray)\b", src, re.M)}):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{unit} needs {module}, which is not installed")
    name = page.relative_to(ROOT).as_posix()
    res = subprocess.run([sys.executable, "-c", DRIVER, name, json.dumps(blocks)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    lines = ", ".join(str(line) for line, _ in blocks)
    if res.returncode != 0:
        pytest.fail(f"{unit} (blocks at lines {lines}) failed:\n{res.stderr[-3000:]}")
