"""A strategy's stand-in for one message of a unit (Selection.replace): checked by the
host, sent in the input's kind, recorded as 'replaced'; and a composed strategy's
stage records (Selection.stages)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import pytest

from ctxwindow import (
    BaseStrategy,
    Conversation,
    History,
    Message,
    Option,
    Selection,
    WindowRecord,
    get_counter,
)
from ctxwindow.errors import ContractViolation, InvalidSelection
from ctxwindow.testing import check_window
from ctxwindow.testing.conversations import assistant, calls, result, user

STUB = "[cleared]"
PARTS = [
    {"type": "text", "text": STUB},
    {"type": "image_url", "image_url": {"url": "https://example.com/chart.png"}},
]


def chat() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "Be brief."},
        user("Look it up."),
        calls("c1"),
        result("c1", "long output " * 200),
        assistant("Found it."),
        user("Thanks, and now?"),
    ]


class Clearing(BaseStrategy):
    """Sends a stub for message 3 (a tool result), or what ``bad`` asks for."""

    name = "clearing"
    option_specs: ClassVar[tuple[Option, ...]] = (Option("bad", str, "", "What to break."),)

    def engages_within_budget(self, history: History) -> bool:
        return True

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        for unit in range(len(history.units)):
            selection.keep(unit, "kept")
        original = history.messages[3]
        stub = dataclasses.replace(original, content=STUB, metadata={"synthetic": True})
        bad = self.options["bad"]
        if bad == "role":
            stub = Message("assistant", STUB, metadata={"synthetic": True})
        elif bad == "call id":
            stub = dataclasses.replace(stub, tool_call_id="other")
        elif bad == "not synthetic":
            stub = dataclasses.replace(stub, metadata={})
        elif bad == "calls":
            call = history.messages[2]
            stub = dataclasses.replace(
                call, tool_calls=(), content="x", metadata={"synthetic": True}
            )
            selection.replace(2, stub, "cleared")
            return selection
        elif bad == "arguments":  # the same ids and names, other arguments
            call = history.messages[2]
            other = tuple(dataclasses.replace(c, arguments='{"q": 1}') for c in call.tool_calls)
            stub = dataclasses.replace(call, tool_calls=other, metadata={"synthetic": True})
            selection.replace(2, stub, "arguments cleared")
            return selection
        elif bad == "name":
            stub = dataclasses.replace(stub, name="someone-else")
        elif bad == "parts":  # not bad: content parts, sent as the dicts to_dict writes
            stub = dataclasses.replace(stub, content=PARTS)
        elif bad == "must keep":
            system = Message("system", "short", metadata={"synthetic": True})
            selection.replace(0, system, "shorter")
            return selection
        elif bad == "dropped":
            selection.replace(3, stub, "cleared")
            selection.drop(history.unit_of(3), "gone")  # type: ignore[arg-type]
            return selection
        selection.replace(3, stub, "cleared")
        return selection


def test_a_stand_in_is_sent_in_the_callers_kind_and_recorded_as_replaced() -> None:
    messages = chat()
    window = Clearing().select(messages, 10_000)
    assert [m is o for m, o in zip(window.messages, messages, strict=True)] == [
        True,
        True,
        True,
        False,
        True,
        True,
    ]
    stub = window.messages[3]
    assert stub == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": STUB,
        "metadata": {"synthetic": True, "stands_in_for": 3},
    }
    decision = next(d for d in window.record.decisions if 3 in d.positions)
    assert decision.action == "replaced" and decision.reason == "cleared"
    assert window.record.count("replaced") == 1
    assert window.tokens < window.record.tokens_before
    assert messages == chat()  # the input is untouched
    objects = [Message.from_dict(m) for m in messages]
    as_objects = Clearing().select(objects, 10_000)
    assert isinstance(as_objects.messages[3], Message)
    assert as_objects.messages[3].metadata["stands_in_for"] == 3


def test_a_stand_in_of_content_parts_is_sent_as_part_dicts() -> None:
    """In a window of dicts the stand-in's content goes in as to_dict writes it: each
    part a dict (the image's fields kept), not a ContentPart."""
    window = Clearing(bad="parts").select(chat(), 10_000)
    sent = window.messages[3]
    assert sent["content"] == PARTS and all(type(part) is dict for part in sent["content"])
    assert sent["content"] == Message("tool", PARTS, tool_call_id="c1").to_dict()["content"]
    assert sent["metadata"] == {"synthetic": True, "stands_in_for": 3}


def test_the_independent_check_accepts_a_stand_in() -> None:
    window = check_window(Clearing(), chat(), 10_000)
    assert window is not None and window.record.count("replaced") == 1


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("role", "has role 'assistant', the original 'tool'"),
        ("call id", "answers 'other', the original 'c1'"),
        ("not synthetic", "is not marked synthetic"),
        ("calls", "changes its tool calls"),
        # sent as the original's fields with the content swapped: arguments must not change
        ("arguments", "changes its tool calls"),
        ("name", "changes its name"),
        ("must keep", "message 0 (system message) cannot be replaced by a strategy"),
        ("dropped", "a stand-in for message 3, which is not in the window"),
    ],
)
def test_a_bad_stand_in_is_a_contract_violation(bad: str, problem: str) -> None:
    with pytest.raises(ContractViolation) as raised:
        Clearing(bad=bad).select(chat(), 10_000)
    assert problem in str(raised.value)


def test_replace_checks_its_arguments() -> None:
    from ctxwindow import Conversation, get_counter

    history = Conversation(chat()).view(get_counter("approx"), 1000)
    selection = history.selection()
    with pytest.raises(InvalidSelection, match=r"takes a ctxwindow\.Message"):
        selection.replace(3, {"role": "tool"}, "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidSelection, match=r"replace\(9\): not the position"):
        selection.replace(9, Message("user", "x"), "x")


class Composed(BaseStrategy):
    """Hands the host records of (pretend) stages, as a pipeline does."""

    name = "composed"

    def engages_within_budget(self, history: History) -> bool:
        return True

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        for unit in range(len(history.units)):
            selection.keep(unit, "kept")
        selection.stages.append(
            WindowRecord("inner", history.budget, "approx", 1, 1, False, 0.0, 1, 1)
        )
        return selection


def test_stage_records_reach_the_record() -> None:
    window = Composed().select(chat(), 10_000)
    assert [stage.strategy for stage in window.record.stages] == ["inner"]
    assert window.record.to_dict()["stages"][0]["strategy"] == "inner"


def test_a_units_tokens_count_its_stand_ins_however_many_there_are() -> None:
    messages = [
        user("Look them up."),
        calls("a", "b", "c"),
        *(result(c, "x " * 300) for c in "abc"),
    ]
    messages += [assistant("Done."), user("And?")]
    history = Conversation(messages).view(get_counter("approx"), 10_000)
    unit = history.unit_of(2)
    assert unit is not None and history.span(unit) == range(1, 5)
    for position in (2, 4, 2):  # the same position replaced twice: the last one counts
        text = f"[stand-in for {position}]" * (1 if position == 4 else 2)
        history._replace(position, dataclasses.replace(history.messages[position], content=text))
    assert history.unit_tokens(unit) == sum(history.tokens(p) for p in history.span(unit))
    assert history.unit_tokens(unit) < 400
    other = history.unit_of(6)
    assert other is not None
    assert history.unit_tokens(other) == history.tokens(6)
