"""A long batch of dicts is read at once (``Conversation._read_batch``: its simple dicts
and tool results found in one pass, units by their roles) up to its first defect, and
the rest a message at a time: the two give the same conversation, the same messages,
the same counts, and the same error for an invalid entry, wherever it stands."""

from __future__ import annotations

import random
from typing import Any
from unittest import mock

import pytest

import ctxwindow._history
from ctxwindow import Conversation, InvalidMessage
from ctxwindow._messages import read_message
from ctxwindow._tokens import ApproxCounter, CachedCounter
from ctxwindow.testing import assistant, calls, result, user

APPROX = ApproxCounter()


def _state(conversation: Conversation) -> dict[str, Any]:
    """Everything a read sets, but the lock."""
    return {k: v for k, v in vars(conversation).items() if k != "_lock"}


def _one_by_one(entries: list[Any]) -> Conversation:
    conversation = Conversation()
    for entry in entries:
        conversation.append(entry)
    return conversation


def _at_once(entries: list[Any]) -> Conversation:
    with mock.patch.object(ctxwindow._history, "BATCH_LOOKUPS_FROM", 0):
        return Conversation(entries)


#: Entries that stop the batch read where they stand (defects, results read whole, a
#: legacy call) or that it reads whole and goes on past (ids, pins, a made summary).
ODD: list[Any] = [
    result("stray", "answers no call"),
    {"role": "tool", "tool_call_id": "n", "content": "named", "name": "lookup"},
    {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
    {"role": "function", "name": "f", "content": "f's result"},
    {**user("with an id"), "id": "m1"},
    {**user("pinned"), "metadata": {"pinned": True}},
    {"role": "system", "content": "summary", "metadata": {"synthetic": True}},
    {"role": "developer", "content": "dev note"},
    {**calls("k"), "id": "call-with-id"},
    {"role": "assistant", "content": [{"type": "text", "text": "parts"}]},
]


def _history(rng: random.Random, size: int, odd: float) -> list[Any]:
    """An agent's history: turns in words, parallel calls answered in any order, and
    now and then an ODD entry, a result missing or repeated, an exchange cut short."""
    out: list[Any] = [{"role": "system", "content": "be brief"}]
    call = 0
    while len(out) < size:
        roll = rng.random()
        if roll < odd:
            out.append(rng.choice(ODD))
        elif roll < 0.35:
            ids = [f"c{call + i}" for i in range(rng.randint(1, 3))]
            call += len(ids)
            made = calls(*ids)
            if rng.random() < 0.3:
                made = {**made, "content": "let me look"}
            out.append(made)
            answers = ids[:]
            rng.shuffle(answers)
            if rng.random() < odd:  # a result missing, or one repeated
                answers = answers[1:] if rng.random() < 0.5 else [*answers, answers[0]]
            out.extend(result(i, "x" * rng.randint(0, 40)) for i in answers)
        else:
            maker = user if rng.random() < 0.5 else assistant
            out.append(maker("w" * rng.randint(0, 60)))
    return out


@pytest.mark.parametrize("odd", [0.0, 0.02, 0.1])
@pytest.mark.parametrize("seed", range(12))
def test_a_batch_reads_as_its_messages_one_by_one(seed: int, odd: float) -> None:
    rng = random.Random(seed)
    entries = _history(rng, rng.randint(1, 120), odd)
    at_once, one_by_one = _at_once(entries), _one_by_one(entries)
    assert _state(at_once) == _state(one_by_one)
    size = len(entries)
    for position, entry in enumerate(entries):
        assert at_once.message(position) == read_message(entry, position)
    approx = [read_message(entry, None) for entry in entries]
    sums = [0]
    for message in approx:
        sums.append(sums[-1] + APPROX.count_message(message))
    assert _at_once(entries).cumulative_tokens(APPROX, size) == sums
    assert _at_once(entries).cumulative_tokens(CachedCounter(ApproxCounter(3.0)), size) == (
        _one_by_one(entries).cumulative_tokens(ApproxCounter(3.0), size)
    )


@pytest.mark.parametrize("seed", range(6))
def test_a_batch_read_in_two_parts_is_read_as_one(seed: int) -> None:
    """A batch appended after another (an exchange left open, answered in the second)
    gives what the whole list read at once gives."""
    rng = random.Random(100 + seed)
    entries = _history(rng, 80, 0.05)
    for cut in range(0, len(entries), 7):
        with mock.patch.object(ctxwindow._history, "BATCH_LOOKUPS_FROM", 0):
            conversation = Conversation(entries[:cut])
            conversation.extend(entries[cut:])
        assert _state(conversation) == _state(_one_by_one(entries)), cut


BAD: list[Any] = [
    {"role": "tool", "tool_call_id": "", "content": "empty call id"},
    {"role": "tool", "content": "no call id"},
    {"role": ["user"], "content": "unhashable role"},
    {"role": "user", "content": 3},
    {"role": "user", "content": "x", "tool_call_id": "a"},
    {"role": "assistant", "content": None, "tool_calls": []},
    {"role": "assistant", "tool_calls": calls("a")["tool_calls"], "name": 5},
    {**calls("a", "a")},
    {"role": "tool", "tool_call_id": ["a"], "content": "unhashable id"},
    "not a message",
]


def _error(read: Any, entries: list[Any]) -> str:
    with pytest.raises(InvalidMessage) as raised:
        read(entries)
    return str(raised.value)


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("seed", range(4))
def test_an_invalid_entry_raises_as_read_one_by_one(seed: int, bad: Any) -> None:
    """Wherever it stands (before or after an entry that stops the batch read, inside
    an exchange), the first invalid entry raises the error that reading one at a time
    raises, and the conversation is left as it was."""
    rng = random.Random(200 + seed)
    entries = _history(rng, 40, 0.1)
    for at in range(0, len(entries) + 1, 3):
        batch = [*entries[:at], bad, *entries[at:], BAD[1]]
        expected = _error(_one_by_one, batch)
        assert f"message {at}" in expected
        conversation = _at_once(entries[:5])
        before = _state(conversation)
        with mock.patch.object(ctxwindow._history, "BATCH_LOOKUPS_FROM", 0):
            assert _error(_at_once, batch) == expected
            assert (
                _error(conversation.extend, batch).replace(f"message {at + 5}", f"message {at}")
                == expected
            )
        assert _state(conversation) == before
