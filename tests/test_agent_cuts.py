"""What every first-party model-free strategy keeps when the runner must cut the
current turn's tool result to fit: the task statement, weighed again after the cut."""

from __future__ import annotations

from typing import Any

import pytest

import ctxwindow
from ctxwindow.testing import calls, result, user

TASK = "task statement (the first user message)"


def cut_history() -> list[dict[str, Any]]:
    """A tiny task, an older exchange too big for the older share, a pending result
    too big for the budget."""
    return [
        {"role": "system", "content": "You are a coding agent."},
        user("TASK: fix ISSUE-4711 in acme/widgets (test_parse_dates)."),
        calls("c1"),
        result("c1", "ok " * 3_000),
        user("Go on."),
        calls("c2"),
        result("c2", "FAILED line\n" * 3_000),
    ]


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
    messages = cut_history()
    window = ctxwindow.select(messages, 2_000, strategy, **options)
    assert window.tokens <= 2_000
    assert messages[1] in window.messages
    assert {d.unit: d.reason for d in window.record.decisions}[1] == TASK
    assert window.messages[-1] is not messages[-1]  # the pending result, cut
    assert "characters cut by ctxwindow" in window.messages[-1]["content"]
