"""Griffe extension: Sphinx roles in ctxwindow's docstrings rendered as Markdown.

``:class:`ctxwindow.BaseStrategy``` becomes a cross-reference to that object's entry in
the API reference; a role naming a bare member (``:meth:`choose```) becomes code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|attr|exc|mod|data|obj):`~?([^`]+)`")


def _replace(match: re.Match[str]) -> str:
    target = match.group(1)
    if target.startswith("ctxwindow."):
        return f"[`{target}`][{target}]"
    return f"`{target}`"


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_replace, obj.docstring.value)
