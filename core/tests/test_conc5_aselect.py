"""Windower.aselect of a strategy with ``achoose`` on a long history reads, counts and
lays out the window in a worker thread, and awaits ``achoose`` on the loop: a cold read
of 50,000 messages held a server's event loop for about 0.2 s. A short history, and a
visit whose selection carried the last one (it costs what changed), stay on the loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from typing import Any

import pytest

from ctxwindow import BaseStrategy, Conversation, History, Selection, Windower
from ctxwindow._recent import RECENT
from ctxwindow._visit import Visit
from ctxwindow._window import Window
from ctxwindow._windower import ASYNC_ON_LOOP_UP_TO


@pytest.fixture(autouse=True)
def _forget() -> None:
    RECENT.clear()


class Waiting(BaseStrategy):
    """Keeps the newest units that fit, in ``achoose``; or, asked to carry, its last
    selection of the conversation but the newest units and what must stay (the first
    visit keeps just that too). Notes the thread each visit chose in."""

    name = "waiting"

    def __init__(self, carry: bool = False, **options: Any) -> None:
        super().__init__(**options)
        self.carry = carry
        self.last: Selection | None = None
        self.threads: list[int] = []
        self.carried: list[int] = []

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        if not self.carry:
            _keep_newest(history, selection)
        elif self.last is not None:  # the older units as the last visit decided them
            self.carried.append(selection.carry(self.last, len(history.units) - 2))
        self.last = selection
        return selection

    async def achoose(self, history: History) -> Selection:
        self.threads.append(threading.get_ident())
        return self.choose(history)


def _keep_newest(history: History, selection: Selection) -> None:
    room = history.budget - history.must_keep_tokens
    for unit in range(len(history.units) - 1, -1, -1):
        tokens = history.unit_tokens(unit)
        if unit not in history.must_keep and tokens <= room:
            selection.keep(unit, "newest that fit")
            room -= tokens


def _chat(size: int) -> list[dict[str, str]]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": f"message {i} " * 5} for i in range(size)]


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """The threads each visit read its messages in and laid out its window in."""
    seen: dict[str, list[int]] = {"read": [], "finish": []}
    extend, finish = Conversation.extend, Visit.finish

    def reading(self: Conversation, messages: Iterable[Any]) -> None:
        seen["read"].append(threading.get_ident())
        extend(self, messages)

    def finishing(self: Visit, selection: object) -> Window[Any]:
        seen["finish"].append(threading.get_ident())
        return finish(self, selection)

    monkeypatch.setattr(Conversation, "extend", reading)
    monkeypatch.setattr(Visit, "finish", finishing)
    return seen


def test_a_long_history_is_read_and_laid_out_off_the_loop_achoose_on_it(
    threads: dict[str, list[int]],
) -> None:
    strategy = Waiting()
    windower = Windower(strategy, 200)  # it does not fit: the strategy chooses
    long = _chat(ASYNC_ON_LOOP_UP_TO + 1)

    async def visit() -> tuple[int, Window[Any]]:
        return threading.get_ident(), await windower.aselect(long)

    loop_thread, window = asyncio.run(visit())
    assert threads["read"] and loop_thread not in threads["read"]
    assert threads["finish"] and loop_thread not in threads["finish"]
    assert strategy.threads == [loop_thread]
    RECENT.clear()
    assert window.messages == windower.select(long).messages  # the same window either way


def test_a_short_history_stays_on_the_loop(threads: dict[str, list[int]]) -> None:
    strategy = Waiting()
    windower = Windower(strategy, 200)

    async def visit() -> int:
        await windower.aselect(_chat(40))
        return threading.get_ident()

    loop_thread = asyncio.run(visit())
    assert set(threads["read"]) == set(threads["finish"]) == set(strategy.threads) == {loop_thread}


def test_a_carried_selection_of_a_long_history_is_laid_out_on_the_loop(
    threads: dict[str, list[int]],
) -> None:
    strategy = Waiting(carry=True)
    windower = Windower(strategy, 200)
    conversation = Conversation(_chat(ASYNC_ON_LOOP_UP_TO + 1))

    async def visits() -> int:
        await windower.aselect(conversation)
        conversation.extend(_chat(2))
        await windower.aselect(conversation)
        return threading.get_ident()

    loop_thread = asyncio.run(visits())
    assert strategy.carried and strategy.carried[0] > 0  # the second visit carried the first
    assert threads["finish"][0] != loop_thread  # the first laid out whole, off the loop
    assert threads["finish"][1] == loop_thread
