"""OpenAI chat-completions messages: the shape ctxwindow reads natively.

The window holds the very dicts you passed; :func:`to_openai` gives new dicts with only
the API's fields, for when a message carries ``id`` or ``metadata`` (a summary does).
Needs no openai package: these are plain dicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxwindow import OPENAI_FIELDS, Strategy, TokenCounter, Window, Windower, to_openai
from ctxwindow_adapters._bridge import windower_for
from ctxwindow_adapters._reads import beside_media

__all__ = ["OPENAI_FIELDS", "aselect", "request_messages", "select", "to_openai"]


def select(
    messages: Any,
    budget: int | None = None,
    strategy: str | Strategy | None = None,
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    windower: Windower | None = None,
    **options: Any,
) -> Window[Any]:
    """The window of chat-completions ``messages``: the same dicts, those that fit."""
    chosen = windower_for(windower, strategy, budget, counter, options)
    return _in_their_order(chosen.select(messages, query=query, budget=budget), messages)


async def aselect(
    messages: Any,
    budget: int | None = None,
    strategy: str | Strategy | None = None,
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    windower: Windower | None = None,
    **options: Any,
) -> Window[Any]:
    """Async :func:`select`."""
    chosen = windower_for(windower, strategy, budget, counter, options)
    window = await chosen.aselect(messages, query=query, budget=budget)
    return _in_their_order(window, messages)


def _in_their_order(window: Window[Any], messages: Any) -> Window[Any]:
    """The window with each message cut to fit holding its parts in the caller's order:
    the core's cut puts its text first and the images after it, where a model reads an
    image and the words about it in the order they were written. Only the current turn
    (the newest user message on) holds cuts, so the look costs that turn, not the window."""
    output = window.messages
    fixed: list[Any] | None = None
    for number in range(len(output) - 1, -1, -1):
        message = output[number]
        if type(message) is not dict:
            break
        metadata = message.get("metadata")
        if isinstance(metadata, dict) and metadata.get("truncated"):
            ordered = _ordered(message, messages, metadata.get("stands_in_for"))
            if ordered is not None:
                fixed = fixed or list(output)
                fixed[number] = ordered
        if message.get("role") == "user":
            break
    return window if fixed is None else Window(fixed, window.record)


def _ordered(cut: dict[str, Any], messages: Any, position: Any) -> dict[str, Any] | None:
    """``cut`` with its text where the original's first text part was and the original's
    other parts where they were (None: nothing to put in order)."""
    content = cut.get("content")
    if type(position) is not int or not isinstance(content, list) or len(content) < 2:
        return None
    given = (
        messages[position]
        if isinstance(messages, Sequence) and 0 <= position < len(messages)
        else None
    )
    original = given.get("content") if isinstance(given, dict) else None
    text = next((p for p in content if isinstance(p, dict) and "text" in p), None)
    if not isinstance(original, list) or text is None:
        return None
    ordered = beside_media(original, text, _no_text)
    if ordered is None or len(ordered) != len(content):  # not the cut of these parts
        return None
    return {**cut, "content": ordered}


def _no_text(part: Any) -> bool:
    """Whether a part holds no words (the core keeps it whole beside a cut's text)."""
    if not isinstance(part, dict):
        return False
    return not isinstance(part.get("refusal" if part.get("type") == "refusal" else "text"), str)


def request_messages(window: Window[Any]) -> list[dict[str, Any]]:
    """The window as the ``messages`` argument of ``client.chat.completions.create``."""
    return to_openai(window.messages)
