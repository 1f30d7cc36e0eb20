"""fixed's ``max_messages``: "At most this many messages besides the system and pinned
ones (whole units only); the newest user message is always kept and counts toward it.
Applies even when everything fits the budget." (The cases the core's visit tests ran
on ``fixed`` before the core's tests stood on their own; with ``task_statement`` off, so
that the first user message is not kept besides.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Window
from ctxwindow.testing import assistant, calls, result, user
from ctxwindow_fixed import FixedWindow

RECENT = "among the most recent units that fit"


def conversation() -> list[dict[str, Any]]:
    """Eleven messages, nine units; approx tokens in the comments (132 in all)."""
    return [
        {"role": "system", "content": "S" * 20},  # 0, unit 0: 8, must keep
        user("a" * 40),  # 1, unit 1: 13
        assistant("b" * 40),  # 2, unit 2: 13
        user("c" * 40, metadata={"pinned": True}),  # 3, unit 3: 13, must keep
        calls("c1", "c2"),  # 4, unit 4: 7
        result("c2", "r" * 38),  # 5, unit 4: 13
        result("c1", "r" * 38),  # 6, unit 4: 13
        assistant("d" * 40),  # 7, unit 5: 13
        user("e" * 40),  # 8, unit 6: 13
        assistant("f" * 40),  # 9, unit 7: 13
        user("g" * 40),  # 10, unit 8: 13, must keep (newest user)
    ]


TOTAL = 132


def positions_of(window: Window[Any], messages: list[Any]) -> list[int]:
    where = {id(message): position for position, message in enumerate(messages)}
    return [where[id(message)] for message in window.messages]


def test_max_messages_over_budget() -> None:
    messages = conversation()
    window = ctxwindow.select(messages, 100, task_statement=False, max_messages=2)
    assert positions_of(window, messages) == [0, 3, 9, 10]  # 9 and the newest user
    reasons = [d.reason for d in window.record.decisions]
    assert reasons[6] == "beyond max_messages=2"
    assert reasons[7] == RECENT
    assert reasons[8] == "newest user message"
    # whole units only: the 3-message tool unit does not fit in the 1 left
    window = ctxwindow.select(messages, 110, task_statement=False, max_messages=5)
    assert positions_of(window, messages) == [0, 3, 7, 8, 9, 10]
    assert window.record.decisions[4].reason == "beyond max_messages=5"
    assert window.record.decisions[4].action == "dropped"
    # the newest user message stays even with a cap of 0
    window = FixedWindow(task_statement=False, max_messages=0).select(messages, 110)
    assert positions_of(window, messages) == [0, 3, 10]


def test_max_messages_applies_when_the_budget_is_large() -> None:
    messages = conversation()
    for window in (
        ctxwindow.select(messages, 10_000, task_statement=False, max_messages=2),
        FixedWindow(task_statement=False, max_messages=2).select(messages, 10_000),
        asyncio.run(ctxwindow.aselect(messages, 10_000, task_statement=False, max_messages=2)),
    ):
        assert positions_of(window, messages) == [0, 3, 9, 10]
        assert window.record.engaged is True
        assert window.record.tokens_after == 8 + 13 * 3


@pytest.mark.parametrize("cap", range(12))
def test_max_messages_caps_the_window_whatever_the_budget(cap: int) -> None:
    messages = conversation()
    for budget in (TOTAL - 1, TOTAL, 10_000):
        window = ctxwindow.select(messages, budget, task_statement=False, max_messages=cap)
        kept = positions_of(window, messages)
        capped = [p for p in kept if p not in (0, 3)]  # besides system and pinned
        assert 10 in capped
        assert len(capped) <= max(cap, 1), (budget, kept)


def test_max_messages_equal_to_the_count_without_newest_user() -> None:
    # three messages besides the system one, a cap of two: the oldest must go,
    # with or without budget pressure
    messages = [
        {"role": "system", "content": "S" * 20},
        user("a" * 40),
        assistant("b" * 40),
        user("c" * 40),
    ]
    tight = ctxwindow.select(messages, 8 + 13 * 3 - 1, task_statement=False, max_messages=2)
    assert positions_of(tight, messages) == [0, 2, 3]
    roomy = ctxwindow.select(messages, 10_000, task_statement=False, max_messages=2)
    assert positions_of(roomy, messages) == [0, 2, 3]
