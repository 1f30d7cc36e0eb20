"""ctxwindow-recency-decay: keep units by a score that decays with age, boosted by keywords."""

from __future__ import annotations

import ctxwindow
from ctxwindow.hookspecs import RegisterStrategy
from ctxwindow_recency_decay.strategy import RecencyDecay

__all__ = ["RecencyDecay"]


@ctxwindow.hookimpl
def register_strategies(register: RegisterStrategy) -> None:
    register(RecencyDecay)
