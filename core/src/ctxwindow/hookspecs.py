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
#: ``register(name, factory)``: ``factory(argument)`` returns a Summarizer.
RegisterSummarizer = Callable[[str, Callable[[str | None], Any]], None]
#: ``register(name, factory)``: ``factory(argument)`` returns an ImportanceScorer.
RegisterImportanceScorer = Callable[[str, Callable[[str | None], Any]], None]
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


@hookspec
def register_summarizers(register: RegisterSummarizer) -> None:
    """Add summarizers that summarizing strategies can name, such as ``"mysummarizer"``.

    :param register: call ``register(name, factory)`` for each summarizer family.
        ``factory(argument)`` (``argument`` is what follows ``name:``, or None) returns an
        object meeting :class:`ctxwindow.Summarizer`: ``name``, ``requires_llm``,
        ``max_input_tokens``, ``summarize(request)`` and ``asummarize(request)``. Raise
        :class:`ctxwindow.SummarizerFailed` when a summary cannot be written, so the
        strategy's fallback chain runs.
    """


@hookspec
def register_importance_scorers(register: RegisterImportanceScorer) -> None:
    """Add importance scorers that strategies keeping "the important units" can name.

    :param register: call ``register(name, factory)`` for each scorer.
        ``factory(argument)`` returns an object meeting :class:`ctxwindow.ImportanceScorer`:
        ``name`` and ``score(history)``, one finite score per unit.
    """
