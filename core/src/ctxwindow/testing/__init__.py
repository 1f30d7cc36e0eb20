"""Test kit for strategy authors: the conformance suite and the contract check.

Needs the ``testing`` extra: ``pip install 'ctxwindow[testing]'``.
"""

from ctxwindow.testing.checks import check_window
from ctxwindow.testing.conversations import BUDGETS, battery, histories
from ctxwindow.testing.suite import StrategyConformance

__all__ = ["BUDGETS", "StrategyConformance", "battery", "check_window", "histories"]
