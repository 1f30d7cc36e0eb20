"""Remembered reads of Anthropic messages with a ``system``: each call of a growing list
windows as a first read of it would, reading only what the list added.

The ``system`` parameter is read as a stand-in opening the list, one position ahead of
the caller's messages. The reads counted the items read for good in one numbering and
the Messages in the other, so the Messages of the newest message, read again on the
next call, were kept as read for good and added a second time: an orphan tool result
raised on a valid loop, or decisions repeated and a window that lost messages."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Windower
from ctxwindow_adapters import anthropic as adapter
from ctxwindow_adapters import openai_responses, pydantic_ai
from ctxwindow_adapters._reads import RecentReads

SYSTEM = "You are a booking agent."


def _fresh(reads: RecentReads[Any]) -> RecentReads[Any]:
    """The same reader with nothing remembered."""
    return RecentReads(reads._read_from, reads._content, reads._raw)


@pytest.fixture
def read_positions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The caller's positions the adapter reads, with nothing remembered at the start."""
    read: list[int] = []
    pieces = adapter._pieces

    def counting(message: Any, position: int) -> Any:
        read.append(position)
        return pieces(message, position)

    monkeypatch.setattr(adapter, "_pieces", counting)
    monkeypatch.setattr(adapter, "_READS", _fresh(adapter._READS))
    monkeypatch.setattr(adapter, "_READS_WITH_SYSTEM", _fresh(adapter._READS_WITH_SYSTEM))
    return read


def _outcome(select: Callable[[], Any]) -> tuple[Any, ...]:
    """What a call gives: the window's messages and record, or the error raised."""
    try:
        window = select()
    except Exception as error:
        return type(error), str(error)
    record = window.record
    decisions = [(d.positions, d.action) for d in record.decisions]
    runs = [(run.units, list(run.positions), run.action) for run in record.decision_runs]
    return window.messages, decisions, runs, record.tokens_before, record.tokens_after


def _first_read(select: Callable[[list[Any]], Any], messages: list[Any]) -> tuple[Any, ...]:
    """What the call gives for a deep copy of ``messages`` with nothing remembered."""
    saved = adapter._READS_WITH_SYSTEM
    adapter._READS_WITH_SYSTEM = _fresh(saved)
    try:
        return _outcome(lambda: select(copy.deepcopy(messages)))
    finally:
        adapter._READS_WITH_SYSTEM = saved


def _check_as_first(
    select: Callable[[list[Any]], Any], messages: list[Any], read: list[int]
) -> list[int]:
    """The call on ``messages`` gives what a first read does, and no repeated decision;
    the positions it read."""
    del read[:]
    warm = _outcome(lambda: select(messages))
    reads = list(read)
    assert warm == _first_read(select, messages), len(messages)
    positions = [positions for positions, _ in warm[1]]
    assert len(positions) == len(set(positions)), len(messages)
    return reads


def _round(number: int, words: bool) -> list[dict[str, Any]]:
    """A call of one tool, and its result (with a reminder beside it when ``words``)."""
    call = {"type": "tool_use", "id": f"toolu_{number}", "name": "search", "input": {"q": number}}
    result: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": f"toolu_{number}", "content": f"result {number}"}
    ]
    if words:
        result.append({"type": "text", "text": "reminder: be brief"})
    return [{"role": "assistant", "content": [call]}, {"role": "user", "content": result}]


def _windower(budget: int) -> Windower:
    return ctxwindow.from_config({"strategy": "fixed", "budget": budget})


@pytest.mark.parametrize("budget", [100_000, 700])
def test_a_tool_loop_with_words_beside_results_windows_as_a_first_read(
    read_positions: list[int], budget: int
) -> None:
    """Past 32 items a warm call raised OrphanToolResult on this valid loop (and every
    call after it), once a result with words beside it was no longer the newest. A
    message with words beside its results reads the same once more follow, so only the
    round's new messages are read (it was read again while it was the last)."""
    windower = _windower(budget)

    def select(messages: list[Any]) -> Any:
        return adapter.select(messages, system=SYSTEM, windower=windower)

    messages: list[dict[str, Any]] = [{"role": "user", "content": "TASK: rebook ZX9QK1"}]
    for number in range(30):
        messages += _round(number, words=number % 3 == 0)
        reads = _check_as_first(select, messages, read_positions)
        if len(messages) > 40:  # remembered: the round's two messages read, not the list
            assert reads and min(reads) >= len(messages) - 2, (len(messages), reads)


@pytest.mark.parametrize("strategy", ["fixed", "sliding"])
def test_a_list_windowed_with_the_assistant_newest_then_the_reply_reads_as_first(
    read_positions: list[int], strategy: str
) -> None:
    """The assistant's message, read again once it was followed, was added twice:
    repeated decisions, tokens overstated and messages dropped that fit."""

    def select(messages: list[Any]) -> Any:
        return adapter.select(messages, 1500, strategy, system=SYSTEM)

    messages: list[dict[str, Any]] = [{"role": "user", "content": "TASK"}]
    for number in range(24):
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "a " * 60}]})
        _check_as_first(select, messages, read_positions)
        messages.append({"role": "user", "content": f"next {number}"})
        reads = _check_as_first(select, messages, read_positions)
        if len(messages) > 40:
            assert reads and min(reads) >= len(messages) - 3, (len(messages), reads)


def test_a_list_of_assistant_messages_alone_reads_its_system_once(
    read_positions: list[int],
) -> None:
    """Only the ``system`` read for good (one turn to the end, read again each call):
    the next call reads the turn again, never the system a second time."""

    def select(messages: list[Any]) -> Any:
        return adapter.select(messages, 100_000, "fixed", system=SYSTEM, user_first=False)

    messages = [{"role": "assistant", "content": f"part {n}"} for n in range(40)]
    for more in range(3):
        _check_as_first(select, messages, read_positions)
        messages.append({"role": "assistant", "content": f"more {more}"})
    messages.append({"role": "user", "content": "go on"})
    _check_as_first(select, messages, read_positions)
    converted = adapter.read_messages(messages, SYSTEM)
    assert [m.role for m in converted.messages].count("system") == 1


def test_a_bad_message_added_to_a_remembered_list_is_named_at_its_position(
    read_positions: list[int],
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "TASK"}]
    for number in range(20):
        messages += _round(number, words=True)
    adapter.select(messages, 100_000, "fixed", system=SYSTEM)
    messages.append({"role": "assistant", "content": 7})
    with pytest.raises(ctxwindow.InvalidMessage) as raised:
        adapter.select(messages, 100_000, "fixed", system=SYSTEM)
    assert raised.value.index == len(messages) - 1


# -- the other adapters with remembered reads: the same numbering for both -----------------
def _responses_loop(rounds: int) -> Iterator[list[Any]]:
    """A Responses API input list after each item: function calls, their outputs, and a
    message beside some of them."""
    items: list[Any] = [{"role": "user", "content": "TASK"}]
    for number in range(rounds):
        call = {"type": "function_call", "call_id": f"c{number}", "name": "f", "arguments": "{}"}
        items.append(call)
        yield items
        items.append({"type": "function_call_output", "call_id": f"c{number}", "output": "ok"})
        yield items
        if number % 3 == 0:
            items.append({"role": "user", "content": "reminder"})
            yield items


def test_the_responses_reader_counts_in_the_callers_positions(
    counted_reads: Callable[[Any], Any],
) -> None:
    reads = counted_reads(openai_responses)
    for items in _responses_loop(30):
        del reads.starts[:]
        reads.check_as_first(items, 600, "fixed")
        start, length = reads.starts[0]
        assert length == len(items) and (length < 40 or length - start <= 2), (start, length)


def test_the_pydantic_ai_reader_counts_in_the_callers_positions(
    counted_reads: Callable[[Any], Any],
) -> None:
    messages = pytest.importorskip("pydantic_ai.messages")
    reads = counted_reads(pydantic_ai)
    history: list[Any] = [messages.ModelRequest(parts=[messages.UserPromptPart("TASK")])]
    for number in range(25):
        call = messages.ToolCallPart("search", {"q": number}, tool_call_id=f"c{number}")
        history.append(messages.ModelResponse(parts=[call]))
        parts: list[Any] = [messages.ToolReturnPart("search", "ok", tool_call_id=f"c{number}")]
        if number % 3 == 0:
            parts.append(messages.UserPromptPart("reminder"))
        history.append(messages.ModelRequest(parts=parts))
        del reads.starts[:]
        reads.check_as_first(history, 600, "fixed")
        start, length = reads.starts[0]
        assert length == len(history) and (length < 40 or length - start <= 2), (start, length)
