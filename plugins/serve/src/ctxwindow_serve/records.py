"""The visit log: one JSON line per windowed request, with the budget and the whole
record; no headers and no message text, so no credentials and no user content.

Lines are made and written by one worker thread, after the response has gone: a
record's decisions cost ~10 us a message to build, too much for the request's path."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from ctxwindow_serve.windowing import Outcome


def visit_entry(
    when: float,
    visit: str,
    route: str,
    outcome: Outcome,
    upstream_status: int | None,
    proxy_ms: float,
    unreachable: str | None = None,
) -> dict[str, Any]:
    """The log line of one visit (at ``when``, seconds since the epoch), as a dict;
    ``unreachable``: why the upstream gave no answer (its status is then None)."""
    return {
        "time": round(when, 3),
        "visit": visit,
        "route": route,
        "model": outcome.model,
        "outcome": outcome.outcome,
        "note": outcome.note,
        "fallback": outcome.fallback,
        "budget": outcome.budget.to_dict() if outcome.budget else None,
        "record": outcome.record.to_dict() if outcome.record else None,
        "upstream_status": upstream_status,
        "upstream_unreachable": unreachable,
        "visit_ms": None if outcome.visit_ms is None else round(outcome.visit_ms, 3),
        "proxy_ms": round(proxy_ms, 3),
    }


class VisitLog:
    """Appends visit entries to a JSON-lines file (opened once, one write per line), in
    its own thread, in the order they were given."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("ab")
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxwindow-log")

    def write(self, entry: Callable[[], dict[str, Any]]) -> None:
        """Write the entry ``entry()`` makes, later, in the log's thread."""
        self._writer.submit(self._write, entry)

    def _write(self, entry: Callable[[], dict[str, Any]]) -> None:
        self._file.write(orjson.dumps(entry()) + b"\n")
        self._file.flush()

    def close(self) -> None:
        """Write what is pending, then close the file."""
        self._writer.shutdown(wait=True)
        self._file.close()
