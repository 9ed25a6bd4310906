"""Every ```python block of README.md runs as pasted.

The blocks of one ``## `` section run in order in one fresh interpreter, in
one namespace, inside an empty temporary directory: a reader pastes them one
after another, so a later block may use names and files an earlier block of
the same section made (the Reading block opens the store the Quick start
wrote). Sections start from nothing. Each block is compiled under the name
README.md with its own line numbers, so a failure's traceback points at the
README line that broke. A section that imports torch, jax, pyarrow, ml_dtypes or ray is skipped, with
the reason, where that framework is not installed. A section that names
``s3://my-bucket`` runs against the session's S3 test server (tests/s3server.py),
with its endpoint and credentials in the ``AWS_*`` variables, as a user's would
be, the bucket ``my-bucket`` made, and the cache in the temporary directory.
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

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```(\S*)\s*$")

# Runs in the child: argv[1] is a JSON list of [first line, source] blocks.
DRIVER = """
import json, sys
namespace = {"__name__": "__main__"}
for line, source in json.loads(sys.argv[1]):
    exec(compile("\\n" * (line - 1) + source, "README.md", "exec"), namespace)
"""


def python_blocks(text: str) -> dict[str, list[tuple[int, str]]]:
    """{section heading: [(line of the block's first code line, code), ...]} for
    every ```python block, in README order; sections without one are left out."""
    sections: dict[str, list[tuple[int, str]]] = {}
    heading = "(top)"
    lang: str | None = None
    start, body = 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        fence = FENCE.match(line)
        if lang is None:
            if fence:
                lang, start, body = fence.group(1), number + 1, []
            elif line.startswith("## "):
                heading = line[3:].strip()
        elif fence and not fence.group(1):
            if lang == "python":
                sections.setdefault(heading, []).append((start, "\n".join(body) + "\n"))
            lang = None
        else:
            body.append(line)
    assert lang is None, f"README.md: the ``` block opened on line {start - 1} is never closed"
    return sections


SECTIONS = python_blocks(README.read_text(encoding="utf-8"))


def test_every_python_block_is_found() -> None:
    text = README.read_text(encoding="utf-8")
    fences = len(re.findall(r"^```python\s*$", text, re.M))
    assert fences >= 1
    assert sum(len(blocks) for blocks in SECTIONS.values()) == fences


def test_extracts_blocks_by_section() -> None:
    text = "# t\n\n```python\na = 1\n```\n\n## One\n\n```sh\nls\n```\n```python\nb = a\n\nc = b\n```\n\n## Two\n"
    assert python_blocks(text) == {"(top)": [(4, "a = 1\n")], "One": [(13, "b = a\n\nc = b\n")]}


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_readme_section_runs(section: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env = dict(os.environ)
    if any("s3://my-bucket" in src for _, src in SECTIONS[section]):
        server = request.getfixturevalue("s3server")
        server.make_bucket("my-bucket")
        env.update(server.env())
        env["LOADERX_CACHE_DIR"] = str(tmp_path / "cache")
    # the loaderx these tests import, whether installed or from the source tree
    package_root = str(Path(loaderx.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    blocks = SECTIONS[section]
    # a section that imports an optional framework runs where it is installed
    for module in sorted({m for _, src in blocks for m in re.findall(r"^import (torch|jax|pyarrow|ml_dtypes|ray)\b", src, re.M)}):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"README.md section {section!r} needs {module}, which is not installed")
    res = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(blocks)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    lines = ", ".join(str(line) for line, _ in blocks)
    if res.returncode != 0:
        pytest.fail(f"README.md section {section!r} (blocks at lines {lines}) failed:\n{res.stderr[-3000:]}")
