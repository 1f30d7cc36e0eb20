"""Test kit for strategy authors: the conformance suite and the contract check.

Needs the ``testing`` extra: ``pip install 'ctxwindow[testing]'``.
"""

from ctxwindow.testing.checks import check_window
from ctxwindow.testing.conversations import (
    BUDGETS,
    assistant,
    battery,
    calls,
    histories,
    result,
    user,
)
from ctxwindow.testing.suite import StrategyConformance, example_instances
from ctxwindow.testing.threads import bounded, run_threads

__all__ = [
    "BUDGETS",
    "StrategyConformance",
    "assistant",
    "battery",
    "bounded",
    "calls",
    "check_window",
    "example_instances",
    "histories",
    "result",
    "run_threads",
    "user",
]
