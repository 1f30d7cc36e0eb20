"""explain()'s row for the messages a strategy wrote, when an adapter split one of the
caller's messages in two units (an Anthropic user turn holding tool results and new
words, a pydantic-ai request holding a system prompt and the user's): the message is
in two decisions, and is one message of the window."""

from __future__ import annotations

from typing import Any

from ctxwindow import WindowRecord


def _decision(unit: int, positions: list[int], action: str, tokens: int) -> dict[str, Any]:
    return {
        "unit": unit,
        "positions": positions,
        "ids": [None] * len(positions),
        "action": action,
        "reason": f"{action} by hand",
        "tokens": tokens,
    }


def _record(messages_after: int, tokens_after: int) -> WindowRecord:
    """Seven messages: 1-4 summarized, message 6 split in two kept units (its tool result
    goes with the call at 5, its words are the newest user message)."""
    return WindowRecord.from_dict(
        {
            "strategy": "by-hand",
            "budget": 500,
            "counter": "approx",
            "tokens_before": 900,
            "tokens_after": tokens_after,
            "engaged": True,
            "elapsed_ms": 1.0,
            "messages_before": 7,
            "messages_after": messages_after,
            "decisions": [
                _decision(0, [0], "kept", 30),
                _decision(1, [1, 2], "summarized", 300),
                _decision(2, [3, 4], "summarized", 300),
                _decision(3, [5, 6], "kept", 200),
                _decision(4, [6], "kept", 10),
            ],
        }
    )


def _made_rows(record: WindowRecord) -> list[str]:
    return [line for line in record.explain().splitlines() if " made " in line]


def test_a_summary_beside_a_message_split_in_two_units_has_its_made_row() -> None:
    """The window: message 0, the summary, 5, 6 (four messages). The made row counted
    message 6 once per unit (0 + 2 + 1 = 3 kept, again 3 + 1 = 4), so it found no
    message the strategy wrote and left the summary out of the table."""
    record = _record(messages_after=4, tokens_after=280)
    (row,) = _made_rows(record)
    assert row.split()[:4] == ["-", "-", "40", "made"]
    assert "1 message the strategy wrote" in row
    lines = record.explain().splitlines()
    summarized = max(i for i, line in enumerate(lines) if " summarized " in line)
    assert lines[summarized + 1] == row  # where the summary sits: after what it stands for


def test_a_message_split_in_two_kept_units_is_no_made_message() -> None:
    """The same window without a summary: no made row, the split message counted once."""
    record = _record(messages_after=3, tokens_after=240)
    assert _made_rows(record) == []
