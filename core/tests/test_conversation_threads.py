"""A Conversation shared between threads: a view keeps what it saw while the history
grows, and an append racing the re-reading of an edited history is not lost. Each
interleaving is forced step by step, not left to the scheduler."""

from __future__ import annotations

import threading
from typing import Any

import ctxwindow
from ctxwindow import Conversation
from ctxwindow.testing import assistant, user


def _function_call(name: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "function_call": {"name": name}}


def test_a_view_keeps_its_units_when_a_function_result_joins_later() -> None:
    """The legacy function result that arrives after a view was taken joins its call's
    unit in the conversation, not in the view (a visit in another thread may be using
    that view while this one appends)."""
    counter = ctxwindow.get_counter("approx")
    conversation = Conversation([user("weather?"), _function_call("weather")])
    before = conversation.view(counter, 1000)
    last = len(before.units) - 1
    assert before.span(last) == range(1, 2)
    tokens = before.unit_tokens(last)
    conversation.append({"role": "function", "name": "weather", "content": "sunny " * 50})
    after = conversation.view(counter, 1000)
    assert after.span(last) == range(1, 3)  # joined, in the new view
    assert before.span(last) == range(1, 2)  # the old view is as it was
    assert before.unit_tokens(last) == tokens
    assert before.total_tokens == sum(before.unit_tokens(u) for u in range(len(before.units)))
    window = ctxwindow.Windower(ctxwindow.get_strategy("newest"), 1000).select(
        conversation.originals[:2]
    )
    assert len(window.messages) == 2


class _SignallingLock:
    """The conversation's lock, telling the test when a thread is about to take it."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock
        self.waiting = threading.Event()

    def __enter__(self) -> bool:
        if self.lock._is_owned():  # the holder re-entering: not a waiter
            return bool(self.lock.__enter__())
        self.waiting.set()
        return bool(self.lock.__enter__())

    def __exit__(self, *exc: object) -> None:
        self.lock.__exit__(*exc)


def test_an_append_racing_the_reading_of_an_edited_history_is_kept() -> None:
    """Thread A appends while the main thread sees an edit in place and reads the
    history again: A's message must reach the history read again, not the old one."""
    first = user("question")
    conversation = Conversation([first, assistant("answer")])
    signalling = _SignallingLock(conversation._lock)
    conversation._lock = signalling  # type: ignore[assignment]
    new = user("one more")
    with signalling.lock:  # A passes every check it makes outside the lock, then waits
        appending = threading.Thread(target=conversation.append, args=(new,))
        appending.start()
        assert signalling.waiting.wait(10)
        first["content"] = "question, edited"  # seen by the next view: read again
        conversation.view(ctxwindow.get_counter("approx"), 1000)
        assert conversation._successor is not None
    appending.join(10)
    assert not appending.is_alive()
    assert conversation.originals == [first, conversation.originals[1], new]
    assert len(conversation) == 3
    history = conversation.view(ctxwindow.get_counter("approx"), 1000)
    assert [m.text for m in history.messages] == ["question, edited", "answer", "one more"]


def test_a_simple_message_is_built_once_for_every_thread() -> None:
    """A simple dict's Message is built on first use; threads asking for it at once get
    one object (a strategy may key state on it), not equal copies."""
    conversation = Conversation([user(f"message {i}") for i in range(200)])
    start = threading.Barrier(8)
    seen: list[list[object]] = []

    def read() -> None:
        start.wait()
        seen.append([conversation.message(p) for p in range(200)])

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(seen) == 8
    assert all(a is b for found in seen for a, b in zip(found, seen[0], strict=True))
