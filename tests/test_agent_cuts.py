"""What every first-party model-free strategy keeps when the runner must cut the
current turn's tool result to fit: the task statement, weighed again after the cut."""

from __future__ import annotations

from typing import Any

import pytest

import ctxwindow
from ctxwindow.testing import calls, result, user
from ctxwindow.testing.conversations import pending_result_too_big

TASK = "task statement (the first user message)"


@pytest.mark.parametrize(
    ("strategy", "options"),
    [
        ("fixed", {}),
        ("sliding", {}),
        ("summarize", {}),
        ("clear_tool_outputs", {}),
        ("pipeline", {"stages": ["clear_tool_outputs", "fixed"]}),
    ],
)
def test_the_task_statement_stays_when_the_pending_result_is_cut(
    strategy: str, options: dict[str, Any]
) -> None:
    messages = pending_result_too_big()
    window = ctxwindow.select(messages, 2_000, strategy, **options)
    assert window.tokens <= 2_000
    assert messages[1] in window.messages
    assert {d.unit: d.reason for d in window.record.decisions}[1] == TASK
    assert window.messages[-1] is not messages[-1]  # the pending result, cut
    assert "characters cut by ctxwindow" in window.messages[-1]["content"]


def test_a_summary_after_clearing_is_not_written_from_the_clearing_stubs() -> None:
    """[clear_tool_outputs, summarize]: the summary's room went on the stubs the first
    stage sent ("[tool output of search (call_3) cleared by ctxwindow: 173 tokens]")."""
    from ctxwindow_pipeline.clear import STUB

    history: list[dict[str, Any]] = [user("TASK: find flight HAT0 to SFO on 2024-06-10.")]
    for n in range(12):
        history += [calls(f"c{n}"), result(f"c{n}", f"flight HAT{n} departs " * 40)]
    history.append(user("Which one leaves first?"))
    stages = ["clear_tool_outputs", "summarize"]
    window = ctxwindow.select(history, 700, "pipeline", counter="approx", stages=stages)
    summaries = [m["content"] for m in window.messages if m.get("metadata", {}).get("synthetic")]
    assert summaries and any("cleared the tool output" in note for note in window.record.notes)
    marker = STUB.split("{tool}")[0]  # "[tool output of "
    assert not any(marker in text for text in summaries)
