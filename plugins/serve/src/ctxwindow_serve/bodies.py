"""Request bodies read in part when their history starts with one read before.

Chat apps resend the whole history with every request: on a 1,000-message chat,
``orjson.loads`` of the body takes ~0.5 ms and the core's recognition of the parsed
history by value ~0.3 ms more, most of the proxy's latency bar. A body whose history
array starts with the very bytes of one remembered here (compared exactly, never by
hash) is read in three small parts instead: what comes before the array, the items it
adds, and what comes after it. The remembered items are the objects parsed before, so
the core recognises its history by identity, at once.

Why the parts make the same body as ``orjson.loads(raw)``: the history's key is found
by its bytes (``"messages"`` and a ``:`` then ``[``; a key, since an unescaped quote
cannot stand inside a string), and the three parts are each parsed by orjson in a
document of their own that holds them in the same place: the head closed by
``null}`` (which parses only when the key is the top level's), the new items inside
``[...]`` (a comma, then one item or more: no trailing comma) and the tail after a
sentinel key (``{"\\u0000":0`` then the rest: one object closed, nothing after it).
The remembered prefix was read in that same place of an earlier body, itself read
whole or in these parts. The tail's keys update the head's, so that a duplicate key
ends as orjson ends it (the last value, at the first place); a tail holding the
sentinel is read whole instead. Anything that does not fit reads the body whole.

A body whose model has no entry is forwarded as it came, so only its model is needed:
it is read from the head when no ``"model"`` (nor any ``\\u`` escape, which could
spell one) follows the history's start, else from the last ``"model"`` key whose rest
parses as the end of one object (only the top level's can). Such a body is then not
checked to be JSON anywhere else.

A body orjson refuses is read by the standard library, which takes a lone surrogate
escape (``"\\ud83d"``: JSON's grammar allows it, and a JavaScript client that cuts a
string mid-emoji sends one); only a body neither reads is not JSON.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ctxwindow.kit import REMEMBER_FROM

#: A remembered history is looked up by the first bytes of its array.
KEY_BYTES = 256
#: The bytes of request bodies kept per remembered conversation, on average.
BYTES_PER_HISTORY = 512 * 1024
#: Candidate ends of the history array (or places of the model) tried before reading
#: the body whole.
END_TRIES = 4
_WHITESPACE = b" \t\r\n"
_SENTINEL = "\x00"
#: ``{"\u0000":0``: what the tail is parsed after (its key spelt the one way JSON can).
_TAIL_OPENING = b'{"\\u0000":0'
_SENTINEL_JSON = b"\\u0000"


@dataclass(frozen=True, slots=True)
class _Remembered:
    """A body read before: its bytes, where its history array starts, where its last item
    ends, where the array ends, the items as parsed, and the key after the history (its
    JSON, None when the history is the last key)."""

    raw: bytes
    key: str
    start: int
    items_end: int
    end: int
    items: list[Any]
    next_key: bytes | None

    @property
    def prefix(self) -> memoryview:
        return memoryview(self.raw)[self.start : self.items_end]

    @property
    def tail(self) -> memoryview:
        return memoryview(self.raw)[self.end :]


@dataclass
class Reading:
    """One body read: ``body`` is what ``orjson.loads`` gives, or, when ``whole`` is
    False, ``{"model": ...}`` alone (the rest was not wanted). :meth:`remember` keeps it
    for the next request of its conversation (called for a body that is windowed: a
    body read whole is then located, two small parses)."""

    body: Any
    whole: bool
    _bodies: RecentBodies
    _raw: bytes
    _key: str
    _start: int | None
    _grown: _Remembered | None = None
    _replaces: _Remembered | None = None

    @property
    def unread(self) -> int:
        """The body's bytes not recognised as a history read before: what a visit counts
        (the core recognises the rest, the very objects, without counting it again)."""
        known = self._replaces
        return len(self._raw) - (0 if known is None else known.items_end - known.start)

    def remember(self) -> None:
        entry = self._grown
        if entry is None and self._start is not None and self.whole:
            entry = _located(self._raw, self._key, self._start, self.body)
        if entry is not None:
            self._bodies._remember(entry, self._replaces)


class RecentBodies:
    """The bodies of the last ``lists`` conversations read (at most ``size`` bytes of
    them in all, least recently used forgotten first); used from the event loop only."""

    def __init__(self, lists: int, size: int) -> None:
        self._lists = lists
        self._size = size
        self._held = 0
        self._entries: OrderedDict[int, _Remembered] = OrderedDict()  # by id, LRU first
        self._by_start: dict[tuple[str, bytes], list[_Remembered]] = {}

    def read(self, raw: bytes, key: str, wanted: Callable[[Any], bool] = lambda _: True) -> Reading:
        """The body ``raw`` (its history under ``key``), read in part when it can be;
        raises ``orjson.JSONDecodeError`` when it is not JSON (see :func:`loads`). A
        body whose model is not ``wanted`` (``wanted(model)`` is False: it has no
        entry) is read no further than its model when that can be found alone, and is
        then not checked to be JSON elsewhere."""
        start = _array_start(raw, key)
        if start is not None:
            known = self._longest_known(raw, key, start)
            if known is not None:
                reading = self._read_grown(raw, key, start, known)
                if reading is not None:
                    return reading
            else:
                model = _model(raw, start)
                if model is not _NOT_FOUND and not wanted(model):
                    return Reading({"model": model}, False, self, raw, key, start)
        return Reading(loads(raw), True, self, raw, key, start)

    # -- reading a grown history -----------------------------------------------------
    def _longest_known(self, raw: bytes, key: str, start: int) -> _Remembered | None:
        best: _Remembered | None = None
        for entry in self._by_start.get((key, raw[start : start + KEY_BYTES]), ()):
            if (best is None or entry.items_end - entry.start > best.items_end - best.start) and (
                raw.startswith(entry.prefix, start)
            ):
                best = entry
        return best

    def _read_grown(self, raw: bytes, key: str, start: int, known: _Remembered) -> Reading | None:
        after = start + known.items_end - known.start
        end = _array_end(raw, after, known.next_key, known.tail)
        if end is None:
            return None
        added = raw[after : end - 1].strip(_WHITESPACE)
        try:
            if added:
                if added[:1] != b",":
                    return None
                new = orjson.loads(b"[" + added[1:] + b"]")
                if not new:  # a trailing comma
                    return None
            else:
                new = []
            head = orjson.loads(raw[:start] + b"null}")
        except orjson.JSONDecodeError:
            return None
        tail = _tail(raw, end)
        if tail is None or not isinstance(head, dict):
            return None
        items = known.items + new
        head[key] = items
        head.update(tail)
        items_end = _items_end(raw, end) if new else start + known.items_end - known.start
        next_key = orjson.dumps(next(iter(tail))) if tail else None
        grown = _Remembered(raw, key, start, items_end, end, items, next_key)
        return Reading(head, True, self, raw, key, start, grown, known)

    # -- the remembered ---------------------------------------------------------------
    def _remember(self, entry: _Remembered, replaces: _Remembered | None) -> None:
        if replaces is not None:
            self._forget(replaces)
        if id(entry) in self._entries:
            return
        size = len(entry.raw)
        if size > self._size or entry.items_end - entry.start < KEY_BYTES:
            return
        self._entries[id(entry)] = entry
        self._held += size
        self._by_start.setdefault(_lookup(entry), []).append(entry)
        while len(self._entries) > self._lists or self._held > self._size:
            self._forget(next(iter(self._entries.values())))

    def _forget(self, entry: _Remembered) -> None:
        if self._entries.pop(id(entry), None) is None:
            return
        self._held -= len(entry.raw)
        lookup = _lookup(entry)
        same_start = [other for other in self._by_start.get(lookup, ()) if other is not entry]
        if same_start:
            self._by_start[lookup] = same_start
        else:
            self._by_start.pop(lookup, None)

    def __len__(self) -> int:
        return len(self._entries)


def _lookup(entry: _Remembered) -> tuple[str, bytes]:
    return entry.key, entry.raw[entry.start : entry.start + KEY_BYTES]


def _array_start(raw: bytes, key: str) -> int | None:
    """Where the array under ``"key":`` starts, at its first place in the bytes (checked
    to be the top level's when read)."""
    needle = b'"' + key.encode() + b'"'
    position = raw.find(needle)
    if position < 0:
        return None
    index = _skip(raw, position + len(needle))
    if raw[index : index + 1] != b":":
        return None
    index = _skip(raw, index + 1)
    return index if raw[index : index + 1] == b"[" else None


def _skip(raw: bytes, index: int) -> int:
    while raw[index : index + 1] in (b" ", b"\t", b"\r", b"\n"):
        index += 1
    return index


def _skip_back(raw: bytes, index: int) -> int:
    """The index just past the last non-whitespace byte before ``index``."""
    while index > 0 and raw[index - 1] in _WHITESPACE:
        index -= 1
    return index


def _array_end(
    raw: bytes, after: int, next_key: bytes | None, tail: memoryview | None
) -> int | None:
    """Where the history array ends (just past its ``]``), by the tail the remembered
    body had, else by the key after the history, else as the body's last key; the
    caller checks it by parsing what follows."""
    if tail is not None and raw.endswith(tail):
        end = len(raw) - len(tail)
        if end > after and raw[end - 1 : end] == b"]":
            return end
    if next_key is None:
        end = _skip_back(raw, len(raw))
        if raw[end - 1 : end] != b"}":
            return None
        end = _skip_back(raw, end - 1)
        return end if end > after and raw[end - 1 : end] == b"]" else None
    position = len(raw)
    for _ in range(END_TRIES):
        position = raw.rfind(next_key, after, position)
        if position < 0:
            return None
        comma = _skip_back(raw, position)
        if raw[comma - 1 : comma] == b",":
            end = _skip_back(raw, comma - 1)
            if end > after and raw[end - 1 : end] == b"]":
                return end
    return None


_NOT_FOUND = object()
_MODEL = b'"model"'


def _model(raw: bytes, start: int) -> Any:
    """The body's top-level ``model`` (orjson's: the last of duplicates), found without
    reading the history array at ``start``: in the head when no ``"model"`` follows
    it (not even spelt with escapes), else at the last ``"model"`` key that, with what
    follows, parses as the rest of one object (a nested one would close more than
    one); _NOT_FOUND otherwise."""
    if raw.find(_MODEL, start) < 0 and not _unicode_escape_after(raw, start):
        try:
            head = orjson.loads(raw[:start] + b"null}")
        except orjson.JSONDecodeError:
            return _NOT_FOUND
        return head.get("model", _NOT_FOUND) if isinstance(head, dict) else _NOT_FOUND
    position = len(raw)
    for _ in range(END_TRIES):
        position = raw.rfind(_MODEL, start, position)
        if position < 0:
            return _NOT_FOUND
        try:  # an object whose first key is "model", when it parses
            return orjson.loads(b"{" + raw[position:])["model"]
        except orjson.JSONDecodeError:
            continue
    return _NOT_FOUND


def _unicode_escape_after(raw: bytes, start: int) -> bool:
    """Whether a ``\\u`` escape (which could spell ``"model"``) follows ``start``: a
    backslash is looked for first (a one-byte search is ~70 times faster)."""
    return raw.find(b"\\", start) >= 0 and raw.find(b"\\u", start) >= 0


def _items_end(raw: bytes, end: int) -> int:
    """Just past the last item of the array that ends at ``end``."""
    return _skip_back(raw, end - 1)


def _tail(raw: bytes, end: int) -> dict[str, Any] | None:
    """The keys after the history, or None when they cannot be read apart (a duplicate
    of the history's key among them wins when they update the head, as in orjson)."""
    rest = raw[end:]
    if _SENTINEL_JSON in rest:
        return None
    try:
        tail = orjson.loads(_TAIL_OPENING + rest)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(tail, dict):
        return None
    del tail[_SENTINEL]
    return tail


def _located(raw: bytes, key: str, start: int, body: Any) -> _Remembered | None:
    """A body parsed whole, as a remembered one: where its history array ends, found and
    checked (None when the body is not worth remembering or cannot be read apart)."""
    if not isinstance(body, dict):
        return None
    items = body.get(key)
    if not isinstance(items, list) or len(items) < REMEMBER_FROM:
        return None
    keys = list(body)
    after = keys[keys.index(key) + 1 :]
    next_key = orjson.dumps(after[0]) if after else None
    end = _array_end(raw, start + 1, next_key, None)
    if end is None:
        return None
    try:
        head = orjson.loads(raw[:start] + b"null}")
    except orjson.JSONDecodeError:
        return None
    tail = _tail(raw, end)
    if not isinstance(head, dict) or tail is None or list(tail) != after:
        return None
    return _Remembered(raw, key, start, _items_end(raw, end), end, items, next_key)


def loads(raw: bytes) -> Any:
    """``raw`` as orjson reads it, else as the standard library does: it takes a lone
    surrogate escape (``"\\ud83d"``, valid JSON) that orjson refuses. Raises orjson's
    ``JSONDecodeError`` when neither reads it, and for what only the standard library
    would read but could not write back as it came (``NaN``, ``Infinity``, a number past
    a double's range)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as refused:
        try:
            return json.loads(raw.decode(), parse_constant=_not_json, parse_float=_finite)
        except (ValueError, RecursionError):  # RecursionError: nested past the stack
            raise refused from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(number: str) -> float:
    value = float(number)
    if math.isinf(value):
        raise ValueError(f"{number} is past a double's range")
    return value
