"""A branch of a conversation: the messages it shares with its parent as read already,
and whatever follows read as a fresh conversation of the same messages would read it."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import ctxwindow
from ctxwindow import Branch, Conversation, History, Message, Selection
from ctxwindow._recent import RECENT
from ctxwindow.kit import PerConversation
from ctxwindow.kit._prefixes import CHECKED, RecentLists
from ctxwindow.testing.conversations import agent_loop, battery, wild_histories

COUNTER = ctxwindow.ApproxCounter()


@pytest.fixture(autouse=True)
def _forget() -> None:
    RECENT.clear()


def portrait(history: History) -> dict[str, Any]:
    """Everything a strategy reads of a view, but the conversation object itself."""
    return {
        "messages": list(history.messages),
        "originals": history.originals,
        "units": [(unit.start, unit.stop) for unit in history.units],
        "unit_of": [history.unit_of(p) for p in range(len(history))],
        "defects": history.defects,
        "must_keep": dict(history.must_keep),
        "newest_user": history.newest_user,
        "task_unit": history.task_unit,
        "agent": history.agent,
        "tokens": [history.tokens(p) for p in range(len(history))],
        "total": history.total_tokens,
        "ids": [history.message_id(p) for p in range(len(history))],
        "first_of_ids": {
            message_id: history.position_of_id(message_id)
            for message_id in map(history.message_id, range(len(history)))
            if message_id
        },
        "checked": history.conversation.checked_always,
    }


def view(conversation: Conversation, budget: int = 400) -> History:
    return conversation.view(COUNTER, budget)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=wild_histories(max_turns=10, defects=True),
    tail=wild_histories(max_turns=4, defects=True),
    at=st.floats(0, 1),
    counted=st.booleans(),
)
def test_a_branch_reads_as_a_fresh_conversation_of_its_messages(
    history: list[Any], tail: list[Any], at: float, counted: bool
) -> None:
    parent = Conversation(history)
    if counted:  # running sums of the shared messages come along
        view(parent)
    branch = parent.branch(round(at * len(history)))
    shared = len(branch)
    assert shared <= round(at * len(history))
    assert branch.branched_from == Branch(parent, shared, len(view(branch).units))
    branch.extend(tail)
    assert portrait(view(branch)) == portrait(view(Conversation([*history[:shared], *tail])))
    # the parent is as it was, and grows as it would have
    assert portrait(view(parent)) == portrait(view(Conversation(history)))
    parent.extend(tail)
    assert portrait(view(parent)) == portrait(view(Conversation([*history, *tail])))


@pytest.mark.parametrize("name", sorted(battery()))
def test_a_branch_at_every_position_of_every_shape(name: str) -> None:
    history = battery()[name]
    parent = Conversation(history)
    for position in range(len(history) + 1):
        branch = parent.branch(position)
        branch.extend(history[len(branch) :])
        assert portrait(view(branch)) == portrait(view(Conversation(history)))


def test_a_branch_never_parts_a_tool_exchange() -> None:
    history = agent_loop(3)
    starts = {unit.start for unit in view(Conversation(history)).units}
    parent = Conversation(history)
    for position in range(len(history) + 1):
        shared = len(parent.branch(position))
        assert shared in starts or shared == len(history)
        assert shared <= position


def test_a_legacy_function_result_joins_its_call_across_a_branch() -> None:
    call = Message(
        role="assistant", content=None, function_call={"name": "lookup", "arguments": "{}"}
    )
    reply = Message(role="function", name="lookup", content="found")
    history = [Message(role="user", content="look it up"), call]
    branch = Conversation(history).branch(2)
    assert len(branch) == 2
    branch.append(reply)
    assert [(u.start, u.stop) for u in view(branch).units] == [(0, 1), (1, 3)]
    # a branch inside the pair parts before the call
    assert len(Conversation([*history, reply]).branch(2)) == 1


def test_a_branch_links_one_conversation_back_not_a_chain() -> None:
    first = Conversation(agent_loop(4))
    second = first.branch(10)
    third = second.branch(8)
    assert third.branched_from is not None and third.branched_from.parent is second
    assert second.branched_from is None  # it let go of the first
    ref = weakref.ref(first)
    del first
    gc.collect()
    assert ref() is None


def chat(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for turn in range(turns):
        out.append({"role": "user", "content": f"question {turn} " + "word " * 8})
        out.append({"role": "assistant", "content": f"answer {turn} " + "reply " * 8})
    return out


def _seen(history: list[Any]) -> Conversation:
    return RECENT.view(history, COUNTER, 300, None, task_statement=True).conversation


def test_a_list_that_parts_near_its_end_is_read_as_a_branch(counting: Any) -> None:
    history = chat(60)
    first = RECENT.view(history, counting, 300, None, task_statement=True).conversation
    read = counting.calls
    cleared = [*history[:-5], {**history[-5], "content": "[cleared]"}, *history[-4:]]
    second = RECENT.view(cleared, counting, 300, None, task_statement=True)
    assert second.conversation.branched_from == Branch(first, len(history) - 5, len(history) - 5)
    # only the messages from where the two part are read and counted
    assert counting.calls - read == 5
    assert portrait(second) == portrait(Conversation(cleared).view(counting, 300))
    assert len(RECENT) == 1  # the branch is remembered in place of the history


def test_a_reply_taken_back_and_asked_again_is_a_branch() -> None:
    history = chat(60)
    first = _seen(history)
    again = [*history[:-1], {"role": "assistant", "content": "a better answer"}]
    assert _seen(again).branched_from == Branch(first, len(history) - 1, len(history) - 1)
    taken_back = again[:-1]
    assert len(_seen(taken_back)) == len(taken_back)


def test_a_message_edited_in_place_near_the_end_parts_the_branch_there() -> None:
    history = chat(60)
    first = _seen(history)
    history[-3]["content"] = "streamed into"
    branch = _seen(history)
    assert branch.branched_from == Branch(first, len(history) - 3, len(history) - 3)
    assert portrait(view(branch)) == portrait(view(Conversation(history)))


def test_a_list_that_parts_further_back_is_read_whole() -> None:
    history = chat(CHECKED)
    _seen(history)
    edited = [*history]
    edited[5] = {"role": "user", "content": "changed long ago"}
    assert _seen(edited).branched_from is None
    edited = [
        *history[: -CHECKED - 2],
        {"role": "user", "content": "changed"},
        *history[-CHECKED - 1 :],
    ]
    assert _seen(edited).branched_from is None


def test_a_state_starts_from_the_state_of_the_conversation_a_branch_came_from() -> None:
    made: list[list[int]] = []

    def branch(state: list[int], conversation: Conversation, origin: Branch) -> list[int]:
        assert conversation.branched_from is origin
        return state[: origin.units]

    states: PerConversation[list[int]] = PerConversation(
        lambda: made.append([]) or made[-1], branch
    )
    parent = Conversation(chat(10))
    states.of(parent).extend(range(len(view(parent).units)))
    child = parent.branch(7)
    assert states.of(child) == list(range(7))
    assert states.of(parent) == list(range(21))  # the parent's own, as it was
    assert len(made) == 1
    assert PerConversation(list).of(parent.branch(5)) == []  # no branch function: anew
    assert states.peek(Conversation()) is None


def test_a_branch_near_the_end_finds_each_id_where_a_fresh_read_would() -> None:
    """The ids first met past the cut are taken off the branch's copy one by one (a
    branch parts near its end); an id met before the cut keeps its first position."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief.", "id": "s"}]
    for turn in range(60):
        history.append({"role": "user", "content": f"question {turn}", "id": f"u{turn}"})
        history.append({"role": "assistant", "content": f"answer {turn}", "id": f"a{turn}"})
    history[-2]["id"] = "u3"  # met first at 7: stays there
    parent = Conversation(history)
    view(parent)
    tail = [
        {"role": "user", "content": "again", "id": "u59"},  # its first position moves
        {"role": "assistant", "content": "sure", "id": "new"},
    ]
    branch = parent.branch(len(history) - 2)
    branch.extend(tail)
    fresh = Conversation([*history[:-2], *tail])
    assert portrait(view(branch)) == portrait(view(fresh))
    assert view(branch).position_of_id("a59") is None
    assert view(branch).position_of_id("u3") == 7


def test_a_state_that_refers_to_its_conversation_goes_with_it() -> None:
    """A strategy's state may hold its conversation's views (the last selection, for
    Selection.carry): the conversation, once the app lets go of it, is still freed,
    state and all, and a state made for a strategy no longer alive goes with it."""
    import gc
    import weakref

    class Bag(list[Any]):  # a list that can be referred to weakly
        pass

    states: PerConversation[Bag] = PerConversation(Bag)
    conversation = Conversation(chat(6))
    states.of(conversation).append(view(conversation))  # a History: refers back
    held = weakref.ref(states.of(conversation))
    gone = weakref.ref(conversation)
    assert len(states) == 1
    del conversation
    gc.collect()
    assert gone() is None and held() is None
    assert len(states) == 0
    other = Conversation(chat(3))
    temporary: PerConversation[Bag] = PerConversation(Bag)
    kept = weakref.ref(temporary.of(other))
    del temporary
    gc.collect()
    assert kept() is None  # the conversation keeps no state of a PerConversation gone


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("set"), st.integers(0, 9), st.integers(0, 40), st.integers(1, 9)),
            st.tuples(st.just("branch"), st.integers(0, 9), st.integers(0, 40)),
        ),
        max_size=60,
    ),
    st.integers(1, 4),
)
# a branch of a branch past OWN_AT_MOST, its parent sharing a span beyond the smaller cut
@example(
    [("set", 0, 10, 2), ("branch", 0, 20), ("set", 1, 0, 1), ("set", 1, 1, 1), ("branch", 1, 5)],
    1,
)
def test_a_span_memo_branch_reads_right_values_and_all_a_copy_would(
    steps: list[tuple[Any, ...]], own_at_most: int
) -> None:
    """Branches of branches, each written before and after others branch from it: a
    memo never reads a value its own conversation's messages would not give, and it
    reads every span a dict would that each branch filled with a copy of its parent's
    spans ending by the cut (what the memo stood in for). A span's value is the
    messages it holds: each message named by the conversation that wrote it, so a
    branch and its parent agree on the messages before the cut and on nothing after."""
    from ctxwindow.kit import _memo

    memos: list[_memo.SpanMemo[str]] = [_memo.SpanMemo()]
    copies: list[dict[tuple[int, int], str]] = [{}]
    writers: list[list[int]] = [[0] * 50]  # who wrote each message of each conversation

    def value(conversation: int, span: tuple[int, int]) -> str:
        return ",".join(str(writers[conversation][p]) for p in range(*span))

    original = _memo.OWN_AT_MOST
    _memo.OWN_AT_MOST = own_at_most
    try:
        for step in steps:
            which = step[1] % len(memos)
            if step[0] == "set":
                span = (step[2], step[2] + step[3])
                memos[which][span] = copies[which][span] = value(which, span)
            else:
                cut = step[2]
                memos.append(memos[which].branch(cut))
                copies.append({s: v for s, v in copies[which].items() if s[1] <= cut})
                writers.append(writers[which][:cut] + [len(writers)] * (50 - cut))
            for conversation, (memo, copy) in enumerate(zip(memos, copies, strict=True)):
                for start in range(41):
                    for length in range(1, 10):
                        span = (start, start + length)
                        found = memo.get(span, _memo.MISSING)
                        assert found is not _memo.MISSING or span not in copy
                        assert found is _memo.MISSING or found == value(conversation, span)
    finally:
        _memo.OWN_AT_MOST = original


# -- a conversation branched again before its own first visit made its state --------------
# neither it nor its branch starts its state afresh (reading the whole history again), and
# no chain of conversations is kept alive
class Index:
    """A per-conversation state that records where it came from (weakly: a state
    holding its parent would keep every conversation alive) and what it read."""

    def __init__(self, read: int = 0, origin: Branch | None = None) -> None:
        self.read = read
        self.parent = None if origin is None else weakref.ref(origin.parent)
        self.shared = 0 if origin is None else origin.messages
        self.units_read = 0

    def branch(self, conversation: Conversation, origin: Branch) -> Index:
        return Index(min(self.read, origin.units), origin)

    def catch_up(self, units: int) -> None:
        self.units_read += units - self.read
        self.read = units


def _visit(states: PerConversation[Index], conversation: Conversation) -> Index:
    index = states.of(conversation)
    index.catch_up(len(conversation.view(COUNTER, 400).units))
    return index


def test_a_branch_of_a_branch_made_before_its_visit_starts_from_the_grandparent() -> None:
    states: PerConversation[Index] = PerConversation(Index, Index.branch)
    first = Conversation(chat(30))
    _visit(states, first)
    second = first.branch(-1)
    third = second.branch(-1)  # before the second's first visit
    late = _visit(states, third)
    assert late.parent is not None and late.parent() is first
    assert late.shared == len(third) and late.units_read == 0
    # the second's own visit, later, still starts from the first's state
    own = _visit(states, second)
    assert own.parent is not None and own.parent() is first
    assert own.units_read == 0
    assert second.branched_from is not None and second.branched_from.parent is first
    assert third.branched_from is not None and third.branched_from.parent is second


def test_each_branch_made_before_its_parent_visit_keeps_at_most_two_back() -> None:
    states: PerConversation[Index] = PerConversation(Index, Index.branch)
    newest = Conversation(chat(30))
    assert _visit(states, newest).units_read == 61
    refs = [weakref.ref(newest)]
    for turn in range(6):  # each branched again before its own visit, every time
        parent, newest = newest, newest.branch(-1)
        refs.append(weakref.ref(newest))
        if turn:
            assert _visit(states, parent).units_read == 0  # from its parent's state
    del parent
    gc.collect()
    assert [ref() is not None for ref in refs] == [False] * 4 + [True] * 3


def test_a_branch_chain_made_before_any_visit_keeps_one_back() -> None:
    newest = Conversation(chat(30))
    refs = [weakref.ref(newest)]
    for _ in range(4):  # no state anywhere: nothing to wait for
        newest = newest.branch(-1)
        refs.append(weakref.ref(newest))
    gc.collect()
    assert [ref() is not None for ref in refs] == [False] * 3 + [True] * 2


class Indexing:
    """A strategy keeping a per-conversation index: keeps what must stay."""

    name = "indexing-test"

    def __init__(self) -> None:
        self.states: PerConversation[Index] = PerConversation(Index, Index.branch)
        self.read: list[int] = []

    def choose(self, history: History) -> Selection:
        index = self.states.of(history.conversation)
        before = index.units_read
        index.catch_up(len(history.units))
        self.read.append(index.units_read - before)
        return history.selection()


def test_an_edit_selected_while_the_previous_edit_is_being_published_reads_little(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    strategy = Indexing()
    windower = ctxwindow.Windower(strategy, 300, COUNTER)
    first = chat(200)
    windower.select(first)
    once = [*first[:-2], {"role": "assistant", "content": "edited once"}, first[-1]]
    twice = [*once[:-2], {"role": "assistant", "content": "edited twice"}, first[-1]]
    replace = RecentLists.replace

    def interleaved(self: Any, old: Any, new: Any) -> None:
        replace(self, old, new)
        if not strategy.read[1:]:  # another caller, right after the first edit is published
            monkeypatch.setattr(RecentLists, "replace", replace)
            windower.select(twice)

    monkeypatch.setattr(RecentLists, "replace", interleaved)
    windower.select(once)
    assert strategy.read[0] == len(first)  # the whole history, once
    assert strategy.read[1:] == [2, 2]  # each edit: what it does not share


def test_a_branch_made_before_its_visit_keeps_a_link_back_to_a_viewed_parent() -> None:
    """A strategy that keeps its states in a pool of its own (semantic's indexes,
    summarize's ledgers) leaves nothing in the conversation's states: that the parent
    was viewed is what says a state may be there, so a branch of an unvisited branch
    keeps it as an origin (``origins``, nearest first). With no visit, one link back."""
    first = Conversation(chat(30))
    first.view(COUNTER, 400)
    second = first.branch(-1)
    third = second.branch(-1)  # before the second's first visit
    assert [origin.parent for origin in third.origins] == [second, first]
    second.view(COUNTER, 400)
    fourth = second.branch(-1)  # the second was viewed: its own state may be there
    assert [origin.parent for origin in fourth.origins] == [second]
    unvisited = Conversation(chat(30)).branch(-1)
    assert [origin.parent for origin in unvisited.branch(-1).origins] == [unvisited]
