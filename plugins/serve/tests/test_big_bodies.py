"""A body with much to count is windowed in a worker thread: the event loop keeps
answering other clients meanwhile, and the window, the time limit and the fallback are
what they are on the loop."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import httpx
import orjson
import pytest

import ctxwindow
from ctxwindow_serve import ModelEntry, ServeSettings, windowing
from ctxwindow_serve.shapes import ANTHROPIC, CHAT, RESPONSES
from ctxwindow_serve.windowing import OFF_LOOP_BYTES, Windowing

#: What the slow counter takes over a long text (unless RELEASED sooner), the GIL let
#: go as tiktoken's does; COUNTING is set once it has begun.
PAUSE = 1.0
COUNTING = threading.Event()
RELEASED = threading.Event()
#: A message longer than this is slow to count.
LONG = 20_000
SLOW_COUNTER = "serve-slow-test"
#: A tool result over OFF_LOOP_BYTES on its own: the body holding it is a big one.
BIG = "log line " * (OFF_LOOP_BYTES // 8)


class _SlowCounter:
    """About four characters a token, and PAUSE seconds over a text past LONG."""

    name = SLOW_COUNTER

    def count_text(self, text: str) -> int:
        if len(text) > LONG:
            COUNTING.set()
            RELEASED.wait(PAUSE)
        return len(text) // 4 + 1

    def count_message(self, message: Any) -> int:
        content = message.content if isinstance(message.content, str) else ""
        return self.count_text(content) + 4


class _SlowChoice(ctxwindow.BaseStrategy):
    """A strategy whose choice takes longer than any time limit the tests give."""

    name = "serve-slow-choice-test"

    def choose(self, history: Any) -> Any:
        time.sleep(3)
        raise AssertionError("not reached: the time limit is shorter")


class _Crashing(ctxwindow.BaseStrategy):
    name = "serve-crashing-big-test"

    def choose(self, history: Any) -> Any:
        raise RuntimeError("boom")


class _Plugin:
    @ctxwindow.hookimpl
    def register_token_counters(self, register: Any) -> None:
        register(SLOW_COUNTER, lambda argument: _SlowCounter())

    @ctxwindow.hookimpl
    def register_strategies(self, register: Any) -> None:
        register(_SlowChoice)
        register(_Crashing)


@pytest.fixture(autouse=True)
def plugin() -> Any:
    COUNTING.clear()
    RELEASED.clear()
    ctxwindow.register_plugin(_Plugin(), name="serve-big-bodies-test")
    yield
    RELEASED.set()
    ctxwindow.unregister_plugin("serve-big-bodies-test")


def _chat(result: str = BIG, turns: int = 3) -> list[dict[str, Any]]:
    """An agent's chat: a call whose result is ``result``, then a few short turns."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "read the log"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "log", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]  # fmt: skip
    for turn in range(turns):
        messages.append({"role": "assistant", "content": f"answer {turn} " + "word " * 20})
        messages.append({"role": "user", "content": f"question {turn} " + "word " * 20})
    return messages


def _settings(counter: str = SLOW_COUNTER, **strategy: Any) -> ServeSettings:
    return ServeSettings(
        upstream="http://127.0.0.1:9",
        strategy={"strategy": "fixed", **strategy},
        models=(ModelEntry("m", context=4000, output=500, reserve=0.0, counter=counter),),
    )


async def _visit_held(windowing: Windowing, shape: Any, raw: bytes) -> tuple[Any, float]:
    """The visit's outcome, and the longest the event loop went without a turn meanwhile."""
    done, longest = False, 0.0

    async def ticking() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.002)
            now = time.perf_counter()
            longest, last = max(longest, now - last), now

    ticker = asyncio.create_task(ticking())
    await asyncio.sleep(0.01)
    try:
        outcome = await windowing.visit(shape, raw)
    finally:
        done = True
        await ticker
    return outcome, longest


def test_a_big_body_is_counted_off_the_event_loop():
    raw = orjson.dumps({"model": "m", "messages": _chat(), "max_tokens": 500})
    assert len(raw) > OFF_LOOP_BYTES
    started = time.perf_counter()
    outcome, held = asyncio.run(_visit_held(Windowing(_settings()), CHAT, raw))
    assert time.perf_counter() - started >= PAUSE  # the long result was counted
    assert outcome.outcome == "windowed" and outcome.dropped == 2  # the call and its result
    assert held < PAUSE / 2, f"the event loop was held {held:.2f} s"


def _hops(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The functions run through ``asyncio.to_thread`` from now on."""
    hops: list[Any] = []
    to_thread = asyncio.to_thread

    async def counted(function: Any, *args: Any) -> Any:
        hops.append(function)
        return await to_thread(function, *args)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    return hops


def test_a_small_body_is_windowed_on_the_loop(monkeypatch):
    """No thread hop for a body with little to count: it would cost each request."""
    hops = _hops(monkeypatch)
    raw = orjson.dumps({"model": "m", "messages": _chat("short result", turns=60)})
    assert len(raw) < OFF_LOOP_BYTES
    outcome = asyncio.run(Windowing(_settings()).visit(CHAT, raw))
    assert outcome.outcome == "windowed" and outcome.dropped > 0
    assert hops == []


def test_the_next_turn_of_a_big_chat_is_windowed_on_the_loop(monkeypatch):
    """A turn that adds little to a big history read before is read in part (the core
    recognises the rest and does not count it again): it stays on the loop."""
    hops = _hops(monkeypatch)
    windowing = Windowing(_settings())
    messages = _chat(turns=20)  # remembered from 32 messages on
    asyncio.run(windowing.visit(CHAT, orjson.dumps({"model": "m", "messages": messages})))
    assert len(hops) == 1
    grown = [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and?"}]
    raw = orjson.dumps({"model": "m", "messages": grown})
    assert windowing.bodies.read(raw, "messages").unread < 100
    outcome = asyncio.run(windowing.visit(CHAT, raw))
    assert outcome.outcome == "windowed" and outcome.dropped == 2
    assert len(hops) == 1


@pytest.mark.parametrize("shape", [CHAT, RESPONSES, ANTHROPIC], ids=lambda shape: shape.name)
def test_off_the_loop_the_window_is_the_one_on_it(monkeypatch, shape):
    if shape is CHAT:
        history = _chat()
    elif shape is RESPONSES:
        history = [
            {"type": "message", "role": "user", "content": "read the log"},
            {"type": "function_call", "call_id": "c1", "name": "log", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": BIG},
            *[{"type": "message", "role": role, "content": f"turn {n} " + "word " * 20}
              for n, role in enumerate(["assistant", "user"] * 3)],
        ]  # fmt: skip
    else:
        history = [
            {"role": "user", "content": "read the log"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "c1", "name": "log", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": BIG}]},
            *[{"role": role, "content": f"turn {n} " + "word " * 20}
              for n, role in enumerate(["assistant", "user"] * 3)],
        ]  # fmt: skip
    raw = orjson.dumps({"model": "m", shape.history_key: history})
    off = asyncio.run(Windowing(_settings("approx")).visit(shape, raw))
    monkeypatch.setattr(windowing, "OFF_LOOP_BYTES", len(raw))
    on = asyncio.run(Windowing(_settings("approx")).visit(shape, raw))
    assert off.outcome == on.outcome == "windowed"
    assert off.content == on.content
    assert off.dropped == on.dropped > 0
    assert off.record is not None and on.record is not None
    assert off.record.to_dict()["decisions"] == on.record.to_dict()["decisions"]


def test_off_the_loop_the_time_limit_holds():
    settings = _settings(
        "approx", strategy="serve-slow-choice-test", time_limit=0.1, on_timeout="recent"
    )
    raw = orjson.dumps({"model": "m", "messages": _chat()})
    started = time.perf_counter()
    outcome, held = asyncio.run(_visit_held(Windowing(settings), CHAT, raw))
    assert time.perf_counter() - started < 2
    assert outcome.outcome == "timed_out"
    assert windowing.header_value(outcome).endswith("; reason=VisitTimeout")
    assert held < 1


def test_off_the_loop_a_failing_strategy_falls_back_to_fixed(caplog):
    settings = _settings("approx", strategy="serve-crashing-big-test")
    raw = orjson.dumps({"model": "m", "messages": _chat()})
    outcome = asyncio.run(Windowing(settings).visit(CHAT, raw))
    assert outcome.outcome == "fallback" and outcome.fallback == "PluginError"
    assert outcome.dropped == 2
    assert "falling back" in caplog.text


def test_the_proxy_answers_others_while_it_counts_a_big_request(start_proxy, upstream, monkeypatch):
    """The review's case: /healthz and a small chat are answered while a request with
    a long tool result is being counted (a 7 MB one held every client for seconds):
    here the counting lasts until both have been answered."""
    monkeypatch.setattr(sys.modules[__name__], "PAUSE", 30)
    models = (ModelEntry("m", context=4000, output=500, reserve=0.0, counter=SLOW_COUNTER),)
    proxy = start_proxy(models=models)
    answers: list[httpx.Response] = []
    body = {"model": "m", "messages": _chat()}
    sending = threading.Thread(
        target=lambda: answers.append(
            httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=60)
        )
    )
    sending.start()
    assert COUNTING.wait(10)
    health = httpx.get(f"{proxy.url}/healthz", timeout=5)  # held with the loop: a timeout
    small = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        timeout=5,
    )
    assert not answers  # the big request is still being counted
    RELEASED.set()
    sending.join(60)
    assert health.status_code == 200 and small.status_code == 200
    assert answers[0].status_code == 200
    assert "dropped=2" in answers[0].headers["x-ctxwindow"]
