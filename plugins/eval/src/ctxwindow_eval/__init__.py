"""ctxwindow-eval: how much of what a question, or an agent's next step, needs does a
strategy's window keep?

Evidence recall at a token budget, on LoCoMo or on your own conversations; next-action
recall, pending exchange kept and task statement kept on agent trajectories (tau-bench's,
or your own agent logs); the speed and memory of every installed strategy; the
``ctxwindow eval`` and ``ctxwindow bench`` commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import ctxwindow
from ctxwindow_eval.agent_runner import AgentResult, evaluate_agent
from ctxwindow_eval.dataset import (
    EvalConversation,
    LoadReport,
    Question,
    load_jsonl,
    load_locomo,
)
from ctxwindow_eval.runner import EvalResult, StrategySpec, evaluate
from ctxwindow_eval.trajectories import Trajectory, load_trajectories

if TYPE_CHECKING:
    import argparse

__all__ = [
    "AgentResult",
    "EvalConversation",
    "EvalResult",
    "LoadReport",
    "Question",
    "StrategySpec",
    "Trajectory",
    "evaluate",
    "evaluate_agent",
    "load_jsonl",
    "load_locomo",
    "load_trajectories",
]


@ctxwindow.hookimpl
def register_commands(cli: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ctxwindow_eval import commands  # loaded with the command line, not with the kit

    commands.register(cli)
