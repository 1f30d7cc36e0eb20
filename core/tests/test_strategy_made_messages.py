"""Whose error an invalid message is: one a strategy builds in its own code (a tool
message without its call id) is the strategy's, a PluginError naming it and its
distribution; one of the caller's messages, even when a strategy's code reads it (a
nested visit, as a pipeline's stages run), stays the caller's InvalidMessage, naming
its index. Other errors about the caller's input pass through a strategy as they are."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from ctxwindow import (
    BaseStrategy,
    BudgetTooSmall,
    History,
    InvalidMessage,
    Message,
    PluginError,
    Selection,
    Windower,
)
from ctxwindow.testing.strategies import Newest, newest

Choose = Callable[[History], Selection]


def chat() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "hello " * 50},
        {"role": "assistant", "content": "hi " * 50},
        {"role": "user", "content": "and now?"},
    ]


class Runs(BaseStrategy):
    """Runs ``choose`` given to it."""

    name = "runs"

    def __init__(self, choose: Choose, **options: Any) -> None:
        super().__init__(**options)
        self._choose = choose

    def choose(self, history: History) -> Selection:
        return self._choose(history)


def tool_without_call_id(history: History) -> Selection:
    Message("tool", "a summary of old tool results")
    return newest(history)


def content_of_the_wrong_type(history: History) -> Selection:
    dataclasses.replace(history.messages[1], content=5)
    return newest(history)


def from_a_bad_dict(history: History) -> Selection:
    Message.from_dict({"role": "wizard", "content": "x"})
    return newest(history)


BUILT_WRONG = [
    (tool_without_call_id, "a tool message needs the 'tool_call_id'"),
    (content_of_the_wrong_type, "'content' must be a string or a list of parts, got int"),
    (from_a_bad_dict, "unknown role 'wizard'"),
]


def _visits(windower: Windower) -> dict[str, Callable[[], Any]]:
    """Each way a visit calls the strategy: select, aselect, and select in a worker."""
    limited = Windower(windower.strategy, windower.budget, distribution="acme-made", time_limit=5)
    return {
        "select": lambda: windower.select(chat()),
        "aselect": lambda: asyncio.run(windower.aselect(chat())),
        "worker": lambda: limited.select(chat()),
    }


@pytest.mark.parametrize("way", ["select", "aselect", "worker"])
@pytest.mark.parametrize(
    ("choose", "problem"), BUILT_WRONG, ids=lambda c: getattr(c, "__name__", "")
)
def test_a_message_the_strategy_built_wrong_is_its_plugin_error(
    choose: Choose, problem: str, way: str
) -> None:
    windower = Windower(Runs(choose), 60, distribution="acme-made")
    with pytest.raises(PluginError) as raised:
        _visits(windower)[way]()
    text = str(raised.value)
    assert "strategy 'runs' from distribution 'acme-made' failed" in text, text
    assert "a message it built is invalid" in text and problem in text, text
    assert not isinstance(raised.value, InvalidMessage)
    assert isinstance(raised.value.__cause__, InvalidMessage)


def test_the_callers_message_read_by_a_nested_visit_stays_the_callers() -> None:
    """A strategy that windows messages the caller gave it (here, as an option) through
    another Windower: the caller's malformed message is the caller's InvalidMessage,
    naming its index, as if the caller had passed it directly."""
    given = [*chat()[:2], {"role": "tool", "content": "no call id"}, chat()[2]]

    def nested(history: History) -> Selection:
        Windower(Newest(), 60).select(given)
        return newest(history)

    with pytest.raises(InvalidMessage, match=r"^message 2: a tool message needs") as raised:
        Windower(Runs(nested), 60, distribution="acme-made").select(chat())
    assert type(raised.value) is InvalidMessage
    with pytest.raises(InvalidMessage, match=r"^message 2: "):
        Windower(Newest(), 60).select(given)  # the same error, passed directly


def test_a_nested_visits_budget_error_stays_the_callers() -> None:
    def nested(history: History) -> Selection:
        Windower(Newest(oversize="raise"), 2).select(chat())
        return newest(history)

    with pytest.raises(BudgetTooSmall):
        Windower(Runs(nested), 60, distribution="acme-made").select(chat())


def test_a_nested_strategys_bad_message_names_that_strategy() -> None:
    """Built wrong by the inner strategy: its PluginError, passed on as it is."""

    class Inner(Runs):
        name = "inner"

    def nested(history: History) -> Selection:
        Windower(Inner(tool_without_call_id), 60, distribution="acme-inner").select(history)
        return newest(history)

    with pytest.raises(PluginError, match="strategy 'inner' from distribution 'acme-inner'"):
        Windower(Runs(nested), 60, distribution="acme-made").select(chat())
