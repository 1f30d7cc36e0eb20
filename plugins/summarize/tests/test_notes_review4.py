"""The notes of a visit whose current turn outgrew the budget: two summaries, each
saying for itself when it found no room."""

from __future__ import annotations

from typing import Any

import ctxwindow


def _call(number: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{number}", "type": "function", "function": {"name": "log", "arguments": "{}"}}
        ],
    }


def _result(number: int, repeats: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{number}", "content": f"line {number} " * repeats}


def _grown_turn() -> list[dict[str, Any]]:
    """An older history of tool rounds, the newest user message, then a turn of two big
    rounds: the turn outgrew the budget, so it has a summary of its own."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "task: look at logs " * 30},
    ]
    for number in range(3):
        messages += [_call(number), _result(number, 200)]
    messages.append({"role": "user", "content": "now check the big ones"})
    return [*messages, _call(10), _result(10, 1500), _call(11), _result(11, 900)]


def test_each_no_room_note_says_which_summary_it_is_about() -> None:
    """Both summaries said "no room for a summary: ... leave 0 tokens", word for word:
    the record held one note twice and neither said which summary it was about."""
    window = ctxwindow.select(_grown_turn(), budget=600, strategy="summarize")
    notes = [note for note in window.record.notes if note.startswith("no room for a summary")]
    assert len(notes) == 2
    assert len(set(window.record.notes)) == len(window.record.notes)
    older, turn = notes
    assert older.startswith("no room for a summary of the older history: ")
    assert turn.startswith("no room for a summary of the current turn's older rounds: ")
    assert all("leave 0 tokens for one" in note for note in notes)
