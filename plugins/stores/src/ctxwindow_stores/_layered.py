"""Memory in front of a persistent or shared store."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ctxwindow_stores._put import put_first

if TYPE_CHECKING:
    from ctxwindow_stores import Store
    from ctxwindow_stores._memory import MemoryStore


class LayeredStore:
    """Reads memory first, then ``back`` (remembering what it found there); writes both,
    one writer at a time, so that both layers hold the same value for a key.

    If ``back`` fails it reports that itself and behaves as empty, so the memory layer
    keeps serving: the fallback for a Redis outage or an unusable SQLite file.
    """

    def __init__(self, front: MemoryStore, back: Store) -> None:
        self.front = front
        self.back = back
        self.where = back.where
        #: Writes go to both layers under it, so that two threads writing one key leave
        #: the same value in both (each layer's own lock alone could order them apart).
        self._writing = threading.Lock()

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        found = self.front.get_many(keys)
        missing = [key for key in keys if key not in found]
        if missing:
            fetched = self.back.get_many(missing)
            if fetched:  # a value written meanwhile is newer than the one fetched
                found.update(self.front.put_new(fetched))
        return found

    def put_many(self, items: Mapping[str, bytes]) -> None:
        with self._writing:
            self.front.put_many(items)
            self.back.put_many(items)

    def put_new(self, items: Mapping[str, bytes]) -> dict[str, bytes]:
        """Hold ``items`` where ``back`` holds nothing yet under their keys; what it holds
        after, which memory then holds too: replicas sharing ``back`` agree on the first
        writer's value, whatever each wrote or remembered before."""
        with self._writing:
            held = put_first(self.back, items)
            self.front.put_many(held)
            return held

    def close(self) -> None:
        self.back.close()
        self.front.close()
