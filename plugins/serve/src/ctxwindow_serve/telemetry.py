"""A span per windowed request when ``opentelemetry-api`` is installed (it does nothing
until the app configures an SDK), with the GenAI semantic conventions' request
attributes and ctxwindow's own. Never headers, never message text."""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import urlsplit

from ctxwindow_serve.windowing import Outcome

try:
    from opentelemetry import trace
except ImportError:  # the `otel` extra is not installed: no spans
    trace = None  # type: ignore[assignment]


def enabled() -> bool:
    return trace is not None


def record_span(outcome: Outcome, provider: str, upstream: str, max_tokens: int | None) -> None:
    """One span for the visit (ended at once: it records the windowing, not the call).
    The attributes samplers read are given at the start; the rest only when the span
    records (with no SDK configured, a request pays for an empty span, not a dict)."""
    if trace is None:
        return
    host, port = _address(upstream)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "server.address": host,
        "server.port": port,
    }
    if outcome.model:
        attributes["gen_ai.request.model"] = outcome.model
    name = f"chat {outcome.model}" if outcome.model else "chat"
    span = _tracer().start_span(name, kind=trace.SpanKind.CLIENT, attributes=attributes)
    if span.is_recording():
        span.set_attributes(_visit_attributes(outcome, max_tokens))
    span.end()


@functools.cache
def _tracer() -> Any:
    """The tracer, got once (the API's proxy tracer turns to the SDK's when one is set)."""
    assert trace is not None
    return trace.get_tracer("ctxwindow_serve")


@functools.lru_cache(maxsize=8)
def _address(upstream: str) -> tuple[str, int]:
    parts = urlsplit(upstream)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def _visit_attributes(outcome: Outcome, max_tokens: int | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {"ctxwindow.outcome": outcome.outcome}
    if max_tokens:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    record = outcome.record
    if record is not None:
        attributes.update(
            {
                "ctxwindow.strategy": record.strategy,
                "ctxwindow.budget": record.budget,
                "ctxwindow.tokens.before": record.tokens_before,
                "ctxwindow.tokens.after": record.tokens_after,
                "ctxwindow.dropped": outcome.dropped,
                "ctxwindow.summarized": outcome.summarized,
                "ctxwindow.cut": outcome.cut,
            }
        )
    if outcome.fallback:
        attributes["ctxwindow.fallback"] = outcome.fallback
    return attributes
