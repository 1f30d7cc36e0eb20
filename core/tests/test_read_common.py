"""The fast reading of the common message shapes gives what full reading gives, and
leaves every other entry (and every invalid one) to full reading."""

from __future__ import annotations

from typing import Any

import pytest

from ctxwindow import Conversation, InvalidMessage, Message, get_counter
from ctxwindow._messages import read_common, read_message, simple_entries, simple_message
from ctxwindow.testing import assistant, calls, result, user

COMMON: list[dict[str, Any]] = [
    user("hello"),
    assistant("hi"),
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": ""},
    calls("a", "b"),
    {**calls("c"), "content": "let me look"},
    result("a", "found it"),
]


@pytest.mark.parametrize("data", COMMON)
def test_a_common_shape_reads_as_full_reading_does(data: dict[str, Any]) -> None:
    read = read_common(data)
    assert read is not None
    message = read if isinstance(read, Message) else simple_message(read)
    assert message == read_message(data, 0)
    assert message.to_dict() == read_message(data, 0).to_dict()


#: What full reading alone reads (or rejects).
OTHER: list[Any] = [
    {"role": ["user"], "content": "x"},  # unhashable role: no TypeError here
    {"role": "user", "content": ["part"]},
    {"role": "user", "content": None},
    {"role": "tool", "content": "x"},  # no call id
    {"role": "function", "content": "x"},  # needs a name
    user("x", id="m1"),
    user("x", metadata={"pinned": True}),
    {"role": "tool", "tool_call_id": "", "content": "x"},
    {"role": "tool", "tool_call_id": "a", "content": None},
    {"role": "assistant", "content": None, "tool_calls": []},
    {"role": "assistant", "content": 3, "tool_calls": calls("a")["tool_calls"]},
    {"role": "user", "content": "x", "tool_calls": calls("a")["tool_calls"]},
    calls("a", "a"),  # the same id twice
    {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "custom"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f"}}],
    },
    Message("user", "already read"),
]


@pytest.mark.parametrize("data", OTHER)
def test_any_other_entry_is_left_to_full_reading(data: Any) -> None:
    assert read_common(data) is None


def test_an_invalid_entry_is_still_named_by_position() -> None:
    with pytest.raises(InvalidMessage, match=r"message 2.*twice"):
        Conversation([user("q"), assistant("a"), calls("x", "x")])
    with pytest.raises(InvalidMessage, match=r"message 1.*unknown role"):
        Conversation([user("q"), {"role": ["user"], "content": "x"}])


def test_a_conversation_of_common_shapes_builds_each_message_once() -> None:
    """A simple dict's Message is built when first asked for, then kept."""
    conversation = Conversation([user("q"), calls("a"), result("a", "r"), assistant("done")])
    history = conversation.view(get_counter("approx"), 1000)
    first = history.messages[0]
    assert first is history.messages[0] is conversation.message(0)
    assert [m.role for m in history.messages] == ["user", "assistant", "tool", "assistant"]
    assert history.messages[2].tool_call_id == "a"
    assert [unit.positions for unit in history.units] == [range(0, 1), range(1, 3), range(3, 4)]


def test_a_batch_reads_the_simple_dicts_as_read_common_does() -> None:
    """simple_entries gives the fields read_common gives a dict of role and content, and
    None for every other dict (a tool result, a call, anything not simple)."""
    entries = [*COMMON, *(entry for entry in OTHER if type(entry) is dict)]
    found = simple_entries(entries, [entry.get("content") for entry in entries])
    for entry, fields in zip(entries, found, strict=True):
        read = read_common(entry)
        assert fields == (read if type(read) is tuple and read[2] is None else None), entry
    assert any(found) and not all(found)
    with pytest.raises(TypeError):
        simple_entries([user("q"), Message("user", "read")], ["q", "read"])
