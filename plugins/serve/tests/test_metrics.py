"""/healthz, /metrics (Prometheus text and JSON), the visit log, and a span per visit
with the GenAI semantic conventions' attributes."""

from __future__ import annotations

import json

import httpx
import pytest


def post(proxy, body):
    return httpx.post(f"{proxy.url}/v1/chat/completions", json=body, timeout=30)


def test_healthz_answers_without_the_upstream(run_app):
    from ctxwindow_serve import ServeSettings, build_app

    proxy = run_app(build_app(ServeSettings(upstream="http://127.0.0.1:9")))
    answer = httpx.get(f"{proxy.url}/healthz")
    assert (answer.status_code, answer.json()) == (200, {"status": "ok"})


def test_metrics_count_requests_tokens_and_latency(proxy, make_history):
    for _ in range(3):
        assert post(
            proxy, {"model": "small", "messages": make_history(20), "max_tokens": 50}
        ).is_success
    post(proxy, {"model": "other", "messages": make_history(2)})
    post(proxy, {"model": "fail-429", "messages": make_history(2), "max_tokens": 5})
    data = httpx.get(f"{proxy.url}/metrics?format=json").json()
    counts = {(r["model"], r["outcome"]): r["count"] for r in data["requests"]}
    assert counts[("small", "windowed")] == 3
    assert counts[("other", "unknown_model")] == 1
    assert counts[("fail-429", "windowed")] == 1
    assert data["upstream_errors"] == {"/v1/chat/completions": 1}
    assert data["tokens_saved"] == data["tokens_before"] - data["tokens_after"] > 0
    assert data["visit_ms"]["p50"] > 0
    text = httpx.get(f"{proxy.url}/metrics").text
    assert (
        'ctxwindow_requests_total{route="/v1/chat/completions",model="small",outcome="windowed"} 3'
        in text
    )
    assert f"ctxwindow_tokens_saved_total {data['tokens_saved']}" in text
    assert 'ctxwindow_visit_ms{quantile="0.50"}' in text


def test_a_request_is_counted_once_and_labels_are_bounded(proxy, make_history):
    """An upstream error on a windowed route is one request, not two; a model or a path
    the client makes up is ``other``, so clients cannot grow the metric set."""
    post(proxy, {"model": "fail-429", "messages": make_history(2), "max_tokens": 5})
    for number in range(3):
        post(proxy, {"model": f"made-up-{number}", "messages": make_history(2)})
        httpx.post(f"{proxy.url}/v1/made/up/{number}", json={"model": "fail-429"}, timeout=30)
    data = httpx.get(f"{proxy.url}/metrics?format=json").json()
    assert sum(r["count"] for r in data["requests"]) == 4  # the four chat requests
    counts = {(r["route"], r["model"], r["outcome"]): r["count"] for r in data["requests"]}
    assert counts[("/v1/chat/completions", "fail-429", "windowed")] == 1
    assert counts[("/v1/chat/completions", "other", "unknown_model")] == 3
    assert data["upstream_errors"] == {"/v1/chat/completions": 1, "other": 3}
    # a body that is not JSON names no model: `other` too, never an empty label
    httpx.post(f"{proxy.url}/v1/chat/completions", content=b"{not json", timeout=30)
    data = httpx.get(f"{proxy.url}/metrics?format=json").json()
    counts = {(r["route"], r["model"], r["outcome"]): r["count"] for r in data["requests"]}
    assert counts[("/v1/chat/completions", "other", "not_json")] == 1
    text = httpx.get(f"{proxy.url}/metrics").text
    assert "made" not in text
    assert 'ctxwindow_upstream_errors_total{route="other"} 3' in text


def test_the_log_has_the_budget_and_the_whole_record(start_proxy, make_history, tmp_path):
    log = tmp_path / "logs" / "visits.jsonl"
    proxy = start_proxy(log=log)
    messages = make_history(20)
    answer = post(proxy, {"model": "small", "messages": messages, "max_tokens": 50})
    proxy.stop()
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["visit"] == answer.headers["x-ctxwindow-visit"]
    assert entry["budget"] == {"context": 400, "output": 50, "fixed": 0, "reserved": 0, "left": 350}
    assert entry["record"]["messages_before"] == len(messages)
    assert len(entry["record"]["decisions"]) > 0
    assert entry["upstream_status"] == 200
    assert "word word" not in log.read_text()  # no message text


def test_each_visit_is_a_span(proxy, upstream, make_history):
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    answer = post(proxy, {"model": "small", "messages": make_history(20), "max_tokens": 50})
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes)
    assert span.name == "chat small"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == "small"
    assert attributes["gen_ai.request.max_tokens"] == 50
    assert attributes["ctxwindow.strategy"] == "fixed"
    assert attributes["ctxwindow.budget"] == 350
    # a request that names no output limit: the span does not report the entry's as asked
    post(proxy, {"model": "small", "messages": make_history(20)})
    unasked = dict(exporter.get_finished_spans()[-1].attributes)
    assert "gen_ai.request.max_tokens" not in unasked
    assert unasked["gen_ai.request.model"] == "small"
    assert f"dropped={attributes['ctxwindow.dropped']}" in answer.headers["x-ctxwindow"]
    assert f"cut={attributes['ctxwindow.cut']}" in answer.headers["x-ctxwindow"]


def test_the_visit_latency_holds_the_adapters_conversion(
    start_proxy, make_history, tmp_path, monkeypatch
):
    """On /v1/messages the adapter's conversion (not in the record's ``elapsed_ms``) is
    most of a new conversation's cost: the metric and the log's ``visit_ms`` hold it."""
    import time

    from ctxwindow_serve import shapes

    convert = shapes.anthropic_adapter.aselect

    async def slow_conversion(*args, **kwargs):
        time.sleep(0.2)  # CPU-bound, as a conversion is: the event loop waits
        return await convert(*args, **kwargs)

    monkeypatch.setattr(shapes.anthropic_adapter, "aselect", slow_conversion)
    log = tmp_path / "visits.jsonl"
    proxy = start_proxy(log=log)
    messages = make_history(20)[1:]
    body = {"model": "claude-x", "max_tokens": 50, "messages": messages}
    answer = httpx.post(f"{proxy.url}/v1/messages", json=body, timeout=30)
    assert answer.status_code == 200
    data = httpx.get(f"{proxy.url}/metrics?format=json").json()
    assert data["visit_ms"]["p50"] >= 200
    proxy.stop()
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["visit_ms"] >= 200 > entry["record"]["elapsed_ms"]
    assert entry["proxy_ms"] >= entry["visit_ms"]
