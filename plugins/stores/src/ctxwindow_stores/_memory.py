"""The in-memory layer: a least-recently-used map bounded by entries and by bytes."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from ctxwindow.errors import InvalidOption

#: What one entry costs beyond its key and value bytes (the map's node, the objects'
#: headers): an estimate, so ``max_bytes`` bounds real memory to within a small factor.
ENTRY_OVERHEAD = 120


class MemoryStore:
    """Thread-safe LRU: past ``max_entries`` entries or ``max_bytes`` (keys, values and
    :data:`ENTRY_OVERHEAD` each), the least recently used entries are forgotten."""

    where = "memory"

    def __init__(self, max_entries: int = 100_000, max_bytes: int = 64 * 2**20) -> None:
        for name, value in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidOption(f"memory store: {name} must be an int >= 1, got {value!r}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
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
                value = self._entries.get(key)
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
            entries = self._entries
            held = {key: entries[key] for key in items if key in entries}
            self._put({key: value for key, value in items.items() if key not in held})
            return {**items, **held}

    def _put(self, items: Mapping[str, bytes]) -> None:
        """Put ``items`` (the lock held), then forget what is past the bounds."""
        for key, value in items.items():
            cost = _cost(key, value)
            if cost > self.max_bytes:
                continue  # one value bigger than the whole bound: not kept
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= _cost(key, old)
            self._entries[key] = bytes(value)
            self._bytes += cost
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            key, value = self._entries.popitem(last=False)
            self._bytes -= _cost(key, value)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def close(self) -> None:
        self.clear()


def _cost(key: str, value: bytes) -> int:
    return len(key) + len(value) + ENTRY_OVERHEAD
