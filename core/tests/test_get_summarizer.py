"""get_summarizer checks what a plugin's factory made against the Summarizer protocol,
and an LLM strategy that names no one to bill says what to set: a summarizer that
cannot work fails at configuration, naming what it lacks, not at its first summary."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ctxwindow
from ctxwindow import BaseStrategy, History, Selection, Summarizer, SummaryRequest, SummaryResult


class Complete:
    """A summarizer with everything the protocol asks for."""

    name = "complete"
    requires_llm = False
    max_input_tokens = 1_000

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        return SummaryResult("Summary.")


class Broken(Complete):
    """Complete, but for the attributes a test sets on it."""

    def __init__(self, **attributes: Any) -> None:
        for name, value in attributes.items():
            setattr(self, name, value)


class AsyncSummarize(Complete):
    async def summarize(self, request: SummaryRequest) -> SummaryResult:  # type: ignore[override]
        return SummaryResult("Summary.")


class OnlyAsync(Summarizer):
    """Implements the protocol's async method alone: summarize is the protocol's stub."""

    name = "only-async"
    requires_llm = False
    max_input_tokens = 1_000

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return SummaryResult("Summary.")


@pytest.fixture
def registered() -> Iterator[Callable[[str, Callable[[], object]], None]]:
    """``registered(name, make)``: a summarizer factory, registered by hand as the
    distribution ``my-summarizers`` for the test."""
    names: list[str] = []

    def register(name: str, make: Callable[[], object]) -> None:
        class Plugin:
            @ctxwindow.hookimpl
            def register_summarizers(self, register: Any) -> None:
                register(name, lambda argument: make())

        ctxwindow.register_plugin(Plugin(), f"summarizers-{name}", "my-summarizers")
        names.append(f"summarizers-{name}")

    yield register
    for name in names:
        ctxwindow.unregister_plugin(name)


def test_a_complete_summarizer_is_made_once_and_shared(registered: Any) -> None:
    registered("complete", Complete)
    first = ctxwindow.get_summarizer("complete")
    assert isinstance(first, Complete) and ctxwindow.get_summarizer("complete") is first


def test_a_factory_returning_no_summarizer_is_refused_with_all_it_lacks(registered: Any) -> None:
    registered("not-one", object)
    with pytest.raises(ctxwindow.PluginError) as raised:
        ctxwindow.get_summarizer("not-one")
    said = str(raised.value)
    assert "summarizer 'not-one' from distribution 'my-summarizers'" in said
    assert "(object) is not a usable ctxwindow.Summarizer" in said
    for missing in ("its name must be", "requires_llm must be", "max_input_tokens must be"):
        assert missing in said
    assert "no summarize(request) method" in said


@pytest.mark.parametrize(
    ("made", "said"),
    [
        (lambda: Broken(name=123), "its name must be a non-empty str"),
        (lambda: Broken(name=""), "its name must be a non-empty str"),
        (lambda: Broken(requires_llm="no"), "requires_llm must be True or False, got 'no'"),
        (lambda: Broken(max_input_tokens=0), "max_input_tokens must be a positive int"),
        (lambda: Broken(max_input_tokens=None), "max_input_tokens must be a positive int"),
        (lambda: Broken(max_input_tokens=True), "max_input_tokens must be a positive int"),
        (lambda: Broken(summarize="not callable"), "no summarize(request) method"),
        (OnlyAsync, "no summarize(request) method"),
        (AsyncSummarize, "summarize() is async; it must return a SummaryResult"),
        (
            lambda: Broken(requires_llm=True),
            "requires_llm is True, so it must name who is billed for its calls: set its "
            "provider and model attribute(s)",
        ),
        (
            lambda: Broken(requires_llm=True, provider="my-gateway"),
            "set its model attribute(s)",
        ),
    ],
)
def test_what_a_summarizer_lacks_is_named_at_configuration(
    registered: Any, made: Callable[[], object], said: str
) -> None:
    registered("lacking", made)
    with pytest.raises(ctxwindow.PluginError, match="summarizer 'lacking' from distribution") as e:
        ctxwindow.get_summarizer("lacking")
    assert said in str(e.value)


def test_an_llm_summarizer_naming_who_is_billed_is_accepted(registered: Any) -> None:
    registered("billed", lambda: Broken(requires_llm=True, provider="my-gateway", model="m"))
    assert ctxwindow.get_summarizer("billed").model == "m"


class Unbilled(BaseStrategy):
    """Calls an LLM, but its billing names no model."""

    name = "unbilled"
    requires_llm = True

    @property
    def billing(self) -> dict[str, Any]:
        return {"provider": "my-gateway", "model": None}

    def choose(self, history: History) -> Selection:  # pragma: no cover - never reached
        raise AssertionError("refused at configuration")


def test_the_billing_error_says_what_to_set() -> None:
    with pytest.raises(ctxwindow.LLMNotConfigured) as raised:
        Unbilled()
    said = str(raised.value)
    assert "declares no billing (no model in {'provider': 'my-gateway', 'model': None})" in said
    assert "its billing property must return {'provider': " in said
    assert "set those on the summarizer" in said
