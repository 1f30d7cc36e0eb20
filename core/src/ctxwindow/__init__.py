"""ctxwindow: choose what an LLM request carries when the history outgrows the window.

The core defines the contract and the plugin host; strategies come from plugins,
selected by name::

    import ctxwindow
    window = ctxwindow.select(messages, budget=4000, strategy="fixed")
    window.messages        # the same dict objects you passed, those that fit
    window.record          # what was kept, dropped or summarized, and why

``import ctxwindow`` loads only the errors; every other name loads its module (and
what that needs: the runner, the plugin host) when it is first used (PEP 562), so a
process that imports the package without using it does not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxwindow.errors import (
    BudgetTooSmall,
    ConfigError,
    ContractViolation,
    CounterFailed,
    CtxWindowError,
    DuplicateName,
    EmbedderUnavailable,
    InvalidBudget,
    InvalidMessage,
    InvalidOption,
    InvalidQuery,
    InvalidSelection,
    LLMNotConfigured,
    OrphanToolResult,
    PluginError,
    SummarizerFailed,
    UnknownCounter,
    UnknownEmbedder,
    UnknownScorer,
    UnknownStrategy,
    UnknownSummarizer,
    VisitTimeout,
)

if TYPE_CHECKING:  # what the names below are, for type checkers and the docs
    from ctxwindow._config import (
        aselect,
        cached_windower,
        from_config,
        load_config,
        parse_strategy_spec,
        select,
    )
    from ctxwindow._contract import Strategy
    from ctxwindow._files import read_messages_file
    from ctxwindow._history import Branch, Conversation, History
    from ctxwindow._messages import (
        OPENAI_FIELDS,
        ContentPart,
        FunctionCall,
        Message,
        Role,
        ToolCall,
        to_openai,
    )
    from ctxwindow._options import Option
    from ctxwindow._plugins import (
        PluginInfo,
        describe_strategies,
        get_counter,
        get_embedder,
        get_importance_scorer,
        get_plugins,
        get_strategy,
        get_summarizer,
        plugin_problems,
        register_plugin,
        reload_plugins,
        strategy_class,
        unregister_plugin,
    )
    from ctxwindow._protocols import (
        AsyncSummarizer,
        Embedder,
        ImportanceScorer,
        Summarizer,
        SummaryRequest,
        SummaryResult,
    )
    from ctxwindow._recent import remember_histories, remembered_histories
    from ctxwindow._requests import SavedRequest, read_request, sendable
    from ctxwindow._selection import Selection
    from ctxwindow._strategy import BaseStrategy
    from ctxwindow._tokens import ApproxCounter, CachedCounter, TokenCounter
    from ctxwindow._units import Unit
    from ctxwindow._window import (
        Action,
        Decision,
        DecisionRun,
        LLMUsage,
        Window,
        WindowRecord,
    )
    from ctxwindow._windower import Windower
    from ctxwindow.hookspecs import hookimpl

#: The public names loaded on first use, by the module that defines them.
_LAZY_MODULES: dict[str, tuple[str, ...]] = {
    "ctxwindow._config": (
        "aselect",
        "cached_windower",
        "from_config",
        "load_config",
        "parse_strategy_spec",
        "select",
    ),
    "ctxwindow._contract": ("Strategy",),
    "ctxwindow._files": ("read_messages_file",),
    "ctxwindow._history": ("Branch", "Conversation", "History"),
    "ctxwindow._messages": (
        "OPENAI_FIELDS",
        "ContentPart",
        "FunctionCall",
        "Message",
        "Role",
        "ToolCall",
        "to_openai",
    ),
    "ctxwindow._options": ("Option",),
    "ctxwindow._plugins": (
        "PluginInfo",
        "describe_strategies",
        "get_counter",
        "get_embedder",
        "get_importance_scorer",
        "get_plugins",
        "get_strategy",
        "get_summarizer",
        "plugin_problems",
        "register_plugin",
        "reload_plugins",
        "strategy_class",
        "unregister_plugin",
    ),
    "ctxwindow._protocols": (
        "AsyncSummarizer",
        "Embedder",
        "ImportanceScorer",
        "Summarizer",
        "SummaryRequest",
        "SummaryResult",
    ),
    "ctxwindow._recent": ("remember_histories", "remembered_histories"),
    "ctxwindow._requests": ("SavedRequest", "read_request", "sendable"),
    "ctxwindow._selection": ("Selection",),
    "ctxwindow._strategy": ("BaseStrategy",),
    "ctxwindow._tokens": ("ApproxCounter", "CachedCounter", "TokenCounter"),
    "ctxwindow._units": ("Unit",),
    "ctxwindow._window": (
        "Action",
        "Decision",
        "DecisionRun",
        "LLMUsage",
        "Window",
        "WindowRecord",
    ),
    "ctxwindow._windower": ("Windower",),
    "ctxwindow.hookspecs": ("hookimpl",),
}
_DEFINED_IN = {name: module for module, names in _LAZY_MODULES.items() for name in names}


#: The installed version (read on first use, by ``__getattr__``).
__version__: str

if not TYPE_CHECKING:  # hidden from type checkers: else any name, a typo too, is Any to them

    def __getattr__(name: str) -> Any:
        """A public name's value, its module imported on first use and the value kept
        (later uses are plain attribute reads). ``ctxwindow.__version__`` is read from the
        installed distribution's metadata (importlib.metadata is not imported by ``import
        ctxwindow``); a submodule (``ctxwindow.kit``) is imported, as ``import ctxwindow``
        once imported them all."""
        import importlib

        if name == "__version__":
            from ctxwindow._plugins import core_version  # late: reads metadata only when asked

            value: Any = core_version()
        elif name in _DEFINED_IN:
            value = getattr(importlib.import_module(_DEFINED_IN[name]), name)
        elif name.startswith("__") or not name.isidentifier():  # such as __path__: no module
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        else:
            try:
                value = importlib.import_module(f"{__name__}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{__name__}.{name}":  # the submodule's own import failed
                    raise
                raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The loaded names and those not loaded yet, for completion and ``help()``."""
    return sorted({*globals(), *_DEFINED_IN})


__all__ = [
    "OPENAI_FIELDS",
    "Action",
    "ApproxCounter",
    "AsyncSummarizer",
    "BaseStrategy",
    "Branch",
    "BudgetTooSmall",
    "CachedCounter",
    "ConfigError",
    "ContentPart",
    "ContractViolation",
    "Conversation",
    "CounterFailed",
    "CtxWindowError",
    "Decision",
    "DecisionRun",
    "DuplicateName",
    "Embedder",
    "EmbedderUnavailable",
    "FunctionCall",
    "History",
    "ImportanceScorer",
    "InvalidBudget",
    "InvalidMessage",
    "InvalidOption",
    "InvalidQuery",
    "InvalidSelection",
    "LLMNotConfigured",
    "LLMUsage",
    "Message",
    "Option",
    "OrphanToolResult",
    "PluginError",
    "PluginInfo",
    "Role",
    "SavedRequest",
    "Selection",
    "Strategy",
    "Summarizer",
    "SummarizerFailed",
    "SummaryRequest",
    "SummaryResult",
    "TokenCounter",
    "ToolCall",
    "Unit",
    "UnknownCounter",
    "UnknownEmbedder",
    "UnknownScorer",
    "UnknownStrategy",
    "UnknownSummarizer",
    "VisitTimeout",
    "Window",
    "WindowRecord",
    "Windower",
    "aselect",
    "cached_windower",
    "describe_strategies",
    "from_config",
    "get_counter",
    "get_embedder",
    "get_importance_scorer",
    "get_plugins",
    "get_strategy",
    "get_summarizer",
    "hookimpl",
    "load_config",
    "parse_strategy_spec",
    "plugin_problems",
    "read_messages_file",
    "read_request",
    "register_plugin",
    "reload_plugins",
    "remember_histories",
    "remembered_histories",
    "select",
    "sendable",
    "strategy_class",
    "to_openai",
    "unregister_plugin",
]
