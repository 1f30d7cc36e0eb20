"""The one-call API: pick a strategy by name and get a window."""

from __future__ import annotations

from typing import Any

from ctxwindow.config import windower_from
from ctxwindow.errors import InvalidOption
from ctxwindow.registry import strategy_entry
from ctxwindow.strategy import Strategy
from ctxwindow.tokens import TokenCounter
from ctxwindow.window import Window


def select(
    messages: Any,
    budget: int,
    strategy: str = "fixed",
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    **options: Any,
) -> Window[Any]:
    """Window ``messages`` to ``budget`` tokens with the strategy named ``strategy``.

    Dicts in, the same dict objects out; Messages in, Messages out.
    """
    config = {"strategy": strategy, "budget": budget, "counter": counter, **options}
    return windower_from(config).select(messages, query=query)


async def aselect(
    messages: Any,
    budget: int,
    strategy: str = "fixed",
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    **options: Any,
) -> Window[Any]:
    """Async :func:`select`: does not block the event loop on strategies that wait."""
    config = {"strategy": strategy, "budget": budget, "counter": counter, **options}
    return await windower_from(config).aselect(messages, query=query)


def get_strategy(name: str, **options: Any) -> Strategy:
    """A strategy instance by name, its options validated."""
    entry = strategy_entry(name)
    try:
        strategy: Strategy = entry.target(**options)
    except TypeError as error:
        raise InvalidOption(f"strategy {name!r} rejected its options: {error}") from None
    return strategy
