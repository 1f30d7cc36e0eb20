"""An adapter remembers what it converted: a framework history that grew by one item
costs converting that item, and gives exactly the window a first read gives."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

import ctxwindow
from ctxwindow_adapters import langchain as adapter
from ctxwindow_adapters._reads import RecentReads, one_each


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


def test_a_message_changed_in_place_is_read_again(reads: list[int]) -> None:
    messages = chat(30)
    adapter.select(messages, 200, "fixed")
    messages[-1].content = "a much longer answer now " * 30  # the same object, changed
    window = adapter.select(messages, 200, "fixed")
    assert len(reads) == 2 * len(messages)  # read whole again
    assert window.tokens <= 200
    assert [id(m) for m in window.messages] == [id(m) for m in first_read(messages, 200)]


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
