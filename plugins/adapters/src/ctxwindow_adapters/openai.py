"""OpenAI chat-completions messages: the shape ctxwindow reads natively.

The window holds the very dicts you passed; :func:`to_openai` gives new dicts with only
the API's fields, for when a message carries ``id`` or ``metadata`` (a summary does).
Needs no openai package: these are plain dicts.
"""

from __future__ import annotations

from typing import Any

from ctxwindow import OPENAI_FIELDS, Strategy, TokenCounter, Window, Windower, to_openai
from ctxwindow_adapters._bridge import windower_for

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
    return chosen.select(messages, query=query, budget=budget)


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
    return await chosen.aselect(messages, query=query, budget=budget)


def request_messages(window: Window[Any]) -> list[dict[str, Any]]:
    """The window as the ``messages`` argument of ``client.chat.completions.create``."""
    return to_openai(window.messages)
