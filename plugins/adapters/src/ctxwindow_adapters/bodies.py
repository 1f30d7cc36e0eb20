"""Request bodies ``ctxwindow select`` reads through this plugin: an Anthropic Messages
body (``{"model": ..., "system": ..., "messages": [...]}``) in, the same body out.

The core reads OpenAI chat bodies itself and names no other API, so this plugin
registers the Anthropic shape through the ``register_request_formats`` hook. Windowing
is the Anthropic adapter's own (:func:`ctxwindow_adapters.anthropic.select`), imported
on first use so that loading plugins stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxwindow import Window, Windower
from ctxwindow.hookspecs import RegisterRequestFormat, hookimpl

__all__ = ["ANTHROPIC_ONLY_BLOCKS", "AnthropicBody", "register_request_formats"]

#: Content blocks only Anthropic's Messages API has: a body holding one is Anthropic's.
ANTHROPIC_ONLY_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})


class AnthropicBody:
    """The body of ``client.messages.create``: ``system`` beside ``messages``, or
    messages holding Anthropic-only content blocks."""

    def recognises(self, body: Mapping[str, Any]) -> bool:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return False
        return "system" in body or any(_has_anthropic_blocks(message) for message in messages)

    def select(
        self, body: Mapping[str, Any], windower: Windower, query: str | None
    ) -> tuple[dict[str, Any], Window[Any]]:
        from ctxwindow_adapters import anthropic

        window = anthropic.select(
            body["messages"], system=body.get("system"), windower=windower, query=query
        )
        return {**body, "messages": window.messages}, window


def _has_anthropic_blocks(message: Any) -> bool:
    content = message.get("content") if isinstance(message, Mapping) else None
    return isinstance(content, list) and any(
        isinstance(block, Mapping) and block.get("type") in ANTHROPIC_ONLY_BLOCKS
        for block in content
    )


@hookimpl
def register_request_formats(register: RegisterRequestFormat) -> None:
    register("anthropic", AnthropicBody())
