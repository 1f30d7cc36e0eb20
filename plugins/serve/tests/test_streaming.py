"""Streamed answers pass through chunk by chunk: the client reads the first chunk while
the upstream still holds back the second (no timing: the upstream waits on a gate the
test opens only after the first chunk has arrived)."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest

from ctxwindow_serve import ModelEntry, ServeSettings, build_app


def test_the_first_chunk_arrives_before_the_upstream_sends_the_second(
    proxy, upstream, make_history
):
    body = {"model": "gated", "messages": make_history(20), "max_tokens": 50, "stream": True}
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as answer,
    ):
        assert answer.status_code == 200
        assert "strategy=fixed" in answer.headers["x-ctxwindow"]
        chunks = answer.iter_raw()
        first = next(chunks)
        assert b'"Hel"' in first
        assert not upstream.gate.is_set()  # the upstream is still holding the rest
        upstream.gate.set()
        rest = b"".join(chunks)
    assert b'"lo"' in rest
    assert rest.endswith(b"data: [DONE]\n\n")


def test_the_openai_client_streams_through(proxy, upstream, make_history):
    upstream.gate.set()
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-x", max_retries=0)
    stream = client.chat.completions.create(
        model="small", messages=make_history(20), max_tokens=50, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    assert text == "Hello"
    assert len(upstream.last.json()["messages"]) < 42


def test_a_client_that_goes_away_closes_the_upstream_stream(proxy, upstream, make_history):
    body = {"model": "gated", "messages": make_history(2), "max_tokens": 50, "stream": True}
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{proxy.url}/v1/chat/completions", json=body) as answer,
    ):
        next(answer.iter_raw())
    # the client closed its connection: the proxy closes the upstream's stream, which
    # is still holding back its second chunk (the gate stays shut)
    assert upstream.closed.wait(10)
    assert not upstream.gate.is_set()


@pytest.fixture
def breaking_upstream(cutting_upstream: Callable[[bytes], str]) -> str:
    """An upstream that streams one SSE event, then drops the connection mid-body (no
    last chunk): an upstream that crashes while it generates."""
    first = b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
    return cutting_upstream(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + f"{len(first):x}\r\n".encode() + first + b"\r\n"
    )


def test_an_upstream_that_breaks_off_mid_stream_ends_it_with_an_error_event(
    breaking_upstream, run_app, make_history, capfd, caplog
):
    """The client gets what came, then an error event in the API's shape and a clean end
    (the SDK raises it); the log gets one line, not a traceback."""
    models = (ModelEntry("small", context=400, output=50, reserve=0.0),)
    proxy = run_app(build_app(ServeSettings(upstream=breaking_upstream, models=models)))
    body = {"model": "small", "messages": make_history(2), "stream": True}
    with caplog.at_level(logging.WARNING, logger="ctxwindow"):
        answer = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=30)
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.APIError, match="upstream"):
            for _ in client.chat.completions.create(**body):
                pass
    assert answer.status_code == 200
    *events, end = answer.content.split(b"\n\n")
    assert end == b"" and all(event.startswith(b"data: ") for event in events[:-1])
    name, data = events[-1].split(b"\n")
    assert name == b"event: error"
    assert json.loads(data.removeprefix(b"data: "))["error"]["type"] == "upstream_error"
    assert "Traceback" not in capfd.readouterr().err
    broke = [r for r in caplog.records if "broke off" in r.getMessage()]
    assert len(broke) == 2 and broke[0].exc_info is None


@pytest.fixture
def cutting_upstream() -> Iterator[Callable[[bytes], str]]:
    """``cut(answer)``: the URL of an upstream that sends ``answer`` (status line,
    headers and the start of a body) to every request, then drops the connection."""
    listeners: list[socket.socket] = []

    def cut(answer: bytes) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def serve() -> None:
            while True:
                try:
                    connection, _ = listener.accept()
                except OSError:
                    return
                with connection:
                    received = b""
                    while b"\r\n\r\n" not in received:
                        received += connection.recv(65536)
                    head, _, body = received.partition(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                    while len(body) < length:
                        body += connection.recv(65536)
                    connection.sendall(answer)
                    time.sleep(0.2)

        threading.Thread(target=serve, daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    yield cut
    for listener in listeners:
        listener.close()


def _proxy_to(run_app, url: str):
    models = (ModelEntry("small", context=400, output=50, reserve=0.0),)
    return run_app(build_app(ServeSettings(upstream=url, models=models)))


def test_an_event_the_upstream_cuts_short_is_dropped_before_the_error_event(
    cutting_upstream, run_app, make_history
):
    """The SDK gets the whole events, then the proxy's error event (it raises
    APIError), never the cut event's fragment (it raised JSONDecodeError on it)."""
    whole = b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
    half = b'data: {"choices":[{"index":1,"del'
    stream = whole + half
    url = cutting_upstream(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + f"{len(stream):x}\r\n".encode() + stream + b"\r\n"
    )
    proxy = _proxy_to(run_app, url)
    body = {"model": "small", "messages": make_history(2), "stream": True}
    answer = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=30)
    assert answer.content.startswith(whole + b"event: error\ndata: ")
    assert half not in answer.content
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.APIError, match="broke off"):
        for _ in client.chat.completions.create(**body):
            pass


def test_an_event_split_across_pieces_goes_on_whole(cutting_upstream, run_app, make_history):
    """An event the upstream sends in two pieces reaches the client whole, with the
    stream's last piece (which ends no event) too."""
    first, second = b'data: {"choices":[{"index"', b':0,"delta":{}}]}\n\ndata: [DONE]'
    pieces = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (first, second))
    url = cutting_upstream(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + pieces + b"0\r\n\r\n"
    )
    proxy = _proxy_to(run_app, url)
    body = {"model": "small", "messages": make_history(2), "stream": True}
    answer = httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=30)
    assert answer.content == first + second


def test_a_json_answer_cut_short_closes_the_connection(
    cutting_upstream, run_app, make_history, caplog
):
    """A body that is not an event stream has no error event to end it: the client's
    connection is closed without the body's end, so it sees a broken answer (and may
    retry), not a whole 200."""
    url = cutting_upstream(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n"
        b'{"id":"x","object":"chat.completion","choices":[{"index":0,'
    )
    proxy = _proxy_to(run_app, url)
    body = {"model": "small", "messages": make_history(2)}
    with caplog.at_level(logging.WARNING, logger="ctxwindow"):
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=30)
        client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(**body)
    assert any("connection closed" in r.getMessage() for r in caplog.records)
