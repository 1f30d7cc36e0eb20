"""What the proxy runs on: HTTP parser, event loop, upstream client and JSON library.

Its speed depends on them, its behaviour does not: uvicorn takes ``httptools`` and
``uvloop`` when they are installed (``ctxwindow-serve[fast]``) and its pure-Python
``h11`` and asyncio's own loop otherwise; aiohttp uses its compiled HTTP parser unless
``AIOHTTP_NO_EXTENSIONS`` is set or no wheel fits. The benchmark records these, so that
a figure says what it was measured on.
"""

from __future__ import annotations

import importlib.util
import os
from importlib.metadata import PackageNotFoundError, version

#: uvicorn's pure-Python choices, for a run without the ``fast`` extra's parts.
PURE_HTTP = "h11"
PURE_LOOP = "asyncio"


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def http_parser(pure: bool = False) -> str:
    """The parser uvicorn's ``http="auto"`` takes (``h11`` when ``pure``)."""
    return PURE_HTTP if pure or not _installed("httptools") else "httptools"


def event_loop(pure: bool = False) -> str:
    """The loop uvicorn's ``loop="auto"`` takes (asyncio's own when ``pure``)."""
    return PURE_LOOP if pure or not _installed("uvloop") else "uvloop"


def client_parser(pure: bool = False) -> str:
    """Which of aiohttp's HTTP parsers reads the upstream's answers."""
    if pure or os.environ.get("AIOHTTP_NO_EXTENSIONS"):
        return "pure Python"
    from aiohttp import http_parser

    compiled = http_parser.HttpResponseParser is not http_parser.HttpResponseParserPy
    return "compiled" if compiled else "pure Python"


def describe(pure: bool = False) -> dict[str, str]:
    """Each part by name and version, as the benchmark's JSON records them."""

    def named(name: str) -> str:
        try:
            return f"{name} {version(name)}"
        except PackageNotFoundError:
            return name

    loop = event_loop(pure)
    return {
        "server": named("uvicorn"),
        "http": named(http_parser(pure)),
        "loop": loop if loop == PURE_LOOP else named(loop),
        "client": f"{named('aiohttp')} ({client_parser(pure)} parser)",
        "json": named("orjson"),
    }
