"""Anthropic adapter, fourth review: ``user_first`` and a summary the strategy made,
which the window sends as a user message."""

from __future__ import annotations

from typing import Any

from ctxwindow_adapters import anthropic as adapter


def _chat() -> list[dict[str, Any]]:
    """Long early turns a summary stands for, then short ones kept verbatim, the oldest
    kept being the assistant's."""
    return [
        {"role": "user", "content": "hello " * 100},
        {"role": "assistant", "content": "long answer " * 100},
        {"role": "user", "content": "more " * 100},
        {"role": "assistant", "content": "ans2 " * 30},
        {"role": "user", "content": "again " * 30},
        {"role": "assistant", "content": "ans3 " * 30},
        {"role": "user", "content": "newest"},
    ]


def test_user_first_keeps_the_assistant_turn_after_a_summary_sent_as_the_users() -> None:
    """The window opened with the summary (a user message), yet ``user_first`` removed
    the assistant turn after it, saying a request starts with a user message: it looked
    at the summary before it became the user's, when it was a system message."""
    messages = _chat()
    window = adapter.select(messages, budget=200, strategy="summarize", system="sys")
    first = window.messages[0]
    assert first["role"] == "user"
    assert first["content"][0]["text"].startswith("Summary of the earlier conversation")
    assert window.messages[1] is messages[3]  # the assistant turn after it, as it came
    assert [m["role"] for m in window.messages] == ["user", "assistant"] * 2 + ["user"]
    record = window.record
    assert not [d for d in record.decisions if "user_first" in d.reason]
    assert not [note for note in record.notes if "user_first" in note]
    (kept,) = [d for d in record.decisions if d.positions == (3,)]
    assert kept.action == "kept"
    assert record.tokens_after <= 200


def test_user_first_still_removes_an_assistant_turn_opening_the_window() -> None:
    """With no summary (the strategy drops), the assistant turn that would open the
    window is still removed, and the record says why."""
    window = adapter.select(_chat(), budget=200, strategy="fixed", system="sys")
    assert window.messages[0]["role"] == "user"
    assert [d for d in window.record.decisions if "user_first" in d.reason]
