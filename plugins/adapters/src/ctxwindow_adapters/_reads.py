"""Conversions an adapter made before, recognised by content, so that a framework's
history that grew by one item costs converting that item, not the history.

A list that starts with a remembered one (equal items, and the same content in the
newest ones, see :func:`ctxwindow.kit.starts_with`) reuses its Messages and converts the
rest. The Messages are kept in a :class:`~ctxwindow.Conversation`, grown by the new ones
and windowed as it is: the runner neither compares the Message list with the histories
it remembers nor reads it again. Anything else is converted whole and remembered in turn.

Most items read the same whatever follows them; a reader says from which item on that
is not yet so (a Responses API run of model output that the next item may continue,
pydantic-ai's last request, pinned while it is last), and those items are read again
on the next call, with the new ones.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from ctxwindow import Conversation, Message, remembered_histories
from ctxwindow.kit import REMEMBER_FROM, RecentLists, starts_with
from ctxwindow_adapters._bridge import Converted, MadeCovers, Prefix

T = TypeVar("T")

#: One Message read from an item: the Message, the items it stands for (none for a
#: message outside the list, such as Anthropic's ``system``), and the item's parts it
#: holds (None: the whole item).
Piece = tuple[Message, tuple[int, ...], "frozenset[int] | None"]
#: Reads the item at a position of the list into its pieces (or raises InvalidMessage).
ReadItem = Callable[[Any, int], Sequence[Piece]]
#: ``read_from(items, start, into)`` reads ``items[start:]`` (positions in ``items``)
#: into ``into`` and returns the first item whose Messages may read otherwise once more
#: items follow (``len(items)`` when none may): it and those after are read again.
ReadFrom = Callable[[Sequence[Any], int, Converted[Any]], int]


def each_item(read_item: ReadItem) -> ReadFrom:
    """A reader of each item on its own, as a :data:`ReadFrom`."""

    def read_from(items: Sequence[Any], start: int, into: Converted[Any]) -> int:
        for position in range(start, len(items)):
            for message, sources, parts in read_item(items[position], position):
                into.add(message, sources, parts)
        return len(items)

    return read_from


def one_each(read: Callable[[Any, int], Message]) -> ReadFrom:
    """A reader of one whole Message per item, as a :data:`ReadFrom`."""
    return each_item(lambda item, position: ((read(item, position), (position,), None),))


class _Read:
    """One remembered conversion: the items and their contents as read, the Messages
    read from them, and how many items (and their Messages) read the same for good."""

    __slots__ = (
        "checked", "contents", "conversation", "first_user", "lock", "made_covers",
        "originals", "read", "settled", "settled_messages",
    )  # fmt: skip

    def __init__(self) -> None:
        self.originals: list[Any] = []
        self.contents: list[Any] | None = []
        self.read: Converted[Any] = Converted([], where={})
        #: The Messages read, grouped and counted as a history: the runner windows it,
        #: so a call costs what the items added (it branches where they are read again).
        self.conversation = Conversation()
        self.settled = 0
        self.settled_messages = 0
        #: The items apps edit in place wherever they are (a system prompt refreshed,
        #: the task statement reworded, a pinned message): compared on every call, as
        #: the newest are (positions of the items the pieces' sources name).
        self.checked: set[int] = set()
        self.first_user: int | None = None
        #: What summaries' covers named in the caller's items (see Converted.made_covers).
        self.made_covers: MadeCovers = {}
        self.lock = threading.Lock()

    def extend(
        self, items: Sequence[Any], read_from: ReadFrom, content: Callable[[Any], Any]
    ) -> None:
        """Convert ``items`` past the settled ones (all, or none: a bad one raises,
        naming its index, and leaves this conversion as it was)."""
        fresh: Converted[Any] = Converted(items)
        settled = read_from(items, self.settled, fresh)
        read = self.read
        read.truncate(self.settled_messages)
        if len(read.where or ()) > 2 * len(read.messages) + 64:  # stale entries: start anew
            read.where = {id(m): p for p, m in enumerate(read.messages)}
        self._forget_checked(self.settled)
        for message, sources, parts in zip(fresh.messages, fresh.sources, fresh.parts, strict=True):
            read.add(message, sources, parts)
            self._note_checked(message, sources)
        unsettled = (
            number
            for number, sources in enumerate(fresh.sources)
            if any(source >= settled for source in sources)
        )
        conversation = self.conversation
        if len(conversation) > self.settled_messages:  # its newest are read again
            conversation = self.conversation = conversation.branch(self.settled_messages)
        conversation.extend(read.messages[len(conversation) :])
        self.settled_messages += next(unsettled, len(fresh.sources))
        self.settled = settled
        known = len(self.originals)
        self.originals.extend(items[known:])
        if self.contents is not None:
            self.contents.extend(map(content, items[known:]))

    def _forget_checked(self, start: int) -> None:
        """Forget what was noted of the items from ``start`` on: they are read again."""
        self.checked = {position for position in self.checked if position < start}
        if self.first_user is not None and self.first_user >= start:
            self.first_user = None

    def _note_checked(self, message: Message, sources: tuple[int, ...]) -> None:
        if not sources:
            return
        if message.role == "user" and self.first_user is None:
            self.first_user = sources[0]
            self.checked.update(sources)
        elif message.role in ("system", "developer") or message.pinned:
            self.checked.update(sources)

    def converted(self, items: Sequence[T]) -> Converted[T]:
        """The caller's ``items`` with the Messages read for them, and their Conversation,
        which is the history windowed. The lists as they are, the Messages as the
        first of them there are now: they only grow (see :meth:`Converted.truncate`),
        and are read at the positions of these Messages only."""
        read = self.read
        messages = read.growing()
        return Converted(
            items,
            Prefix(messages, len(messages)),
            read.sources,
            read.parts,
            dict(read.split),
            where=read.where,
            conversation=self.conversation,
            breaks=read.breaks,
            settled=self.settled_messages,
            made_covers=self.made_covers,
        )


class RecentReads(Generic[T]):
    """The conversions one adapter made (see the module docstring). ``content(item)``
    is what is kept of an item to compare later (a snapshot of what an app may edit in
    place); ``raw(items)``, when given, the same fields of a batch as they are now, with
    no snapshot taken: compared first, as :func:`ctxwindow.kit.starts_with` says."""

    def __init__(
        self,
        read_from: ReadFrom,
        content: Callable[[Any], Any],
        raw: Callable[[Sequence[Any]], list[Any]] | None = None,
    ) -> None:
        self._read_from = read_from
        self._content = content
        self._raw = raw
        self.remembered: RecentLists[_Read] = RecentLists(*remembered_histories())

    def _follow_core(self) -> None:
        """Take the bounds :func:`ctxwindow.remember_histories` set (a server sized for
        many conversations, ``ctxwindow serve``, windows Anthropic bodies through this
        plugin), when they changed since: one comparison a call."""
        bounds = remembered_histories()
        if bounds != self.remembered.bounds:
            self.remembered.bound(*bounds)  # under the lists' own lock

    def read(self, given: Sequence[Any], items: Sequence[T] | None = None) -> Converted[T]:
        """The Messages of ``given``, for the caller's ``items`` (by default ``given``
        itself; else the list the sources of the pieces index, such as ``given`` without
        a leading stand-in for a ``system`` outside it)."""
        given = given if type(given) is list else list(given)  # no copy: read, not kept
        self._follow_core()
        out: Sequence[Any] = given if items is None else items
        if len(given) >= REMEMBER_FROM:
            offset = len(given) - len(out)  # a stand-in for a system outside the list
            for entry in self.remembered.candidates(given):
                with entry.lock:
                    checked = [position + offset for position in entry.checked]
                    checked += range(offset)  # a stand-in for a system outside the list
                    if not starts_with(given, entry, self._content, checked, raw_of=self._raw):
                        continue
                    entry.extend(given, self._read_from, self._content)
                    converted = entry.converted(out)
                self.remembered.remember(entry)
                return converted
        entry = _Read()
        entry.extend(given, self._read_from, self._content)
        # converted first, then published: once other callers can find the entry, one
        # may grow it before this call would take its conversion
        converted = entry.converted(out)
        if len(given) >= REMEMBER_FROM:
            self.remembered.remember(entry)
        return converted


# -- cuts -------------------------------------------------------------------------------
def beside_media(parts: Iterable[T], text: T, kept: Callable[[T], bool]) -> list[T] | None:
    """``parts`` with ``text`` (a cut of all their text) in place of the first text
    part, the parts ``kept`` says stay (media) where they were and the other text parts
    gone (their words are in the cut); None when no part stays (send the text alone).
    The order is the caller's: a model reads an image and the words about it in turn."""
    out: list[T] = []
    placed = held = False
    for part in parts:
        if kept(part):
            out.append(part)
            held = True
        elif not placed:
            out.append(text)
            placed = True
    if not held:
        return None
    if not placed:
        out.append(text)
    return out


#: The start of the marker the core puts where it cut a text (between the head and the
#: tail it kept, or after the head), with the number of characters it removed.
_CUT_MARKER = re.compile(r"\n\[\.\.\. ([\d,]+) characters cut by ctxwindow[^\]]*\]\n?")


def lay_cut(texts: Sequence[str], cut: str) -> list[str] | None:
    """The core's ``cut`` of ``texts`` joined by newlines (a Message's text: their head,
    a marker, maybe their tail) laid back on them: each one's share, so that an item
    whose words lie in several fields sends them in their fields, and the shares'
    non-empty ones joined by newlines are ``cut``, what was counted. ``texts`` are not
    empty; None when ``cut`` is not such a cut of them."""
    whole = "\n".join(texts)
    bounds = _cut_bounds(whole, cut)
    if bounds is None:
        return None
    head, marker, tail = bounds
    sent: list[str] = []
    start, marked, ends = 0, -1, set()
    for text in texts:
        end = start + len(text)
        kept = whole[start : min(end, head)] if start < head else ""
        if marked < 0 and head <= end:
            kept, marked = kept + marker, len(sent) if end < tail else len(texts)
        sent.append(kept + (whole[max(start, tail) : end] if end > tail else ""))
        ends.add(end)
        start = end + 1  # past the newline joining the texts
    if marker.endswith("\n") and tail not in ends and any(sent[marked + 1 :]):
        sent[marked] = sent[marked][:-1]  # the newline joining it to the tail's text
    return sent


def _cut_bounds(whole: str, cut: str) -> tuple[int, str, int] | None:
    """Where ``cut`` splits ``whole``: the length of the head kept, the marker, and
    where the tail kept starts; None when ``cut`` is no head, marker and tail of it."""
    for match in _CUT_MARKER.finditer(cut):
        head = match.start()
        tail = head + int(match.group(1).replace(",", ""))
        if tail > len(whole) or cut[:head] != whole[:head]:
            continue
        for stop in {match.end(), match.end() - match.group(0).endswith("\n")}:
            if cut[stop:] == whole[tail:]:  # the marker's last newline may be the tail's
                return head, cut[head:stop], tail
    return None
