"""The contract checker's fourth review: stand-ins that drop a legacy function call or a
refusal, legacy function results in the current turn, made messages after the turn,
fields written straight into a selection, the method named for a bad return, the task
statement after a truncation, and the oracle on one object repeated."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import ctxwindow
from ctxwindow import BaseStrategy, ContractViolation, History, Message, Selection, Windower
from ctxwindow.testing import check_window
from ctxwindow.testing import checks as oracle

BIG = "lorem ipsum " * 30
APPROX = ctxwindow.get_counter("approx")


def _cost(messages: list[Any]) -> int:
    return sum(
        APPROX.count_message(m if isinstance(m, Message) else Message.from_dict(m))
        for m in messages
    )


class KeepAll(BaseStrategy):
    """Keeps every unit; subclasses add a stand-in or a made message."""

    name = "keep-all"

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        for unit in range(len(history.units)):
            if unit not in selection.kept:
                selection.keep(unit, "all")
        self.add(history, selection)
        return selection

    def add(self, history: History, selection: Selection) -> None:
        """What a subclass adds to the selection."""

    def engages_within_budget(self, history: History) -> bool:
        return True


class ClearCalls(KeepAll):
    """Stands a plain text in for every assistant message with a function_call or a
    refusal: the stand-in has neither."""

    name = "clear-calls"

    def add(self, history: History, selection: Selection) -> None:
        for position, message in enumerate(history.messages):
            if message.function_call is not None or message.refusal is not None:
                made = Message(role="assistant", content="[cleared]", metadata={"synthetic": True})
                selection.replace(position, made, "cleared")


def _legacy_exchange() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "function_call": {"name": "w", "arguments": BIG}},
        {"role": "function", "name": "w", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "thanks"},
    ]


@pytest.mark.parametrize("kind", ["dict", "Message"])
def test_a_stand_in_that_drops_a_legacy_function_call_is_refused(kind: str) -> None:
    """Sent as a dict it carried the call uncounted (over budget); as a Message its
    ``function`` result went without its call."""
    messages: list[Any] = _legacy_exchange()
    if kind == "Message":
        messages = [Message.from_dict(m) for m in messages]
    with pytest.raises(ContractViolation, match=r"clear-calls.*message 2 changes its legacy"):
        Windower(ClearCalls(), _cost(messages) - 50, "approx").select(messages)


def test_the_oracle_refuses_a_stand_in_that_drops_a_legacy_function_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Held apart from the runner's checker: with it fooled, check_window still fails."""
    import ctxwindow._visit as visit

    monkeypatch.setattr(visit, "stand_ins_problems", lambda *args: [])
    messages = [Message.from_dict(m) for m in _legacy_exchange()]
    with pytest.raises(AssertionError, match="legacy function_call of message 2"):
        check_window(ClearCalls(), messages, _cost(messages) - 50)


def test_a_stand_in_that_drops_a_refusal_sends_what_was_counted() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "do the bad thing"},
        {"role": "assistant", "content": None, "refusal": "I can't help with that. " * 20},
        {"role": "user", "content": "ok"},
    ]
    budget = _cost(messages) - 40
    window = Windower(ClearCalls(), budget, "approx").select(messages)
    assert "refusal" not in window.messages[2]
    assert window.messages[2]["content"] == "[cleared]"
    assert window.record.tokens_after == _cost(window.messages) <= budget
    assert messages[2]["refusal"]  # the caller's message as it was
    check_window(ClearCalls(), messages, budget)


def _legacy_turn(legacy: bool) -> list[dict[str, Any]]:
    head = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "w? " + BIG},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "and? " + BIG},
    ]
    if legacy:
        call = {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "w", "arguments": "{}"},
        }
        return [*head, call, {"role": "function", "name": "w", "content": BIG * 2}]
    calls = [{"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]
    return [
        *head,
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": BIG * 2},
    ]


@pytest.mark.parametrize("legacy", [False, True])
def test_a_legacy_function_result_in_the_current_turn_is_cut_like_a_tool_result(
    legacy: bool,
) -> None:
    messages = _legacy_turn(legacy)
    newest = ctxwindow.get_strategy("newest")
    window = Windower(newest, 200, "approx").select(messages)
    assert window.record.tokens_after <= 200
    answers = "function 'w'" if legacy else "call 'c1'"
    assert any(f"message 5 ({answers})" in note for note in window.record.notes)
    assert window.messages[-1]["metadata"]["truncated"] is True
    for budget in (200, 300):
        check_window(newest, messages, budget)


def test_the_oracle_groups_a_legacy_function_call_with_its_result() -> None:
    parsed = [Message.from_dict(m) for m in _legacy_turn(True)]
    assert {4, 5} in oracle.tool_groups(parsed)
    unnamed = [*parsed[:5], Message(role="function", name="other", content="x")]
    assert {4, 5} not in oracle.tool_groups(unnamed)  # the runner pairs it by name alone


def _agent(user: bool, size: int = 1) -> list[dict[str, Any]]:
    def call(i: int) -> dict[str, Any]:
        calls = [{"id": f"c{i}", "type": "function", "function": {"name": "r", "arguments": "{}"}}]
        return {"role": "assistant", "content": None, "tool_calls": calls}

    def result(i: int) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i} " * size}

    asked = [{"role": "user", "content": "read files"}] if user else []
    return [
        {"role": "system", "content": "An agent."},
        *asked,
        call(0),
        result(0),
        call(1),
        result(1),
    ]


class TailNote(KeepAll):
    """A made note after every unit: after the exchange the model waits on."""

    name = "tail-note"

    def add(self, history: History, selection: Selection) -> None:
        start = history.span(history.current_turn.start).start
        refs = [history.covers_ref(p) for p in range(start + 1, len(history))]
        metadata = {"synthetic": True, **({"covers": refs} if self.covers else {})}
        note = Message(role="assistant", content="(note)", metadata=metadata)
        selection.add_synthetic(note, len(history.units))

    def __init__(self, covers: bool) -> None:
        super().__init__()
        self.covers = covers


@pytest.mark.parametrize(("user", "covers"), [(False, False), (False, True), (True, True)])
def test_a_made_message_after_the_exchange_the_model_waits_on_is_refused(
    user: bool, covers: bool
) -> None:
    """With no user message, or covering the (kept) current turn: still at the end."""
    with pytest.raises(ContractViolation, match=r"tail-note.*a made assistant message"):
        Windower(TailNote(covers), 500, "approx").select(_agent(user))


@pytest.mark.parametrize(("user", "covers"), [(False, False), (False, True), (True, True)])
def test_the_oracle_refuses_a_made_message_after_the_current_turn(
    monkeypatch: pytest.MonkeyPatch, user: bool, covers: bool
) -> None:
    import ctxwindow._checker as checker

    monkeypatch.setattr(checker, "_late_problem", lambda *args: "")
    with pytest.raises(AssertionError, match=r"a made message (sits after|ends the window)"):
        check_window(TailNote(covers), _agent(user), 500)


def test_a_summary_of_the_current_turns_older_rounds_may_go_before_its_newest_exchange() -> None:
    """What the placement rule still allows, with and without a user message."""

    class Folded(KeepAll):
        name = "folded"

        def add(self, history: History, selection: Selection) -> None:
            first = history.current_turn.start + (1 if history.newest_user is not None else 0)
            older = history.span(first)
            selection.drop(first, "summarized below")
            refs = [history.covers_ref(p) for p in older]
            summary = Message(
                role="assistant", content="(read 0)", metadata={"synthetic": True, "covers": refs}
            )
            selection.add_synthetic(summary, first + 1)

    for user in (False, True):
        messages = _agent(user, size=40)  # the turn past the budget: its newest exchange stays
        window = check_window(Folded(), messages, 150)
        assert window is not None and window.messages[-3]["content"] == "(read 0)"


def _chat() -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": "sys"}]
    for i in range(8):
        messages += [
            {"role": "user", "content": f"q{i} " + "w " * 20},
            {"role": "assistant", "content": f"a{i} " + "w " * 20},
        ]
    return [*messages, {"role": "user", "content": "final?"}]


class Writes(BaseStrategy):
    """Writes one field straight into its selection, past keep()."""

    name = "writes"

    def __init__(self, field: str, value: object) -> None:
        self.field, self.value = field, value

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        unit = len(history.units) - 2
        selection.keep(unit, "recent")
        if self.field == "llm":
            selection.llm = self.value
        else:
            getattr(selection, self.field)[unit] = self.value
        return selection


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        (
            "llm",
            {"provider": "openai", "model": "m", "input_tokens": 10},
            "selection.llm is a dict",
        ),
        ("scores", "high", r"selection.scores\[16\] is 'high', not a number"),
        ("reasons", 42, r"selection.reasons\[16\] is 42, not a string"),
        ("reasons", None, "unit 16 is kept with no reason of its own"),
        ("reasons", "", "unit 16 is kept with no reason of its own"),
    ],
)
def test_a_field_written_straight_into_a_selection_is_checked_at_the_visit(
    field: str, value: object, said: str
) -> None:
    with pytest.raises(ContractViolation, match=f"'writes' broke the contract: {said}"):
        Windower(Writes(field, value), 80, "approx").select(_chat())


@pytest.mark.parametrize(("field", "value"), [("scores", 3), ("scores", 0.5), ("reasons", "mine")])
def test_fields_written_straight_that_the_record_holds_pass(field: str, value: object) -> None:
    window = Windower(Writes(field, value), 80, "approx").select(_chat())
    json.dumps(window.record.to_dict())
    assert window.record.explain()


class BadReturns(BaseStrategy):
    name = "bad-returns"

    def choose(self, history: History) -> Selection:
        return history.selection()

    async def achoose(self, history: History) -> Any:
        return [0, 1]

    def transform(self, history: History) -> Any:
        return None


def test_a_bad_return_names_the_method_that_made_it() -> None:
    with pytest.raises(ContractViolation, match=r"achoose\(\) returned list"):
        asyncio.run(Windower(BadReturns(), 80).aselect(_chat()))
    with pytest.raises(ContractViolation, match=r"transform\(\) returned NoneType"):
        Windower(BadReturns(), 80).transform(_chat())


def _task_and_big_turn(newest_words: int) -> list[dict[str, Any]]:
    calls = [{"id": "c1", "type": "function", "function": {"name": "log", "arguments": "{}"}}]
    return [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Task: find why the nightly build fails. " * 10},
        {"role": "assistant", "content": "older reply " * 200},
        {"role": "user", "content": "look at this " * newest_words},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "log line " * 3000},
    ]


def test_truncate_weighs_the_task_statement_again_after_cutting_the_newest_user_message() -> None:
    window = ctxwindow.select(
        _task_and_big_turn(2000), budget=1200, strategy="newest", oversize="truncate"
    )
    task = window.record.decisions[1]
    assert task.action == "kept", task
    assert window.record.tokens_after <= 1200
    assert any(n.startswith("truncated message 3") for n in window.record.notes)


def test_the_oracle_reads_one_object_repeated_thousands_of_times_in_near_linear_work() -> None:
    """The old reading compared every candidate with every earlier end: 20,000 items
    each with 40,000 candidates was some 10**13 steps; now each item is a bisection."""
    item = {"role": "assistant", "content": "ok"}
    places = {id(item): list(range(40_000))}
    reading = oracle._matched_best([item] * 20_000, places, {5, 39_999})
    assert reading is not None
    assert reading[-1] == 39_999 and 5 in reading
    assert reading == sorted(set(reading))  # type: ignore[type-var]


def test_check_window_on_a_history_repeating_one_acknowledgement() -> None:
    ack = {"role": "assistant", "content": "ok"}
    messages: list[Any] = [{"role": "system", "content": "s"}]
    for i in range(2000):
        messages += [{"role": "user", "content": f"note {i} " + "w " * 10}, ack]
    messages.append({"role": "user", "content": "final?"})
    for budget in (40_000, 8_000):
        check_window(ctxwindow.get_strategy("newest"), messages, budget)


def test_a_summary_of_a_dropped_final_reply_may_end_the_window() -> None:
    """Where what it covers was: after the newest exchange, which the reply followed."""

    class FoldReply(BaseStrategy):
        name = "fold-reply"

        def choose(self, history: History) -> Selection:
            selection = history.selection()  # what must stay: the newest exchange
            last = len(history.units) - 1
            selection.drop(last, "summarized below")
            refs = [history.covers_ref(len(history) - 1)]
            summary = Message(
                role="assistant", content="(done)", metadata={"synthetic": True, "covers": refs}
            )
            selection.add_synthetic(summary, last + 1)
            return selection

    messages = [*_agent(True, size=40), {"role": "assistant", "content": "All read. " * 30}]
    window = check_window(FoldReply(), messages, 150)
    assert window is not None and window.messages[-1]["content"] == "(done)"
