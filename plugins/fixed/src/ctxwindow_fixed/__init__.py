"""ctxwindow-fixed: the most recent units that fit the budget."""

from __future__ import annotations

import ctxwindow
from ctxwindow.hookspecs import RegisterStrategy
from ctxwindow_fixed.strategy import FixedWindow

__all__ = ["FixedWindow"]


@ctxwindow.hookimpl
def register_strategies(register: RegisterStrategy) -> None:
    register(FixedWindow)
