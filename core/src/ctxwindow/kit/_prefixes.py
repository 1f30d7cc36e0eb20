"""Lists read before, recognised by content when a new list starts with one, so that
reading a history that grew costs what it adds: the one-call API's remembered
Conversations and the adapters' remembered conversions both stand on this.

A list is recognised when it starts with a remembered one: the same items in the same
order, compared by value (rebuilt dicts, say from JSON, count as the same), and, for the
items apps edit in place (the newest :data:`CHECKED` and any the owner names: system,
developer and pinned messages), the same *contents* as when they were read: an item
changed in place is the same object and so equal to itself, but its content is not.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

#: Items whose content is compared with what was read: the newest this many.
CHECKED = 256
#: How many lists are remembered, and how many items across them at most.
LISTS_KEPT = 32
ITEMS_KEPT = 250_000
#: Shorter lists are read whole each time: recognising them would save nothing.
REMEMBER_FROM = 32


class Remembered(Protocol):
    """What a remembered list keeps: its items as read and, per item, its content as
    read (None: items that cannot be edited in place, compared by value alone)."""

    @property
    def originals(self) -> Sequence[Any]: ...

    @property
    def contents(self) -> list[Any] | None: ...


S = TypeVar("S", bound=Remembered)
T = TypeVar("T")


def as_now(content: Any) -> Any:
    """What is compared of an item's content on later visits: a string (or None) as it
    is; a list of parts as its parts are now (:func:`snapshot`). Kept by reference, a
    list would equal itself after a part was appended to it, or text streamed into one."""
    if type(content) is not list:
        return content
    return snapshot(content)


#: Values an app cannot change in place: kept as they are in a snapshot.
_ATOMS = frozenset({str, int, float, bool, bytes, type(None)})


def snapshot(value: Any, depth: int = 8) -> Any:
    """``value`` as it is now, down to its nested parts: lists, tuples, dicts and SDK
    objects (pydantic models, dataclasses) as tuples of their fields' snapshots. Kept
    by reference, a part dict, or an SDK block whose text an app sets in place, would
    equal itself after the edit, and the stale messages read from it would be windowed.
    ``depth`` bounds the walk (a cycle, an odd object): deeper values are kept as they are."""
    kind = type(value)
    if kind in _ATOMS or depth <= 0:
        return value
    atoms, deeper = _ATOMS, depth - 1  # atoms inline: most fields are strings
    if kind is list or kind is tuple:
        return tuple([v if type(v) in atoms else snapshot(v, deeper) for v in value])
    if kind is dict:
        return _fields(value, deeper)
    fields = getattr(value, "__dict__", None)
    if type(fields) is dict:  # an SDK object: its fields, by its type
        return (kind, _fields(fields, deeper))
    return _fields(dict(value), deeper) if isinstance(value, Mapping) else value


def _fields(value: dict[Any, Any], depth: int) -> tuple[Any, ...]:
    """A dict's items, each value's :func:`snapshot`."""
    atoms = _ATOMS
    if atoms.issuperset(map(type, value.values())):  # a part of strings: in C
        return tuple(value.items())
    return tuple([(k, v if type(v) in atoms else snapshot(v, depth)) for k, v in value.items()])


def same(a: object, b: object) -> bool:
    """Equal by value; a comparison that fails (an odd object's ``__eq__``) is no match."""
    try:
        return a is b or bool(a == b)
    except Exception:
        return False


def starts_with(
    given: Sequence[Any],
    remembered: Remembered,
    content: Callable[[Any], Any],
    also_checked: Iterable[int] = (),
    *,
    contents_of: Callable[[Sequence[Any]], list[Any]] | None = None,
    raw_of: Callable[[Sequence[Any]], list[Any]] | None = None,
) -> bool:
    """Whether ``given`` starts with the remembered list, unchanged: equal items, and
    for the newest CHECKED items and ``also_checked`` positions, equal ``content(item)``
    (``contents_of``, when given, reads a batch of items' contents at once: faster, as
    the core reads a list of dicts; ``raw_of``, their contents as they are, compared
    first: see :func:`contents_unchanged`). The caller holds whatever lock keeps the
    remembered list from growing meanwhile: a remembered ``list`` is grown for the
    moment by ``given``'s newer items and cut back before this returns."""
    originals = remembered.originals
    size = len(originals)
    try:
        if size > len(given) or not _same_items(given, originals):
            return False
        contents = remembered.contents
        read = contents_of or (lambda batch: list(map(content, batch)))
        return contents is None or contents_unchanged(
            given, contents, read, also_checked, raw=raw_of
        )
    except Exception:  # an odd object's __eq__ failed: read whole
        return False


def shared_prefix(
    given: Sequence[Any],
    remembered: Remembered,
    content: Callable[[Any], Any],
    also_checked: Iterable[int] = (),
    *,
    contents_of: Callable[[Sequence[Any]], list[Any]] | None = None,
) -> int:
    """How many leading items ``given`` shares with the remembered list, unchanged (as
    :func:`starts_with` compares them), when the two part only among the remembered
    list's newest CHECKED items: a result cleared, a message edited or taken back near
    the end. 0 when they part earlier, or when a named item (``also_checked``) before
    where they part was edited (``contents_of``: as :func:`starts_with` takes it). The
    caller holds the remembered list's lock."""
    originals = remembered.originals
    size = min(len(originals), len(given))
    tail = max(0, len(originals) - CHECKED)
    if size <= tail:
        return 0
    try:
        # the last item before the newest CHECKED first: two histories that part earlier
        # (another conversation, opening with the same system prompt) nearly always
        # differ there, and a comparison of everything before copies both prefixes
        if tail and not (
            same(given[tail - 1], originals[tail - 1])
            and _as_list(given[:tail]) == _as_list(originals[:tail])
        ):
            return 0
        cut = next((i for i in range(tail, size) if not same(given[i], originals[i])), size)
        contents = remembered.contents
        if contents is None:
            return cut
        read = contents_of or (lambda batch: list(map(content, batch)))
        named = [p for p in also_checked if p < cut]
        if named and read([given[p] for p in named]) != [contents[p] for p in named]:
            return 0
        start = max(0, cut - CHECKED)
        return first_changed(read(given[start:cut]), contents, start, cut)
    except Exception:  # an odd object's __eq__ failed: read whole
        return 0


def first_changed(now: Sequence[Any], contents: Sequence[Any], start: int, default: T) -> int | T:
    """The position of the first of ``now`` (items' contents read from position
    ``start`` on) that differs from ``contents`` (as read before), else ``default``."""
    return next((start + i for i, c in enumerate(now) if c != contents[start + i]), default)


def contents_unchanged(
    items: Sequence[Any],
    contents: Sequence[Any],
    read: Callable[[Sequence[Any]], list[Any]],
    also_checked: Iterable[int] = (),
    *,
    raw: Callable[[Sequence[Any]], list[Any]] | None = None,
) -> bool:
    """Whether the items an app edits in place still hold what was read: ``read`` (the
    contents of a batch of items, as :func:`as_now` keeps them) of the newest CHECKED
    of the first ``len(contents)`` items, and of those at ``also_checked``, equals
    ``contents`` there. A comparison or read that fails is a change.

    ``raw`` (the contents as they are, say a dict's ``content``) is compared first:
    :func:`as_now` keeps every content but a list of parts as it is, and a list never
    equals what it keeps of one (a tuple), so contents that equal ``contents`` as they
    are hold what was read, and a chat's strings are compared without a snapshot."""
    size = len(contents)
    tail = max(0, size - CHECKED)
    named = [p for p in also_checked if p < tail]
    try:
        if not _as_read(items[tail:size], _as_list(contents[tail:size]), read, raw):
            return False
        stored = [contents[p] for p in named]
        return not named or _as_read([items[p] for p in named], stored, read, raw)
    except Exception:
        return False


def _as_read(
    items: Sequence[Any],
    stored: list[Any],
    read: Callable[[Sequence[Any]], list[Any]],
    raw: Callable[[Sequence[Any]], list[Any]] | None,
) -> bool:
    """Whether ``items`` hold the ``stored`` contents (see :func:`contents_unchanged`)."""
    if raw is not None:
        try:
            if raw(items) == stored:
                return True
        except TypeError:  # ``raw`` reads only some kinds (dicts): read each as ``read`` does
            pass
    return read(items) == stored


def _same_items(given: Sequence[Any], originals: Sequence[Any]) -> bool:
    """Whether ``given`` starts with the items of ``originals`` (no longer than it):
    the same objects, or equal ones.

    Lists are compared whole, the remembered list grown for the moment by ``given``'s
    newer items and cut back before returning (under the lock its owner holds for the
    comparison; a reader without the lock reads it up to a length it knows, or, as
    :meth:`RecentLists.candidates`, only to choose what to compare under the lock).
    A copy of ``given``'s first items (a slice) would write to every item's reference
    count and so touch every message, about 7 us per thousand once they are out of the
    CPU's caches; comparing two lists reads their arrays of references alone where the
    items are the same objects (an app's list that grew): about a tenth of the time at
    100,000 messages."""
    size = len(originals)
    if type(given) is not list or type(originals) is not list:
        return _as_list(given[:size]) == _as_list(originals)
    originals.extend(given[size:])
    try:
        return given == originals
    finally:
        del originals[size:]


def _as_list(items: Sequence[Any]) -> list[Any]:
    return items if isinstance(items, list) else list(items)


class RecentLists(Generic[S]):
    """Remembered lists, least recently used first out, bounded by count and by items.

    :meth:`candidates` is a cheap first look (length, first and last item): confirm
    each with :func:`starts_with` under the lock that guards it. Thread-safe.
    """

    def __init__(self, lists: int = LISTS_KEPT, items: int = ITEMS_KEPT) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, S] = OrderedDict()  # by id(entry), LRU last
        self._lists = lists
        self._items = items

    def candidates(self, given: Sequence[Any]) -> Iterator[S]:
        """Remembered lists ``given`` may start with (by their first and last items):
        first those whose ends are ``given``'s very objects (an app's list that grew),
        longest first; then those whose ends are only equal (a list rebuilt from equal
        items), longest first, compared only when no earlier one is taken. Comparing
        by value costs an SDK's message models microseconds each, and a list that grew
        would otherwise pay it for every other list remembered. A generator: the
        remembered lists are read when the first is asked for, and it is true even
        when it yields none (``list()`` it to test)."""
        size = len(given)
        with self._lock:
            ends = [
                (entry, len(entry.originals), entry.originals[0], entry.originals[-1])
                for entry in self._entries.values()
                if 0 < len(entry.originals) <= size
            ]
        ends.sort(key=lambda end: end[1], reverse=True)
        first = given[0] if size else None
        unlike: list[tuple[S, int, Any, Any]] = []
        for end in ends:
            entry, length, head, tail = end
            if head is first and given[length - 1] is tail:
                yield entry
            else:
                unlike.append(end)
        for entry, length, head, tail in unlike:
            if same(first, head) and same(given[length - 1], tail):
                yield entry

    def near(self, given: Sequence[Any]) -> list[S]:
        """Remembered lists ``given`` may share all but their newest CHECKED items with
        (see :func:`shared_prefix`), longest first."""
        size = len(given)
        with self._lock:
            found = [
                entry
                for entry in self._entries.values()
                if len(entry.originals) - CHECKED < size
                and len(entry.originals) > 0
                and same(given[0], entry.originals[0])
            ]
        return sorted(found, key=lambda entry: len(entry.originals), reverse=True)

    def replace(self, old: S, new: S) -> None:
        """Remember ``new`` in place of ``old`` (a branch of it): the most recent."""
        with self._lock:
            self._entries.pop(id(old), None)
        self.remember(new)

    def remember(self, entry: S) -> None:
        """Remember ``entry``, or note that it grew: it becomes the most recent."""
        with self._lock:
            self._entries[id(entry)] = entry
            self._entries.move_to_end(id(entry))
            self._forget_beyond_bounds(keep=entry)

    def bound(self, lists: int, items: int) -> None:
        """Keep at most ``lists`` lists holding ``items`` items in all from now on (the
        least recently used forgotten first, now if there are more)."""
        with self._lock:
            self._lists, self._items = lists, items
            self._forget_beyond_bounds(keep=None)

    @property
    def bounds(self) -> tuple[int, int]:
        """(lists, items): the bounds in force."""
        return self._lists, self._items

    def _forget_beyond_bounds(self, keep: S | None) -> None:
        total = sum(len(entry.originals) for entry in self._entries.values())
        for key in list(self._entries):
            if len(self._entries) <= self._lists and total <= self._items:
                break
            entry = self._entries[key]
            if entry is not keep:
                total -= len(entry.originals)
                del self._entries[key]
        if keep is not None and total > self._items:  # one list alone past the bound
            self._entries.pop(id(keep), None)

    def clear(self) -> None:
        """Forget every remembered list."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
