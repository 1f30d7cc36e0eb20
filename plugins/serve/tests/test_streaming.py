"""Streamed answers pass through chunk by chunk: the client reads the first chunk while
the upstream still holds back the second (no timing: the upstream waits on a gate the
test opens only after the first chunk has arrived)."""

from __future__ import annotations

import httpx
import openai


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
