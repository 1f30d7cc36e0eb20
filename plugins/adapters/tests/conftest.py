"""Shared by the adapter tests: a local server that records what a real SDK client sends,
and the ways a strategy sends stand-ins (cleared tool outputs) through an adapter."""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import pytest

#: What a local recording server gets: (path, JSON body) per request, in order.
Bodies = list[tuple[str, Any]]


@pytest.fixture
def recording_server() -> Iterator[Callable[..., tuple[str, Bodies]]]:
    """``recording_server(reply, prefix="")``: a local HTTP server that records each JSON
    body with its path and answers ``reply(path)`` as the API would, so a real SDK
    client's request is seen as sent; its base URL (``prefix`` appended) and the bodies.
    Stopped after the test."""
    started: list[ThreadingHTTPServer] = []

    def start(reply: Callable[[str], Any], prefix: str = "") -> tuple[str, Bodies]:
        bodies: Bodies = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                bodies.append((self.path, body))
                data = json.dumps(reply(self.path)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        started.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}{prefix}", bodies

    yield start
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


CLEARING = {"strategy": "clear_tool_outputs", "keep_recent": 1, "min_tokens": 10, "when": "always"}


class StandInRun(NamedTuple):
    """A strategy that sends stand-ins for tool results through an adapter, its options
    and a budget."""

    strategy: str
    options: dict[str, Any]
    budget: int
    #: A cleared tool output's text; its groups: the tool's name and the call id.
    stub = re.compile(r"\[tool output of (\w+) \((\w+)\) cleared by ctxwindow: [\d,]+ tokens\]")

    def select(self, select: Callable[..., Any], messages: Any, **more: Any) -> Any:
        """``select(messages, budget, strategy, **options, **more)`` (an adapter's), its
        window, checking that nothing passed in was changed."""
        before = copy.deepcopy(messages)
        window = select(messages, self.budget, self.strategy, **self.options, **more)
        assert messages == before  # nothing passed in was changed
        return window


#: clear_tool_outputs on its own (everything fits, it clears anyway), and as a pipeline's
#: first stage before fixed (which then drops the oldest turns to fit).
STAND_IN_RUNS = {
    "clear_tool_outputs": StandInRun(
        "clear_tool_outputs", {k: v for k, v in CLEARING.items() if k != "strategy"}, 10_000
    ),
    "pipeline": StandInRun("pipeline", {"stages": [CLEARING, "fixed"]}, 700),
}


@pytest.fixture(params=sorted(STAND_IN_RUNS))
def stand_in_run(request: pytest.FixtureRequest) -> StandInRun:
    """Each way of sending stand-ins (the test runs once per way); needs the pipeline
    distribution, which provides clear_tool_outputs."""
    pytest.importorskip("ctxwindow_pipeline")
    return STAND_IN_RUNS[request.param]


@pytest.fixture
def clearing_run() -> StandInRun:
    """clear_tool_outputs on its own (see :data:`STAND_IN_RUNS`)."""
    pytest.importorskip("ctxwindow_pipeline")
    return STAND_IN_RUNS["clear_tool_outputs"]
