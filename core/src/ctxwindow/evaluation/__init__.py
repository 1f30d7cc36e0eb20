"""The evaluation kit: how much of what a question needs does a strategy's window keep?

Evidence recall at a token budget, on LoCoMo or on your own conversations, and the
speed of every installed strategy. Needs the ``eval`` extra for tables and plots:
``pip install 'ctxwindow[eval]'``.
"""

from ctxwindow.evaluation.dataset import (
    EvalConversation,
    LoadReport,
    Question,
    load_jsonl,
    load_locomo,
)
from ctxwindow.evaluation.runner import EvalResult, StrategySpec, evaluate

__all__ = [
    "EvalConversation",
    "EvalResult",
    "LoadReport",
    "Question",
    "StrategySpec",
    "evaluate",
    "load_jsonl",
    "load_locomo",
]
