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
    UnknownCounter,
    UnknownEmbedder,
    UnknownStrategy,
)
from ctxwindow.history import Conversation, History, Selection
from ctxwindow.hookspecs import hookimpl
from ctxwindow.host import Windower
from ctxwindow.messages import ContentPart, Message, ToolCall
from ctxwindow.options import Option
from ctxwindow.registry import get_counter, get_embedder
from ctxwindow.strategy import BaseStrategy, Strategy
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
    "TokenCounter",
    "ToolCall",
    "Unit",
    "UnknownCounter",
    "UnknownEmbedder",
    "UnknownStrategy",
    "Window",
    "WindowRecord",
    "Windower",
    "aselect",
    "from_config",
    "get_counter",
    "get_embedder",
    "get_strategy",
    "hookimpl",
    "select",
]
