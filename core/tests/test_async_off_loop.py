"""Windower.aselect of a strategy that cannot wait (no ``achoose``) on a long history
runs the visit in a worker thread: a cold visit of 10,000 messages held a server's
event loop for seconds. A short one stays on the loop, sparing it the thread hop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ctxwindow import BaseStrategy, History, Selection, Windower
from ctxwindow._windower import ASYNC_ON_LOOP_UP_TO


class Noting(BaseStrategy):
    """Keeps the newest units that fit, noting the thread each visit chose in."""

    name = "noting"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.threads: list[int] = []

    def choose(self, history: History) -> Selection:
        self.threads.append(threading.get_ident())
        selection = history.selection()
        room = history.budget - history.must_keep_tokens
        for unit in range(len(history.units) - 1, -1, -1):
            tokens = history.unit_tokens(unit)
            if unit in history.must_keep or tokens > room:
                continue
            selection.keep(unit, "newest that fit")
            room -= tokens
        return selection


def _chat(size: int) -> list[dict[str, str]]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": f"message {i} " * 5} for i in range(size)]


def test_a_long_history_is_windowed_off_the_loop_a_short_one_on_it() -> None:
    strategy = Noting()
    windower = Windower(strategy, 200)  # neither fits: the strategy chooses both
    long, short = _chat(ASYNC_ON_LOOP_UP_TO + 1), _chat(40)

    async def visits() -> tuple[int, Any, Any]:
        loop_thread = threading.get_ident()
        return loop_thread, await windower.aselect(long), await windower.aselect(short)

    loop_thread, far, near = asyncio.run(visits())
    off, on = strategy.threads
    assert off != loop_thread and on == loop_thread
    assert far.messages == windower.select(long).messages  # the same window either way
    assert near.messages == windower.select(short).messages
