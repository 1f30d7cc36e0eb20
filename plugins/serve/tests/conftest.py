"""Real servers on loopback for the proxy's tests: a recording upstream (a Starlette app
answering the three APIs' shapes, streamed or not, and recording what reached it) and
the proxy itself, each under uvicorn in a thread."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxwindow_serve import ModelEntry, ServeSettings, build_app

#: A secret only the tests know: found nowhere but in what reached the upstream.
SECRET = "sk-test-9f3c1e7a-never-logged"


@dataclass
class Seen:
    path: str
    method: str
    headers: dict[str, str]
    body: bytes
    #: The path and query as they came on the request line (percent-encoded).
    target: str = ""

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Upstream:
    """What the recording upstream saw, and the gate its gated stream waits on."""

    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)
    closed: threading.Event = field(default_factory=threading.Event)
    #: Set when the proxy closed a ``"slow"`` request's connection before its answer.
    left: threading.Event = field(default_factory=threading.Event)

    @property
    def last(self) -> Seen:
        return self.seen[-1]


def _sse(events: list[tuple[str | None, dict[str, Any]]]) -> list[bytes]:
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {json.dumps(data)}\n\n".encode())
    return out


def _chat_chunks(model: str) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }  # fmt: skip

    return [
        *_sse([(None, chunk({"role": "assistant", "content": "Hel"}))]),
        *_sse([(None, chunk({"content": "lo"}, "stop"))]),
        b"data: [DONE]\n\n",
    ]


def _anthropic_chunks(model: str) -> list[bytes]:
    message = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }  # fmt: skip
    return _sse(
        [
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "Hello"}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                               "stop_sequence": None}, "usage": {"output_tokens": 2}}),
            ("message_stop", {"type": "message_stop"}),
        ]
    )  # fmt: skip


def chat_completion(model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Hello"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip


def anthropic_message(model: str) -> dict[str, Any]:
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
    }  # fmt: skip


def response_object(model: str) -> dict[str, Any]:
    return {
        "id": "resp_1", "object": "response", "created_at": 1, "model": model,
        "status": "completed", "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "Hello", "annotations": []}]}],
    }  # fmt: skip


def recording_app(upstream: Upstream) -> Starlette:
    """The upstream: records each request; answers each API's minimal valid response.
    Model ``"gated"`` streams its first chunk, then waits for ``upstream.gate``; model
    ``"fail-429"`` answers a rate-limit error; model ``"slow"`` answers after the body's
    ``delay`` seconds (setting ``upstream.left`` if the proxy hangs up first);
    ``GET /cookies`` sets two cookies, ``GET /moved`` redirects and ``GET /hop`` names
    ``x-upstream-hop`` in its Connection header."""

    async def answer(request: Request) -> Response:  # noqa: PLR0911
        body = await request.body()
        query = request.scope["query_string"]
        target = (request.scope["raw_path"] + (b"?" + query if query else b"")).decode()
        upstream.seen.append(
            Seen(request.url.path, request.method, dict(request.headers), body, target)
        )
        if request.url.path == "/cookies":
            cookies = Response(b"{}", media_type="application/json")
            cookies.raw_headers += [(b"set-cookie", b"a=1; Path=/"), (b"set-cookie", b"b=2")]
            return cookies
        if request.url.path == "/moved":
            return Response(status_code=307, headers={"location": "/elsewhere"})
        if request.url.path == "/hop":
            hop = Response(b"{}", media_type="application/json")
            hop.raw_headers += [
                (b"connection", b"keep-alive, X-Upstream-Hop"),
                (b"x-upstream-hop", b"1"),
                (b"x-upstream-kept", b"1"),
            ]
            return hop
        if request.method != "POST":
            return JSONResponse(
                {
                    "object": "list",
                    "data": [{"id": "m", "object": "model", "created": 1, "owned_by": "me"}],
                }
            )
        try:
            sent = json.loads(body)
        except ValueError:
            return JSONResponse({"error": {"message": "upstream: bad JSON"}}, status_code=400)
        model = sent.get("model", "m")
        if model == "fail-429":
            return JSONResponse(
                {"error": {"message": "slow down", "type": "rate_limit"}},
                status_code=429,
                headers={"retry-after": "7"},
            )
        if model == "slow" and not await _slowly(request, float(sent.get("delay", 1))):
            upstream.left.set()
            return Response(status_code=499)
        path = request.url.path
        if sent.get("stream"):
            chunks = _anthropic_chunks(model) if path == "/v1/messages" else _chat_chunks(model)
            return StreamingResponse(
                _stream(chunks, model == "gated"), media_type="text/event-stream"
            )
        if path == "/v1/messages":
            return JSONResponse(anthropic_message(model))
        if path == "/v1/responses":
            return JSONResponse(response_object(model))
        return JSONResponse(chat_completion(model))

    async def _slowly(request: Request, delay: float) -> bool:
        """Wait ``delay`` seconds as a long generation would; False if the caller left."""
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            if await request.is_disconnected():
                return False
            await asyncio.sleep(0.02)
        return True

    async def _stream(chunks: list[bytes], gated: bool) -> Any:
        try:
            for number, chunk in enumerate(chunks):
                if gated and number == 1:
                    await asyncio.to_thread(upstream.gate.wait, 30)
                yield chunk
        finally:
            upstream.closed.set()

    return Starlette(routes=[Route("/{path:path}", answer, methods=["GET", "POST"])])


@dataclass
class Running:
    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def serve(app: Any, http: str = "auto", loop: str = "auto") -> Running:
    """``app`` under uvicorn on a free loopback port, in a thread, started (with the
    HTTP parser and event loop uvicorn picks, unless told which)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", http=http, loop=loop)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.01)
    return Running(f"http://127.0.0.1:{port}", server, thread)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    recorded = Upstream()
    running = serve(recording_app(recorded))
    recorded.url = running.url
    yield recorded
    recorded.gate.set()
    running.stop()


#: Small contexts, so that short test histories overflow them.
MODELS = (
    ModelEntry("small", context=400, output=50, reserve=0.0),
    ModelEntry("gated", context=400, output=50, reserve=0.0),
    ModelEntry("claude*", context=400, output=50, reserve=0.0),
    ModelEntry("fail-429", context=400, output=50, reserve=0.0),
)


@pytest.fixture
def start_proxy(upstream: Upstream) -> Iterator[Callable[..., Running]]:
    """Starts a proxy to ``upstream`` with MODELS and the given settings (and uvicorn's
    HTTP parser and loop, ``server=(http, loop)``, when given)."""
    started: list[Running] = []

    def start(server: tuple[str, str] = ("auto", "auto"), **settings: Any) -> Running:
        settings.setdefault("models", MODELS)
        app = build_app(ServeSettings(upstream=upstream.url, **settings))
        running = serve(app, *server)
        running.app = running.server.config.app  # type: ignore[attr-defined]
        started.append(running)
        return running

    yield start
    upstream.gate.set()
    for running in started:
        running.stop()


@pytest.fixture
def run_app() -> Iterator[Callable[[Any], Running]]:
    """Runs any ASGI app on loopback until the test ends."""
    started: list[Running] = []

    def run(app: Any) -> Running:
        running = serve(app)
        running.app = app  # type: ignore[attr-defined]
        started.append(running)
        return running

    yield run
    for running in started:
        running.stop()


@pytest.fixture
def proxy(start_proxy: Callable[..., Running]) -> Running:
    return start_proxy()


def _history(turns: int, words: int = 20) -> list[dict[str, Any]]:
    """A chat of ``turns`` user/assistant pairs, a system prompt first, a user turn last."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn} " + "word " * words})
        messages.append({"role": "assistant", "content": f"answer {turn} " + "word " * words})
    messages.append({"role": "user", "content": "and now?"})
    return messages


@pytest.fixture
def make_history() -> Callable[..., list[dict[str, Any]]]:
    return _history


@pytest.fixture
def secret() -> str:
    return SECRET


def _materialised(value: Any) -> Any:
    """``value`` with every lazily validated iterable read (pydantic validates the SDKs'
    ``Iterable[...]`` fields only as they are read: reading them is the validation)."""
    if isinstance(value, dict):
        return {key: _materialised(item) for key, item in value.items()}
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, (list, tuple)) or hasattr(value, "__next__"):
        return [_materialised(item) for item in value]
    return value


@pytest.fixture
def validate() -> Callable[[Any, Any], Any]:
    """``validate(TypeAdapter(...), value)``: the value validated all the way down."""

    def check(adapter: Any, value: Any) -> Any:
        return _materialised(adapter.validate_python(value))

    return check
