"""A JSON endpoint on loopback for tests of strategies that call an HTTP API (an LLM
summarizer, a hosted embedder): it records what a real client sends and answers as the
test says, with no network and no key."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Request:
    """One request the endpoint received: its path, headers (their names in lower case,
    as HTTP/2 sends them) and JSON body (None when the body is empty or not JSON)."""

    path: str
    headers: Mapping[str, str]
    body: Any


@dataclass(frozen=True)
class Reply:
    """What the endpoint answers: ``body`` as JSON, with ``status`` and ``headers``."""

    body: Any
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class LocalServer:
    """A running endpoint: its base ``url`` and every request received, in order."""

    url: str
    requests: list[Request] = field(default_factory=list)


def chat_completion(
    content: str, model: str = "fake", usage: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """An OpenAI chat completion replying ``content`` (with ``usage`` when given)."""
    reply: dict[str, Any] = {
        "id": "cmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
    if usage is not None:
        reply["usage"] = dict(usage)
    return reply


@contextmanager
def local_server(answer: Callable[[Request], Reply | Any]) -> Iterator[LocalServer]:
    """Serve ``answer(request)`` for every POST on ``127.0.0.1`` (a free port), each
    request in a thread of its own, so an answer may wait (a slow provider); anything
    but a :class:`Reply` is sent as a 200 JSON body. Stopped when the block ends."""
    server: LocalServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(data) if data else None
            except ValueError:
                body = None
            headers = {name.lower(): value for name, value in self.headers.items()}
            request = Request(self.path, headers, body)
            server.requests.append(request)
            reply = answer(request)
            if not isinstance(reply, Reply):
                reply = Reply(reply)
            sent = json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(sent)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(sent)

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    server = LocalServer(f"http://127.0.0.1:{httpd.server_address[1]}")
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
