"""A remembered conversion's Conversation, handed out and then branched by a later call
before its own visit made its state (the newest items are read again on each call):
its visit still starts from the state of the conversation it was branched from, not
from nothing (the whole history read again)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxwindow import Branch, Conversation, Message
from ctxwindow.kit import REMEMBER_FROM, PerConversation
from ctxwindow_adapters._bridge import Converted
from ctxwindow_adapters._reads import RecentReads


def _read_from(items: Sequence[Any], start: int, into: Converted[Any]) -> int:
    """Each item read whole; the last may read otherwise once more items follow."""
    for position in range(start, len(items)):
        item = items[position]
        into.add(Message(role=item["role"], content=item["content"]), (position,))
    return len(items) - 1


def _chat(size: int) -> list[dict[str, str]]:
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": f"message {i}"} for i in range(size)]


class Index:
    """A per-conversation state: how many units it read, and how many it read itself."""

    def __init__(self, read: int = 0) -> None:
        self.read = read
        self.own = 0

    def branch(self, conversation: Conversation, origin: Branch) -> Index:
        return Index(min(self.read, origin.units))

    def visit(self, conversation: Conversation) -> Index:
        units = len(conversation)  # one unit per message here
        self.own, self.read = units - self.read, units
        return self


def test_a_conversion_branched_again_before_its_visit_starts_from_its_parent() -> None:
    reads: RecentReads[Any] = RecentReads(_read_from, lambda item: item["content"])
    states: PerConversation[Index] = PerConversation(Index, Index.branch)
    items = _chat(REMEMBER_FROM + 20)
    first = reads.read(items).conversation
    assert first is not None
    assert states.of(first).visit(first).own == len(items)
    second = reads.read([*items, *_chat(1)]).conversation
    third = reads.read([*items, *_chat(2)]).conversation  # before the second's visit
    assert second is not None and third is not None and second is not first
    assert third.branched_from is not None and third.branched_from.parent is second
    assert states.of(second).visit(second).own == 2  # the item read again, and the new
