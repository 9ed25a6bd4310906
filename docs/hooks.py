"""MkDocs hooks of the documentation site.

The Format page is made from ``zrecord/doc.go`` when the site is built, so the
on-disk format has one description, next to the code that writes it: the
package comment's ``// # Heading`` lines become the page's sections and its
tab-indented blocks become code blocks. Go identifiers stay as written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC_GO = Path(__file__).resolve().parent.parent / "zrecord" / "doc.go"
MARKER = "<!-- zrecord/doc.go -->"


def doc_go_markdown(text: str) -> str:
    """The package comment of a Go file (``//`` lines before ``package``) as Markdown."""
    lines: list[str] = []
    for raw in text.splitlines():
        if raw.startswith("package "):
            break
        if not raw.startswith("//"):
            continue
        lines.append(raw[3:] if raw.startswith("// ") else raw[2:])
    out: list[str] = []
    in_code = False
    for line in lines:
        code = line.startswith("\t")
        if code and not in_code:
            if out and out[-1] != "":
                out.append("")
            out.append("```text")
            in_code = True
        elif not code and in_code:
            if line.strip() == "" :
                # a blank line inside a block stays in it unless the block ends
                out.append("\x00")
                continue
            while out and out[-1] == "\x00":
                out.pop()
            out.append("```")
            in_code = False
        if in_code:
            out.append(line[1:] if code else "")
            continue
        heading = re.match(r"^# (.+)$", line)
        if heading:
            out.append(f"## {heading.group(1)}")
        else:
            out.append(line)
    if in_code:
        while out and out[-1] == "\x00":
            out.pop()
        out.append("```")
    return "\n".join("" if line == "\x00" else line for line in out).strip() + "\n"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, doc_go_markdown(DOC_GO.read_text(encoding="utf-8")))
    return markdown
