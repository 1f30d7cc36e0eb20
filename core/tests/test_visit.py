"""One visit end to end, through ctxwindow.select and Newest().select (the testing kit's
reference strategy: the newest units that fit). These cases test that rule and the
visit around it, so they run with ``task_statement`` off; the task statement and the
current turn have their own tests (test_current_turn.py)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

import ctxwindow
from ctxwindow import (
    BaseStrategy,
    BudgetTooSmall,
    Conversation,
    History,
    InvalidMessage,
    InvalidQuery,
    Message,
    OrphanToolResult,
    Selection,
    Window,
    Windower,
)
from ctxwindow.testing import assistant, calls, result, user
from ctxwindow.testing.strategies import NEWEST as RECENT
from ctxwindow.testing.strategies import OLDER
from ctxwindow.testing.strategies import Newest as TheNewest

#: The options of every visit here: the newest-units rule alone, no task statement.
PLAIN = {"task_statement": False}

MARKER_TAIL = "characters cut by ctxwindow to fit the token budget]"
IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}


def conversation() -> list[dict[str, Any]]:
    """Eleven messages, nine units; approx tokens in the comments (132 in all)."""
    return [
        {"role": "system", "content": "S" * 20},  # 0, unit 0: 8, must keep
        user("a" * 40),  # 1, unit 1: 13
        assistant("b" * 40),  # 2, unit 2: 13
        user("c" * 40, metadata={"pinned": True}),  # 3, unit 3: 13, must keep
        calls("c1", "c2"),  # 4, unit 4: 7
        result("c2", "r" * 38),  # 5, unit 4: 13
        result("c1", "r" * 38),  # 6, unit 4: 13
        assistant("d" * 40),  # 7, unit 5: 13
        user("e" * 40),  # 8, unit 6: 13
        assistant("f" * 40),  # 9, unit 7: 13
        user("g" * 40),  # 10, unit 8: 13, must keep (newest user)
    ]


TOTAL = 132
MUST_KEEP = 34
TOOL_UNIT = (4, 5, 6)


def select(messages: Any, budget: int, **options: Any) -> Window[Any]:
    return ctxwindow.select(messages, budget, "newest", **{**PLAIN, **options})


async def aselect(messages: Any, budget: int, **options: Any) -> Window[Any]:
    return await ctxwindow.aselect(messages, budget, "newest", **{**PLAIN, **options})


def Newest(**options: Any) -> TheNewest:
    return TheNewest(**{**PLAIN, **options})


def positions_of(window: Window[Any], messages: list[Any]) -> list[int]:
    """Where each window message sits in the input, by identity."""
    where = {id(message): position for position, message in enumerate(messages)}
    return [where[id(message)] for message in window.messages]


def recount(window: Window[Any], counter: Any = "approx") -> int:
    exact = ctxwindow.get_counter(counter)
    return sum(
        exact.count_message(Message.from_dict(m) if isinstance(m, dict) else m)
        for m in window.messages
    )


def select_both(messages: Any, budget: int, **options: Any) -> list[Window[Any]]:
    """The same visit through the one-call API and through the plugin class."""
    return [
        select(messages, budget, **options),
        Newest(**options).select(messages, budget),
    ]


# -- identity and kinds ----------------------------------------------------------------
def test_dicts_in_the_same_dicts_out() -> None:
    messages = conversation()
    for window in select_both(messages, 100):
        assert all(isinstance(m, dict) for m in window.messages)
        assert positions_of(window, messages) == [0, 3, 7, 8, 9, 10]
        assert window.messages[0] is messages[0]
        assert window.messages[-1] is messages[10]


def test_messages_in_messages_out() -> None:
    messages = [Message.from_dict(m) for m in conversation()]
    for window in select_both(messages, 100):
        assert all(type(m) is Message for m in window.messages)
        assert positions_of(window, messages) == [0, 3, 7, 8, 9, 10]
        assert window.record.tokens_after == 73


def test_under_budget_returns_everything_untouched() -> None:
    messages = conversation()
    for budget in (TOTAL, TOTAL + 1, 100_000):
        for window in select_both(messages, budget):
            assert window.messages == messages
            assert all(a is b for a, b in zip(window.messages, messages, strict=True))
            assert window.messages is not messages  # a new list
            record = window.record
            assert record.engaged is False
            assert record.tokens_before == record.tokens_after == window.tokens == TOTAL
            assert record.messages_before == record.messages_after == 11
            assert record.budget == budget
            assert record.notes == ()
            assert len(record.decisions) == 9
            assert {d.action for d in record.decisions} == {"kept"}
            assert {d.reason for d in record.decisions} == {"everything fits the budget"}
            assert record.count("kept") == 9
            assert record.count("dropped") == 0


def test_empty_history() -> None:
    window = select([], 10)
    assert window.messages == []
    assert window.record.engaged is False
    assert window.record.tokens_after == 0
    assert window.record.decisions == ()


# -- over budget -----------------------------------------------------------------------
def test_over_budget_keeps_the_newest_units_that_fit() -> None:
    messages = conversation()
    for window in select_both(messages, 100):
        record = window.record
        assert record.engaged is True
        assert record.strategy == "newest"
        assert record.counter == "approx"
        assert record.budget == 100
        assert record.tokens_before == TOTAL
        assert record.tokens_after == window.tokens == 73
        assert record.messages_before == 11
        assert record.messages_after == len(window) == 6
        # unit 4 (33 tokens) does not fit: it and everything older is dropped,
        # even unit 2 which alone would have fitted
        assert [(d.unit, d.action, d.reason) for d in record.decisions] == [
            (0, "kept", "system message"),
            (1, "dropped", OLDER),
            (2, "dropped", OLDER),
            (3, "kept", "pinned"),
            (4, "dropped", OLDER),
            (5, "kept", RECENT),
            (6, "kept", RECENT),
            (7, "kept", RECENT),
            (8, "kept", "newest user message"),
        ]
        assert [d.positions for d in record.decisions] == [
            (0,),
            (1,),
            (2,),
            (3,),
            (4, 5, 6),
            (7,),
            (8,),
            (9,),
            (10,),
        ]
        assert [d.tokens for d in record.decisions] == [8, 13, 13, 13, 33, 13, 13, 13, 13]
        assert record.count("kept") == 6
        assert record.count("dropped") == 3


def test_the_tool_unit_is_kept_whole_when_it_fits() -> None:
    messages = conversation()
    window = select(messages, 110)
    assert positions_of(window, messages) == [0, 3, 4, 5, 6, 7, 8, 9, 10]
    assert window.record.tokens_after == 106
    assert window.record.decisions[4].action == "kept"
    assert window.record.decisions[2].action == "dropped"


@pytest.mark.parametrize("budget", range(MUST_KEEP, TOTAL + 2))
def test_window_invariants_at_every_budget(budget: int) -> None:
    messages = conversation()
    before = copy.deepcopy(messages)
    window = select(messages, budget)
    kept = positions_of(window, messages)
    # in order, never over budget, tokens as recorded
    assert kept == sorted(kept)
    assert window.record.tokens_after <= budget
    assert recount(window) == window.record.tokens_after
    # system, pinned and newest user always kept
    assert {0, 3, 10} <= set(kept)
    # a tool unit is kept whole or not at all
    present = [p in kept for p in TOOL_UNIT]
    assert all(present) or not any(present)
    # the kept units are the newest ones: no gap among the non-must-keep units
    optional = [p for p in kept if p not in (0, 3, 10)]
    if optional:
        first = optional[0]
        expected = [p for p in range(first, 10) if p != 3]
        assert optional == expected
    # one decision per unit, each with a reason; the actions match the window
    decisions = window.record.decisions
    assert [d.unit for d in decisions] == list(range(9))
    assert all(d.reason for d in decisions)
    for decision in decisions:
        inside = [p in kept for p in decision.positions]
        assert all(inside) if decision.action == "kept" else not any(inside)
    # nothing was changed
    assert messages == before


def test_recount_with_another_counter(counting: Any) -> None:
    messages = conversation()
    window = select(messages, 100, counter=counting)
    assert window.record.counter == "counting"
    assert window.record.tokens_after == 73
    assert recount(window, counting) == 73


def test_budget_too_small_for_what_must_stay() -> None:
    messages = conversation()
    for call in (
        lambda: select(messages, MUST_KEEP - 1),
        lambda: Newest().select(messages, MUST_KEEP - 1),
    ):
        with pytest.raises(BudgetTooSmall) as raised:
            call()
        assert raised.value.needed == MUST_KEEP
        assert raised.value.budget == MUST_KEEP - 1
        assert "need 34 tokens but the budget leaves 33" in str(raised.value)
        # the newest user message is shorter than a cut's marker: no cut helps, so the
        # error says how far to raise the budget and advises no oversize policy
        assert "raise the budget to at least 34 tokens" in str(raised.value)
        assert "oversize=" not in str(raised.value)
        assert isinstance(raised.value, ValueError)
    window = select(messages, MUST_KEEP)
    assert positions_of(window, messages) == [0, 3, 10]
    assert window.record.tokens_after == MUST_KEEP


def test_budget_too_small_without_a_user_message_even_when_truncating() -> None:
    messages = [{"role": "system", "content": "S" * 400}, assistant("hi")]
    with pytest.raises(BudgetTooSmall) as raised:
        select(messages, 50, oversize="truncate")
    assert (raised.value.needed, raised.value.budget) == (103, 50)
    assert raised.value.position == 0
    assert raised.value.biggest_tokens == ctxwindow.get_counter().count_message(
        ctxwindow.Message.from_dict(messages[0])
    )


def test_budget_too_small_gives_the_biggest_as_data() -> None:
    """Callers read which message is too big from attributes, never from the text."""
    messages = conversation()
    messages[10]["content"] = "z" * 400
    with pytest.raises(BudgetTooSmall) as raised:
        select(messages, MUST_KEEP, oversize="raise")
    error = raised.value
    counter = ctxwindow.get_counter()
    assert error.position == 10
    assert error.biggest_tokens == counter.count_message(ctxwindow.Message.from_dict(messages[10]))
    assert error.biggest is not None
    assert error.biggest.startswith("message 10, the newest user message")
    assert f"{error.biggest_tokens:,} tokens" in str(error)


def test_budget_too_small_names_only_the_kinds_of_message_the_history_keeps() -> None:
    """No system message, no pins, no tool exchange: the error does not list them; a
    pinned user message is called pinned; figures have thousands separators."""
    pinned = {"role": "user", "content": "y " * 4000, "metadata": {"pinned": True}}
    with pytest.raises(BudgetTooSmall) as raised:
        select([pinned, user("hi")], 300, oversize="raise")
    text = str(raised.value)
    assert text.startswith("the messages that must be kept (pinned, newest user) need 2,007 ")
    assert "message 0, a pinned user message, 2,003 tokens" in text
    with pytest.raises(BudgetTooSmall) as raised:
        select([{"role": "system", "content": "s"}, user("y " * 4000)], 300, oversize="raise")
    assert "kept (system, newest user) need" in str(raised.value)


def test_budget_too_small_keeps_its_old_constructor() -> None:
    error = BudgetTooSmall(10, 5, "shorten it", "message 1")
    assert (error.needed, error.budget, error.biggest) == (10, 5, "message 1")
    assert error.position is None and error.biggest_tokens is None
    assert str(error).endswith("the biggest is message 1; raise the budget, or shorten it")


def test_input_is_never_modified() -> None:
    messages = conversation()
    messages[10]["content"] = "z" * 400
    messages.insert(2, result("ghost"))
    before = copy.deepcopy(messages)
    select(messages, 150, orphans="drop")
    select(messages, 100, orphans="drop", oversize="truncate")
    Engages(orphans="drop", **PLAIN).select(messages, 10_000)
    asyncio.run(aselect(messages, 100, orphans="drop", oversize="truncate"))
    Conversation(messages[:2] + messages[3:]).view(ctxwindow.get_counter(), 10)
    with pytest.raises(OrphanToolResult):
        select(messages, 150)
    with pytest.raises(BudgetTooSmall):
        select(messages, 100, orphans="drop")
    assert messages == before


# -- oversize="truncate" ---------------------------------------------------------------
def truncation_case() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "S" * 20},  # 8
        user("a" * 40),  # 13
        assistant("b" * 40),  # 13
        user("z" * 400, id="u-last"),  # 103
    ]


def test_truncate_returns_a_cut_copy_of_the_newest_user_dict() -> None:
    messages = truncation_case()
    before = copy.deepcopy(messages)
    for window in select_both(messages, 80, oversize="truncate"):
        assert window.messages[0] is messages[0]
        assert len(window.messages) == 2
        cut = window.messages[1]
        assert cut is not messages[3]
        assert messages == before  # the original dict is unchanged
        assert cut["role"] == "user"
        assert cut["id"] == "u-last"  # other keys are carried over
        text = cut["content"]
        assert isinstance(text, str)
        kept = len(text) - len(text.lstrip("z"))
        assert 0 < kept < 400
        assert text == "z" * kept + f"\n[... {400 - kept} {MARKER_TAIL}"
        record = window.record
        assert record.tokens_before == 8 + 13 + 13 + 103  # before the cut
        assert record.tokens_after <= 80
        assert recount(window) == record.tokens_after
        # the longest cut that fits: one more character would not
        longer = Message("user", "z" * (kept + 1) + f"\n[... {400 - kept - 1} {MARKER_TAIL}")
        assert 8 + ctxwindow.get_counter().count_message(longer) > 80
        assert record.decisions[3].action == "truncated"
        assert record.decisions[3].reason == "newest user message; text cut to fit the budget"
        assert (
            f"truncated message 3 from 400 to {len(text):,} characters to fit the budget"
            in record.notes
        )


def test_truncate_a_message_object() -> None:
    messages = [Message.from_dict(m) for m in truncation_case()]
    window = select(messages, 80, oversize="truncate")
    cut = window.messages[-1]
    assert isinstance(cut, Message)
    assert cut is not messages[3]
    assert cut.metadata["truncated"] is True
    assert cut.text.endswith(MARKER_TAIL)
    assert messages[3].content == "z" * 400
    assert window.record.tokens_after <= 80


def test_truncate_keeps_non_text_parts() -> None:
    messages = truncation_case()
    messages[3] = user([{"type": "text", "text": "z" * 400}, IMAGE])
    before = copy.deepcopy(messages)
    window = select(messages, 150, oversize="truncate")  # needs 8 + 103 + 85
    cut = window.messages[-1]
    assert cut is not messages[3]
    assert messages == before
    assert cut["content"][1] == IMAGE
    assert cut["content"][0]["type"] == "text"
    assert cut["content"][0]["text"].endswith(MARKER_TAIL)
    assert window.record.tokens_after <= 150
    assert window.record.decisions[3].action == "truncated"
    assert recount(window) == window.record.tokens_after


def test_no_truncation_when_it_fits() -> None:
    messages = truncation_case()
    window = select(messages, 120, oversize="truncate")
    assert window.messages[-1] is messages[3]
    assert all(d.action != "truncated" for d in window.record.decisions)


# -- orphans ---------------------------------------------------------------------------
def with_orphan() -> list[dict[str, Any]]:
    return [user("a" * 40), result("ghost", "g" * 40), assistant("b" * 40), user("c" * 40)]


def test_orphan_raises_by_default_even_under_budget() -> None:
    messages = with_orphan()
    for call in (
        lambda: select(messages, 10_000),
        lambda: Newest().select(messages, 10_000),
    ):
        with pytest.raises(OrphanToolResult) as raised:
            call()
        assert raised.value.index == 1
        assert str(raised.value).startswith("message 1: tool result for call 'ghost'")
        assert "orphans='drop'" in str(raised.value)
        assert isinstance(raised.value, InvalidMessage)


def test_a_result_appended_twice_is_named_a_repeat_not_a_result_without_its_call() -> None:
    """A retried step that appends its tool result twice: the second result's call is in
    the assistant message right before the exchange, so "does not follow an assistant
    message that made that call" misled (a new user's review). Both policies say what
    it is: the raise, and the note and decision of orphans='drop'; a third copy too."""
    messages = [user("q"), calls("c1"), result("c1"), result("c1", "again"), result("c1")]
    repeat = "tool result for call 'c1' repeats one the exchange before it (messages 1-2)"
    with pytest.raises(OrphanToolResult) as raised:
        select(messages, 10_000)
    assert str(raised.value).startswith(f"message 3: {repeat}")
    window = select(messages, 10_000, orphans="drop")
    assert [note.partition(": ")[2] for note in window.record.notes] == [
        f"{repeat} already holds: a call is answered once"
    ] * 2
    assert all(repeat in d.reason for d in window.record.decisions if d.unit == -1)
    # a result for a call no exchange made keeps its words
    other = [user("q"), calls("c1"), result("c1"), result("c2")]
    with pytest.raises(OrphanToolResult, match="does not follow an assistant message"):
        select(other, 10_000)


def test_unanswered_call_raises_by_default() -> None:
    messages = [user("q"), calls("c9")]
    with pytest.raises(OrphanToolResult) as raised:
        select(messages, 10_000)
    assert raised.value.index == 1
    assert "c9" in str(raised.value)


def test_orphan_dropped_with_a_note_and_a_decision() -> None:
    messages = with_orphan()
    for window in select_both(messages, 10_000, orphans="drop"):
        assert positions_of(window, messages) == [0, 2, 3]
        record = window.record
        assert record.tokens_before == 3 * 13 + 15  # the orphan's call id counts too
        assert record.tokens_after == 39
        assert len(record.notes) == 1
        assert record.notes[0].startswith("dropped message 1: tool result for call 'ghost'")
        assert len(record.decisions) == 4
        orphan = record.decisions[-1]
        assert orphan.unit == -1
        assert orphan.positions == (1,)
        assert orphan.action == "dropped"
        assert "'ghost'" in orphan.reason
        assert orphan.tokens == 15
        assert [d.unit for d in record.decisions[:3]] == [0, 1, 2]
        assert [d.positions for d in record.decisions[:3]] == [(0,), (2,), (3,)]
        assert all(d.action == "kept" for d in record.decisions[:3])


def test_unanswered_call_dropped() -> None:
    messages = [user("q"), assistant("a"), user("r"), calls("c9", "c8"), result("c8")]
    window = select(messages, 10_000, orphans="drop")
    assert positions_of(window, messages) == [0, 1, 2]
    (orphan,) = [d for d in window.record.decisions if d.unit == -1]
    assert orphan.positions == (3, 4)
    assert "c9" in orphan.reason
    assert window.record.notes[0].startswith("dropped messages 3-4: ")


def test_a_pinned_message_dropped_with_its_broken_exchange_says_so() -> None:
    pinned_call = {**calls("c7"), "metadata": {"pinned": True}}
    pinned_result = {**result("ghost"), "metadata": {"pinned": True}}
    messages = [user("q"), pinned_result, assistant("a"), user("r"), pinned_call]
    window = select(messages, 10_000, orphans="drop")
    assert positions_of(window, messages) == [0, 2, 3]
    ghost, unanswered = [d for d in window.record.decisions if d.unit == -1]
    assert ghost.reason.endswith(
        "; dropped although pinned (message 1): a broken tool exchange cannot be sent"
    )
    assert "dropped although pinned (message 4)" in unanswered.reason
    plain = select(with_orphan(), 10_000, orphans="drop")
    assert all("pinned" not in d.reason for d in plain.record.decisions)


def test_explain_lists_dropped_defects_in_position_order() -> None:
    messages = with_orphan()
    text = select(messages, 10_000, orphans="drop").record.explain()
    rows = [line.split()[0] for line in text.splitlines()[3:] if not line.startswith("note")]
    assert rows == ["0", "1", "2", "3"]


# -- a strategy that engages within budget -------------------------------------------
class Engages(TheNewest):
    """Newest, but chooses even when everything fits: keeps the newest two units."""

    name = "engages"

    def engages_within_budget(self, history: ctxwindow.History) -> bool:
        return True

    def choose(self, history: ctxwindow.History) -> ctxwindow.Selection:
        selection = history.selection()
        for unit in range(len(history.units) - 2, len(history.units)):
            selection.keep(unit, "one of the newest two")
        return selection


def test_a_strategy_that_engages_within_budget_chooses_though_everything_fits() -> None:
    messages = conversation()
    for window in (
        Engages(**PLAIN).select(messages, 10_000),
        asyncio.run(Engages(**PLAIN).aselect(messages, 10_000)),
    ):
        assert positions_of(window, messages) == [0, 3, 9, 10]
        assert window.record.engaged is True
        assert window.record.tokens_after == 8 + 13 * 3
    assert Newest().select(messages, 10_000).record.engaged is False


# -- query -----------------------------------------------------------------------------
@pytest.mark.parametrize("query", [5, b"bytes", ["q"], {"q": 1}])
def test_query_of_wrong_type(query: Any) -> None:
    messages = conversation()
    with pytest.raises(
        InvalidQuery, match=f"query must be a string or None, got {type(query).__name__}"
    ):
        select(messages, 100, query=query)
    with pytest.raises(InvalidQuery):
        Newest().select(messages, 100, query=query)
    with pytest.raises(InvalidQuery):
        Newest().select(messages, 10_000, query=query)
    with pytest.raises(TypeError):
        asyncio.run(aselect(messages, 100, query=query))


def test_a_string_query_is_accepted() -> None:
    messages = conversation()
    assert positions_of(select(messages, 100, query="weather"), messages) == [
        0,
        3,
        7,
        8,
        9,
        10,
    ]


# -- async and Conversation ------------------------------------------------------------
def summary(window: Window[Any]) -> tuple[Any, ...]:
    record = window.record
    return (
        [id(m) for m in window.messages],
        record.tokens_before,
        record.tokens_after,
        record.engaged,
        record.notes,
        record.decisions,
    )


@pytest.mark.parametrize(
    ("budget", "options"), [(100, {}), (10_000, {}), (80, {"oversize": "truncate"})]
)
def test_aselect_gives_the_same_window(budget: int, options: dict[str, Any]) -> None:
    messages = conversation() if "oversize" not in options else truncation_case()
    sync = select(messages, budget, **options)
    asynchronous = asyncio.run(aselect(messages, budget, **options))
    by_class = asyncio.run(Newest(**options).aselect(messages, budget))
    if "oversize" in options:  # the cut message is a new dict each time
        assert sync.messages == asynchronous.messages == by_class.messages
        assert summary(sync)[1:] == summary(asynchronous)[1:] == summary(by_class)[1:]
    else:
        assert summary(sync) == summary(asynchronous) == summary(by_class)


def test_a_conversation_gives_the_same_window_as_the_list() -> None:
    messages = conversation()
    conv = Conversation(messages)
    for budget in (40, 100, 110, 10_000):
        from_list = select(messages, budget)
        from_conversation = select(conv, budget)
        assert summary(from_conversation) == summary(from_list)
        assert summary(Newest().select(conv, budget)) == summary(from_list)
        assert summary(asyncio.run(aselect(conv, budget))) == summary(from_list)
    windower = ctxwindow.from_config({"strategy": "newest", "budget": 100, **PLAIN})
    assert summary(windower.select(conv)) == summary(select(messages, 100))


def test_a_growing_conversation() -> None:
    messages = conversation()
    conv = Conversation(messages[:3])
    for message in messages[3:]:
        conv.append(message)
    assert positions_of(select(conv, 100), messages) == [0, 3, 7, 8, 9, 10]
    extra = assistant("h" * 40)
    conv.append(extra)
    window = select(conv, 100)
    assert window.messages[-1] is extra
    assert positions_of(window, [*messages, extra]) == [0, 3, 7, 8, 9, 10, 11]
    assert window.record.tokens_after == 73 + 13


class _OneSummary(BaseStrategy):
    """Keeps the system message and the newest units; the rest in one written summary."""

    name = "one-summary"

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        newest = len(history.units) - 1
        older = range(1, newest - 1)
        selection.summarize(older, "in the summary")
        covers = [history.covers_ref(p) for unit in older for p in history.span(unit)]
        made = Message(
            "system", "Summary: earlier talk.", metadata={"synthetic": True, "covers": covers}
        )
        selection.add_synthetic(made, older.stop)
        selection.keep(range(newest - 1, newest + 1), "newest")
        return selection


def test_explain_shows_the_messages_the_strategy_wrote() -> None:
    """The table had no row for a summary: its tokens were in the window's total but in
    no row (tokens 1339 -> 492, rows summing to 376). A row says what the strategy wrote
    and its tokens, after what it summarized; a visit that wrote nothing has none."""
    messages = [{"role": "system", "content": "Be brief."}]
    for n in range(10):
        messages.append({"role": "user" if n % 2 == 0 else "assistant", "content": f"m{n} " * 9})
    window = Windower(_OneSummary(**PLAIN), 60, "approx").select(messages)
    assert window.record.engaged
    table = window.record.explain().splitlines()
    made = [line for line in table if line.startswith("-  ")]
    assert len(made) == 1 and "made" in made[0] and "1 message the strategy wrote" in made[0]
    assert table.index(made[0]) == 1 + next(
        i for i, line in enumerate(table) if "summarized" in line
    )
    rows = [line.split() for line in table[3:] if not line.startswith("note")]
    sent = [row for row in rows if row[3] in ("kept", "made")]
    assert sum(int(row[2]) for row in sent) == window.record.tokens_after
    plain = select(messages, 60, **PLAIN).record
    assert plain.engaged and "made" not in plain.explain()
