"""What the fixed window keeps, beyond the contract."""

from __future__ import annotations

import ctxwindow
from ctxwindow import Conversation, get_counter
from ctxwindow_fixed import FixedWindow


def chat(turns: int) -> list[dict]:
    out = [{"role": "system", "content": "Be brief."}]
    for turn in range(turns):
        out.append({"role": "user", "content": f"question {turn} " * 5})
        out.append({"role": "assistant", "content": f"answer {turn} " * 5})
    return out


def cost(messages: list[dict]) -> int:
    counter = get_counter("approx")
    return sum(counter.count_message(ctxwindow.Message.from_dict(m)) for m in messages)


def test_keeps_the_newest_contiguous_run_that_fits() -> None:
    messages = chat(30)
    window = FixedWindow(task_statement=False).select(messages, 200)
    kept = [messages.index(m) for m in window.messages]
    assert kept[0] == 0  # the system message
    tail = kept[1:]
    assert tail == list(range(tail[0], len(messages)))  # no gaps
    one_more = [messages[0], messages[tail[0] - 1], *window.messages[1:]]
    assert cost(window.messages) <= 200 < cost(one_more)


def test_stops_at_the_first_unit_that_does_not_fit_even_if_older_ones_would() -> None:
    messages = chat(3)
    messages.insert(3, {"role": "assistant", "content": "x" * 2000})  # big, in the middle
    window = FixedWindow(task_statement=False).select(messages, 120)
    assert messages[3] not in window.messages
    assert all(messages.index(m) > 3 for m in window.messages[1:])


def test_pinned_message_is_kept_even_when_old() -> None:
    messages = chat(30)
    messages[2] = {**messages[2], "metadata": {"pinned": True}}
    window = FixedWindow(task_statement=False).select(messages, 150)
    assert messages[2] in window.messages
    decision = next(d for d in window.record.decisions if 2 in d.positions)
    assert decision.action == "kept" and decision.reason == "pinned"


def test_max_messages_limits_the_recent_run() -> None:
    messages = chat(30)
    for budget in (500, 10_000):  # the cap applies even when everything fits
        window = FixedWindow(task_statement=False, max_messages=4).select(messages, budget)
        assert window.record.engaged is True
        assert window.messages == [messages[0], *messages[-4:]]
        reasons = {d.reason for d in window.record.decisions if d.action == "dropped"}
        assert reasons == {"beyond max_messages=4"}
    assert (
        FixedWindow(task_statement=False, max_messages=100).select(messages, 10_000).record.engaged
        is False
    )


def test_tool_group_is_kept_or_dropped_whole() -> None:
    messages = [
        *chat(2),
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "A" * 400},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "assistant", "content": "done"},
    ]
    group = range(len(messages) - 4, len(messages) - 1)  # the call and its two results
    for budget in range(20, 300, 7):
        try:
            window = FixedWindow(task_statement=False).select(messages, budget)
        except ctxwindow.BudgetTooSmall:
            continue
        # a result cut to fit (oversize="cut") is there as its stand-in
        stand_ins = {m.get("metadata", {}).get("stands_in_for") for m in window.messages}
        present = [messages[p] in window.messages or p in stand_ins for p in group]
        assert all(present) or not any(present), budget


def test_warm_conversation_counts_only_new_messages() -> None:
    class Counting:
        name = "counting"

        def __init__(self) -> None:
            self.calls = 0

        def count_text(self, text: str) -> int:
            return len(text) // 4

        def count_message(self, message: ctxwindow.Message) -> int:
            self.calls += 1
            return 3 + len(message.text) // 4

    inner = Counting()
    counter = get_counter(inner)
    conversation = Conversation(chat(500))
    strategy = FixedWindow(task_statement=False)
    strategy.select(conversation, 300, counter)
    first = inner.calls
    conversation.append({"role": "user", "content": "one more"})
    window = strategy.select(conversation, 300, counter)
    assert first == len(conversation) - 1
    assert inner.calls == first + 1
    assert window.messages[-1] == {"role": "user", "content": "one more"}


def test_selected_by_name_through_the_entry_point() -> None:
    window = ctxwindow.select(chat(30), budget=200, strategy="fixed")
    assert window.messages[1] == chat(30)[1], "the task statement, the first question"
    assert window.record.strategy == "fixed"
    assert "fixed" in {entry["name"] for entry in ctxwindow.describe_strategies()}


def test_the_task_statement_and_the_current_turn_stay_by_default() -> None:
    messages = chat(30)
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    messages += [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "found it " * 20},
    ]
    window = FixedWindow().select(messages, 200)
    assert window.messages[:2] == messages[:2]  # the system message and the task
    assert window.messages[-3:] == messages[-3:]  # the exchange the model waits on
    reasons = {d.positions[0]: d.reason for d in window.record.decisions}
    assert reasons[1] == "task statement (the first user message)"
    assert reasons[62] == "current turn (after the newest user message)"
