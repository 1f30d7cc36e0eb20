"""A lone surrogate escape (``"\\ud83d"``: valid JSON, sent by a JavaScript client that
cut a string mid-emoji) is read, windowed and written back as it came; only a body that
neither orjson nor the standard library reads is not JSON."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import orjson
import pytest

from ctxwindow_serve.bodies import RecentBodies, loads

CUT_EMOJI = "and the last one \ud83d"


def _history(turns: int = 20, last: str = CUT_EMOJI) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn} " + "word " * 20})
        messages.append({"role": "assistant", "content": f"answer {turn} " + "word " * 20})
    messages.append({"role": "user", "content": last})
    return messages


@pytest.mark.parametrize(
    "text", ['"\\ud83d"', '"\\udc00x"', '["a\\ud83d", "\\ud83d\\ude42"]', '{"\\ud83d": 1}']
)
def test_a_lone_surrogate_reads_as_the_standard_library_reads_it(text):
    assert loads(text.encode()) == json.loads(text)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"{", "unexpected end of data"),
        (b"NaN", "unexpected character"),
        (b'{"a": Infinity}', "unexpected character"),
        (b"[-Infinity]", "no digit after sign"),
        (b"[1e400]", "number is infinity"),
        (b'"\xff"', "str is not valid UTF-8"),
        (b"\xef\xbb\xbf{}", "byte order mark"),
        (b"[" * 100_000 + b"]" * 100_000, "depth limit exceeded"),
        (b'"\\ud83d', "unexpected end of data"),
    ],
)
def test_what_neither_reads_as_json_is_not_json(raw, why):
    """orjson's own error, as before; so is what only the standard library would read
    but could not write back as it came (NaN, Infinity, a number past a double's range)."""
    with pytest.raises(orjson.JSONDecodeError, match=re.escape(why)):
        loads(raw)


def test_a_grown_history_with_a_lone_surrogate_is_read_in_part():
    recent = RecentBodies(lists=8, size=1 << 24)
    history = _history(last="hi \ud83d")
    first = json.dumps({"model": "m", "messages": history}).encode()
    earlier = recent.read(first, "messages")
    earlier.remember()
    grown = [*history, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "so?"}]
    raw = json.dumps({"model": "m", "messages": grown}).encode()
    reading = recent.read(raw, "messages")
    assert reading.body == json.loads(raw)
    assert reading.body["messages"][-3] is earlier.body["messages"][-1]  # not read again


def _post(proxy: Any, raw: bytes) -> httpx.Response:
    return httpx.post(
        f"{proxy.url}/v1/chat/completions",
        content=raw,
        headers={"content-type": "application/json"},
    )


def test_a_body_with_a_lone_surrogate_is_windowed(proxy, upstream):
    history = _history()
    raw = json.dumps({"model": "small", "messages": history, "max_tokens": 50}).encode()
    answer = _post(proxy, raw)
    assert answer.status_code == 200
    header = answer.headers["x-ctxwindow"]
    assert header.startswith("strategy=fixed") and "dropped=0" not in header
    sent = upstream.last.body
    sent.decode()  # UTF-8 still: the surrogate went as the escape it came as
    assert b"\\ud83d" in sent
    messages = json.loads(sent)["messages"]
    assert len(messages) < len(history)
    assert messages[0] == history[0] and messages[-1] == {"role": "user", "content": CUT_EMOJI}


def test_a_lone_surrogate_and_an_integer_past_64_bits_go_as_they_came(proxy, upstream):
    history = _history()
    history[-1] = {**history[-1], "x-app-id": -9223372036854775809}
    raw = json.dumps({"model": "small", "messages": history, "seed": 2**80}).encode()
    assert _post(proxy, raw).status_code == 200
    sent = json.loads(upstream.last.body)
    assert sent["seed"] == 2**80 and sent["messages"][-1] == history[-1]
    assert len(sent["messages"]) < len(history)


def test_a_body_neither_reads_is_still_not_json(proxy, upstream):
    raw = b'{"model": "small", "messages": [{"role": "user", "content": NaN}]}'
    answer = _post(proxy, raw)
    assert answer.headers["x-ctxwindow"] == "outcome=not_json"
    assert upstream.last.body == raw


def test_the_ui_shows_a_visit_with_a_lone_surrogate(start_proxy, upstream):
    proxy = start_proxy(ui=True)
    raw = json.dumps({"model": "small", "messages": _history(), "max_tokens": 50}).encode()
    assert _post(proxy, raw).status_code == 200
    page = httpx.get(f"{proxy.url}/ui")
    assert page.status_code == 200
    assert "and the last one \\ud83d" in page.text
