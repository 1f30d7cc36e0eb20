"""Grouping into units, defects, must-keep reasons and incremental counting (Conversation.view)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings

import ctxwindow
import ctxwindow._history
from ctxwindow import Conversation, History, InvalidMessage, Message, Unit
from ctxwindow._tokens import ApproxCounter, CachedCounter
from ctxwindow.testing import assistant, calls, result, user
from ctxwindow.testing.conversations import wild_histories
from ctxwindow.testing.strategies import Newest

APPROX = ApproxCounter()


def spans(history: History) -> list[tuple[int, int]]:
    return [(unit.start, unit.stop) for unit in history.units]


def defects(history: History) -> list[tuple[int, int]]:
    return [(defect.start, defect.stop) for defect in history.defects]


def view(messages: list[Any], budget: int = 1000, query: str | None = None) -> History:
    """The view of ``messages`` without the task statement tier, which, like the current
    turn's, has its own tests (test_current_turn.py)."""
    return Conversation(messages).view(APPROX, budget, query, task_statement=False)


# -- units -----------------------------------------------------------------------------
def test_plain_messages_are_one_unit_each() -> None:
    history = view([{"role": "system", "content": "s"}, user("a"), assistant("b"), user("c")])
    assert list(history.units) == [Unit(0, 0, 1), Unit(1, 1, 2), Unit(2, 2, 3), Unit(3, 3, 4)]
    assert history.defects == ()
    assert [history.unit_of(p) for p in range(4)] == [0, 1, 2, 3]
    assert history.units[-1] == Unit(3, 3, 4)
    assert history.units[1:3] == [Unit(1, 1, 2), Unit(2, 2, 3)]
    assert history.units[1].size == 1
    assert list(history.units[1].positions) == [1]
    with pytest.raises(IndexError):
        history.units[4]


def test_parallel_tool_calls_form_one_unit() -> None:
    history = view(
        [
            user("q"),
            calls("c1", "c2", "c3"),
            result("c1"),
            result("c2"),
            result("c3"),
            assistant("a"),
        ]
    )
    assert spans(history) == [(0, 1), (1, 5), (5, 6)]
    assert [history.unit_of(p) for p in range(6)] == [0, 1, 1, 1, 1, 2]
    assert list(history.span(1)) == [1, 2, 3, 4]
    assert history.units[1].size == 4
    assert history.defects == ()


def test_tool_results_in_any_order() -> None:
    history = view(
        [user("q"), calls("c1", "c2", "c3"), result("c3"), result("c1"), result("c2"), user("next")]
    )
    assert spans(history) == [(0, 1), (1, 5), (5, 6)]
    assert history.defects == ()


def test_consecutive_tool_rounds_are_separate_units() -> None:
    history = view([user("q"), calls("a"), result("a"), calls("b", "c"), result("c"), result("b")])
    assert spans(history) == [(0, 1), (1, 3), (3, 6)]


def test_orphan_tool_result_is_a_defect() -> None:
    history = view([user("q"), result("ghost"), assistant("a")])
    assert spans(history) == [(0, 1), (2, 3)]
    assert defects(history) == [(1, 2)]
    assert "'ghost'" in history.defects[0].problem
    assert "does not follow an assistant message" in history.defects[0].problem
    assert history.unit_of(1) is None
    assert history.unit_of(2) == 1


def test_a_result_repeated_inside_an_open_exchange_is_named_as_its_break() -> None:
    """A retried step inside a parallel round: the exchange breaks at the repeat, and
    its defect says the repeat is why (not only that 'b' has no result)."""
    history = view([user("q"), calls("a", "b"), result("a"), result("a"), result("b")])
    assert defects(history) == [(1, 3), (3, 4), (4, 5)]
    assert history.defects[0].problem.startswith(
        "the tool result for call 'a' at message 3 repeats one this exchange already holds"
    )


def test_a_read_that_fails_rewinds_what_the_open_exchange_has_answered() -> None:
    """A batch that raises part way leaves the grouping as before it, the calls the
    exchange still open has answered included: a batch that closed it and opened
    another is undone, and a repeat that follows is still named as one."""
    conversation = Conversation([user("q"), calls("a", "b"), result("a")])
    with pytest.raises(InvalidMessage):
        conversation.extend([result("b"), calls("c"), {"role": "wizard", "content": "x"}])
    conversation.extend([result("a"), result("b")])
    history = conversation.view(APPROX, 1000, task_statement=False)
    assert defects(history) == [(1, 3), (3, 4), (4, 5)]
    assert history.defects[0].problem.startswith("the tool result for call 'a' at message 3")


def test_duplicate_result_after_the_unit_closed_is_an_orphan() -> None:
    history = view([user("q"), calls("c1"), result("c1"), result("c1")])
    assert spans(history) == [(0, 1), (1, 3)]
    assert defects(history) == [(3, 4)]


def test_result_for_another_call_breaks_the_open_unit() -> None:
    history = view([user("q"), calls("c1"), result("other"), user("more")])
    # the call is unanswered and the result answers nothing
    assert defects(history) == [(1, 2), (2, 3)]
    assert "c1" in history.defects[0].problem
    assert "have no tool result" in history.defects[0].problem
    assert "'other'" in history.defects[1].problem
    assert spans(history) == [(0, 1), (3, 4)]


def test_several_unanswered_calls_are_named_sorted() -> None:
    history = view([user("q"), calls("zeta", "alpha"), user("again")])
    assert defects(history) == [(1, 2)]
    assert history.defects[0].problem == (
        "the assistant's tool call(s) 'alpha', 'zeta' have no tool result right after them"
    )


def test_unanswered_call_followed_by_a_message_is_a_defect() -> None:
    history = view([user("q"), calls("c1", "c2"), result("c2"), user("again"), assistant("ok")])
    assert defects(history) == [(1, 3)]  # the call and its partial results
    # names only the calls left unanswered
    assert history.defects[0].problem == (
        "the assistant's tool call(s) 'c1' have no tool result right after them"
    )
    assert spans(history) == [(0, 1), (3, 4), (4, 5)]
    assert history.unit_of(1) is None and history.unit_of(2) is None


def test_unanswered_call_at_the_end_is_a_defect_of_the_view() -> None:
    conversation = Conversation([user("q"), calls("c1", "c2"), result("c1")])
    history = conversation.view(APPROX, 1000)
    assert defects(history) == [(1, 3)]
    assert history.defects[0].problem == (
        "the assistant's tool call(s) 'c2' have no tool result right after them"
    )
    assert spans(history) == [(0, 1)]
    # answering the last call closes the unit: the defect was only the view's
    conversation.append(result("c2"))
    later = conversation.view(APPROX, 1000)
    assert later.defects == ()
    assert spans(later) == [(0, 1), (1, 4)]
    # the earlier snapshot is unchanged
    assert len(history) == 3
    assert defects(history) == [(1, 3)]
    assert len(history.units) == 1


SCRIPT: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    user("weather in Paris and Rome?", metadata={"pinned": True}),
    calls("p", "r"),
    result("r", "18 C"),
    result("p", "21 C"),
    assistant("Paris 21, Rome 18"),
    result("stray"),
    user("and Oslo?"),
    calls("o"),
    user("never mind"),
    {"role": "developer", "content": "dev note"},
    calls("x"),
    result("x"),
    assistant("bye"),
]


def test_incremental_append_gives_the_same_units_as_building_at_once() -> None:
    incremental = Conversation()
    for size in range(1, len(SCRIPT) + 1):
        incremental.append(SCRIPT[size - 1])
        at_once = Conversation(SCRIPT[:size])
        a, b = incremental.view(APPROX, 1000), at_once.view(APPROX, 1000)
        assert list(a.units) == list(b.units), size
        assert defects(a) == defects(b), size
        assert [d.problem for d in a.defects] == [d.problem for d in b.defects]
        assert a.must_keep == b.must_keep, size
        assert a.total_tokens == b.total_tokens, size
        assert list(a.messages) == list(b.messages)


def test_script_units_and_defects() -> None:
    history = view(SCRIPT)
    assert spans(history) == [
        (0, 1),
        (1, 2),
        (2, 5),
        (5, 6),
        (7, 8),
        (9, 10),
        (10, 11),
        (11, 13),
        (13, 14),
    ]
    assert defects(history) == [(6, 7), (8, 9)]


def test_extend_equals_append() -> None:
    extended = Conversation()
    extended.extend(SCRIPT[:5])
    extended.extend(iter(SCRIPT[5:]))
    assert list(extended.view(APPROX, 10).units) == list(view(SCRIPT).units)


#: SCRIPT and what else a read changes: a legacy function call joined by its result, a
#: message id, a pinned message.
REWOUND = [
    *SCRIPT,
    {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
    {"role": "function", "name": "f", "content": "f's result"},
    {**user("with an id"), "id": "m1"},
    calls("y"),
]
#: What is not a message: its read raises part way through a batch.
BAD = {"role": "tool", "content": "a result with no call id"}


def _state(conversation: Conversation) -> dict[str, Any]:
    """Everything a read sets, but the lock."""
    return {k: v for k, v in vars(conversation).items() if k != "_lock"}


@pytest.fixture(params=["batch lookups", "one by one"])
def reading(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways a batch is read: with its roles and sizes looked up first (a long one),
    and each entry by read_common (a short one)."""
    lookups_from = 0 if request.param == "batch lookups" else 10**9
    monkeypatch.setattr(ctxwindow._history, "BATCH_LOOKUPS_FROM", lookups_from)


@pytest.mark.parametrize("kept", range(len(REWOUND) + 1))
@pytest.mark.usefixtures("reading")
def test_a_batch_with_an_invalid_message_changes_nothing_wherever_it_fails(kept: int) -> None:
    """A read rewinds the grouping it did before the invalid message: units, the
    exchange left open (answered in the batch), a result joined to a call read
    before, ids, the newest user."""
    expected = _state(Conversation(REWOUND[:kept]))
    for bad_at in range(len(REWOUND) - kept + 1):
        conversation = Conversation(REWOUND[:kept])
        batch = [*REWOUND[kept : kept + bad_at], BAD, *REWOUND[kept + bad_at :]]
        with pytest.raises(InvalidMessage):
            conversation.extend(batch)
        assert _state(conversation) == expected, bad_at
        conversation.extend(REWOUND[kept:])
        assert _state(conversation) == _state(Conversation(REWOUND)), bad_at


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wild_histories(defects=True))
def test_a_batch_is_read_as_its_messages_one_by_one(messages: list[Any]) -> None:
    """Read at once (the simple dicts of the batch found by their roles and sizes at
    once) or a message at a time, a history of dicts gives the same conversation:
    units, defects, exchanges left open, users, instructions and pins, each message."""
    dicts = [m.to_dict() if isinstance(m, Message) else m for m in messages]
    with mock.patch.object(ctxwindow._history, "BATCH_LOOKUPS_FROM", 0):
        at_once = Conversation(dicts)
    one_by_one = Conversation()
    for entry in dicts:
        one_by_one.append(entry)
    assert _state(at_once) == _state(one_by_one)


@pytest.mark.usefixtures("reading")
def test_a_list_of_dicts_and_messages_is_read_as_either_alone() -> None:
    """Not all dicts: each entry is read in full, and noted as in a list of one kind."""
    script = [*SCRIPT, *REWOUND[len(SCRIPT) :]]
    as_messages = [Message.from_dict(entry) for entry in script]
    for mixed in (
        [entry if position % 2 else as_messages[position] for position, entry in enumerate(script)],
        [as_messages[position] if position % 2 else entry for position, entry in enumerate(script)],
    ):
        read, alone = Conversation(mixed), Conversation(script)
        kind = {"_originals": None, "_messages": None, "all_dicts": None}
        assert _state(read) | kind == _state(alone) | kind
        assert [read.message(p) for p in range(len(script))] == as_messages


# -- must keep -------------------------------------------------------------------------
def test_must_keep_system_developer_pinned_and_newest_user() -> None:
    history = view(SCRIPT)
    turn = "current turn (after the newest user message)"
    assert history.must_keep == {
        0: "system message",
        1: "pinned",
        5: "newest user message",
        6: "developer message",
        7: turn,  # the rest of the current turn fits: it stays whole
        8: turn,
    }
    assert history.newest_user == 9
    assert history.current_turn == range(5, 9)


def test_newest_user_that_is_also_pinned_keeps_the_pinned_reason() -> None:
    history = view([user("old"), user("new", metadata={"pinned": True})])
    assert history.must_keep == {1: "pinned"}


def test_pinned_message_inside_a_tool_unit_keeps_the_whole_unit() -> None:
    pinned_result = {**result("c1"), "metadata": {"pinned": True}}
    history = view([user("a"), calls("c1"), pinned_result, assistant("b")])
    turn = "current turn (after the newest user message)"
    assert history.must_keep == {1: "pinned", 0: "newest user message", 2: turn}
    assert list(history.must_keep) == [0, 1, 2]  # sorted by unit


def test_pinned_orphan_is_not_kept() -> None:
    history = view([user("a"), {**result("ghost"), "metadata": {"pinned": True}}])
    assert history.must_keep == {0: "newest user message"}


def test_no_must_keep_without_system_or_user() -> None:
    history = view([assistant("hello")])
    assert history.must_keep == {}
    assert history.newest_user is None
    assert history.must_keep_tokens == 0
    assert history.effective_query == ""


def test_empty_conversation() -> None:
    history = view([])
    assert len(history) == 0
    assert list(history.units) == []
    assert history.total_tokens == 0
    assert history.must_keep == {}


def test_query_and_effective_query() -> None:
    messages = [user("first question"), assistant("answer"), user("second question")]
    assert view(messages).query is None
    assert view(messages).effective_query == "second question"
    assert view(messages, query="custom").effective_query == "custom"
    assert view(messages, query="").effective_query == ""
    assert view(messages, budget=77).budget == 77


# -- tokens ----------------------------------------------------------------------------
def test_token_accounting() -> None:
    messages = [
        {"role": "system", "content": "s" * 8},  # 3 + 2 = 5
        user("u" * 40),  # 3 + 10 = 13
        calls("c1", "c2"),  # (6 + 2) * 2 = 16 chars: 3 + 4 = 7
        result("c2", "r" * 10),  # 10 + 2 = 12 chars: 3 + 3 = 6
        result("c1", "r" * 14),  # 14 + 2 = 16 chars: 3 + 4 = 7
        result("ghost", "g" * 3),  # 3 + 5 = 8 chars: 3 + 2 = 5
        user("v" * 4),  # 3 + 1 = 4
    ]
    history = view(messages)
    assert [history.tokens(p) for p in range(7)] == [5, 13, 7, 6, 7, 5, 4]
    assert [history.unit_tokens(u) for u in range(len(history.units))] == [5, 13, 20, 4]
    assert history.total_tokens == 47
    assert history.usable_tokens == 42
    assert history.must_keep == {0: "system message", 3: "newest user message"}
    assert history.must_keep_tokens == 9
    assert history.unit_text(2) == "\n" + "r" * 10 + "\n" + "r" * 14
    history._replace(6, Message("user", ""))  # as the host cuts the newest message: 3
    assert history.must_keep_tokens == 8  # summed again, not as first read


def test_messages_and_originals() -> None:
    messages = [user("a"), Message("assistant", "b")]
    conversation = Conversation(messages)
    assert len(conversation) == 2
    assert conversation.originals == messages
    assert all(a is b for a, b in zip(conversation.originals, messages, strict=True))
    assert all(a is b for a, b in zip(conversation, messages, strict=True))
    history = conversation.view(APPROX, 100)
    assert history.messages[0] == Message("user", "a")
    assert history.messages[1] is messages[1]
    assert history.messages[-1] is messages[1]
    assert history.original(0) is messages[0]
    assert history.message_id(0) is None


def test_bad_append_leaves_the_conversation_unchanged() -> None:
    conversation = Conversation([user("a"), calls("c1")])
    with pytest.raises(InvalidMessage) as raised:
        conversation.append({"role": "robot", "content": "x"})
    assert raised.value.index == 2
    assert len(conversation) == 2
    conversation.append(result("c1"))
    history = conversation.view(APPROX, 100)
    assert spans(history) == [(0, 1), (1, 3)]
    assert history.defects == ()


def test_snapshot_does_not_see_later_messages() -> None:
    conversation = Conversation([user("a"), assistant("b")])
    history = conversation.view(APPROX, 100)
    conversation.append(user("c" * 40))
    assert len(history) == 2
    assert len(history.messages) == 2
    assert len(history.units) == 2
    assert history.newest_user == 0
    assert history.total_tokens == 8
    with pytest.raises(IndexError):
        history.messages[2]


# -- counting only what is new ---------------------------------------------------------
def test_each_message_is_counted_once_across_views(counting: Any) -> None:
    counter = ctxwindow.get_counter(counting)
    assert ctxwindow.get_counter(counting) is counter  # the wrapper is shared
    conversation = Conversation([user("a" * 4), assistant("b" * 8), user("c" * 12)])
    first = conversation.view(counter, 100)
    assert counting.calls == 3
    assert first.total_tokens == 4 + 5 + 6
    conversation.view(counter, 100)
    conversation.view(counter, 50, "q")
    assert counting.calls == 3
    conversation.append(assistant("d" * 16))
    second = conversation.view(counter, 100)
    assert counting.calls == 4
    assert counting.counted[-1] == Message("assistant", "d" * 16)
    assert second.total_tokens == 4 + 5 + 6 + 7
    assert counter.misses == 4


def test_equal_messages_in_another_conversation_hit_the_cache(counting: Any) -> None:
    counter = ctxwindow.get_counter(counting)
    messages = [user("hello"), assistant("world")]
    Conversation(messages).view(counter, 100)
    Conversation([dict(m) for m in messages]).view(counter, 100)
    assert counting.calls == 2
    assert counter.misses == 2


def test_cached_counter_misses_count_distinct_contents(counting: Any) -> None:
    counter = CachedCounter(counting)
    conversation = Conversation([user("same"), assistant("other"), user("same"), user("same")])
    history = conversation.view(counter, 100)
    assert counter.misses == 2 and counting.calls == 2
    assert history.total_tokens == conversation.view(counting, 100).total_tokens
    conversation.append(user("new"))
    conversation.view(counter, 100)
    assert counter.misses == 3


def test_a_conversation_counts_by_length_past_the_approx_cache() -> None:
    """Counting by length costs less than a cache lookup: a Conversation keeps its own
    sums, so the approx counter's cache is left out, and the counts are the same."""
    counter = CachedCounter(ApproxCounter())
    messages = [
        user("same"),
        assistant("other"),
        calls("c1"),
        result("c1", "result " * 9),
        user("same"),
    ]
    history = Conversation(messages).view(counter, 100)
    assert counter.misses == 0 and len(counter) == 0
    each = [counter.count_message(message) for message in history.messages]
    assert [history.tokens(p) for p in range(len(messages))] == each


def test_selecting_a_growing_conversation_counts_only_new_messages(counting: Any) -> None:
    conversation = Conversation([{"role": "system", "content": "s"}])
    for turn in range(5):
        conversation.append(user(f"question {turn} " + "x" * 40))
        ctxwindow.select(conversation, 40, "newest", counter=counting)
        conversation.append(assistant(f"answer {turn} " + "y" * 40))
        ctxwindow.select(conversation, 40, "newest", counter=counting)
    assert counting.calls == 11


def test_two_counters_keep_separate_sums(counting_factory: Any) -> None:
    one, two = counting_factory("one"), counting_factory("two")
    conversation = Conversation([user("a"), assistant("b")])
    conversation.view(ctxwindow.get_counter(one), 100)
    conversation.view(ctxwindow.get_counter(two), 100)
    conversation.view(ctxwindow.get_counter(one), 100)
    assert (one.calls, two.calls) == (2, 2)


def test_a_conversation_of_messages_reads_no_content_again_on_a_visit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ctxwindow Messages are frozen: a visit compares no content of theirs (an
    adapter's Conversation of the Messages it read is windowed on every call)."""
    import ctxwindow._history as history_module

    messages = [Message("system", "Be brief.")]
    messages += [Message("user" if n % 2 else "assistant", f"turn {n} " * 9) for n in range(400)]
    conversation = Conversation(messages)

    def read_contents(_: Any) -> list[Any]:
        raise AssertionError("a Message's content was read again")

    monkeypatch.setattr(history_module, "_contents", read_contents)
    monkeypatch.setattr(history_module, "_content_of", read_contents)
    window = ctxwindow.Windower(Newest(), 300, "approx").select(conversation)
    assert window.messages[-1] is messages[-1]
