"""Conversions an adapter made before, recognised by content, so that a framework's
history that grew by one item costs converting that item, not the history.

For readers that convert each item on its own, into one Message (LangChain's) or a few
(Anthropic's user message holding tool results and text): a list that starts with a
remembered one (equal items, and the same content in the newest ones, see
:func:`ctxwindow.kit.starts_with`) reuses its Messages and converts the rest; the
Messages being the same objects as last time, the runner then recognises the history at
once too. Anything else is converted whole and remembered in turn.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ctxwindow import Message
from ctxwindow.kit import REMEMBER_FROM, RecentLists, starts_with
from ctxwindow_adapters._bridge import Converted

T = TypeVar("T")

#: One Message read from an item: the Message, the items it stands for (none for a
#: message outside the list, such as Anthropic's ``system``), and the item's parts it
#: holds (None: the whole item).
Piece = tuple[Message, tuple[int, ...], "frozenset[int] | None"]
#: Reads the item at a position of the list into its pieces (or raises InvalidMessage).
ReadItem = Callable[[Any, int], Sequence[Piece]]


def one_each(read: Callable[[Any, int], Message]) -> ReadItem:
    """A reader of one whole Message per item, as a :data:`ReadItem`."""

    def read_item(item: Any, position: int) -> Sequence[Piece]:
        return ((read(item, position), (position,), None),)

    return read_item


class _Read:
    """One remembered conversion: the items, their contents and Messages as read."""

    __slots__ = (
        "contents",
        "ends",
        "lock",
        "messages",
        "originals",
        "parts",
        "sources",
        "split",
        "where",
    )

    def __init__(self) -> None:
        self.originals: list[Any] = []
        self.contents: list[Any] | None = []
        self.messages: list[Message] = []
        self.sources: list[tuple[int, ...]] = []
        self.parts: list[frozenset[int] | None] = []
        self.split: dict[int, int] = {}
        self.ends: list[int] = []  # after each item, how many Messages
        self.where: dict[int, int] = {}
        self.lock = threading.Lock()

    def extend(
        self, items: Sequence[Any], read_item: ReadItem, content: Callable[[Any], Any]
    ) -> None:
        """Convert and add ``items`` (all, or none: a bad one raises, naming its index)."""
        start = len(self.originals)
        read = [read_item(item, position) for position, item in enumerate(items, start)]
        self.originals.extend(items)
        if self.contents is not None:
            self.contents.extend(map(content, items))
        for pieces in read:
            for message, sources, parts in pieces:
                self.where[id(message)] = len(self.messages)
                self.messages.append(message)
                self.sources.append(sources)
                self.parts.append(parts)
                if parts is not None:
                    (item,) = sources
                    self.split[item] = self.split.get(item, 0) + len(parts)
            self.ends.append(len(self.messages))

    def converted(self, items: Sequence[T]) -> Converted[T]:
        """The caller's ``items`` with the Messages read for them (copies of the lists:
        a later call may grow this conversion)."""
        stop = self.ends[-1] if self.ends else 0
        return Converted(
            items,
            self.messages[:stop],
            self.sources[:stop],
            self.parts[:stop],
            dict(self.split),
            where=self.where,
        )


class RecentReads(Generic[T]):
    """The conversions one adapter made (see the module docstring)."""

    def __init__(self, read_item: ReadItem, content: Callable[[Any], Any]) -> None:
        self._read_item = read_item
        self._content = content
        self.remembered: RecentLists[_Read] = RecentLists()

    def read(self, given: Sequence[Any], items: Sequence[T] | None = None) -> Converted[T]:
        """The Messages of ``given``, for the caller's ``items`` (by default ``given``
        itself; else the list the sources of the pieces index, such as ``given`` without
        a leading stand-in for a ``system`` outside it)."""
        given = list(given)
        out: Sequence[Any] = given if items is None else items
        if len(given) >= REMEMBER_FROM:
            for entry in self.remembered.candidates(given):
                with entry.lock:
                    if not starts_with(given, entry, self._content):
                        continue
                    entry.extend(given[len(entry.originals) :], self._read_item, self._content)
                    converted = entry.converted(out)
                self.remembered.remember(entry)
                return converted
        entry = _Read()
        entry.extend(given, self._read_item, self._content)
        if len(given) >= REMEMBER_FROM:
            self.remembered.remember(entry)
        return entry.converted(out)
