"""Shared by the summarize plugin's tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ctxwindow
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


@pytest.fixture
def registered(ctxwindow_register: Callable[..., str]) -> Callable[[Any], Any]:
    """``registered(summarizer)``: registers it by hand for the test, under its name
    (``odd`` when it has no str name, as a broken one may not); returns it."""

    def register(summarizer: Any) -> Any:
        name = summarizer.name if isinstance(getattr(summarizer, "name", None), str) else "odd"

        class Plugin:
            @ctxwindow.hookimpl
            def register_summarizers(self, register: Any) -> None:
                register(name, lambda argument: summarizer)

        ctxwindow_register(Plugin(), name=f"test-{name}", distribution="my-summarizers")
        return summarizer

    return register
