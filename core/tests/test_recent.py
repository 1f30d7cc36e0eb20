"""The one-call API remembers: windowers by configuration, histories by content.

Every test compares what a remembered visit gives with what a fresh read of the same
list gives (a new Conversation), so that remembering can save work but never change a
window; and counts the messages read, to show that the saving is real.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxwindow
from ctxwindow import Conversation, Windower
from ctxwindow._history import _content_of
from ctxwindow._recent import RECENT, RecentHistories
from ctxwindow.errors import InvalidMessage
from ctxwindow.kit._prefixes import CHECKED, REMEMBER_FROM, RecentLists, starts_with
from ctxwindow.testing.conversations import agent_loop
from ctxwindow.testing.strategies import Newest


@pytest.fixture(autouse=True)
def _forget() -> None:
    RECENT.clear()


def chat(turns: int, words: int = 10) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for turn in range(turns):
        out.append({"role": "user", "content": f"question {turn} " + "word " * words})
        out.append({"role": "assistant", "content": f"answer {turn} " + "reply " * words})
    return out


def fresh(messages: list[Any], budget: int, counter: Any = None) -> ctxwindow.Window[Any]:
    """The window a first read of ``messages`` gives (nothing remembered)."""
    return Windower(Newest(), budget, counter).select(Conversation(list(messages)))


def same_window(got: ctxwindow.Window[Any], want: ctxwindow.Window[Any]) -> None:
    assert got.messages == want.messages
    assert got.tokens == want.tokens
    assert [(d.action, d.reason, d.positions) for d in got.record.decisions] == [
        (d.action, d.reason, d.positions) for d in want.record.decisions
    ]


def test_a_grown_history_costs_its_new_messages(counting: Any) -> None:
    history = chat(40)
    ctxwindow.select(history, 300, "newest", counter=counting)
    read = counting.calls
    assert read >= len(history)
    history.append({"role": "user", "content": "and one more"})
    window = ctxwindow.select(history, 300, "newest", counter=counting)
    assert counting.calls - read == 1  # the new message, not the history
    same_window(window, fresh(history, 300))
    assert all(any(kept is m for m in history) for kept in window.messages)


def test_a_grown_list_of_dicts_has_its_contents_read_in_one_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The newest contents of a list of dicts are read at C speed, as a batch, not one
    message at a time (a Python call per message: 70 microseconds a turn at CHECKED)."""
    import ctxwindow._recent as recent

    one_at_a_time: list[Any] = []
    per_message = recent._content_of

    def counted(message: Any) -> Any:
        one_at_a_time.append(message)
        return per_message(message)

    monkeypatch.setattr(recent, "_content_of", counted)
    history = chat(300)
    ctxwindow.select(history, 300, "newest")
    history.append({"role": "user", "content": "and one more"})
    window = ctxwindow.select(history, 300, "newest")
    same_window(window, fresh(copy.deepcopy(history), 300))
    history[-2]["content"] = "an answer streamed into its dict"  # read again: a branch
    edited = ctxwindow.select(history, 300, "newest")
    same_window(edited, fresh(history, 300))
    assert one_at_a_time == []


def test_a_branch_of_an_equal_list_holds_the_callers_objects_from_then_on() -> None:
    """A list that shares an older list's prefix by value (equal dicts, other objects)
    is read as a branch of it; the branch then holds the caller's objects, so the turns
    after compare by identity, not each message by value (5 ms a turn at 100,000)."""
    older = chat(300)
    ctxwindow.select([*older, {"role": "user", "content": "first path"}], 300, "newest")
    mine = [*copy.deepcopy(older), {"role": "user", "content": "another path"}]
    window = ctxwindow.select(mine, 300, "newest")
    same_window(window, fresh(mine, 300))
    (entry,) = [e for e in RECENT.remembered.candidates(mine) if len(e.originals) == len(mine)]
    assert entry.conversation.branched_from is not None  # read as a branch, not whole
    assert all(held is given for held, given in zip(entry.originals, mine, strict=True))
    mine.append({"role": "assistant", "content": "and on"})
    same_window(ctxwindow.select(mine, 300, "newest"), fresh(mine, 300))


def test_rebuilt_dicts_are_recognised_and_come_back_as_the_callers_objects(
    counting: Any,
) -> None:
    history = chat(40)
    ctxwindow.select(history, 300, "newest", counter=counting)
    read = counting.calls
    rebuilt = copy.deepcopy(history)  # say, read again from JSON
    rebuilt.append({"role": "user", "content": "next"})
    window = ctxwindow.select(rebuilt, 300, "newest", counter=counting)
    assert counting.calls - read == 1
    ids = {id(m) for m in rebuilt}
    assert all(id(m) in ids for m in window.messages)  # this call's objects, not the first's
    same_window(window, fresh(rebuilt, 300))


@pytest.mark.parametrize("where", ["system", "newest", "pinned", "task"])
def test_content_edited_in_place_where_apps_edit_is_read_again(where: str) -> None:
    history = chat(CHECKED)  # the task statement is older than the newest CHECKED
    history[5]["metadata"] = {"pinned": True}
    ctxwindow.select(history, 400, "newest")
    position = {"system": 0, "newest": len(history) - 1, "pinned": 5, "task": 1}[where]
    history[position]["content"] = "much longer now " * 40  # the same dict, changed
    window = ctxwindow.select(history, 400, "newest")
    same_window(window, fresh(history, 400))
    assert window.tokens <= 400


class SdkMessage:
    """What an SDK gives back (the openai SDK's ChatCompletionMessage, say): an object
    whose ``content`` the app may change in place, as it does a dict's."""

    def __init__(self, role: str, content: Any) -> None:
        self.role, self.content = role, content

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return {"role": self.role, "content": self.content}

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__


@pytest.mark.parametrize("where", ["system", "newest"])
def test_an_sdk_object_edited_in_place_is_read_again(where: str) -> None:
    """A history holding an SDK object was compared by value alone: the object equals
    itself after an edit, so the window came from the old read, over the budget."""
    history: list[Any] = chat(40)
    position = {"system": 0, "newest": len(history) - 1}[where]
    history[position] = SdkMessage(history[position]["role"], history[position]["content"])
    ctxwindow.select(history, 400, "newest")
    history[position].content = "much longer now " * 40  # the same object, changed
    window = ctxwindow.select(history, 400, "newest")
    same_window(window, fresh(history, 400))
    assert window.tokens <= 400


@pytest.mark.parametrize("edit", ["part appended", "part text streamed into"])
def test_a_content_list_edited_in_place_is_read_again(edit: str) -> None:
    """A list content was compared with itself (the remembered reference): a part
    appended to it, or text streamed into a part, went unseen."""
    history = chat(40)
    parts = [{"type": "text", "text": "short"}]
    history.append({"role": "assistant", "content": parts})
    conversation = Conversation(history)
    windower = Windower(Newest(), 400)
    windower.select(conversation)
    ctxwindow.select(history, 400, "newest")
    if edit == "part appended":
        parts.append({"type": "text", "text": "much longer now " * 40})
    else:
        parts[0]["text"] += " much longer now" * 40
    same_window(ctxwindow.select(history, 400, "newest"), fresh(history, 400))
    same_window(windower.select(conversation), fresh(history, 400))


def test_a_replaced_message_anywhere_is_seen() -> None:
    history = chat(40)
    ctxwindow.select(history, 300, "newest")
    history[3] = {"role": "user", "content": "a different question " * 30}
    same_window(ctxwindow.select(history, 300, "newest"), fresh(history, 300))


def test_a_comparison_leaves_the_remembered_list_as_it_was() -> None:
    """``starts_with`` compares a grown list with the remembered one by growing the
    remembered list for the moment (a slice of the grown one would touch every
    message): whether the two match or not, it is as it was afterwards, so a history
    grown turn after turn holds each message once."""
    history = chat(40)
    ctxwindow.select(history, 300, "newest")
    (entry,) = RECENT.remembered._entries.values()
    remembered = entry.originals
    before = list(remembered)
    history.append({"role": "user", "content": "one more"})
    changed = [*history[:5], {"role": "user", "content": "not the same"}, *history[6:]]
    for listed, matches in ((changed, False), (history, True)):
        assert starts_with(listed, entry, _content_of) is matches
        assert len(remembered) == len(before)
        assert all(a is b for a, b in zip(remembered, before, strict=True))
    for _ in range(3):  # grown and windowed turn after turn: each message once
        history.append({"role": "user", "content": f"and {len(history)}?"})
        same_window(ctxwindow.select(history, 300, "newest"), fresh(history, 300))
        assert len(entry.originals) == len(history)
        assert all(a is b for a, b in zip(entry.originals, history, strict=True))


def test_a_list_is_not_taken_for_an_earlier_read_its_own_ends_refused() -> None:
    """An old message edited in place (not seen once it is past the newest CHECKED of
    a list that starts with it: replace it with a new dict) is held as it is now by a
    list read whole since. A list that ends with the very objects of both, refused by
    that one (an item near its end stood in for), is read as a branch of it, not taken
    as a growth of the shorter list read before the edit: the window a fresh read
    gives, within the budget."""
    history = chat(210, words=1)  # 421 short messages: a budget of 5,000 holds them all
    select = lambda items: ctxwindow.select(items, 5_000, "newest")  # noqa: E731
    select(history[:300])
    history[10]["content"] = "edited in place " + "big " * 5_000
    earlier = history[:380]
    earlier[200] = {**history[200], "content": "a passing edit"}
    select(earlier)  # refused by the first list, and parts from it too early: read whole
    given = history[:400]
    given[370] = {**history[370], "content": "edited near the end"}
    window = select(given)
    same_window(window, fresh(given, 5_000))
    assert window.tokens <= 5_000


def test_an_old_message_replaced_beyond_the_checked_tail_is_seen() -> None:
    history = chat(CHECKED)  # longer than the tail whose contents are checked
    ctxwindow.select(history, 300, "newest")
    history[10] = {**history[10], "metadata": {"pinned": True}}  # same content, now pinned
    window = ctxwindow.select(history, 300, "newest")
    same_window(window, fresh(history, 300))
    assert any(m is history[10] for m in window.messages)


def test_shorter_and_branched_histories_give_what_a_fresh_read_gives() -> None:
    history = chat(40)
    ctxwindow.select(history, 300, "newest")
    shorter = history[:-3]
    same_window(ctxwindow.select(shorter, 300, "newest"), fresh(shorter, 300))
    branch = [*history[:-1], {"role": "assistant", "content": "another answer"}]
    same_window(ctxwindow.select(branch, 300, "newest"), fresh(branch, 300))
    same_window(ctxwindow.select(history, 300, "newest"), fresh(history, 300))


def test_an_agent_history_whose_results_arrive_later() -> None:
    history = agent_loop(20, pending=False)
    history.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "late", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        }
    )
    first = ctxwindow.select(history, 600, "newest", orphans="drop")
    assert first.record.messages_before == len(history)
    history.append({"role": "tool", "tool_call_id": "late", "content": "arrived"})
    same_window(ctxwindow.select(history, 600, "newest"), fresh(history, 600))


def test_an_invalid_new_message_names_its_position_and_changes_nothing() -> None:
    history = chat(40)
    ctxwindow.select(history, 300, "newest")
    bad = [*history, {"role": "user"}]
    with pytest.raises(InvalidMessage) as raised:
        ctxwindow.select(bad, 300, "newest")
    assert raised.value.index == len(history)
    same_window(ctxwindow.select(history, 300, "newest"), fresh(history, 300))


def test_short_histories_are_not_remembered() -> None:
    ctxwindow.select(chat(3), 300, "newest")
    assert len(RECENT) == 0
    assert REMEMBER_FROM > 7


def test_the_memory_is_bounded_by_histories_and_by_messages() -> None:
    recent = RecentHistories()
    recent.remembered = RecentLists(lists=2, items=300)
    counter = ctxwindow.ApproxCounter()
    for turns in (20, 21, 22):  # three histories, none extending another
        recent.view([{"role": "user", "content": f"start {turns}"}, *chat(turns)], counter, 100,
                    None, task_statement=False)  # fmt: skip
    assert len(recent) == 2
    grown = [{"role": "user", "content": "start 22"}, *chat(22), *chat(1)]
    recent.view(grown, counter, 100, None, task_statement=False)
    assert len(recent) == 2  # recognised: grown, not added
    recent.view(chat(200), counter, 100, None, task_statement=False)  # alone past the bound
    assert len(recent) <= 1


def test_a_windower_is_built_once_per_configuration(ctxwindow_register: Any) -> None:
    built: list[object] = []

    class Counted(Newest):
        name = "counted"

        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            built.append(self)

    ctxwindow_register(Counted, name="counted-plugin")
    history = chat(10)
    for budget in (100, 200, 100):
        window = ctxwindow.select(history, budget, "counted")
        assert window.record.budget == budget and window.tokens <= budget
    assert len(built) == 1
    ctxwindow.select(history, 100, "counted", counter=ctxwindow.ApproxCounter())
    assert len(built) == 2  # an object in the configuration: built for the call
    ctxwindow.select(history, 100, "counted", time_limit=1)
    ctxwindow.select(history, 100, "counted", time_limit=1.0)
    assert len(built) == 4  # equal values of other types are other configurations
    with pytest.raises(ctxwindow.InvalidOption):
        ctxwindow.select(history, 100, "counted", time_limit=True)


def test_concurrent_callers_growing_shared_and_separate_histories() -> None:
    base = chat(40)
    failures: list[str] = []

    def worker(number: int) -> None:
        history = copy.deepcopy(base)  # equal to every other worker's at first
        for turn in range(15):
            history.append({"role": "user", "content": f"worker {number} turn {turn}"})
            window = ctxwindow.select(history, 300, "newest")
            want = fresh(history, 300)
            if window.messages != want.messages:
                failures.append(f"worker {number} turn {turn}")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


@pytest.mark.parametrize("publish", ["remember", "replace"])
def test_a_history_another_caller_grows_once_published_is_viewed_at_the_callers_length(
    publish: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A history read whole (``remember``) or into a branch (``replace``) is published
    for other callers; one that grows it at that moment (another thread, interleaved
    here) must not lengthen the view of the caller that published it."""
    recent = RecentHistories()
    counter = ctxwindow.ApproxCounter()
    base = chat(20)
    assert len(base) >= REMEMBER_FROM
    if publish == "replace":  # remembered first, so that an edited newest message branches
        recent.view(base, counter, 400, None, task_statement=True)
        given = [*base[:-1], {"role": "assistant", "content": "a different last answer"}]
    else:
        given = base
    longer = [*given, {"role": "user", "content": "asked by the other caller"}]
    published = getattr(recent.remembered, publish)
    grown: list[int] = []

    def published_then_grown(*entries: Any) -> None:
        published(*entries)
        if not grown:  # the other caller's visit, between publishing and the view
            grown.append(0)  # (its own publishing passes straight through)
            grown[0] = len(recent.view(longer, counter, 400, None, task_statement=True))

    monkeypatch.setattr(recent.remembered, publish, published_then_grown)
    history = recent.view(given, counter, 400, None, task_statement=True)
    assert grown == [len(longer)]
    assert len(history) == len(given)
    assert [message.content for message in history.messages] == [m["content"] for m in given]


EDITS = st.lists(
    st.sampled_from(["append", "append_many", "rebuild", "truncate", "edit_newest", "replace"]),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=EDITS, budget=st.integers(60, 600), seed=st.integers(0, 10_000))
def test_any_sequence_of_edits_gives_what_a_fresh_read_gives(
    edits: list[str], budget: int, seed: int
) -> None:
    RECENT.clear()
    history = chat(20)
    for step, edit in enumerate(edits):
        text = f"step {step} seed {seed} " + "x " * (seed % 37)
        if edit == "append":
            history.append({"role": "user", "content": text})
        elif edit == "append_many":
            history.extend(agent_loop(2, result_words=seed % 20)[1:])
        elif edit == "rebuild":
            history = copy.deepcopy(history)
        elif edit == "truncate":
            history = history[: max(REMEMBER_FROM, len(history) - 1 - seed % 5)]
        elif edit == "edit_newest":
            history[-1]["content"] = text * 3
        else:
            history[seed % len(history)] = {"role": "assistant", "content": text}
        try:
            want = fresh(history, budget)
        except ctxwindow.CtxWindowError as error:
            with pytest.raises(type(error)):
                ctxwindow.select(history, budget, "newest")
            continue
        same_window(ctxwindow.select(history, budget, "newest"), want)


def test_checked_covers_the_newest_messages() -> None:
    assert CHECKED >= 64


def test_remember_histories_bounds_how_many_are_kept_and_gives_back_the_old_bounds(
    counting: Any,
) -> None:
    before = ctxwindow.remember_histories(2, 10_000)
    try:
        assert before == (32, 250_000)
        chats = [chat(20, words=turn + 1) for turn in range(3)]
        for history in chats:
            ctxwindow.select(history, 300, "newest", counter=counting)
        assert len(RECENT) == 2  # the least recently used forgotten
        read = counting.calls
        ctxwindow.select(
            [*chats[2], {"role": "user", "content": "more"}], 300, "newest", counter=counting
        )
        assert counting.calls - read == 1  # still remembered: only the new message read
        assert not list(RECENT.remembered.candidates(chats[0]))  # forgotten: read whole next time
        assert ctxwindow.remembered_histories() == (2, 10_000)  # what plugins follow
        assert ctxwindow.remember_histories(1, 10_000) == (2, 10_000)
        assert len(RECENT) == 1  # shrinking forgets at once
    finally:
        ctxwindow.remember_histories(*before)
    assert ctxwindow.remembered_histories() == before


@pytest.mark.parametrize("bad", [-1, 2.5, True, "8"])
def test_remember_histories_refuses_what_is_not_a_count(bad: Any) -> None:
    with pytest.raises(ctxwindow.InvalidOption, match="whole number"):
        ctxwindow.remember_histories(bad)


class _Counted:
    """An item whose comparisons by value are counted (an SDK model's ``__eq__`` costs
    microseconds)."""

    compared = 0

    def __init__(self, value: int) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        _Counted.compared += 1
        return isinstance(other, _Counted) and other.value == self.value

    __hash__ = None  # type: ignore[assignment]


class _Held:
    """A remembered list of items that cannot be edited in place."""

    def __init__(self, originals: list[Any]) -> None:
        self.originals = originals
        self.contents = None


def test_a_list_that_grew_is_found_before_any_list_is_compared_by_value() -> None:
    """The remembered lists whose ends are the given list's very objects come first,
    longest first, none compared by value; then the lists equal by value, longest first."""
    items = [_Counted(value) for value in range(40)]
    longer, shorter = _Held(items[:30]), _Held(items[:10])
    equal = _Held([_Counted(value) for value in range(35)])  # longer than either
    unlike = _Held([_Counted(100 + value) for value in range(20)])
    lists: RecentLists[_Held] = RecentLists()
    for held in (shorter, equal, unlike, longer):
        lists.remember(held)
    _Counted.compared = 0
    found = lists.candidates(items)
    assert next(found) is longer
    assert next(found) is shorter
    assert _Counted.compared == 0
    assert list(found) == [equal]
