"""ctxwindow-summarize: recent messages verbatim plus a rolling summary that never loses data."""

from __future__ import annotations

from typing import Any

import ctxwindow
from ctxwindow.hookspecs import RegisterStrategy
from ctxwindow_summarize.errors import SummarizerFailed
from ctxwindow_summarize.extractive import ExtractiveSummarizer
from ctxwindow_summarize.llm import OpenAISummarizer
from ctxwindow_summarize.strategy import SummarizeWindow

__all__ = ["ExtractiveSummarizer", "OpenAISummarizer", "SummarizeWindow", "SummarizerFailed"]


@ctxwindow.hookimpl
def register_strategies(register: RegisterStrategy) -> None:
    register(SummarizeWindow)


@ctxwindow.hookimpl
def register_summarizers(register: Any) -> None:
    """``extractive``, and ``openai:<model>`` (api.openai.com, the key in
    $OPENAI_API_KEY; the strategy builds ``openai`` from its ``llm_*`` options instead),
    so that both are named wherever summarizers are listed."""
    register("extractive", lambda argument: ExtractiveSummarizer())
    register("openai", lambda argument: OpenAISummarizer(model=argument or ""))
