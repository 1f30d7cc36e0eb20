"""First writer wins: the write a cache makes when its value depends on what it had
cached before (a rolling summary), so that replicas sharing a store end up agreeing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def put_first(store: Any, items: Mapping[str, bytes]) -> dict[str, bytes]:
    """Hold ``items`` under the keys that hold nothing yet, and give back what each of
    their keys holds after: another writer's value where it was first. A store without
    ``put_new`` (one written before it existed) is written with ``put_many``, and its
    values come back as given."""
    put_new = getattr(store, "put_new", None)
    if callable(put_new):
        held: dict[str, bytes] = put_new(items)
        return held
    store.put_many(items)
    return dict(items)
