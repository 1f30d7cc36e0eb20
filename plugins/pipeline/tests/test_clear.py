"""What clear_tool_outputs clears, keeps and says, beyond the contract."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from agent import agent, call, output
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxwindow
from ctxwindow import Conversation, History, Message, get_counter
from ctxwindow.testing.conversations import agent_histories
from ctxwindow_pipeline import ClearToolOutputs, clear

COUNTER = get_counter("approx")


def tokens(message: dict) -> int:
    return COUNTER.count_message(Message.from_dict(message))


def made(window: ctxwindow.Window) -> list[dict]:
    """The messages made that stand for no message of the input (clearing makes none)."""
    return [
        m
        for m in window.messages
        if m.get("metadata", {}).get("synthetic") and "stands_in_for" not in m["metadata"]
    ]


def cleared(window: ctxwindow.Window) -> list[dict]:
    """What was cleared, from the stubs (stand-ins), in order."""
    return [
        message["metadata"]["cleared_tool_output"]
        for message in window.messages
        if "cleared_tool_output" in (message.get("metadata") or {})
    ]


def test_an_old_large_result_becomes_a_stub_naming_tool_call_and_tokens() -> None:
    messages = agent(6)
    budget = sum(map(tokens, messages)) - 10  # just over: clearing alone is enough
    window = ClearToolOutputs(keep_recent=2).select(messages, budget)
    cost = tokens(messages[3])
    stub = f"[tool output of search (call_0) cleared by ctxwindow: {cost:,} tokens]"
    details = cleared(window)
    assert [d["tool_call_id"] for d in details] == ["call_0", "call_1", "call_2", "call_3"]
    assert details[0] == {
        "tool": "search",
        "tool_call_id": "call_0",
        "position": 3,
        "id": None,
        "tokens": cost,
        "characters": len(messages[3]["content"]),
    }
    sent = {id(m) for m in window.messages}
    for turn in (4, 5):  # the newest two results stay whole, with their calls
        assert id(messages[2 + 4 * turn]) in sent and id(messages[3 + 4 * turn]) in sent
    decision = next(d for d in window.record.decisions if 3 in d.positions)
    assert decision.reason.startswith("tool output cleared: search (call_0); ")
    assert window.record.count("dropped") == 0  # nothing else had to go
    assert window.tokens <= budget
    # the stub stays a tool message answering the very call, which stays
    assert len(window.messages) == len(messages)
    assert window.messages[2] is messages[2]
    result = window.messages[3]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_0"
    assert result["content"] == stub
    assert result["metadata"]["synthetic"] is True and result["metadata"]["stands_in_for"] == 3
    assert decision.action == "replaced"
    assert made(window) == []  # no note stands for the exchange
    assert ctxwindow.to_openai(window.messages)[3] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "content": stub,
    }
    assert messages == agent(6)  # the input is untouched


def test_min_tokens_spares_small_results_and_keep_recent_counts_results() -> None:
    messages = agent(4, words=200)
    messages[3] = output("call_0", 5, "tiny")  # old but small
    budget = sum(map(tokens, messages)) - 10
    window = ClearToolOutputs(keep_recent=1, min_tokens=50).select(messages, budget)
    assert [d["tool_call_id"] for d in cleared(window)] == ["call_1", "call_2"]
    assert messages[3] in window.messages and messages[15] in window.messages


def blocked_by_a_newest_result() -> list[dict]:
    """Ten older results, then one among the newest too big for any budget below, then
    a new question: keep_recent protects the big one."""
    messages = agent(10, words=200)
    messages.append({"role": "user", "content": "Now the big one."})
    messages.append(call("big", "search", query="everything"))
    messages.append(output("big", 8_000, "big"))
    messages.append({"role": "assistant", "content": "That was a lot."})
    messages.append({"role": "user", "content": "What did we learn?"})
    return messages


@pytest.mark.parametrize("stages", [None, ["clear_tool_outputs", "fixed"]])
def test_a_protected_result_too_big_to_stay_is_cleared_not_the_end_of_the_window(
    stages: list[str] | None,
) -> None:
    messages = blocked_by_a_newest_result()
    budget = 3_000
    if stages is None:
        window = ClearToolOutputs().select(messages, budget)
    else:
        window = ctxwindow.select(messages, budget, "pipeline", stages=stages)
    assert window.tokens <= budget
    stubs = cleared(window)
    assert "big" in [d["tool_call_id"] for d in stubs]  # cleared, though the newest result
    # the older exchanges (their calls, with stubs or whole) stay, not just the must-keep
    assert sum(1 for m in window.messages if m.get("tool_calls")) >= 8
    position = len(messages) - 3  # the big result's
    big = next(d for d in window.record.decisions if position in d.positions)
    assert "among the newest keep_recent results" in big.reason
    # a result among the newest that fits stays whole
    fits = ClearToolOutputs().select(messages[:-5] + messages[-1:], budget)
    assert all(d["tool_call_id"] not in ("call_9", "call_8", "call_7") for d in cleared(fits))


def test_a_protected_result_the_room_left_cannot_hold_is_cleared_and_older_units_follow() -> None:
    """keep_recent's newest results stay whole where they fit; one that fits the budget
    but not the room the newer units left is cleared instead of ending the window."""
    messages = agent(5, words=200)
    window = ClearToolOutputs().select(messages, 1_300)
    assert window.tokens <= 1_300
    assert messages[15] in window.messages  # call_3's result: protected, and it fits
    by_positions = {d.positions: d for d in window.record.decisions}
    squeezed = by_positions[(10, 11)]  # call_2's: protected, but no room left for it whole
    assert squeezed.action == "replaced"
    assert squeezed.reason.endswith("did not fit whole in the room the newer units left")
    # the older exchanges follow, cleared: nothing dropped
    assert window.record.count("dropped") == 0 and len(window.messages) == len(messages)


def test_parallel_calls_clear_only_the_large_result_and_keep_the_small_one() -> None:
    messages = [
        {"role": "system", "content": "Agent."},
        {"role": "user", "content": "Weather and flights?"},
        {
            **call("call_a", "weather", city="Lisbon"),
            "tool_calls": [
                *call("call_a", "weather", city="Lisbon")["tool_calls"],
                *call("call_b", "flights", to="LIS")["tool_calls"],
            ],
        },
        output("call_b", 300, "flight"),
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny, 23C"},
        {"role": "assistant", "content": "Sunny; flights found."},
        {"role": "user", "content": "Thanks. Anything else?"},
    ]
    budget = sum(map(tokens, messages)) - 10
    window = ClearToolOutputs(keep_recent=0, min_tokens=20).select(messages, budget)
    stub = f"[tool output of flights (call_b) cleared by ctxwindow: {tokens(messages[3]):,} tokens]"
    assert [d["tool_call_id"] for d in cleared(window)] == ["call_b"]
    assert len(window.messages) == len(messages)
    assert window.messages[2] is messages[2] and window.messages[4] is messages[4]
    assert window.messages[3]["content"] == stub
    assert window.messages[3]["tool_call_id"] == "call_b"
    assert made(window) == []


def test_engages_within_budget_only_when_asked() -> None:
    messages = agent(5)
    roomy = 100_000
    assert ClearToolOutputs().select(messages, roomy).record.engaged is False
    window = ClearToolOutputs(when="always").select(messages, roomy)
    assert window.record.engaged is True
    assert len(cleared(window)) == 2  # five results, the newest three stay whole
    assert window.tokens < window.record.tokens_before
    nothing_to_clear = agent(2)
    assert ClearToolOutputs(when="always").select(nothing_to_clear, roomy).record.engaged is False


def test_alone_it_drops_the_oldest_units_when_clearing_is_not_enough() -> None:
    messages = agent(12, words=60)
    window = ClearToolOutputs(keep_recent=2).select(messages, 700)
    assert window.tokens <= 700
    record = window.record
    dropped = [d for d in record.decisions if d.action == "dropped"]
    assert dropped and all(
        d.reason == "outside the most recent units that fit once tool outputs were cleared"
        for d in dropped
    )
    # dropped from the oldest on: every dropped unit is older than every kept or cleared one,
    # the must-keep units (system message, task statement, current turn) aside
    must_keep = ("system message", "task statement", "newest user message", "current turn")
    kept_by_rule = {d.unit for d in record.decisions if d.reason.startswith(must_keep)}
    assert 1 in kept_by_rule  # the task statement: the first user message
    others = [
        d.unit for d in record.decisions if d.action != "dropped" and d.unit not in kept_by_rule
    ]
    assert others
    assert max(d.unit for d in dropped) < min(others)
    assert cleared(window)  # and it still cleared
    assert record.notes and record.notes[0].startswith("cleared the tool output of ")


def test_a_stub_that_would_not_save_tokens_is_not_made() -> None:
    messages = agent(5, words=3)  # results shorter than any stub
    budget = sum(map(tokens, messages)) - 5
    window = ClearToolOutputs(keep_recent=0, min_tokens=0).select(messages, budget)
    assert cleared(window) == [] and made(window) == []
    assert window.tokens <= budget


def decisions(window: ctxwindow.Window) -> list[tuple[str, tuple[int, ...], str]]:
    return [(d.action, tuple(d.positions), d.reason) for d in window.record.decisions]


def test_an_agent_loop_gets_what_a_fresh_strategy_gives_every_turn() -> None:
    messages = agent(60, words=150)
    looping = ClearToolOutputs(keep_recent=2)
    conversation = ctxwindow.Conversation(messages[:9])
    for end in range(10, len(messages) + 1):
        conversation.append(messages[end - 1])
        if messages[end - 1].get("tool_calls"):
            continue  # the call's result is next
        for budget in (400, 2_000):
            got = looping.select(conversation, budget)
            want = ClearToolOutputs(keep_recent=2).select(messages[:end], budget)
            assert got.messages == want.messages, (end, budget)
            assert decisions(got) == decisions(want), (end, budget)
            assert got.record.notes == want.record.notes, (end, budget)


def test_a_turn_clears_only_what_is_new_in_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = agent(2_000, words=120)  # 8,001 messages
    strategy = ClearToolOutputs()
    conversation = ctxwindow.Conversation(messages[:-4])
    first = strategy.select(conversation, 3_000)
    made: list[int] = []
    clearing = clear._clearing

    def counted(history: History, unit: int, cleared: list[int]) -> object:
        made.append(unit)
        return clearing(history, unit, cleared)

    monkeypatch.setattr(clear, "_clearing", counted)
    conversation.extend(messages[-4:])
    window = strategy.select(conversation, 3_000)
    assert window.record.count("dropped") > 5_000
    assert len(cleared(window)) == len(cleared(first)) > 3
    # the exchange that now has 3 newer results is cleared; the rest was made last turn
    assert len(made) == 1


@pytest.mark.parametrize("keep_recent", [0, 2])
def test_a_transform_takes_the_settled_exchanges_over_from_the_last_turn(
    monkeypatch: pytest.MonkeyPatch, keep_recent: int
) -> None:
    """As a pipeline's first stage, turn after turn: the exchanges older than the
    newest results' are carried from the last transform (Selection.carry), and the
    window and record are a fresh strategy's, also when a budget too small for the
    newest exchanges clears them though they are recent, and after a turn taken back
    (the longer list's newest results are not this one's)."""
    messages = agent(300, words=150)
    strategy = ClearToolOutputs(keep_recent=keep_recent)
    carried: list[int] = []
    carry = ctxwindow.Selection.carry

    def counted(selection: ctxwindow.Selection, previous: Any, units: int) -> int:
        carried.append(carry(selection, previous, units))
        return carried[-1]

    monkeypatch.setattr(ctxwindow.Selection, "carry", counted)
    ends = [end for end in range(601, len(messages) + 1) if not messages[end - 1].get("tool_calls")]
    for number, end in enumerate(ends[:40]):
        budget = 300 if number % 9 == 8 else 3_000
        if number % 7 == 6:  # a turn taken back: a longer list first, then this one
            ctxwindow.Windower(strategy, budget, COUNTER).transform(messages[: end + 8])
        got = ctxwindow.Windower(strategy, budget, COUNTER).transform(messages[:end])
        want = ctxwindow.Windower(ClearToolOutputs(keep_recent=keep_recent), budget, COUNTER)
        fresh = want.transform(messages[:end])
        assert got.messages == fresh.messages, end
        assert got.record.decision_runs == fresh.record.decision_runs, end
        assert decisions(got) == decisions(fresh), end
        assert got.record.notes == fresh.record.notes, end
        assert got.record.tokens_after == fresh.record.tokens_after, end
    assert sum(1 for units in carried if units > 400) >= 25  # of about 450


class _UnitByUnit(ClearToolOutputs):
    """clear_tool_outputs choosing as it did before plain units were taken a stretch at
    a time: every unit, newest first, one at a time."""

    name = "clear_unit_by_unit"

    def choose(self, history: History) -> ctxwindow.Selection:
        selection = history.selection()
        room = history.budget - history.must_keep_tokens
        units: list = []
        for unit, planned, protected in self._units(history):
            if unit in history.must_keep:
                continue
            clearing = planned
            cost = clearing.tokens_after if clearing else history.unit_tokens(unit)
            if cost > room and protected:
                memo = self._memo_of(history)
                wider = clear._with_protected(history, memo, unit, planned, protected)
                clearing = wider or planned
                cost = clearing.tokens_after if clearing else cost
            if cost > room:
                selection.default_reason = clear.DROPPED
                break
            room -= cost
            units.append((unit, clearing))
        dropped = selection.default_reason == clear.DROPPED
        if dropped and not any(clearing for _, clearing in units):
            selection.default_reason = clear.DROPPED_UNCLEARED
            _keep_units(selection, units, clear.FITS)
        else:
            _keep_units(selection, units, clear.FITS_AFTER if dropped else clear.KEPT)
        return selection

    def transform(self, history: History) -> ctxwindow.Selection:
        selection = history.selection()
        units = [(u, c) for u, c, _ in self._units(history) if u not in history.must_keep]
        _keep_units(selection, units, clear.KEPT)
        return selection

    def engages_within_budget(self, history: History) -> bool:
        return self.options["when"] == "always" and any(c for _, c, _ in self._units(history))


def _keep_units(selection: ctxwindow.Selection, units: list, kept_reason: str) -> None:
    """Keep ``units`` (newest first, each with its clearing or None) and only them, in
    runs of consecutive units kept as they are: the choice made unit by unit."""
    done = []
    run_start = run_stop = 0
    for unit, clearing in reversed(units):  # oldest first
        if clearing is None:
            if unit != run_stop:
                selection.keep(range(run_start, run_stop), kept_reason)
                run_start = unit
            run_stop = unit + 1
            continue
        done.append(clearing)
    selection.keep(range(run_start, run_stop), kept_reason)
    clear._note_cleared(selection, done)


def _shown(window: ctxwindow.Window) -> tuple:
    decisions = [(d.unit, d.action, d.reason, d.positions) for d in window.record.decisions]
    return window.messages, decisions, window.record.notes


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=agent_histories(max_rounds=25),
    budget=st.integers(40, 3_000),
    keep_recent=st.integers(0, 4),
    min_tokens=st.sampled_from([0, 20, 100]),
    grown=st.booleans(),
)
def test_plain_units_taken_a_stretch_at_a_time_give_the_unit_by_unit_window(
    history: list, budget: int, keep_recent: int, min_tokens: int, grown: bool
) -> None:
    options = {"keep_recent": keep_recent, "min_tokens": min_tokens, "oversize": "truncate"}
    fast = ctxwindow.Windower(ClearToolOutputs(**options), budget, COUNTER)
    slow = ctxwindow.Windower(_UnitByUnit(**options), budget, COUNTER)
    _same_as_unit_by_unit(fast.select, slow.select, history, grown)


def _same_as_unit_by_unit(fast: Any, slow: Any, history: list, grown: bool) -> None:
    """``fast`` (a Windower's select or transform) on a Conversation of ``history`` (with
    ``grown``, half of it visited first) gives what ``slow`` gives on the whole list:
    the same window, decisions and notes, or the same error."""
    conversation = Conversation(history[: len(history) // 2] if grown else history)
    if grown:  # the exchanges read on an earlier visit, then the rest
        with contextlib.suppress(ctxwindow.CtxWindowError):
            fast(conversation)
        conversation.extend(history[len(history) // 2 :])
    try:
        want = _shown(slow(list(history)))
    except ctxwindow.CtxWindowError as error:
        with pytest.raises(type(error)):
            fast(conversation)
        return
    assert _shown(fast(conversation)) == want


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=agent_histories(max_rounds=25),
    budget=st.integers(40, 3_000),
    keep_recent=st.integers(0, 4),
    min_tokens=st.sampled_from([0, 20, 100]),
    when=st.sampled_from(["over_budget", "always"]),
    grown=st.booleans(),
)
def test_a_transform_of_the_exchanges_alone_gives_the_unit_by_unit_one(
    history: list, budget: int, keep_recent: int, min_tokens: int, when: str, grown: bool
) -> None:
    """As a pipeline's first stage: every unit kept, the old results cleared, the plain
    units between the exchanges taken as runs, not read one by one."""
    options = {"keep_recent": keep_recent, "min_tokens": min_tokens, "when": when}
    fast = ctxwindow.Windower(ClearToolOutputs(**options), budget, COUNTER)
    slow = ctxwindow.Windower(_UnitByUnit(**options), budget, COUNTER)
    _same_as_unit_by_unit(fast.transform, slow.transform, history, grown)


def test_a_legacy_function_result_that_joins_its_call_makes_an_exchange() -> None:
    strategy = ClearToolOutputs()
    call_message = Message(
        role="assistant", content=None, function_call={"name": "lookup", "arguments": "{}"}
    )
    conversation = Conversation([Message(role="user", content="find it"), call_message])
    memo = strategy._memo_of(conversation.view(COUNTER, 1_000))
    before = conversation.view(COUNTER, 1_000)
    found, count = memo.exchanges(before)
    assert found[:count] == []
    conversation.append(Message(role="function", name="lookup", content="found " * 50))
    found, count = memo.exchanges(conversation.view(COUNTER, 1_000))
    assert found[:count] == [1]
    conversation.append(Message(role="user", content="and then?"))
    found, count = memo.exchanges(conversation.view(COUNTER, 1_000))
    assert found[:count] == [1]  # once an exchange, always one: the list only grows


def test_a_window_that_cleared_nothing_says_no_clearing() -> None:
    """With no tool output cleared (a chat, or outputs under min_tokens), the record
    said the units fit, or went, "once tool outputs were cleared": a clearing that never
    happened. It says what fixed says then; with one cleared, what it says still does."""
    chat = [{"role": "system", "content": "s"}]
    for n in range(40):
        chat.append({"role": "user" if n % 2 == 0 else "assistant", "content": f"m{n} " * 20})
    window = ctxwindow.select(chat, budget=400, strategy="clear_tool_outputs")
    reasons = {(run.action, run.reason) for run in window.record.decision_runs}
    assert ("dropped", clear.DROPPED_UNCLEARED) in reasons
    assert ("kept", clear.FITS) in reasons
    assert not any("cleared" in reason for _, reason in reasons)


def test_a_stub_for_a_copy_a_host_cut_says_only_that_it_was_cleared() -> None:
    """A stage's input may hold a copy of a result an earlier stage's host cut (marked
    ``truncated`` and ``stands_in_for``): its stub keeps the message's own metadata, not
    those marks (the window would say the runner cut it, and the conformance kit
    refused that window)."""
    messages = agent(6)
    marked = {"truncated": True, "stands_in_for": 3, "source": "ci-log"}
    messages[3] = {**messages[3], "metadata": marked}
    window = ctxwindow.Windower(ClearToolOutputs(keep_recent=2, when="always"), 10**6).transform(
        messages
    )
    stub = window.messages[3]
    assert stub["metadata"]["cleared_tool_output"]["position"] == 3
    assert stub["metadata"]["source"] == "ci-log"
    assert "truncated" not in stub["metadata"]
    assert stub["metadata"].get("stands_in_for", 3) == 3
