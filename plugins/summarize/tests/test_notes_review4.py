"""The notes of a visit whose current turn outgrew the budget: two summaries, each
saying for itself when it found no room."""

from __future__ import annotations

from typing import Any

import ctxwindow
from ctxwindow.testing import calls, result


def _grown_turn() -> list[dict[str, Any]]:
    """An older history of tool rounds, the newest user message, then a turn of two big
    rounds: the turn outgrew the budget, so it has a summary of its own."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "task: look at logs " * 30},
    ]
    for number in range(3):
        messages += [calls(f"c{number}"), result(f"c{number}", f"line {number} " * 200)]
    messages.append({"role": "user", "content": "now check the big ones"})
    return [
        *messages,
        calls("c10"),
        result("c10", "line 10 " * 1500),
        calls("c11"),
        result("c11", "line 11 " * 900),
    ]


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
