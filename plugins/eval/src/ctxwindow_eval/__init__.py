"""ctxwindow-eval: how much of what a question needs does a strategy's window keep?

Evidence recall at a token budget, on LoCoMo or on your own conversations, and the
speed and memory of every installed strategy; the ``ctxwindow eval`` and
``ctxwindow bench`` commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ctxwindow
from ctxwindow_eval.dataset import (
    EvalConversation,
    LoadReport,
    Question,
    load_jsonl,
    load_locomo,
)
from ctxwindow_eval.runner import EvalResult, StrategySpec, evaluate

if TYPE_CHECKING:
    import argparse

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


@ctxwindow.hookimpl
def register_commands(cli: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ctxwindow_eval import commands  # loaded with the command line, not with the kit

    commands.register(cli)
