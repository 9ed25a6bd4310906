"""A griffe extension of the documentation site, so that its API reference
says what ``help()`` says:

* a public face that appends the docstring of the module behind it to its
  own at import time (``__doc__ = f"{__doc__}\n{_impl.__doc__ or ''}"``, so
  that ``help(loaderx.packing)`` shows the full documentation) gets the same
  docstring on its reference page; griffe reads the source and would
  otherwise show the face's own few lines;
* the docstrings' reST habits (``:class:`Name``` roles, a paragraph ending
  in ``::`` before its indented example) read as Markdown, a page showing
  ``Name`` in code type where ``help()`` shows the role.

The docstrings themselves stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Docstring, Extension

# a face's import of the module behind it, and the line that appends its docstring
IMPL = re.compile(r"^import (loaderx(?:\.\w+)+) as _impl$", re.M)
APPENDS = '__doc__ = f"{__doc__}\\n{_impl.__doc__ or \'\'}"'

# :class:`~loaderx.x.Name`, :meth:`Name.m`, :func:`f`, :mod:`m`, :data:`D`, :attr:`a`, :exc:`E`
ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj):`~?([^`]+)`")
# a paragraph that ends in "::" introduces a literal block: in Markdown the
# indented block is code by itself, and the colon stays one
LITERAL = re.compile(r"(\S)::$", re.M)
BARE_LITERAL = re.compile(r"^(\s*)::$", re.M)


def markdown_of(text: str) -> str:
    text = ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    text = BARE_LITERAL.sub(r"\1", text)
    return LITERAL.sub(r"\1:", text)


class ReSTRoles(Extension):
    def on_instance(self, *, obj: Any, **_: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_of(obj.docstring.value)

    def on_package(self, *, pkg: Any, **_: Any) -> None:
        if pkg.path != "loaderx":
            return
        for face in pkg.modules.values():
            try:
                source = face.filepath.read_text(encoding="utf-8")
            except (AttributeError, OSError):
                continue
            impl = IMPL.search(source)
            if impl is None or APPENDS not in source:
                continue
            inner = pkg[impl.group(1).removeprefix("loaderx.")]
            own = face.docstring.value if face.docstring is not None else ""
            behind = inner.docstring.value if inner.docstring is not None else ""
            face.docstring = Docstring(f"{own}\n\n{behind}", parent=face)
