"""Adapters, fourth provider review: what a window sends is valid for the provider and
is what was counted (a shell output cut to fit, ...)."""

from __future__ import annotations

from typing import Any

import pytest

from ctxwindow import get_counter
from ctxwindow_adapters import anthropic
from ctxwindow_adapters import openai_responses as responses


def _shell_items(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "list the build dir"},
        {"type": "shell_call", "call_id": "s1", "action": {"commands": ["ls", "make"]}},
        {"type": "shell_call_output", "call_id": "s1", "output": chunks},
    ]


def test_responses_shell_output_cut_to_fit_keeps_its_chunks_and_their_outcomes() -> None:
    """A current-turn shell output cut to fit was sent as the cut of its chunks' JSON in
    one stdout (escaped newlines, stderr emptied, the last chunk's outcome for all): the
    cut now falls in the chunks' stdout and stderr, each chunk keeping its outcome."""
    listing = "total 48\n-rw-r--r-- 1 me me 1200 build.log\n"
    chunks = [
        {"stdout": listing * 150, "stderr": "warning: slow disk",
         "outcome": {"type": "exit", "exit_code": 0}},
        {"stdout": "make: built\n" * 150, "stderr": "error: link failed",
         "outcome": {"type": "exit", "exit_code": 2}},
    ]  # fmt: skip
    items = _shell_items(chunks)
    window = responses.select(items, budget=300, strategy="fixed")
    sent = window.messages[-1]
    assert sent["type"] == "shell_call_output" and sent["call_id"] == "s1"
    assert [c["outcome"] for c in sent["output"]] == [c["outcome"] for c in chunks]
    first, second = sent["output"]
    assert first["stdout"].startswith(listing * 3)
    assert "outcome" not in first["stdout"] and "\\n" not in first["stdout"]
    assert "characters cut by ctxwindow" in first["stdout"] + first["stderr"] + second["stdout"]
    assert second["stderr"] == "error: link failed"  # the tail of the whole text
    assert items[2]["output"] is chunks and len(chunks[0]["stdout"]) == len(listing) * 150
    resent = responses.read_items(window.messages).messages
    counter = get_counter("approx")
    assert sum(counter.count_message(m) for m in resent) == window.record.tokens_after <= 300
    assert window.record.tokens_after <= 300


def test_responses_shell_output_cleared_keeps_one_chunk_with_the_stand_in() -> None:
    """A strategy's stand-in (not a cut of the text) still goes in one chunk's stdout."""
    items = [
        *_shell_items([{"stdout": "file\n" * 3000, "stderr": "",
                        "outcome": {"type": "exit", "exit_code": 0}}]),
        {"type": "message", "role": "assistant", "content": "Done."},
        {"role": "user", "content": "ok"},
    ]  # fmt: skip
    window = responses.select(
        items, 100_000, "clear_tool_outputs", keep_recent=0, min_tokens=0, when="always"
    )
    (shell,) = [m for m in window.messages if m.get("type") == "shell_call_output"]
    (chunk,) = shell["output"]
    assert "cleared" in chunk["stdout"] and chunk["stderr"] == ""
    assert chunk["outcome"] == {"type": "exit", "exit_code": 0}


_LINES = "".join(
    f"Reservation R{i:04d} flight HAT{i:03d} seat {i}C passenger P{i:05d}.\n" for i in range(12)
)


def _anthropic_turns(first: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An older assistant turn holding ``first`` (thinking), text and a tool call, then
    later turns: a strategy may send the older turn as an excerpt."""
    return [
        {"role": "user", "content": "I need to change reservation R0007 for passenger P00007."},
        {"role": "assistant", "content": [
            *first,
            {"type": "text", "text": "Here is what I found:\n" + _LINES},
            {"type": "tool_use", "id": "t1", "name": "get_reservation", "input": {"id": "R0007"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": _LINES * 2}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Anything else? " * 30}]},
        {"role": "user", "content": "Move R0007 to flight HAT009, seat 9C. " + "Thanks. " * 20},
    ]  # fmt: skip


def test_anthropic_excerpt_of_an_older_turn_sends_no_uncounted_thinking() -> None:
    """An older assistant turn sent as an excerpt kept its redacted_thinking block
    beside the excerpt, uncounted: the window sent counted 710 tokens for a record of
    625 within a budget of 640. The excerpt now stands for the turn's words and
    thinking; its tool call stays."""
    messages = _anthropic_turns([{"type": "redacted_thinking", "data": "EuYBCkQY" * 40}])
    window = anthropic.select(messages, budget=640, strategy="sliding")
    assert [d.action for d in window.record.decisions if 1 in d.positions] == ["replaced"]
    turn = window.messages[1]
    assert [b["type"] for b in turn["content"]] == ["text", "tool_use"]
    assert turn["content"][0]["text"].startswith("[excerpt:")
    assert turn["content"][1] is messages[1]["content"][2]
    assert len(messages[1]["content"]) == 3  # the caller's message is not changed
    sent = anthropic.select(window.messages, budget=10**6, strategy="fixed").record
    assert sent.tokens_before == window.record.tokens_after <= 640


def test_anthropic_stand_in_for_a_turn_without_text_is_sent() -> None:
    """A stand-in for an assistant turn of thinking and a call alone (no text block to
    hold it) was lost, the thinking sent in its place: it now comes as a text block."""
    content = [
        {"type": "thinking", "thinking": "thinking " * 50, "signature": "sig"},
        {"type": "tool_use", "id": "t1", "name": "get", "input": {}},
    ]
    rebuilt = anthropic._rebuild({"role": "assistant", "content": content}, None, (None, "[gist]"))
    assert rebuilt["content"] == [{"type": "text", "text": "[gist]"}, content[1]]


def _results_with_words(words: str = "Please hurry.") -> list[dict[str, Any]]:
    """A tool loop whose newest user message holds the result and words after it."""
    return [
        {"role": "user", "content": "Find me a flight to Rome tomorrow and hold a seat."},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Searching."},
            {"type": "tool_use", "id": "t1", "name": "search", "input": {"to": "FCO"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1",
             "content": "flight AZ123 departs 09:05, seat 14C free; " * 60},
            {"type": "text", "text": words}]},
    ]  # fmt: skip


@pytest.mark.parametrize(
    "strategy", ["fixed", "sliding", "summarize", "semantic", "clear_tool_outputs"]
)
def test_anthropic_results_with_words_keep_the_exchange_they_answer(strategy: str) -> None:
    """Words after the tool results in the newest user message (a reminder an agent
    adds) were read as the newest user message: the exchange they answer was no longer
    the current turn and was dropped whole, the request sent with the words alone. The
    exchange now stays, its result cut to fit, the words still after it."""
    messages = _results_with_words()
    window = anthropic.select(messages, budget=200, strategy=strategy, system="Travel agent.")
    first, call, answer = window.messages
    assert first is messages[0] and call is messages[1]
    result, words = answer["content"]
    assert result["tool_use_id"] == "t1" and "characters cut by ctxwindow" in result["content"]
    assert result["content"].startswith("flight AZ123 departs 09:05")
    assert words == {"type": "text", "text": "Please hurry."}
    (exchange,) = [d for d in window.record.decisions if 2 in d.positions]
    assert exchange.positions == (1, 2) and exchange.action == "truncated"
    resent = anthropic.select(window.messages, 10**6, "fixed", system="Travel agent.").record
    assert resent.tokens_before == window.record.tokens_after <= 200


def test_anthropic_results_with_words_read_apart_once_the_turn_is_answered() -> None:
    """A message's words go with its results wherever it stands: once the assistant
    answers, they are still a part of the last result, as the docs say (and as a
    history read afresh reads them, the grown history reusing the reading before)."""
    messages = [
        msg
        for turn in range(12)
        for msg in (
            {"role": "user", "content": f"Step {turn}."},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": f"t{turn}", "name": "search", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{turn}", "content": "ok"},
                {"type": "text", "text": f"Reminder {turn}."}]},
        )
    ]  # fmt: skip
    last = anthropic.read_messages(messages).messages
    assert [m.role for m in last[-3:]] == ["user", "assistant", "tool"]
    assert last[-1].text == "ok\nReminder 11."
    grown = [*messages, {"role": "assistant", "content": "Done."}]
    roles = [m.role for m in anthropic.read_messages(grown).messages]
    assert roles[-4:] == ["user", "assistant", "tool", "assistant"]
    assert anthropic.read_messages(grown).messages[-2] == last[-1]
    each = [m.role for item in grown for m in anthropic.read_messages([item]).messages]
    assert roles == each  # each message reads as it does when last


def _parallel_calls_stored_apart() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking both."},
            {"type": "tool_use", "id": "a", "name": "weather", "input": {"city": "Paris"}}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "b", "name": "weather", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "b", "content": "24C"}]},
    ]  # fmt: skip


@pytest.mark.parametrize("orphans", ["raise", "drop"])
def test_anthropic_consecutive_assistant_messages_are_one_turn(orphans: str) -> None:
    """Parallel calls an app stored as two consecutive assistant messages (the API
    joins consecutive turns of a role, and accepts them) were refused as orphans, or,
    dropped, left the window with the first user message alone: read as one turn."""
    messages = _parallel_calls_stored_apart()
    window = anthropic.select(messages, 10_000, "fixed", orphans=orphans)
    assert window.messages == messages and all(
        sent is given for sent, given in zip(window.messages, messages, strict=True)
    )
    assert [d.positions for d in window.record.decisions] == [(0,), (1, 2, 3)]
    small = anthropic.select([*messages, {"role": "user", "content": "Thanks!"}], 30, "fixed")
    assert small.messages[-1]["content"] == "Thanks!"
    assert [d.action for d in small.record.decisions if d.positions == (1, 2, 3)] == ["dropped"]


def test_anthropic_stand_in_for_a_turn_stored_apart_is_sent_once() -> None:
    """An excerpt standing for a turn stored as two assistant messages goes in the first;
    the second keeps its call alone (a message left with nothing is not sent)."""
    messages = _anthropic_turns([{"type": "redacted_thinking", "data": "EuYBCkQY" * 40}])
    turn = messages[1]["content"]
    messages[1:2] = [
        {"role": "assistant", "content": turn[:2]},
        {"role": "assistant", "content": turn[2:]},
    ]
    window = anthropic.select(messages, budget=630, strategy="sliding")
    assert [d.action for d in window.record.decisions if 1 in d.positions] == ["replaced"]
    first, second = window.messages[1:3]
    assert [b["type"] for b in first["content"]] == ["text"]
    assert first["content"][0]["text"].startswith("[excerpt:")
    assert second == messages[2]
    sent = anthropic.select(window.messages, budget=10**6, strategy="fixed").record
    assert sent.tokens_before == window.record.tokens_after <= 630
    words_only = {"role": "assistant", "content": [{"type": "text", "text": "more"}]}
    assert anthropic._rebuild(words_only, None, (None, "")) is None
