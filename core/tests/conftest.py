"""Shared helpers for the core tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ctxwindow.messages import Message
from ctxwindow.tokens import ApproxCounter


class CountingCounter:
    """An approx counter that records every message it is asked to count."""

    def __init__(self, name: str = "counting") -> None:
        self.name = name
        self._inner = ApproxCounter()
        self.counted: list[Message] = []

    def count_text(self, text: str) -> int:
        return self._inner.count_text(text)

    def count_message(self, message: Message) -> int:
        self.counted.append(message)
        return self._inner.count_message(message)

    @property
    def calls(self) -> int:
        return len(self.counted)


@pytest.fixture
def counting() -> CountingCounter:
    return CountingCounter()


@pytest.fixture
def counting_factory() -> type[CountingCounter]:
    """The class itself, to build several independent counters in one test."""
    return CountingCounter


#: The distribution hidden when every first-party plugin is installed.
HIDDEN = "ctxwindow-sliding"


@pytest.fixture
def install_advice(uninstalled_first_party: str) -> str:
    """What the UnknownStrategy for that strategy tells the user to do: install it, or,
    when the fixture hid it, which variable kept it out (the real uninstall is tested in
    tests/test_ecosystem.py)."""
    import os

    if os.environ.get("CTXWINDOW_DISABLE_PLUGINS") == HIDDEN:
        return f"{HIDDEN} (CTXWINDOW_DISABLE_PLUGINS)"
    return f"pip install ctxwindow-{uninstalled_first_party}"


@pytest.fixture
def uninstalled_first_party(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A first-party strategy that is not installed here; when all are, one is hidden
    with CTXWINDOW_DISABLE_PLUGINS (for this process and the CLI runs it starts)."""
    from ctxwindow import plugins
    from ctxwindow.registry import FIRST_PARTY, strategy_names

    missing = [name for name in FIRST_PARTY if name not in strategy_names()]
    if missing:
        yield missing[-1]
        return
    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", HIDDEN)
    plugins.reset()
    try:
        yield "sliding"
    finally:
        monkeypatch.delenv("CTXWINDOW_DISABLE_PLUGINS")
        plugins.reset()
