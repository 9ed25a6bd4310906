"""A griffe extension of the documentation site: the docstrings' reST
habits (``:class:`Name``` roles, a paragraph ending in ``::`` before its
indented example) read as Markdown on the API reference pages, so a page
shows ``Name`` in code type where ``help()`` shows the role. The docstrings
themselves stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension

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
