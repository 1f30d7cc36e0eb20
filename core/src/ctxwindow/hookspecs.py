"""The hooks a ctxwindow plugin can implement.

Each ``register_*`` hook but ``register_commands`` receives a ``register`` callable and
calls it once per thing it adds, so one plugin can add several strategies or counters,
and the host knows which plugin (and so which distribution) added each of them.
``register_commands`` receives the command line to add subcommands to, as simonw/llm's
hook of that name does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    import argparse

    from ctxwindow import Window, Windower

PROJECT = "ctxwindow"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: ``register(StrategyClass)``: a class (or factory) with ``name`` and
#: ``choose(history)`` (see :class:`ctxwindow.Strategy` for the optional members).
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


class RequestFormat(Protocol):
    """A request body shape that ``ctxwindow select`` reads and gives back, such as an
    Anthropic Messages body: the plugin that knows the shape converts it, so the core
    names no other API than its own (OpenAI chat messages)."""

    def recognises(self, body: Mapping[str, Any]) -> bool:
        """Whether ``body`` (a JSON object holding a ``messages`` list) is in this
        format. Cheap and strict: the first format that recognises a body reads it."""
        ...

    def select(
        self, body: Mapping[str, Any], windower: Windower, query: str | None
    ) -> tuple[dict[str, Any], Window[Any]]:
        """``body`` with its messages windowed by ``windower`` (every other key kept, in
        the same shape), and the window, whose record counts positions in ``messages``.
        Raise :class:`ctxwindow.InvalidMessage` for a message the format cannot read."""
        ...


#: ``register(name, format)``: ``format`` is a :class:`RequestFormat`.
RegisterRequestFormat = Callable[[str, RequestFormat], None]
#: ``register(name, description)``: a table of ctxwindow.toml the plugin reads.
RegisterConfigTable = Callable[[str, str], None]


@hookspec
def register_strategies(register: RegisterStrategy) -> None:
    """Add strategies that users can select by name.

    :param register: call ``register(StrategyClass)`` for each strategy. The class is
        called with the user's options (``StrategyClass(**options)``) when selected.
        Subclass :class:`ctxwindow.BaseStrategy` for declared, validated options; the
        runner (:class:`ctxwindow.Windower`) checks the contract and writes the record.
    """


@hookspec
def register_token_counters(register: RegisterTokenCounter) -> None:
    """Add token counters that users can name in config, such as ``"mymodel:large"``.

    :param register: call ``register(name, factory)`` for each counter family. A spec
        ``"name:argument"`` calls ``factory("argument")``; a bare ``"name"`` calls
        ``factory(None)``. The factory returns a :class:`ctxwindow.TokenCounter`, or
        raises :class:`ctxwindow.InvalidOption` saying what is wrong with the argument.
    """


@hookspec
def register_embedders(register: RegisterEmbedder) -> None:
    """Add text embedders that strategies can name, such as ``"mymodel:small"``.

    :param register: call ``register(name, factory)`` for each embedder family. A spec
        ``"name:argument"`` calls ``factory("argument")`` (a model name or path, say) and
        ``"name"`` calls ``factory(None)`` for the family's default. The factory returns
        a :class:`ctxwindow.Embedder`; it is called once per spec and its result shared,
        so load models there, not at import.
    """


@hookspec
def register_summarizers(register: RegisterSummarizer) -> None:
    """Add summarizers that summarizing strategies can name, such as ``"mysummarizer"``.

    :param register: call ``register(name, factory)`` for each summarizer family.
        ``factory(argument)`` (``argument`` is what follows ``name:``, or None) returns a
        :class:`ctxwindow.Summarizer`, which raises :class:`ctxwindow.SummarizerFailed`
        when a summary cannot be written, so the strategy's fallback chain runs.
    """


@hookspec
def register_importance_scorers(register: RegisterImportanceScorer) -> None:
    """Add importance scorers that strategies keeping "the important units" can name.

    :param register: call ``register(name, factory)`` for each scorer.
        ``factory(argument)`` returns a :class:`ctxwindow.ImportanceScorer`.
    """


@hookspec
def register_request_formats(register: RegisterRequestFormat) -> None:
    """Add request body shapes that ``ctxwindow select`` reads and writes back.

    :param register: call ``register(name, format)`` for each shape, where ``format``
        is a :class:`RequestFormat`: ``recognises(body)`` says whether a saved request
        body is in that shape, ``select(body, windower, query)`` windows its messages
        and returns the body in the same shape with every other key kept. The core reads
        OpenAI chat bodies (``{"model": ..., "messages": [...]}``) itself.
    """


@hookspec
def register_config_tables(register: RegisterConfigTable) -> None:
    """Claim tables of ``ctxwindow.toml`` (and ``[tool.ctxwindow]``) that the plugin
    reads, so that one file configures the windower and the plugin's own tool: the
    windower leaves a claimed table to its plugin, and names any other unknown key as
    an error (a misspelt option is not silently ignored).

    :param register: call ``register(name, description)`` for each top-level table
        the plugin reads (``"serve"`` for ``[serve]``; ``"models"`` for
        ``[models."NAME"]``), ``description`` saying in a few words what it configures.
    """


@hookspec
def register_commands(cli: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add subcommands to the ``ctxwindow`` command line.

    :param cli: the ``ctxwindow`` parser's subcommands: call ``cli.add_parser(name,
        help=...)`` for each command, add its arguments, and ``set_defaults(run=run)``
        where ``run(args)`` returns the exit code. A ctxwindow error (or ValueError,
        OSError) that ``run`` raises is printed as one ``ctxwindow: error:`` line, as for
        the core's own commands; a hook that raises is reported by ``ctxwindow plugins``
        and the other commands still work.
    """
