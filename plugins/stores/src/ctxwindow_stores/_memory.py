"""The in-memory layer: a least-recently-used map bounded by entries and by bytes."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from ctxwindow.errors import InvalidOption

#: What one entry costs beyond its key and value bytes (the map's node, the objects'
#: headers): an estimate, so ``max_bytes`` bounds real memory to within a small factor.
ENTRY_OVERHEAD = 120


class MemoryStore:
    """Thread-safe LRU: past ``max_entries`` entries or ``max_bytes`` (keys, values and
    :data:`ENTRY_OVERHEAD` each), the least recently used entries are forgotten.
    ``ttl``: seconds an entry lives (None: until forgotten), as long as in the shared
    store behind, so that a replica reads that store again once its entry expired there
    instead of serving its own value for ever."""

    where = "memory"

    def __init__(
        self,
        max_entries: int = 100_000,
        max_bytes: int = 64 * 2**20,
        *,
        ttl: float | None = None,
    ) -> None:
        for name, value in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidOption(f"memory store: {name} must be an int >= 1, got {value!r}")
        if ttl is not None and not ttl > 0:
            raise InvalidOption(f"memory store: ttl must be a number of seconds > 0, got {ttl!r}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl = ttl
        #: When each entry expires (time.monotonic()), with a ttl only.
        self._expires: dict[str, float] = {}
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        """Bytes counted against ``max_bytes``."""
        return self._bytes

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        with self._lock:
            for key in keys:
                value = self._live(key)
                if value is not None:
                    self._entries.move_to_end(key)
                    found[key] = value
        return found

    def put_many(self, items: Mapping[str, bytes]) -> None:
        with self._lock:
            self._put(items)

    def put_new(self, items: Mapping[str, bytes]) -> dict[str, bytes]:
        """Put the items whose key holds nothing yet; what each key holds after (a value
        put before wins over ``items``')."""
        with self._lock:
            live = {key: self._live(key) for key in items}
            held = {key: value for key, value in live.items() if value is not None}
            self._put({key: value for key, value in items.items() if key not in held})
            return {**items, **held}

    def _put(self, items: Mapping[str, bytes]) -> None:
        """Put ``items`` (the lock held), then forget what is past the bounds."""
        expires = None if self.ttl is None else time.monotonic() + self.ttl
        for key, value in items.items():
            self._drop(key)  # first: the old value must not outlive a newer write
            cost = _cost(key, value)
            if cost > self.max_bytes:
                continue  # one value bigger than the whole bound: not kept
            self._entries[key] = bytes(value)
            self._bytes += cost
            if expires is not None:
                self._expires[key] = expires
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _live(self, key: str) -> bytes | None:
        """The value held for ``key`` (the lock held), None once expired (then dropped)."""
        expires = self._expires.get(key)
        if expires is not None and time.monotonic() >= expires:
            self._drop(key)
            return None
        return self._entries.get(key)

    def _drop(self, key: str) -> None:
        """Forget ``key`` (the lock held), if held."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= _cost(key, old)
        self._expires.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._expires.clear()
            self._bytes = 0

    def close(self) -> None:
        self.clear()


def _cost(key: str, value: bytes) -> int:
    return len(key) + len(value) + ENTRY_OVERHEAD
