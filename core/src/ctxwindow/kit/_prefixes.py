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
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from itertools import islice, repeat
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

#: Items whose content is compared with what was read: the newest this many.
CHECKED = 256
#: How many lists are remembered, and how many items across them at most.
LISTS_KEPT = 32
ITEMS_KEPT = 250_000
#: Shorter lists are read whole each time: recognising them would save nothing.
REMEMBER_FROM = 32
#: Lists this long or longer are looked up by their items' keys (see RecentLists);
#: shorter ones, which neither the core nor the adapters remember, are looked through.
INDEXED_FROM = REMEMBER_FROM
#: At most this many remembered lists of one key (and of one anchor, for a list that
#: parts from them) are compared with a list: more than that open alike by chance (a
#: long prompt every chat shares), and each would cost a comparison.
TRIED = 8


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


def item_key(item: Any) -> Hashable:
    """What :class:`RecentLists` looks an item up by: its ``content`` when a string,
    else a hash of the whole item (:func:`_hashable`; None when it has none). Equal
    items have equal keys, so the keys of a few of a list's items find the lists it may
    start with, and only those are compared. A dict's key is what :func:`item_keys`
    gives of it."""
    try:
        if isinstance(item, dict):
            content = dict.get(item, "content")
        else:
            content = getattr(item, "content", None)
        return content if type(content) is str else hash(_hashable(item))
    except Exception:  # an odd object, or one that holds an unhashable value
        return None


def _hashable(value: Any, depth: int = 8) -> Any:
    """``value`` as one hashable whole, equal for equal values: a dict as the set of
    its items (a dict rebuilt with its keys in another order is equal), a list as a
    tuple, an SDK object as its :func:`snapshot`."""
    kind = type(value)
    if kind in _ATOMS or depth <= 0:
        return value
    if kind is dict:
        return frozenset([(key, _hashable(v, depth - 1)) for key, v in value.items()])
    if kind is list or kind is tuple:
        return tuple([_hashable(v, depth - 1) for v in value])
    return snapshot(value, depth)


def item_keys(items: Sequence[Any]) -> list[Hashable]:
    """:func:`item_key` of each item; for a chat's dicts of strings, at C speed."""
    try:
        contents = list(map(dict.get, items, repeat("content")))
    except TypeError:  # not all dicts: Messages, SDK objects, other mappings
        return list(map(item_key, items))
    if _STRINGS.issuperset(map(type, contents)):
        return contents
    return [c if type(c) is str else item_key(i) for c, i in zip(contents, items, strict=True)]


_STRINGS = frozenset({str})


def _signature(items: Sequence[Any]) -> int:
    """The keys of a list's first INDEXED_FROM items, hashed: a list and one that it
    starts with, or that it parts from where :func:`shared_prefix` finds it, share them.
    Histories that share a system prompt alone do not."""
    return hash(tuple(item_keys(items[:INDEXED_FROM])))


def _anchor(length: int) -> int:
    """A position a list that parts from a remembered one of ``length`` items where
    :meth:`RecentLists.near` finds it agrees with it up to: INDEXED_FROM, or the
    greatest power of two no later than the remembered list's newest CHECKED items."""
    older = length - CHECKED
    return max(INDEXED_FROM, 1 << (older.bit_length() - 1)) if older > 0 else INDEXED_FROM


def _anchors(size: int) -> list[int]:
    """The anchors (:func:`_anchor`) of the lists a list of ``size`` items may part from
    where :meth:`RecentLists.near` finds it: INDEXED_FROM and each power of two past it
    below ``size``. A few: one a doubling."""
    anchors, power = [INDEXED_FROM], 1 << INDEXED_FROM.bit_length()
    while power < size:
        anchors.append(power)
        power *= 2
    return anchors


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


class _Keys(NamedTuple):
    """What a remembered list is indexed by, as it was when last remembered (a list
    shorter than INDEXED_FROM: its length alone)."""

    entry: Any
    length: int
    signature: int | None
    first: Any  # its first and last items, found by identity: held, so that their
    last: Any  # ids stay their own
    end: tuple[int, int, Hashable] | None  # (length, signature, the last item's key)
    anchored: tuple[int, int, Hashable] | None  # (anchor, signature, the key there)


def _keys_of(entry: Remembered, known: _Keys | None) -> _Keys:
    """What ``entry`` is indexed by now: its opening's signature as ``known`` has it
    (a list grows at its end: its opening is read once), its last item, its anchor's."""
    originals = entry.originals
    length = len(originals)
    if length < INDEXED_FROM:
        return _Keys(entry, length, None, None, None, None, None)
    signature = known.signature if known is not None else None
    if signature is None:
        signature = _signature(originals)
    first, last, anchor = originals[0], originals[length - 1], _anchor(length)
    last_key, anchor_key = item_keys([last, originals[anchor - 1]])
    end = (length, signature, last_key)
    anchored = (anchor, signature, anchor_key)
    return _Keys(entry, length, signature, first, last, end, anchored)


def _fresh(entries: Iterable[S], taken: set[int]) -> Iterator[S]:
    """``entries`` not yet in ``taken`` (by id), each then taken."""
    for entry in entries:
        if id(entry) not in taken:
            taken.add(id(entry))
            yield entry


def _batches(given: Sequence[Any]) -> Iterator[tuple[int, Sequence[Any]]]:
    """``given``'s items from its end back to the last of its first INDEXED_FROM, as
    (position of the first, items): two, then twice as many each time, so that a list
    that grew by a few items is looked up at a few, and any other at each once."""
    stop, batch = len(given), 2
    while stop >= INDEXED_FROM:
        start = max(INDEXED_FROM - 1, stop - batch)
        yield start, given[start:stop]
        stop, batch = start, batch * 2


def _newest(bucket: dict[int, None] | None) -> Iterator[int]:
    """The ids in ``bucket``, the most recently remembered first."""
    return reversed(bucket) if bucket else iter(())


class RecentLists(Generic[S]):
    """Remembered lists, least recently used first out, bounded by count and by items.

    :meth:`candidates` and :meth:`near` are a cheap first look: confirm each list they
    give with :func:`starts_with` (or :func:`shared_prefix`) under the lock that guards
    it. They look lists up by the keys (:func:`item_key`) of a few of their items: the
    first INDEXED_FROM, the last, one at an anchor (:func:`_anchor`). Many histories open
    alike (one app's system prompt, many users' chats), and looking through them all on
    each visit cost milliseconds at a thousand: a look costs the new items of a list
    that grew (all of them for a new one) and at most TRIED comparisons a length,
    however many lists are remembered. Thread-safe.
    """

    def __init__(self, lists: int = LISTS_KEPT, items: int = ITEMS_KEPT) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, S] = OrderedDict()  # by id(entry), LRU last
        self._keys: dict[int, _Keys] = {}  # by id(entry)
        # the ids of the lists of each key (below), the most recently remembered last
        self._ends: dict[Hashable, dict[int, None]] = {}  # by _Keys.end
        self._lasts: dict[int, dict[int, None]] = {}  # by id(_Keys.last)
        self._firsts: dict[int, int] = {}  # id(_Keys.first): how many lists start with it
        self._signatures: dict[int, int] = {}  # _Keys.signature: how many lists have it
        self._anchored: dict[Hashable, dict[int, None]] = {}  # by _Keys.anchored
        self._short: dict[int, None] = {}  # shorter than INDEXED_FROM: looked through
        self._total = 0  # items in all, as each list was when remembered
        self._lists = lists
        self._items = items

    def candidates(self, given: Sequence[Any]) -> Iterator[S]:
        """Remembered lists ``given`` may start with: first those whose first and last
        items are ``given``'s very objects (an app's list that grew), longest first;
        then those whose ends are only equal (a list rebuilt from equal items), longest
        first, compared only when no earlier one is taken. Comparing by value costs an
        SDK's message models microseconds each, and a list that grew would otherwise pay
        it for every other list remembered.

        The long lists are looked up from ``given``'s end back (:func:`_batches`), so
        that a list that grew is found after its new items: by identity (only when some
        list starts with ``given``'s very first item), then by their keys. A generator:
        the remembered lists are read when the first is asked for, and it is true even
        when it yields none (``list()`` it to test)."""
        taken: set[int] = set()
        indexed = len(given) >= INDEXED_FROM
        if indexed and self._starts_with_object(given[0]):
            found = False
            for entry in _fresh(self._identical(given), taken):
                found = True
                yield entry
            if found:
                # none of the lists whose ends are ``given``'s very objects is its
                # start, so an item inside was edited or stood in for (a tool result
                # cleared near the end): ``near`` finds it to branch from. A list whose
                # items are the very ones was not rebuilt from equal items, and a look
                # by value through each of them would cost the turn the history (a
                # pipeline stage's input, cleared anew every turn).
                return
        identical, unlike = self._short_ends(given)
        yield from identical
        if indexed:
            signature = _signature(given)
            if self._opens_like(signature):  # else none can be its start: no look back
                yield from _fresh(self._equal(given, signature), taken)
        for entry, length, head, tail in unlike:
            if same(given[0], head) and same(given[length - 1], tail):
                yield entry

    def _identical(self, given: Sequence[Any]) -> Iterator[S]:
        """The indexed lists whose first and last items are ``given``'s very objects, of
        the greatest length that has any, the most recent first: looked up by identity
        alone. Two lists of the same objects and length may both be remembered, one
        with a few items stood in for (a pipeline's stages, each handed a list: a
        stage's input, and the window of a stage that cleared some of its outputs,
        which the next stage windows): the first found may be the other's. A shorter
        one is not offered: it was read earlier, maybe before an older message was
        edited in place, which the longer one, read whole since, holds as it is now
        (``near`` finds that one to branch from)."""
        first = given[0]
        for start, items in _batches(given):
            found: list[S] = []
            with self._lock:
                for at in range(len(items) - 1, -1, -1):
                    held = self._ending_with(start + at + 1, items[at])
                    found = [keys.entry for keys in held if keys.first is first]
                    if found:
                        break
            if found:
                yield from found
                return

    def _equal(self, given: Sequence[Any], signature: int) -> Iterator[S]:
        """The indexed lists that may end where an item of ``given`` stands, longest
        first: those whose keys match (``signature``: of ``given``'s opening), and those
        that end with that very item (whose key it had when it was remembered: an app
        may edit the newest in place, which :func:`starts_with` sees)."""
        for start, items in _batches(given):
            keys = item_keys(items)
            with self._lock:
                found = [
                    held.entry
                    for at in range(len(items) - 1, -1, -1)
                    for held in self._ending(start + at + 1, items[at], keys[at], signature)
                ]
            yield from found

    def _opens_like(self, signature: int) -> bool:
        """Whether an indexed list opens with items of these keys (:func:`_signature`):
        a new history (a cold call) is then looked up at no item of its own."""
        with self._lock:
            return signature in self._signatures

    def _starts_with_object(self, first: Any) -> bool:
        """Whether an indexed list starts with ``first``, that very object."""
        with self._lock:
            return id(first) in self._firsts

    def _ending(self, length: int, last: Any, key: Hashable, signature: int) -> list[_Keys]:
        """The indexed lists of ``length`` items that end with ``last``, that very
        object, then those whose keys are ``key`` and ``signature``: at most TRIED of
        each, the most recent (more that match by key are alike only by chance)."""
        matched = self._ends.get((length, signature, key))
        found = self._ending_with(length, last)
        if matched is not None:
            found += map(self._keys.__getitem__, islice(reversed(matched), TRIED))
        return found

    def _ending_with(self, length: int, last: Any) -> list[_Keys]:
        """The indexed lists of ``length`` items that end with ``last``, that very
        object: at most TRIED, the most recent."""
        bucket = self._lasts.get(id(last))
        if bucket is None:  # most positions: at C speed
            return []
        held = map(self._keys.__getitem__, reversed(bucket))
        return [k for k in held if k.length == length and k.last is last][:TRIED]

    def _short_ends(self, given: Sequence[Any]) -> tuple[list[S], list[tuple[S, int, Any, Any]]]:
        """Of the lists shorter than INDEXED_FROM that ``given`` is no shorter than, those
        whose first and last items are ``given``'s very objects, and the ends (entry,
        length, first and last items) of the others; each longest first."""
        size = len(given)
        with self._lock:
            ends = [
                (entry, len(entry.originals), entry.originals[0], entry.originals[-1])
                for entry in map(self._entries.__getitem__, self._short)
                if 0 < len(entry.originals) <= size
            ]
        ends.sort(key=lambda end: end[1], reverse=True)
        first = given[0] if size else None
        identical: list[S] = []
        unlike: list[tuple[S, int, Any, Any]] = []
        for end in ends:
            if end[2] is first and given[end[1] - 1] is end[3]:
                identical.append(end[0])
            else:
                unlike.append(end)
        return identical, unlike

    def near(self, given: Sequence[Any]) -> list[S]:
        """Remembered lists ``given`` may share its first INDEXED_FROM items and all but
        their newest CHECKED items with (see :func:`shared_prefix`), longest first: at
        most TRIED whose keys are ``given``'s at their anchor (:func:`_anchor`), the most
        recent of each key; and the short lists whose first item is equal."""
        size = len(given)
        found = self._anchored_in(given) if size >= INDEXED_FROM else []
        with self._lock:
            short = [self._entries[key] for key in self._short]
            found += [
                entry
                for entry in short
                if len(entry.originals) > 0 and same(given[0], entry.originals[0])
            ]
        found = [entry for entry in found if len(entry.originals) - CHECKED < size]
        return sorted(found, key=lambda entry: len(entry.originals), reverse=True)

    def _anchored_in(self, given: Sequence[Any]) -> list[S]:
        """The indexed lists whose keys are ``given``'s at their anchor (one look per
        power of two below its length), at most TRIED, the longest."""
        signature, anchors = _signature(given), _anchors(len(given))
        keys = item_keys([given[anchor - 1] for anchor in anchors])
        with self._lock:
            ids = [
                key
                for anchor, at in zip(anchors, keys, strict=True)
                for key in islice(_newest(self._anchored.get((anchor, signature, at))), TRIED)
            ]
            found = [self._keys[key].entry for key in dict.fromkeys(ids)]
        found.sort(key=lambda entry: len(entry.originals), reverse=True)
        return found[:TRIED]

    def replace(self, old: S, new: S) -> None:
        """Remember ``new`` in place of ``old`` (a branch of it): the most recent."""
        with self._lock:
            self._forget(id(old))
        self.remember(new)

    def remember(self, entry: S) -> None:
        """Remember ``entry``, or note that it grew: it becomes the most recent. Its
        keys are read as it is now: call this as its owner grows it, under its lock."""
        known = self._keys.get(id(entry))
        keys = _keys_of(entry, known if known is not None and known.entry is entry else None)
        with self._lock:
            self._unindex(id(entry))
            self._entries[id(entry)] = entry
            self._entries.move_to_end(id(entry))
            self._index(id(entry), keys)
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
        entries = self._entries
        while entries and (len(entries) > self._lists or self._total > self._items):
            oldest = next(iter(entries))
            if entries[oldest] is keep:  # the most recent: no other is left
                break
            self._forget(oldest)
        if keep is not None and self._total > self._items:  # one list alone past the bound
            self._forget(id(keep))

    def _forget(self, key: int) -> None:
        self._entries.pop(key, None)
        self._unindex(key)

    def _index(self, key: int, keys: _Keys) -> None:
        self._keys[key] = keys
        self._total += keys.length
        if keys.signature is None:
            self._short[key] = None
            return
        self._ends.setdefault(keys.end, {})[key] = None
        self._lasts.setdefault(id(keys.last), {})[key] = None
        self._anchored.setdefault(keys.anchored, {})[key] = None
        self._firsts[id(keys.first)] = self._firsts.get(id(keys.first), 0) + 1
        self._signatures[keys.signature] = self._signatures.get(keys.signature, 0) + 1

    def _unindex(self, key: int) -> None:
        keys = self._keys.pop(key, None)
        if keys is None:
            return
        self._total -= keys.length
        if keys.signature is None:
            del self._short[key]
            return
        if self._signatures[keys.signature] == 1:
            del self._signatures[keys.signature]
        else:
            self._signatures[keys.signature] -= 1
        indexes: tuple[tuple[dict[Any, dict[int, None]], Hashable], ...] = (
            (self._ends, keys.end),
            (self._lasts, id(keys.last)),
            (self._anchored, keys.anchored),
        )
        for index, at in indexes:
            bucket = index[at]
            del bucket[key]
            if not bucket:
                del index[at]
        if self._firsts[id(keys.first)] == 1:
            del self._firsts[id(keys.first)]
        else:
            self._firsts[id(keys.first)] -= 1

    def clear(self) -> None:
        """Forget every remembered list."""
        with self._lock:
            for index in (self._entries, self._keys, self._ends, self._lasts, self._anchored):
                index.clear()
            self._short.clear()
            self._firsts.clear()
            self._signatures.clear()
            self._total = 0

    def __len__(self) -> int:
        return len(self._entries)
