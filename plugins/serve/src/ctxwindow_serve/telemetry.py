"""A span per windowed request when ``opentelemetry-api`` is installed (it does nothing
until the app configures an SDK), with the GenAI semantic conventions' request
attributes and ctxwindow's own. Never headers, never message text."""

from __future__ import annotations

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
    """One span for the visit (ended at once: it records the windowing, not the call)."""
    if trace is None:
        return
    parts = urlsplit(upstream)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "server.address": parts.hostname or "",
        "server.port": parts.port or (443 if parts.scheme == "https" else 80),
        "ctxwindow.outcome": outcome.outcome,
    }
    if outcome.model:
        attributes["gen_ai.request.model"] = outcome.model
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
            }
        )
    if outcome.fallback:
        attributes["ctxwindow.fallback"] = outcome.fallback
    tracer = trace.get_tracer("ctxwindow_serve")
    name = f"chat {outcome.model}" if outcome.model else "chat"
    with tracer.start_as_current_span(name, kind=trace.SpanKind.CLIENT, attributes=attributes):
        pass
