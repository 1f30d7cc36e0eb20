"""The hooks a ctxwindow plugin can implement.

Each hook receives a ``register`` callable and calls it once per thing it adds, so one
plugin can add several strategies or counters, and the host knows which plugin (and so
which distribution) added each of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

PROJECT = "ctxwindow"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: ``register(StrategyClass)``: a class (or factory) with ``name``, ``requires_llm``,
#: ``overhead_tokens``, optional ``option_specs``, and ``select``/``aselect``.
RegisterStrategy = Callable[[Any], None]
#: ``register(name, factory)``: ``factory(argument)`` returns a TokenCounter, where
#: ``argument`` is what follows ``name:`` in a counter spec (None when absent).
RegisterTokenCounter = Callable[[str, Callable[[str | None], Any]], None]
#: ``register(name, factory)``: ``factory(argument)`` returns an Embedder.
RegisterEmbedder = Callable[[str, Callable[[str | None], Any]], None]


@hookspec
def register_strategies(register: RegisterStrategy) -> None:
    """Add strategies that users can select by name.

    :param register: call ``register(StrategyClass)`` for each strategy. The class is
        called with the user's options (``StrategyClass(**options)``) when selected.
        Subclass :class:`ctxwindow.BaseStrategy` to get the contract checks, the record
        and option validation for free.
    """


@hookspec
def register_token_counters(register: RegisterTokenCounter) -> None:
    """Add token counters that users can name in config, such as ``"mymodel:large"``.

    :param register: call ``register(name, factory)`` for each counter family. A spec
        ``"name:argument"`` calls ``factory("argument")``; a bare ``"name"`` calls
        ``factory(None)``. The factory returns an object meeting
        :class:`ctxwindow.TokenCounter`, or raises InvalidOption saying what is wrong.
    """


@hookspec
def register_embedders(register: RegisterEmbedder) -> None:
    """Add text embedders that strategies can name, such as ``"mymodel:small"``.

    :param register: call ``register(name, factory)`` for each embedder family. A spec
        ``"name:argument"`` calls ``factory("argument")`` (a model name or path, say) and
        ``"name"`` calls ``factory(None)`` for the family's default. The factory returns
        an object meeting :class:`ctxwindow.Embedder`; it is made once per spec and
        shared, so load models there, not at import.
    """
