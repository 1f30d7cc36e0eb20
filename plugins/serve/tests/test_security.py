"""Credentials go to the upstream and nowhere else; a client key when asked for; a body
limit; upstream errors as they came; a failing strategy never costs the request."""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import openai
import pytest

import ctxwindow
from ctxwindow.testing import check_window
from ctxwindow_serve import ServeSettings
from ctxwindow_serve.settings import load_settings


def post(proxy, body, **headers):
    return httpx.post(f"{proxy.url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def test_credentials_reach_the_upstream_and_nothing_else(
    start_proxy, upstream, make_history, secret, tmp_path, caplog
):
    caplog.set_level(logging.DEBUG)
    log = tmp_path / "visits.jsonl"
    proxy = start_proxy(log=log)
    body = {"model": "small", "messages": make_history(20), "max_tokens": 50}
    answer = post(proxy, body, authorization=f"Bearer {secret}", **{"x-api-key": secret})
    untouched = post(proxy, {**body, "model": "other"}, authorization=f"Bearer {secret}")
    assert answer.status_code == untouched.status_code == 200
    assert upstream.seen[0].headers["authorization"] == f"Bearer {secret}"
    assert upstream.seen[0].headers["x-api-key"] == secret
    metrics = (
        httpx.get(f"{proxy.url}/metrics").text + httpx.get(f"{proxy.url}/metrics?format=json").text
    )
    proxy.stop()  # the log is written out when the proxy stops
    logged = log.read_text()
    assert json.loads(logged.splitlines()[0])["record"]["strategy"] == "fixed"
    for place in (
        logged,
        metrics,
        caplog.text,
        str(answer.headers),
        repr(proxy.app.state.proxy.settings),
    ):
        assert secret not in place


def test_a_required_key_is_checked_and_not_forwarded(start_proxy, upstream, make_history):
    proxy = start_proxy(client_key="proxy-key-1")
    body = {"model": "small", "messages": make_history(2), "max_tokens": 50}
    refused = post(proxy, body)
    wrong = post(proxy, body, **{"x-ctxwindow-key": "proxy-key-2"})
    assert refused.status_code == wrong.status_code == 401
    assert httpx.get(f"{proxy.url}/metrics").status_code == 401
    # a scraper's Basic authentication, the key as its password, opens /metrics alone
    assert httpx.get(f"{proxy.url}/metrics", auth=("prometheus", "proxy-key-1")).status_code == 200
    assert httpx.get(f"{proxy.url}/metrics", auth=("prometheus", "proxy-key-2")).status_code == 401
    basic = httpx.post(
        f"{proxy.url}/v1/chat/completions", json=body, auth=("x", "proxy-key-1"), timeout=30
    )
    assert basic.status_code == 401  # the API routes take the proxy's header only
    assert upstream.seen == []
    assert post(proxy, body, **{"x-ctxwindow-key": "proxy-key-1"}).status_code == 200
    assert "x-ctxwindow-key" not in upstream.last.headers


def test_the_key_comes_from_the_environment_and_never_from_the_config():
    settings = load_settings(
        {"serve": {"upstream": "http://up"}}, require_key=True,
        environ={"CTXWINDOW_PROXY_KEY": "k-123"},
    )  # fmt: skip
    assert settings.client_key == "k-123"
    assert "k-123" not in repr(settings)
    with pytest.raises(ctxwindow.ConfigError, match="CTXWINDOW_PROXY_KEY"):
        load_settings({"serve": {"upstream": "http://up"}}, require_key=True, environ={})


def test_an_upstream_url_with_credentials_is_refused():
    with pytest.raises(ctxwindow.ConfigError, match="credentials"):
        ServeSettings(upstream="https://user:pw@api.example.com")


def test_a_body_over_the_limit_is_a_413_saying_so(start_proxy, upstream, make_history):
    proxy = start_proxy(max_body_bytes=2000)
    answer = post(proxy, {"model": "small", "messages": make_history(40)})
    assert answer.status_code == 413
    assert "2000 bytes" in answer.json()["error"]["message"]
    # without a content-length, counted as it arrives
    chunks = iter([b'{"model": "small", "messages": [', b"1," * 2000, b"1]}"])
    streamed = httpx.post(f"{proxy.url}/v1/chat/completions", content=chunks)
    assert streamed.status_code == 413
    assert upstream.seen == []


def test_upstream_errors_come_back_as_they_came(proxy, make_history):
    answer = post(proxy, {"model": "fail-429", "messages": make_history(2), "max_tokens": 5})
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "7"
    assert answer.json() == {"error": {"message": "slow down", "type": "rate_limit"}}
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-x", max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="fail-429", messages=make_history(2))


def test_bad_json_is_forwarded_for_the_upstream_to_answer(proxy, upstream):
    answer = httpx.post(f"{proxy.url}/v1/chat/completions", content=b"{not json")
    assert upstream.last.body == b"{not json"
    assert answer.status_code == 400
    assert answer.headers["x-ctxwindow"] == "outcome=not_json"


@pytest.mark.parametrize("max_tokens", [400, 400.0])
def test_a_request_with_no_room_for_history_is_refused_and_says_so(
    proxy, upstream, make_history, max_tokens
):
    """The model's context (400) less the output the request asks for leaves nothing:
    a 400 in the API's shape, never sent on, with the outcome in the header as every
    other answer has it; a whole float counts as the number it is (lenient servers
    take 400.0 as 400)."""
    before = len(upstream.seen)
    body = {"model": "small", "messages": make_history(2), "max_tokens": max_tokens}
    answer = post(proxy, body)
    assert answer.status_code == 400
    assert answer.headers["x-ctxwindow"] == "outcome=refused"
    assert "no room for any history" in answer.json()["error"]["message"]
    assert len(upstream.seen) == before


@pytest.mark.parametrize("max_tokens", [399, 50])
def test_a_history_that_cannot_fit_goes_untouched_and_says_why(
    proxy, upstream, make_history, max_tokens
):
    """A budget of one token, or a newest user message over the whole budget: no window
    holds what must be kept, so the body goes as it came, the header naming why."""
    messages = [*make_history(2)[:-1], {"role": "user", "content": "long " * 600}]
    answer = post(proxy, {"model": "small", "messages": messages, "max_tokens": max_tokens})
    assert answer.status_code == 200
    assert answer.headers["x-ctxwindow"] == "outcome=untouched; reason=BudgetTooSmall"
    assert upstream.last.json()["messages"] == messages


def test_a_history_that_cannot_fit_is_no_failure(
    start_proxy, upstream, make_history, caplog, tmp_path
):
    """Not a strategy's failure: no fallback tried, no warning, none in the log line."""
    log = tmp_path / "visits.jsonl"
    proxy = start_proxy(log=log)
    messages = [*make_history(2)[:-1], {"role": "user", "content": "long " * 600}]
    with caplog.at_level(logging.INFO, logger="ctxwindow"):
        answer = post(proxy, {"model": "small", "messages": messages, "max_tokens": 50})
    assert answer.headers["x-ctxwindow"] == "outcome=untouched; reason=BudgetTooSmall"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    proxy.stop()
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["fallback"] is None
    assert "budget" in entry["note"]


def test_an_unreachable_upstream_is_a_502_in_the_apis_shape(run_app, make_history):
    from ctxwindow_serve import build_app

    proxy = run_app(build_app(ServeSettings(upstream="http://127.0.0.1:9")))
    answer = post(proxy, {"model": "small", "messages": make_history(2)})
    assert answer.status_code == 502
    assert "upstream 127.0.0.1:9 unreachable" in answer.json()["error"]["message"]
    anthropic_shape = httpx.post(f"{proxy.url}/v1/messages", json={"model": "m"})
    assert anthropic_shape.json()["type"] == "error"


def test_an_unreachable_upstream_is_logged_and_counted_as_such(
    run_app, make_history, tmp_path, caplog
):
    """The client and the log name the host and the cause (never the query); the
    metrics and the visit log count it apart from the upstream's own errors (it gave no
    answer: no status)."""
    from ctxwindow_serve import ModelEntry, build_app

    log = tmp_path / "visits.jsonl"
    models = (ModelEntry("small", context=400, output=50, reserve=0.0),)
    settings = ServeSettings(upstream="http://127.0.0.1:9", models=models, log=log)
    proxy = run_app(build_app(settings))
    with caplog.at_level(logging.WARNING, logger="ctxwindow"):
        answer = httpx.post(
            f"{proxy.url}/v1/chat/completions?key=secret-in-query",
            json={"model": "small", "messages": make_history(2)},
            timeout=30,
        )
        httpx.get(f"{proxy.url}/v1/models", timeout=30)
    message = answer.json()["error"]["message"]
    assert "127.0.0.1:9" in message and "ClientConnectorError" in message
    warned = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(warned) == 2 and "upstream 127.0.0.1:9 unreachable: Client" in warned[0]
    data = httpx.get(f"{proxy.url}/metrics?format=json").json()
    assert data["upstream_errors"] == {}
    assert data["upstream_unreachable"] == {"/v1/chat/completions": 1, "other": 1}
    text = httpx.get(f"{proxy.url}/metrics").text
    assert 'ctxwindow_upstream_unreachable_total{route="other"} 1' in text
    proxy.stop()
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["upstream_status"] is None
    assert entry["upstream_unreachable"].startswith("127.0.0.1:9: ClientConnectorError")
    assert "secret-in-query" not in log.read_text() + caplog.text + message


def test_a_key_that_is_not_ascii_is_matched(start_proxy, make_history):
    """The header's bytes, UTF-8 as the key in the environment is (Starlette reads
    them as latin-1): the right key was refused every time."""
    key = "clé-ключ"
    proxy = start_proxy(client_key=key)
    body = {"model": "small", "messages": make_history(2), "max_tokens": 50}
    assert post(proxy, body, **{"x-ctxwindow-key": key.encode()}).status_code == 200
    assert post(proxy, body, **{"x-ctxwindow-key": "clé".encode()}).status_code == 401
    assert (
        post(proxy, body, **{"x-ctxwindow-key": key.encode("latin-1", "replace")}).status_code
        == 401
    )
    assert (
        httpx.get(f"{proxy.url}/metrics", headers={"x-ctxwindow-key": key.encode()}).status_code
        == 200
    )
    assert httpx.get(f"{proxy.url}/metrics", auth=("u", key)).status_code == 200


class Crashing(ctxwindow.BaseStrategy):
    """A strategy whose own code fails on every visit."""

    name = "crashing-test"

    def choose(self, history):
        raise RuntimeError("boom")


def test_a_failing_strategy_falls_back_to_fixed(start_proxy, upstream, make_history, caplog):
    ctxwindow.register_plugin(_CrashingPlugin(), name="crashing-test-plugin")
    try:
        proxy = start_proxy(strategy={"strategy": "crashing-test"})
        messages = make_history(20)
        answer = post(proxy, {"model": "small", "messages": messages, "max_tokens": 50})
    finally:
        ctxwindow.unregister_plugin("crashing-test-plugin")
    assert answer.status_code == 200
    assert "fallback=PluginError" in answer.headers["x-ctxwindow"]
    expected = check_window(ctxwindow.get_strategy("fixed"), messages, 350)
    assert expected is not None
    assert upstream.last.json()["messages"] == expected.messages
    assert "falling back" in caplog.text
    assert "Traceback" not in answer.text


def test_the_fallback_keeps_the_configured_common_options(start_proxy, upstream, make_history):
    """``oversize = "truncate"`` applies to ``fixed`` when it stands in: a newest user
    message over the budget is cut, not the whole body forwarded untouched."""
    ctxwindow.register_plugin(_CrashingPlugin(), name="crashing-test-plugin")
    try:
        proxy = start_proxy(strategy={"strategy": "crashing-test", "oversize": "truncate"})
        messages = [*make_history(3)[:-1], {"role": "user", "content": "long " * 600}]
        answer = post(proxy, {"model": "small", "messages": messages, "max_tokens": 50})
    finally:
        ctxwindow.unregister_plugin("crashing-test-plugin")
    assert answer.status_code == 200
    assert "fallback=PluginError" in answer.headers["x-ctxwindow"]
    sent = upstream.last.json()["messages"]
    assert len(sent[-1]["content"]) < len(messages[-1]["content"])


class _CrashingPlugin:
    @ctxwindow.hookimpl
    def register_strategies(self, register):
        register(Crashing)


class Slow(ctxwindow.BaseStrategy):
    """A strategy that takes longer than any time limit the tests give."""

    name = "slow-test"

    def choose(self, history):
        raise AssertionError("not called: achoose is")

    async def achoose(self, history):
        await asyncio.sleep(5)
        raise AssertionError("not reached: the time limit is shorter")


class _SlowPlugin:
    @ctxwindow.hookimpl
    def register_strategies(self, register):
        register(Slow)


def test_a_visit_that_times_out_says_so(start_proxy, upstream, make_history):
    """With ``on_timeout = "recent"`` the core chooses the newest messages: the header
    says why, and the metrics count it apart from a strategy's own window."""
    ctxwindow.register_plugin(_SlowPlugin(), name="slow-test-plugin")
    try:
        strategy = {"strategy": "slow-test", "time_limit": 0.05, "on_timeout": "recent"}
        proxy = start_proxy(strategy=strategy)
        answer = post(proxy, {"model": "small", "messages": make_history(20), "max_tokens": 50})
    finally:
        ctxwindow.unregister_plugin("slow-test-plugin")
    assert answer.status_code == 200
    assert answer.headers["x-ctxwindow"].endswith("; reason=VisitTimeout")
    data = httpx.get(f"{proxy.url}/metrics?format=json").json()
    assert [(r["outcome"], r["count"]) for r in data["requests"]] == [("timed_out", 1)]
