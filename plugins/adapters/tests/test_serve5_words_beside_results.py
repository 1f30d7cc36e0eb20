"""Words beside tool results (an agent's reminder, as Claude Code's ``<system-reminder>``)
are read as part of the message's last result wherever the message stands.

Read apart once more messages followed, they became the newest user message: the current
turn moved past the user's instruction, which could then be dropped (semantic dropped it
as "less relevant" and took the reminder as its query), and a dropped exchange left its
words behind as an orphan half."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ctxwindow import get_counter
from ctxwindow_adapters import anthropic as adapter

SYSTEM = "You are a coding agent."
REMINDER = "<system-reminder>note the todo list</system-reminder> " * 3
INSTRUCTION = "Continue please, and fix the failing parser test. " * 3


def use(number: int) -> dict[str, Any]:
    block = {"type": "tool_use", "id": f"t{number}", "name": "bash", "input": {"cmd": number}}
    return {"role": "assistant", "content": [{"type": "text", "text": f"Step {number}"}, block]}


def answer(number: int, text: str, *words: str) -> dict[str, Any]:
    """A user message with the result of call ``number``, and ``words`` after it."""
    result = {"type": "tool_result", "tool_use_id": f"t{number}", "content": text}
    return {"role": "user", "content": [result, *({"type": "text", "text": w} for w in words)]}


def agent_loop(rounds: int = 24, instruction_after: int = 16) -> list[dict[str, Any]]:
    """A task, tool rounds with a reminder beside every third result, and the user's
    instruction (after an assistant answer) opening the current turn."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Task: fix the bug. " * 20}]
    for number in range(rounds):
        words = (REMINDER,) if number % 3 == 1 else ()
        messages += [use(number), answer(number, f"output {number} " * 40, *words)]
        if number == instruction_after:
            messages += [{"role": "assistant", "content": "Done part."}]
            messages += [{"role": "user", "content": INSTRUCTION}]
    return messages


def _watched() -> Any:
    """A semantic strategy that keeps each query it ranked the units against."""
    semantic = pytest.importorskip("ctxwindow_semantic.strategy")

    class Watched(semantic.SemanticWindow):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.queries: list[str] = []

        def _relevance(self, history: Any, index: Any) -> Any:
            self.queries.append(history.effective_query)
            return super()._relevance(history, index)

    return Watched()


@pytest.mark.parametrize("strategy", ["fixed", "sliding", "semantic"])
def test_the_instruction_and_the_current_turn_stay_beside_reminders(strategy: str) -> None:
    messages = agent_loop()
    start = messages.index({"role": "user", "content": INSTRUCTION})
    counter = get_counter("approx")
    turn = adapter.read_messages(messages[start:], SYSTEM).messages
    budget = sum(map(counter.count_message, turn)) + 400  # the turn fits, not the history
    chosen: Any = _watched() if strategy == "semantic" else strategy
    window = adapter.select(messages, budget, chosen, system=SYSTEM, counter=counter)
    assert window.record.count("dropped") > 0
    kept = window.messages
    assert kept[-(len(messages) - start) :] == messages[start:]  # the current turn whole
    assert all(any(m is o for o in messages) for m in kept)  # no half of a message
    newest = [d for d in window.record.decisions if d.reason.startswith("newest user")]
    assert [d.positions for d in newest] == [(start,)]
    if strategy == "semantic":
        assert chosen.queries and all(q.startswith(INSTRUCTION) for q in chosen.queries)


def test_an_exchange_dropped_takes_its_words_with_it() -> None:
    """Under ``oversize='raise'`` the turn too big goes but for its newest exchange: the
    older round goes whole, its words with it. (A cutting policy holds the turn, the
    round cut with its words beside: the next test.)"""
    messages = [
        {"role": "user", "content": "Fix the bug in parser.py."},
        use(1),
        answer(1, "line " * 600, REMINDER),
        use(2),
        answer(2, "small"),
    ]
    window = adapter.select(messages, 300, "fixed", oversize="raise")
    assert window.messages == [messages[0], *messages[3:]]
    assert all(any(m is o for o in messages) for m in window.messages)
    dropped = [d.positions for d in window.record.decisions if d.action == "dropped"]
    assert dropped == [(1, 2)]
    held = adapter.select(messages, 300, "fixed")  # the turn held, the older round cut
    assert [(d.positions, d.action) for d in held.record.decisions] == [
        ((0,), "kept"),
        ((1, 2), "truncated"),
        ((3, 4), "kept"),
    ]
    assert held.messages[2]["content"][1] == messages[2]["content"][1]  # the words beside
    assert held.messages[3:] == messages[3:]


@pytest.mark.parametrize("oversize", ["cut", "truncate"])
def test_an_older_exchange_is_cut_with_its_words(oversize: str) -> None:
    """The exchange with words is no longer the newest message: it is cut to fit with
    them, the words kept beside the cut result, never left as the newest user message."""
    messages = [
        {"role": "user", "content": "Fix the bug in parser.py."},
        use(1),
        answer(1, "line " * 600, REMINDER),
        {"role": "assistant", "content": "The parser fails on line 3."},
    ]
    before = copy.deepcopy(messages)
    counter = get_counter("approx")
    window = adapter.select(messages, 300, "fixed", oversize=oversize, counter=counter)
    assert [(d.positions, d.action) for d in window.record.decisions] == [
        ((0,), "kept"),
        ((1, 2), "truncated"),
        ((3,), "kept"),
    ]
    sent = window.messages
    assert sent[:2] == messages[:2] and sent[3] is messages[3]
    result, words = sent[2]["content"]
    assert result["tool_use_id"] == "t1" and len(result["content"]) < len("line " * 600)
    assert words == messages[2]["content"][1]
    read = adapter.read_messages(sent).messages
    assert sum(map(counter.count_message, read)) == window.record.tokens_after <= 300
    assert messages == before


def _outcome(window: Any) -> tuple[Any, ...]:
    record = window.record
    decisions = [(d.positions, d.action, d.reason) for d in record.decisions]
    return window.messages, decisions, record.tokens_before, record.tokens_after
