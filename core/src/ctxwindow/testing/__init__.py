"""Test kit for plugin authors: the conformance suite, the contract check, strategies
to test with (:mod:`ctxwindow.testing.strategies`) and the command line in a test
(:func:`run_command`).

Needs the ``testing`` extra: ``pip install 'ctxwindow[testing]'``.
"""

from ctxwindow.testing.checks import check_window
from ctxwindow.testing.commands import CommandResult, run_command
from ctxwindow.testing.conversations import (
    BUDGETS,
    agent_histories,
    agent_loop,
    assistant,
    battery,
    calls,
    histories,
    result,
    user,
)
from ctxwindow.testing.strategies import FAULTY, BareNewest, Newest
from ctxwindow.testing.suite import StrategyConformance, example_instances
from ctxwindow.testing.threads import bounded, run_threads

__all__ = [
    "BUDGETS",
    "FAULTY",
    "BareNewest",
    "CommandResult",
    "Newest",
    "StrategyConformance",
    "agent_histories",
    "agent_loop",
    "assistant",
    "battery",
    "bounded",
    "calls",
    "check_window",
    "example_instances",
    "histories",
    "result",
    "run_command",
    "run_threads",
    "user",
]
