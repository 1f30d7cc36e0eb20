"""Memory in front of a persistent or shared store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxwindow_stores import Store
    from ctxwindow_stores._memory import MemoryStore


class LayeredStore:
    """Reads memory first, then ``back`` (remembering what it found there); writes both.

    If ``back`` fails it reports that itself and behaves as empty, so the memory layer
    keeps serving: the fallback for a Redis outage or an unusable SQLite file.
    """

    def __init__(self, front: MemoryStore, back: Store) -> None:
        self.front = front
        self.back = back
        self.where = back.where

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        found = self.front.get_many(keys)
        missing = [key for key in keys if key not in found]
        if missing:
            fetched = self.back.get_many(missing)
            if fetched:
                self.front.put_many(fetched)
                found.update(fetched)
        return found

    def put_many(self, items: Mapping[str, bytes]) -> None:
        self.front.put_many(items)
        self.back.put_many(items)

    def close(self) -> None:
        self.back.close()
        self.front.close()
