"""One clear_tool_outputs shared by windowers of different counters: each visit gives
the window its own counter gives alone, even when a visit under another counter runs
in the middle of it (another thread, at the worst moment)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from agent import agent

import ctxwindow
from ctxwindow import ApproxCounter, Conversation, Message
from ctxwindow_pipeline import ClearToolOutputs, clear


class _Interrupting(ApproxCounter):
    """An approx counter that, the first time it counts a stub, runs ``interrupt``:
    another visit, between the memo's lookup and its clearing."""

    def __init__(self, chars_per_token: float) -> None:
        super().__init__(chars_per_token=chars_per_token)
        self.interrupt: Callable[[], object] | None = None

    def count_message(self, message: Message) -> int:
        interrupt, self.interrupt = self.interrupt, None
        if interrupt is not None and message.text.startswith("[tool output of"):
            interrupt()
        elif interrupt is not None:
            self.interrupt = interrupt  # not a stub yet: wait for one
        return super().count_message(message)


def history() -> list[dict[str, Any]]:
    return agent(12, words=120)


def seen(window: ctxwindow.Window) -> tuple[list[Any], list[str]]:
    """What a window sends, and why each unit went as it did."""
    return window.messages, [decision.reason or "" for decision in window.record.decisions]


@pytest.mark.parametrize("method", ["select", "transform"])
@pytest.mark.parametrize(
    ("mine", "other", "budget"),
    [(4.0, 1.0, 2_500), (4.0, 1.0, 3_500), (1.0, 4.0, 2_500), (1.0, 4.0, 4_000)],
)
def test_a_visit_under_another_counter_in_the_middle_leaves_this_ones_window(
    method: str, mine: float, other: float, budget: int
) -> None:
    messages = history()
    alone = getattr(ctxwindow.Windower(ClearToolOutputs(), budget, ApproxCounter(mine)), method)(
        messages
    )
    counter = _Interrupting(mine)
    shared = ClearToolOutputs()
    interloper = ctxwindow.Windower(shared, budget, ApproxCounter(other))
    counter.interrupt = lambda: getattr(interloper, method)(messages)
    got = getattr(ctxwindow.Windower(shared, budget, counter), method)(messages)
    assert counter.interrupt is None  # the other visit ran
    assert seen(got) == seen(alone)
    if method == "select":  # a transform only clears: the stages after it fit
        assert got.record.tokens_after <= budget


def test_two_counters_taking_turns_each_keep_their_clearings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[int] = []
    real = clear._clearing

    def counted(history: ctxwindow.History, unit: int, cleared: list[int]) -> Any:
        made.append(unit)
        return real(history, unit, cleared)

    monkeypatch.setattr(clear, "_clearing", counted)
    conversation = Conversation(history())
    shared = ClearToolOutputs()
    windowers = [ctxwindow.Windower(shared, 2_000, ApproxCounter(c)) for c in (4.0, 1.0)]
    for windower in windowers:
        windower.select(conversation)
    assert made
    made.clear()
    for windower in windowers:  # each counter's clearings are still there
        windower.select(conversation)
    assert made == []


def test_the_clearings_of_at_most_so_many_counters_are_kept() -> None:
    conversation = Conversation(history())
    shared = ClearToolOutputs()
    counters = [ApproxCounter(chars_per_token=1.0 + n) for n in range(clear.COUNTERS_KEPT + 3)]
    for counter in counters:
        alone = ctxwindow.Windower(ClearToolOutputs(), 2_000, counter).select(history())
        got = ctxwindow.Windower(shared, 2_000, counter).select(conversation)
        assert seen(got) == seen(alone)
    memo = shared._memos.peek(conversation)
    assert memo is not None
    assert len(memo.counted) == clear.COUNTERS_KEPT
