"""ctxwindow-sliding: the recent turns plus the important older ones, with no model."""

from __future__ import annotations

import ctxwindow
from ctxwindow.hookspecs import RegisterImportanceScorer, RegisterStrategy
from ctxwindow_sliding.keywords import KeywordScorer, keywords_factory
from ctxwindow_sliding.strategy import SlidingWindow

__all__ = ["KeywordScorer", "SlidingWindow"]


@ctxwindow.hookimpl
def register_strategies(register: RegisterStrategy) -> None:
    register(SlidingWindow)


@ctxwindow.hookimpl
def register_importance_scorers(register: RegisterImportanceScorer) -> None:
    register("keywords", keywords_factory)
