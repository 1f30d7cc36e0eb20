"""Conversions an adapter made before, recognised by content, so that a framework's
history that grew by one item costs converting that item, not the history.

For readers that make one Message per item, independently of the others (LangChain's):
a list that starts with a remembered one (equal items, and the same content in the
newest ones, see :func:`ctxwindow.kit.starts_with`) reuses its Messages and converts
the rest; the Messages being the same objects as last time, the runner then recognises
the history at once too. Anything else is converted whole and remembered in turn.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from ctxwindow import Message
from ctxwindow.kit import REMEMBER_FROM, RecentLists, starts_with
from ctxwindow_adapters._bridge import Converted

T = TypeVar("T")


class _Read:
    """One remembered conversion: the items, their contents and Messages as read."""

    __slots__ = ("contents", "lock", "messages", "originals", "sources", "where")

    def __init__(self) -> None:
        self.originals: list[Any] = []
        self.contents: list[Any] | None = []
        self.messages: list[Message] = []
        self.sources: list[tuple[int, ...]] = []
        self.where: dict[int, int] = {}
        self.lock = threading.Lock()

    def extend(
        self,
        items: Sequence[Any],
        read_one: Callable[[Any, int], Message],
        content: Callable[[Any], Any],
    ) -> None:
        """Convert and add ``items`` (all, or none: a bad one raises, naming its index)."""
        start = len(self.originals)
        read = [read_one(item, position) for position, item in enumerate(items, start)]
        self.originals.extend(items)
        if self.contents is not None:
            self.contents.extend(map(content, items))
        self.messages.extend(read)
        self.sources.extend((position,) for position in range(start, start + len(read)))
        self.where.update((id(message), p) for p, message in enumerate(read, start))

    def converted(self, items: Sequence[T]) -> Converted[T]:
        """The caller's ``items`` with the Messages read for them (copies of the lists:
        a later call may grow this conversion)."""
        size = len(items)
        return Converted(
            items,
            self.messages[:size],
            self.sources[:size],
            [None] * size,
            where=self.where,
        )


class RecentReads(Generic[T]):
    """The conversions one adapter made (see the module docstring)."""

    def __init__(
        self, read_one: Callable[[Any, int], Message], content: Callable[[Any], Any]
    ) -> None:
        self._read_one = read_one
        self._content = content
        self.remembered: RecentLists[_Read] = RecentLists()

    def read(self, items: Sequence[T]) -> Converted[T]:
        given = list(items)
        if len(given) >= REMEMBER_FROM:
            for entry in self.remembered.candidates(given):
                with entry.lock:
                    if not starts_with(given, entry, self._content):
                        continue
                    entry.extend(given[len(entry.originals) :], self._read_one, self._content)
                    converted = entry.converted(given)
                self.remembered.remember(entry)
                return converted
        entry = _Read()
        entry.extend(given, self._read_one, self._content)
        if len(given) >= REMEMBER_FROM:
            self.remembered.remember(entry)
        return entry.converted(given)
