"""Review 5 of the stores: passwords kept out of errors, the SQLite bound kept by
short-lived writers, Redis refusing writes but answering reads, URLs and options checked,
memory entries that must not outlive a newer write or the shared store's ttl."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from ctxwindow.errors import InvalidOption
from ctxwindow_stores import (
    LayeredStore,
    MemoryStore,
    RedisStore,
    SQLiteStore,
    _memory,
    cache_key,
    cache_options,
    content_hash,
    open_store,
    put_first,
    spec_problem,
)
from ctxwindow_stores._sqlite import TABLE

if TYPE_CHECKING:
    from redis_server import RedisServer

#: The fixture redis_server (tests/support, on pytest's pythonpath).
pytest_plugins = ["redis_server"]


@pytest.fixture
def caught() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        yield records


def runtime_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


# -- a password never in an error ------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "redis://:abc/SECRETPART@localhost:6392/0",
        "redis://:abc#SECRETPART@localhost:6392/0",
        "redis://:abc?SECRETPART@localhost:6392/0",
        "redis://user:abc/SECRETPART@localhost:6392/0",
        "redis://abc/SECRETPART@localhost:6392/0",
    ],
)
def test_a_password_holding_a_url_delimiter_is_in_no_error(url: str) -> None:
    """redis-py reads such a URL's host wrong ('Port could not be cast ... as abc')."""
    with pytest.raises(InvalidOption) as raised:
        open_store(url, memory_entries=10, memory_bytes=10**6)
    message = str(raised.value)
    assert "abc" not in message and "SECRETPART" not in message
    assert "localhost:6392" in message and "percent-encode" in message


def test_a_percent_encoded_password_is_taken_and_masked(redis_server: RedisServer) -> None:
    """The fix the errors advise works: the server gets the password decoded."""
    import redis

    redis.Redis.from_url(redis_server.url).config_set("requirepass", "abc/SECRET#x?y")
    url = f"redis://:abc%2FSECRET%23x%3Fy@127.0.0.1:{redis_server.port}/0"
    store = RedisStore(url)
    store.put_many({"a": b"1"})
    assert store.get_many(["a"]) == {"a": b"1"} and store.available
    assert store.where == f"redis://:***@127.0.0.1:{redis_server.port}/0"


def test_redis_py_text_quoting_the_user_info_is_not_pasted() -> None:
    """An invalid port after a password: redis-py's own text is left out."""
    with pytest.raises(InvalidOption) as raised:
        RedisStore("redis://:hunter2@localhost:notaport/0")
    assert "hunter2" not in str(raised.value) and "***" in str(raised.value)


# -- the Redis URL's database part ------------------------------------------------------
@pytest.mark.parametrize("db", ["abc", "7/extra", "1O", "-1", "0?db=x"])
def test_a_redis_database_part_that_is_not_a_number_is_refused(db: str) -> None:
    """redis-py reads it as database 0: another application's data."""
    with pytest.raises(InvalidOption, match="not a number") as raised:
        open_store(f"redis://:hunter2@localhost:6379/{db}", memory_entries=1, memory_bytes=10**6)
    assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize("url", ["redis://localhost:6379", "redis://h:1/", "redis://h/15"])
def test_redis_urls_with_a_number_or_no_database_part_are_taken(url: str) -> None:
    assert RedisStore(url).where == url


def test_a_redis_url_scheme_is_case_insensitive() -> None:
    assert spec_problem("REDIS://localhost:6379/0") is None
    store = open_store("Redis://:pw@localhost:6379/0", memory_entries=1, memory_bytes=10**6)
    assert isinstance(store, LayeredStore) and isinstance(store.back, RedisStore)
    assert "pw" not in store.where


# -- options ----------------------------------------------------------------------------
def test_a_ttl_past_what_redis_takes_is_refused() -> None:
    """Redis refuses ``SET ... EX 1e20``: every write would fail, blamed on the URL."""
    _, ttl = cache_options("a summary", None, "where")
    with pytest.raises(InvalidOption, match="cache_ttl"):
        ttl.validate("strategy 'summarize'", 1e20)
    with pytest.raises(InvalidOption, match="ttl"):
        RedisStore("redis://localhost:6379/0", ttl=1e20)


def test_the_longest_ttl_taken_is_one_redis_takes(redis_server: RedisServer) -> None:
    from ctxwindow_stores._redis import MAX_TTL

    store = RedisStore(redis_server.url, ttl=MAX_TTL)
    store.put_many({"a": b"1"})
    assert store.available and store.get_many(["a"]) == {"a": b"1"}


def test_a_cache_path_ending_in_a_separator_is_refused(tmp_path: Path) -> None:
    """It names a folder (not made yet): never a SQLite file named like the folder."""
    spec = f"{tmp_path}/cachedir/"
    with pytest.raises(InvalidOption, match="folder separator"):
        open_store(spec, memory_entries=1, memory_bytes=10**6)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bound", [0, -5, True, 2.5])
def test_sqlite_max_entries_below_one_is_refused(tmp_path: Path, bound: object) -> None:
    """0 would delete every entry at each write."""
    with pytest.raises(InvalidOption, match="max_entries"):
        SQLiteStore(tmp_path / "c.sqlite3", max_entries=bound)  # type: ignore[arg-type]


# -- the SQLite bound -------------------------------------------------------------------
def test_sqlite_bound_holds_when_each_process_writes_a_few_entries(tmp_path: Path) -> None:
    """100 short-lived writers (CLI runs) of 4 entries each, the bound checked every 5
    writes: each checks at its first writes with probability 4/5, so the file stays
    near its bound (past it by more than 60 entries: odds below 1e-10)."""
    path = tmp_path / "c.sqlite3"
    for run in range(100):
        store = SQLiteStore(path, max_entries=100)
        store.put_many({cache_key("x", "m", content_hash(f"{run}-{i}")): b"v" for i in range(4)})
        store.close()
    with sqlite3.connect(path) as db:
        count = db.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0]
    assert 90 <= count <= 160


# -- Redis refusing writes, answering reads ---------------------------------------------
def _refusing_writes(redis_server: RedisServer, how: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_server.url)
    if how == "full":
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", "1")  # any write is past it
    else:  # a replica of a primary that is not there: serves reads, refuses writes
        client.replicaof("127.0.0.1", "1")


@pytest.mark.parametrize(
    ("how", "advice"),
    [("full", "allkeys-lru"), ("replica", "point the URL at the primary")],
)
def test_a_write_redis_refuses_leaves_reads_going_with_advice_that_fits(
    redis_server: RedisServer, caught: list[warnings.WarningMessage], how: str, advice: str
) -> None:
    back = RedisStore(redis_server.url, retry_after=60)
    back.put_many({"held": b"1"})
    _refusing_writes(redis_server, how)
    store = LayeredStore(MemoryStore(), back)
    store.put_many({"new": b"2"})
    assert put_first(store, {"newer": b"3"}) == {"newer": b"3"}
    fresh = LayeredStore(MemoryStore(), back)
    assert fresh.get_many(["held", "new"]) == {"held": b"1"}  # read from the server
    assert back.available and back.outages == 0
    messages = runtime_warnings(caught)
    assert len(messages) == 1 and advice in messages[0]
    assert "refused a write" in messages[0] and "password" not in messages[0]


# -- memory entries ---------------------------------------------------------------------
def test_an_overwrite_too_big_to_keep_drops_the_old_value() -> None:
    memory = MemoryStore(max_entries=10, max_bytes=1000)
    memory.put_many({"k": b"old"})
    memory.put_many({"k": b"N" * 2000})
    assert memory.get_many(["k"]) == {} and len(memory) == 0 and memory.size_bytes == 0
    memory.put_many({"k": b"old"})
    assert memory.put_new({"k": b"N" * 2000}) == {"k": b"old"}  # held: not overwritten


def _clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The memory layer's clock, moved by the test (no sleeping)."""
    now = [time.monotonic()]
    monkeypatch.setattr(_memory, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def test_memory_entries_expire_with_the_stores_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    now = _clock(monkeypatch)
    memory = MemoryStore(ttl=2)
    memory.put_many({"a": b"1"})
    now[0] += 1.9
    assert memory.get_many(["a"]) == {"a": b"1"}
    now[0] += 0.2
    assert memory.get_many(["a"]) == {} and len(memory) == 0 and memory.size_bytes == 0
    assert memory.put_new({"a": b"2"}) == {"a": b"2"}  # an expired value holds nothing


def test_replicas_agree_after_the_redis_ttl_passes(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once Redis has dropped a summary, a replica reads (and writes) Redis again
    instead of serving its own value from memory, so a new replica gets the same one."""
    import redis

    now = _clock(monkeypatch)
    client = redis.Redis.from_url(redis_server.url)
    replica_a = open_store(redis_server.url, memory_entries=10, memory_bytes=10**6, ttl=60)
    key = cache_key("summary", "s", "10:abc")
    assert put_first(replica_a, {key: b"first"}) == {key: b"first"}
    client.delete(key)  # what Redis does once the ttl passed
    now[0] += 61  # and the memory in front: its entries as old
    assert replica_a.get_many([key]) == {}  # so the cache writes again
    assert put_first(replica_a, {key: b"second"}) == {key: b"second"}
    replica_b = open_store(redis_server.url, memory_entries=10, memory_bytes=10**6, ttl=60)
    assert put_first(replica_b, {key: b"third"}) == {key: b"second"}
    assert replica_a.get_many([key]) == replica_b.get_many([key]) == {key: b"second"}
    assert 0 < client.ttl(key) <= 60


def test_sqlite_and_memory_caches_keep_entries_whatever_the_ttl(tmp_path: Path) -> None:
    """``cache_ttl`` is Redis's (documented): a file or memory-only cache ignores it."""
    for spec in (None, str(tmp_path / "c.sqlite3")):
        store = open_store(spec, memory_entries=10, memory_bytes=10**6, ttl=1)
        front = store.front if isinstance(store, LayeredStore) else store
        assert isinstance(front, MemoryStore) and front.ttl is None
    _, ttl = cache_options("a summary", None, "where")
    assert "ignores it" in ttl.help


# -- SQLite: reads while a write waits ---------------------------------------------------
def test_sqlite_reads_of_other_threads_go_on_while_a_write_waits_for_the_lock(
    tmp_path: Path, caught: list[warnings.WarningMessage]
) -> None:
    """Another process holds the write lock: this store's write waits for it (up to
    ``timeout``), and meanwhile another thread's read is answered, not held behind it."""
    path = tmp_path / "c.sqlite3"
    store = SQLiteStore(path, timeout=10)
    held = {f"k{i}": b"v" for i in range(10)}
    store.put_many(held)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    refused = threading.Event()  # set once the writer found the lock taken: it waits
    begin = store._begin

    def noted_begin(db: sqlite3.Connection, final: bool) -> bool:
        begun = begin(db, final)
        if not begun:
            refused.set()
        return begun

    store._begin = noted_begin  # type: ignore[method-assign]
    writer = threading.Thread(target=store.put_many, args=({"late": b"w"},))
    writer.start()
    try:
        assert refused.wait(10), "the writer never found the lock taken"
        assert store.get_many(list(held)) == held
        assert writer.is_alive()  # still waiting: the read did not wait for it to end
    finally:
        other.execute("ROLLBACK")
        other.close()
        writer.join()
    assert store.get_many(["late"]) == {"late": b"w"} and runtime_warnings(caught) == []


def test_sqlite_write_still_gives_up_after_its_timeout(
    tmp_path: Path, caught: list[warnings.WarningMessage]
) -> None:
    path = tmp_path / "c.sqlite3"
    store = SQLiteStore(path, timeout=0.2)
    store.put_many({"a": b"1"})
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        store.put_many({"b": b"2"})
        assert store.get_many(["a", "b"]) == {"a": b"1"}
    finally:
        other.execute("ROLLBACK")
        other.close()
    messages = runtime_warnings(caught)
    assert len(messages) == 1 and "locked" in messages[0] and "writes are skipped" in messages[0]


def test_opening_a_sqlite_store_leaves_the_global_random_numbers_alone(tmp_path: Path) -> None:
    """A seeded program gets the same numbers whether or not it opened a cache (the
    store's start of its write count once drew from the global generator)."""
    random.seed(42)
    expected = [random.random() for _ in range(3)]
    random.seed(42)
    SQLiteStore(tmp_path / "c.sqlite3")
    assert [random.random() for _ in range(3)] == expected
