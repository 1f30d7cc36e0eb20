"""ctxwindow: choose what an LLM request carries when the history outgrows the window.

The core defines the contract and the plugin host; strategies come from plugins,
selected by name::

    import ctxwindow
    window = ctxwindow.select(messages, budget=4000, strategy="fixed")
    window.messages        # the same dict objects you passed, those that fit
    window.record          # what was kept, dropped or summarized, and why
"""

from ctxwindow._config import aselect, cached_windower, from_config, select
from ctxwindow._contract import Strategy
from ctxwindow._files import read_messages_file
from ctxwindow._history import Conversation, History
from ctxwindow._messages import (
    OPENAI_FIELDS,
    ContentPart,
    FunctionCall,
    Message,
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
    Embedder,
    ImportanceScorer,
    Summarizer,
    SummaryRequest,
    SummaryResult,
)
from ctxwindow._selection import Selection
from ctxwindow._strategy import BaseStrategy
from ctxwindow._tokens import ApproxCounter, CachedCounter, TokenCounter
from ctxwindow._units import Unit
from ctxwindow._window import Decision, LLMUsage, Window, WindowRecord
from ctxwindow._windower import Windower
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
from ctxwindow.hookspecs import hookimpl


def __getattr__(name: str) -> str:
    """``ctxwindow.__version__``, read from the installed distribution's metadata on
    first use (importlib.metadata is not imported by ``import ctxwindow``)."""
    if name == "__version__":
        from ctxwindow._plugins import core_version  # late: reads metadata only when asked

        version = core_version()
        globals()["__version__"] = version
        return version
    raise AttributeError(f"module 'ctxwindow' has no attribute {name!r}")


__all__ = [
    "OPENAI_FIELDS",
    "ApproxCounter",
    "BaseStrategy",
    "BudgetTooSmall",
    "CachedCounter",
    "ConfigError",
    "ContentPart",
    "ContractViolation",
    "Conversation",
    "CounterFailed",
    "CtxWindowError",
    "Decision",
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
    "plugin_problems",
    "read_messages_file",
    "register_plugin",
    "reload_plugins",
    "select",
    "strategy_class",
    "to_openai",
    "unregister_plugin",
]
