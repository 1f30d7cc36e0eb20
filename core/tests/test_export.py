"""to_openai: only the API's fields go out, and nothing the caller passed changes."""

from __future__ import annotations

import copy

import pytest

import ctxwindow
from ctxwindow import InvalidMessage, Message, to_openai


def test_strips_ctxwindow_keys_from_dicts_and_made_messages() -> None:
    messages = [
        {"role": "system", "content": "Be brief.", "id": "s", "metadata": {"pinned": True}},
        {"role": "user", "content": "hi", "id": "u1", "extra": 1},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "ok", "metadata": {"id": "t"}},
    ]  # fmt: skip
    before = copy.deepcopy(messages)
    out = to_openai(messages)
    assert messages == before
    assert out == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": messages[2]["tool_calls"]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
    ]
    summary = Message("system", "Summary: ...", metadata={"synthetic": True, "covers": ["u1"]})
    assert to_openai([summary]) == [{"role": "system", "content": "Summary: ..."}]


def test_a_window_exports_cleanly() -> None:
    messages = [{"role": "user", "content": f"q{i}", "id": f"u{i}"} for i in range(50)]
    window = ctxwindow.select(messages, budget=60, strategy="newest")
    assert all(set(m) == {"role", "content"} for m in to_openai(window.messages))


def test_malformed_entry_is_a_clear_error() -> None:
    with pytest.raises(InvalidMessage, match="message 1"):
        to_openai([{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}])
