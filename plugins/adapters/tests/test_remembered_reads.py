"""An adapter remembers what it converted: a framework history that grew by one item
costs converting that item, and gives exactly the window a first read gives."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

import ctxwindow
from ctxwindow_adapters import langchain as adapter
from ctxwindow_adapters._reads import RecentReads, each_item, one_each


def chat(turns: int) -> list[BaseMessage]:
    out: list[BaseMessage] = [SystemMessage("Be brief.")]
    for turn in range(turns):
        out.append(HumanMessage(f"question {turn} " + "word " * 12))
        out.append(AIMessage(f"answer {turn} " + "reply " * 12))
    return out


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The positions the LangChain adapter converts, with a fresh memory of reads."""
    converted: list[int] = []

    def counting(message: Any, index: int) -> ctxwindow.Message:
        converted.append(index)
        return adapter._read(message, index)

    fresh = RecentReads(one_each(counting), adapter._fields)
    monkeypatch.setattr(adapter, "_READS", fresh)
    return converted


def first_read(messages: list[BaseMessage], budget: int) -> list[BaseMessage]:
    """The window with nothing remembered (a new adapter memory and core state)."""
    saved = adapter._READS
    adapter._READS = RecentReads(one_each(adapter._read), adapter._fields)
    try:
        return adapter.select([*messages], budget, "fixed").messages
    finally:
        adapter._READS = saved


def test_a_grown_history_converts_its_new_item_only(reads: list[int]) -> None:
    messages = chat(30)
    adapter.select(messages, 200, "fixed")
    assert len(reads) == len(messages)
    messages.append(HumanMessage("and one more"))
    window = adapter.select(messages, 200, "fixed")
    assert reads[len(messages) - 1 :] == [len(messages) - 1]
    assert [id(m) for m in window.messages] == [id(m) for m in first_read(messages, 200)]
    assert window.messages[-1] is messages[-1]


def test_copies_are_recognised_and_the_window_holds_this_calls_objects(
    reads: list[int],
) -> None:
    messages = chat(30)
    adapter.select(messages, 200, "fixed")
    copies = [m.model_copy() for m in messages]
    window = adapter.select(copies, 200, "fixed")
    assert len(reads) == len(messages)  # nothing converted again
    ids = {id(m) for m in copies}
    assert all(id(m) in ids for m in window.messages)


def _longer_content(message: Any) -> None:
    message.content = "a much longer answer now " * 30


def _a_call_appended(message: Any) -> None:  # the list itself grown, as streaming does
    message.tool_calls.append({"name": "lookup", "args": {"q": "x" * 400}, "id": "call_9"})


def _renamed(message: Any) -> None:
    message.name = "planner"


def _new_id(message: Any) -> None:
    message.id = "run-42"


@pytest.mark.parametrize("change", [_longer_content, _a_call_appended, _renamed, _new_id])
def test_a_message_changed_in_place_is_read_again(reads: list[int], change: Any) -> None:
    messages = chat(30)
    adapter.select(messages, 200, "fixed")
    change(messages[-1])  # the same object, changed
    outcome = _ids_or_error(lambda: adapter.select(messages, 200, "fixed").messages)
    assert len(reads) == 2 * len(messages)  # read whole again
    assert outcome == _ids_or_error(lambda: first_read(messages, 200))  # a call: no result


def _ids_or_error(window: Any) -> Any:
    try:
        return [id(m) for m in window()]
    except ctxwindow.CtxWindowError as error:
        return type(error), str(error)


def test_a_bad_new_item_names_its_position_and_changes_nothing(reads: list[int]) -> None:
    messages = chat(30)
    adapter.select(messages, 200, "fixed")
    with pytest.raises(ctxwindow.InvalidMessage) as raised:
        adapter.select([*messages, "not a message"], 200, "fixed")
    assert raised.value.index == len(messages)
    window = adapter.select([*messages, HumanMessage("fine")], 200, "fixed")
    assert window.messages[-1].content == "fine"


def test_a_named_strategy_is_built_once_and_each_call_has_its_budget() -> None:
    messages = chat(30)
    small = adapter.select(messages, 120, "sliding")
    large = adapter.select(messages, 600, "sliding")
    assert small.tokens <= 120 < large.tokens <= 600
    one = ctxwindow.cached_windower("sliding", 100)
    other = ctxwindow.cached_windower("sliding", 900)
    assert one.strategy is other.strategy and (one.budget, other.budget) == (100, 900)


def test_a_first_read_another_caller_grows_once_published_converts_the_callers_items(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A history read for the first time is published for other callers; one that grows
    it at that moment (another thread, interleaved here) must not lengthen the
    conversion handed to the caller that read it."""

    def read_from(items: Any, start: int, into: Any) -> int:
        for position in range(start, len(items)):
            into.add(ctxwindow.Message("user", str(items[position])), (position,), BOTH)
        return len(items)

    reads = RecentReads(read_from, lambda item: item)
    items = [f"item {n}" for n in range(40)]
    publish = reads.remembered.remember
    grown: list[int] = []

    def published_then_grown(entry: Any) -> None:
        publish(entry)
        if not grown:  # the other caller's read, between publishing and the conversion
            grown.append(0)  # (its own publishing passes straight through)
            grown[0] = len(reads.read([*items, "item 40"]).messages)

    monkeypatch.setattr(reads.remembered, "remember", published_then_grown)
    converted = reads.read(items)
    assert grown == [41]
    assert [m.text for m in converted.messages] == items


def test_a_conversion_handed_out_keeps_its_sources_when_a_later_read_redoes_the_tail() -> None:
    """Conversions share their sources and parts lists (no copy per call): a later call
    that reads the unsettled last item again, into other Messages, must not change what
    an earlier conversion (perhaps still being finished in another thread) reads at its
    positions."""

    def read_from(items: Any, start: int, into: Any) -> int:
        for position in range(start, len(items)):
            if position == len(items) - 1:  # last: one Message for both parts
                into.add(ctxwindow.Message("user", f"{items[position]} whole"), (position,), BOTH)
                continue
            for part in (0, 1):  # followed: a Message per part
                text = f"{items[position]} part {part}"
                into.add(ctxwindow.Message("user", text), (position,), frozenset({part}))
        return len(items) - 1  # the last item reads otherwise once another follows

    reads = RecentReads(read_from, lambda item: item)
    items = [f"item {n}" for n in range(40)]
    earlier = reads.read(items)
    held = [(m.text, earlier.sources[p], earlier.parts[p]) for p, m in enumerate(earlier.messages)]
    assert held[-1] == ("item 39 whole", (39,), BOTH)
    later = reads.read([*items, "item 40"])
    assert [m.text for m in later.messages[-3:]] == [
        "item 39 part 0",
        "item 39 part 1",
        "item 40 whole",
    ]
    assert later.parts[len(earlier.messages) - 1] == frozenset({0})
    assert [
        (m.text, earlier.sources[p], earlier.parts[p]) for p, m in enumerate(earlier.messages)
    ] == held
    assert earlier.split == dict.fromkeys(range(40), 2)
    assert later.split == dict.fromkeys(range(41), 2)


BOTH = frozenset({0, 1})


def test_the_conversation_holds_the_messages_and_branches_where_they_are_read_again() -> None:
    """The Conversation the runner windows is the conversion's Messages, no more, no
    fewer: grown by the new ones, and branched before those read again (the last
    item's Message, replaced by one per part once another item follows)."""

    def read_from(items: Any, start: int, into: Any) -> int:
        for position in range(start, len(items)):
            text = f"{items[position]} {'last' if position == len(items) - 1 else 'settled'}"
            into.add(ctxwindow.Message("user", text), (position,))
        return len(items) - 1

    reads = RecentReads(read_from, lambda item: item)
    items = [f"item {n}" for n in range(40)]
    first = reads.read(items)
    assert first.conversation is not None
    assert first.conversation.originals == list(first.messages)
    later = reads.read([*items, "item 40"])
    assert later.conversation is not None
    assert later.conversation.originals == list(later.messages)
    assert [m.text for m in later.messages[-2:]] == ["item 39 settled", "item 40 last"]
    assert later.conversation.branched_from is not None  # not read again from the start
    assert first.conversation.originals[-1].text == "item 39 last"  # what it held, still


def test_a_grown_history_is_windowed_as_its_conversation_not_a_list_the_core_compares(
    reads: list[int],
) -> None:
    """The runner is given the conversion's Conversation: the core remembers no list of
    the adapter's and counts the new Message alone."""
    from ctxwindow._recent import RECENT

    RECENT.clear()
    messages = chat(30)
    counted: list[str] = []

    class Counting(ctxwindow.ApproxCounter):
        def count_message(self, message: Any) -> int:
            counted.append(getattr(message, "text", ""))
            return int(super().count_message(message))

    windower = ctxwindow.Windower(ctxwindow.get_strategy("fixed"), 200, Counting())
    adapter.select(messages, windower=windower)
    messages.append(HumanMessage("and one more"))
    del counted[:]
    window = adapter.select(messages, windower=windower)
    assert counted == ["and one more"]
    assert len(RECENT) == 0
    assert window.messages[-1] is messages[-1]


def test_a_call_whose_conversation_grew_meanwhile_windows_its_own_messages() -> None:
    """Two calls on one history: the later (another thread's) grows the shared
    Conversation before the earlier is windowed; the earlier still windows its own
    items, as a first read does."""
    from ctxwindow_adapters._bridge import Call

    saved = adapter._READS
    adapter._READS = RecentReads(one_each(adapter._read), adapter._fields)
    try:
        messages = chat(30)
        earlier = adapter.read_messages(messages)
        grown = [*messages, HumanMessage("a later question")]
        adapter.read_messages(grown)
        assert earlier.conversation is not None and len(earlier.conversation) > len(messages)
        windower = ctxwindow.cached_windower("fixed", 200)
        window = Call(windower, earlier, adapter.SHAPE).select()
    finally:
        adapter._READS = saved
    assert window.record.messages_before == len(messages)
    assert [id(m) for m in window.messages] == [id(m) for m in first_read(messages, 200)]


def test_remember_histories_raises_the_adapters_bound_too(monkeypatch: Any) -> None:
    """``ctxwindow.remember_histories`` (what ``ctxwindow serve``'s ``histories`` sets)
    bounds an adapter's remembered conversions as it does the core's: 40 conversations
    windowed in turn are each recognised when they grow, and 1 bounds them again."""
    from ctxwindow_adapters import anthropic

    read: list[int] = []

    def counting(item: Any, position: int) -> Any:
        read.append(position)
        return anthropic._pieces(item, position)

    monkeypatch.setattr(
        anthropic, "_READS", RecentReads(each_item(counting), anthropic._content_of)
    )
    chats = [
        [{"role": "user" if n % 2 == 0 else "assistant", "content": f"chat {c} turn {n}"}
         for n in range(41)]
        for c in range(40)
    ]  # fmt: skip
    before = ctxwindow.remember_histories(40, 250_000)
    try:
        for chat in chats:
            anthropic.select(chat, 10_000)
        for chat in chats:
            chat += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
            del read[:]
            anthropic.select(chat, 10_000)
            assert read == [41, 42]  # only what it added
        ctxwindow.remember_histories(1, 250_000)
        anthropic.select(chats[0], 10_000)
        assert len(anthropic._READS.remembered) == 1
    finally:
        ctxwindow.remember_histories(*before)


def test_a_summarys_covers_are_named_in_the_callers_items_once_per_summary(
    reads: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A summary stands for thousands of items turn after turn with the same covers:
    naming each of its references in the caller's items again cost a warm turn the
    history (29 ms at 10,000 messages). Named once, a turn that grew by a message names
    none, and the window is the one a first read gives."""
    from ctxwindow_adapters import _bridge

    named: list[object] = []
    covered_position = _bridge._covered_position

    def counting(ref: object, size: int) -> int | None:
        named.append(ref)
        return covered_position(ref, size)

    monkeypatch.setattr(_bridge, "_covered_position", counting)
    history = chat(400)
    adapter.select(history, 600, "summarize")
    history.append(HumanMessage("one more question"))
    named.clear()
    window = adapter.select(history, 600, "summarize")
    (summary,) = [m for m in window.messages if "ctxwindow" in m.response_metadata]
    assert len(summary.response_metadata["ctxwindow"]["covers"]) > 500
    assert len(named) < 10, len(named)
    monkeypatch.setattr(adapter, "_READS", RecentReads(one_each(adapter._read), adapter._fields))
    assert adapter.select(history, 600, "summarize").messages == window.messages
