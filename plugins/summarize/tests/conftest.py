"""Shared by the summarize plugin's tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ctxwindow import SummaryRequest, SummaryResult
from ctxwindow_summarize import SummarizeWindow


def _counted(strategy: SummarizeWindow) -> list[int]:
    calls = [0]
    for summarizer in strategy._summarizers:
        original = summarizer.summarize

        def wrapped(request: SummaryRequest, _original: Any = original) -> SummaryResult:
            calls[0] += 1
            return _original(request)

        summarizer.summarize = wrapped  # type: ignore[method-assign]
    return calls


@pytest.fixture
def counted() -> Callable[[SummarizeWindow], list[int]]:
    """``counted(strategy)``: wrap the strategy's summarizers to count their calls; a
    one-item list holding the count so far."""
    return _counted
