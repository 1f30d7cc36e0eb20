"""Key-value stores for caches: bytes in, bytes out, never pickle.

Caches (embeddings, summaries) name an entry by a key built with :func:`cache_key`,
``ctxwindow:v1:<kind>:<model or summarizer>:<digest>`` (a summary's digest is its size
and a hash of what it covers), so message text never appears in a key, and store values
they encode themselves (raw float32, JSON).

:func:`open_store` turns a cache option into a store:

- ``None`` or ``"memory"``: a bounded in-memory LRU only;
- ``"redis://host:port/db"`` (``rediss://``, ``unix://``): memory in front of Redis,
  shared by every process that names the same server;
- anything else: a SQLite file path, memory in front of it; but ``"default"``, which
  only a strategy that defines it (``semantic``: its file in the user cache folder)
  accepts, and turns into a path before it opens a store.

A cache whose values depend on what it cached before (rolling summaries) writes with
:func:`put_first`: the first value written under a key wins and every writer gets it
back, so replicas sharing SQLite or Redis agree (each store's ``put_new``).

Persistent stores never raise from ``get_many``, ``put_many`` or ``put_new``: a cache
must never be the reason a window fails. A problem (a corrupt, locked or read-only
file, an unreachable server) is reported once with a ``RuntimeWarning`` naming the
place and what to do, and the cache carries on with what still works.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from ctxwindow import Option
from ctxwindow.errors import InvalidOption
from ctxwindow_stores._layered import LayeredStore
from ctxwindow_stores._memory import MemoryStore
from ctxwindow_stores._put import put_first
from ctxwindow_stores._redis import MAX_TTL, RedisStore
from ctxwindow_stores._sqlite import SQLiteStore

__all__ = [
    "KEY_PREFIX",
    "LayeredStore",
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "Store",
    "as_store",
    "cache_key",
    "cache_options",
    "content_hash",
    "is_redis_url",
    "open_store",
    "put_first",
    "spec_problem",
]

#: Every key starts with this; bump the version when a value format changes.
KEY_PREFIX = "ctxwindow:v1"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
#: A strategy's word for its own default file (``semantic``: the user cache folder),
#: never a file path: elsewhere it is an error, not a file of that name made here.
RESERVED = "default"


@runtime_checkable
class Store(Protocol):
    """What a cache needs from where it keeps entries."""

    #: Where the entries live, for messages (a path, or a URL without its password).
    where: str

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        """The values held for ``keys``; keys not held are left out."""
        ...

    def put_many(self, items: Mapping[str, bytes]) -> None:
        """Hold ``items``, replacing values already held under the same keys."""
        ...

    def close(self) -> None: ...


def content_hash(*parts: str) -> str:
    """A hex digest standing for ``parts`` (message text never goes into a key)."""
    if len(parts) == 1:  # the common case, one text: no framing needed
        return hashlib.sha256(parts[0].encode("utf-8", "surrogatepass")).hexdigest()[:40]
    digest = hashlib.sha256()
    for part in parts:
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()[:40]


def cache_key(kind: str, namespace: str, digest: str) -> str:
    """``ctxwindow:v1:<kind>:<namespace>:<digest>``; ``namespace`` is the model or
    summarizer the value came from, so entries of two models never meet; ``digest``
    is the content's hash (a summary's: ``<size>:<hash>``)."""
    return f"{KEY_PREFIX}:{kind}:{namespace}:{digest}"


def is_redis_url(spec: object) -> bool:
    """Whether ``spec`` is a Redis URL (its scheme in any case: ``REDIS://`` too)."""
    return isinstance(spec, str) and spec.lower().startswith(REDIS_SCHEMES)


def spec_problem(spec: object) -> str | None:
    """Why ``spec`` cannot name a cache store, or None if it can (for option checks)."""
    if spec is None or spec == "memory":
        return None
    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        return "must be 'memory', a SQLite file path or a redis:// URL"
    if spec == RESERVED:
        return (
            "must be 'memory', a SQLite file path or a redis:// URL: 'default' (a file in "
            "the user cache folder) is the semantic strategy's own, not this cache's; "
            "write './default' for a file of that name here"
        )
    text = str(spec)
    if "://" in text and not is_redis_url(text):
        scheme = text.split("://", maxsplit=1)[0]
        return f"names an unknown kind of store ({scheme!r}); use a redis:// URL"
    return None if is_redis_url(text) else _path_problem(text)


def _path_problem(text: str) -> str | None:
    """Why ``text`` cannot name a SQLite file, or None: a folder, or what must be one
    (a path ending in a separator, which would otherwise become a file of that name)."""
    if text.endswith(("/", os.sep)):
        return (
            f"ends with a folder separator ({text!r}); name a file, such as "
            f"{text + 'cache.sqlite3'!r}"
        )
    if Path(text).expanduser().is_dir():
        return f"names a folder ({text!r}); name a file in it, such as cache.sqlite3"
    return None


def cache_options(entry: str, default: str | None, where: str) -> tuple[Option, Option]:
    """A caching strategy's ``cache`` option, described by ``where``, and its
    ``cache_ttl`` for ``entry`` (one cached value: "an embedding"). The default always
    passes the check: a strategy's own keyword (``'default'``: its file) included; a
    strategy without that default refuses ``'default'``."""

    def check(value: str) -> str | None:
        return None if value == default else spec_problem(value)

    return (
        Option("cache", str, default, where, nullable=True, check=check),
        Option(
            "cache_ttl",
            float,
            None,
            f"Seconds {entry} lives in a Redis cache and in the memory in front of it "
            "(None: until Redis evicts it); a SQLite or memory-only cache ignores it.",
            nullable=True,
            minimum=1.0,
            maximum=float(MAX_TTL),
        ),
    )


def open_store(
    spec: str | Path | None,
    *,
    memory_entries: int,
    memory_bytes: int,
    ttl: float | None = None,
) -> Store:
    """The store a cache option names: memory only, or memory in front of Redis or SQLite.

    ``memory_entries`` and ``memory_bytes`` bound the in-memory layer in every case;
    ``ttl`` (seconds) applies to Redis entries and to the memory in front of Redis
    (replicas then read again what expired), never to SQLite or memory-only caches,
    which keep entries until their bound pushes them out. A spec that cannot name a store
    raises InvalidOption.
    """
    problem = spec_problem(spec)
    if problem:
        raise InvalidOption(f"cache {str(spec)!r} {problem}")
    if spec is None or spec == "memory":
        return MemoryStore(max_entries=memory_entries, max_bytes=memory_bytes)
    if is_redis_url(spec):
        back = RedisStore(str(spec), ttl=ttl)  # checks ttl
        memory = MemoryStore(max_entries=memory_entries, max_bytes=memory_bytes, ttl=back.ttl)
        return LayeredStore(memory, back)
    memory = MemoryStore(max_entries=memory_entries, max_bytes=memory_bytes)
    return LayeredStore(memory, SQLiteStore(spec))


def as_store(
    where: str | Path | Store | None,
    *,
    memory_entries: int,
    memory_bytes: int,
    ttl: float | None = None,
) -> Store:
    """A cache's ``where``: a ready Store as it is, else the store :func:`open_store`
    opens for that spec."""
    if isinstance(where, (str, Path)) or where is None:
        return open_store(where, memory_entries=memory_entries, memory_bytes=memory_bytes, ttl=ttl)
    return where
