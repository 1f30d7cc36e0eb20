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


class SentCovers:
    """The covers of the one summary each window sends, held by length: a length sent
    before must come as the very tuple sent then (``reused`` counts those)."""

    def __init__(self) -> None:
        self.sent: dict[int, Any] = {}
        self.reused = 0

    def of(self, window: Any) -> Any:
        covers = self.read(window)
        if len(covers) in self.sent:
            assert covers is self.sent[len(covers)]
            self.reused += 1
        self.sent[len(covers)] = covers
        return covers

    @staticmethod
    def read(window: Any) -> Any:
        """The covers of the one summary ``window`` sends (not held)."""
        (summary,) = [m for m in window.messages if m.get("metadata", {}).get("synthetic")]
        return summary["metadata"]["covers"]


@pytest.fixture
def sent_covers() -> SentCovers:
    """A :class:`SentCovers` for the test's windows."""
    return SentCovers()
