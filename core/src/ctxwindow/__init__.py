"""ctxwindow: choose what an LLM request carries when the history outgrows the window.

The core defines the contract and the plugin host; strategies come from plugins,
selected by name::

    import ctxwindow
    window = ctxwindow.select(messages, budget=4000, strategy="fixed")
    window.messages        # the same dict objects you passed, those that fit
    window.record          # what was kept, dropped or summarized, and why
"""

from ctxwindow.api import aselect, get_strategy, select
from ctxwindow.config import from_config
from ctxwindow.embedders import Embedder
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
from ctxwindow.export import to_openai
from ctxwindow.history import Conversation, History, Selection
from ctxwindow.hookspecs import hookimpl
from ctxwindow.host import Windower
from ctxwindow.importance import ImportanceScorer
from ctxwindow.messages import ContentPart, Message, ToolCall
from ctxwindow.options import Option
from ctxwindow.registry import (
    get_counter,
    get_embedder,
    get_importance_scorer,
    get_summarizer,
)
from ctxwindow.strategy import BaseStrategy, Strategy
from ctxwindow.summarizers import Summarizer, SummaryRequest, SummaryResult
from ctxwindow.tokens import TokenCounter
from ctxwindow.units import Unit
from ctxwindow.window import Decision, LLMUsage, Window, WindowRecord

__all__ = [
    "BaseStrategy",
    "BudgetTooSmall",
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
    "from_config",
    "get_counter",
    "get_embedder",
    "get_importance_scorer",
    "get_strategy",
    "get_summarizer",
    "hookimpl",
    "select",
    "to_openai",
]
