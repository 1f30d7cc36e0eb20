"""The cache stores against real SQLite files and a real redis-server: bounds, failures
(each reported once, none raised), concurrency (no lost writes), and no pickle."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ctxwindow.testing import run_threads
from ctxwindow_stores import (
    LayeredStore,
    MemoryStore,
    SQLiteStore,
    Store,
    cache_key,
    content_hash,
    open_store,
    put_first,
)
from ctxwindow_stores._sqlite import _SCHEMA, PAGE_CACHE_KIB, TABLE

if TYPE_CHECKING:
    from redis_server import RedisServer

#: The fixture redis_server (tests/support, on pytest's pythonpath).
pytest_plugins = ["redis_server"]

#: Where the redis-server launcher lives (tests/support, on pytest's pythonpath).
SUPPORT = Path(__file__).resolve().parents[3] / "tests" / "support"
STORES = Path(__file__).resolve().parents[1]

HOSTILE_KEY = "ctxwindow:v1:x:m:'); DROP TABLE ctxwindow_cache; --"


def runtime_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.fixture
def caught() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        yield records


def values(count: int, prefix: str = "k") -> dict[str, bytes]:
    return {f"{prefix}{i}": f"value {i} of {prefix}".encode() * 3 for i in range(count)}


# -- keys ------------------------------------------------------------------------------
def test_keys_are_namespaced_and_never_hold_the_text() -> None:
    text = "my secret plan"
    key = cache_key("embedding", "model-a", content_hash(text))
    assert key.startswith("ctxwindow:v1:embedding:model-a:")
    assert "secret" not in key
    assert content_hash("ab", "c") != content_hash("a", "bc")  # parts are length-framed


# -- memory ----------------------------------------------------------------------------
def test_memory_store_is_a_bounded_lru_by_entries() -> None:
    store = MemoryStore(max_entries=100, max_bytes=10**9)
    store.put_many(values(50))
    for round_ in range(20):
        store.get_many(["k0"])  # kept in use: never the least recently used
        store.put_many(values(50, prefix=f"r{round_}-"))
        assert len(store) <= 100
    assert store.get_many(["k0"]) == {"k0": values(1)["k0"]}
    assert store.get_many(["k1"]) == {}  # the oldest unused went first
    last = values(50, prefix="r19-")
    assert store.get_many(list(last)) == last  # everything recent is there and right


def test_memory_store_is_bounded_by_bytes() -> None:
    store = MemoryStore(max_entries=10**6, max_bytes=200_000)
    for batch in range(50):
        store.put_many({f"b{batch}-{i}": os.urandom(1000) for i in range(20)})
        assert store.size_bytes <= 200_000
    assert 100 < len(store) < 200
    store.put_many({"huge": b"x" * 300_000})  # bigger than the whole bound: not kept
    assert store.get_many(["huge"]) == {} and store.size_bytes <= 200_000


def test_memory_store_from_many_threads_loses_nothing_within_its_bound() -> None:
    store = MemoryStore(max_entries=100_000, max_bytes=10**9)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(400):
                store.put_many({f"w{worker}-{i}": f"{worker}:{i}".encode()})
                got = store.get_many([f"w{worker}-{i // 2}"])
                assert got == {f"w{worker}-{i // 2}": f"{worker}:{i // 2}".encode()}
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    run_threads(work, 8)
    assert not errors and len(store) == 8 * 400


class _HeldBack(MemoryStore):
    """A back layer whose first write waits until the test lets it go on."""

    where = "held"

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.go_on = threading.Event(), threading.Event()
        self.fetched: dict[str, bytes] = {}
        self.while_fetching: Any = None

    def put_many(self, items: Any) -> None:
        if not self.entered.is_set():
            self.entered.set()
            assert self.go_on.wait(10)
        super().put_many(items)

    def get_many(self, keys: Any) -> dict[str, bytes]:
        if self.while_fetching is not None:
            self.while_fetching()
        return {**super().get_many(keys), **self.fetched}


def test_layered_store_layers_agree_when_two_threads_write_one_key() -> None:
    """Without one lock over both layers, the second writer could finish in between:
    memory would hold its value and the back store the first writer's, so this process
    and the next (reading the file) would see two different summaries for one key."""
    back = _HeldBack()
    store = LayeredStore(MemoryStore(), back)
    first = threading.Thread(target=store.put_many, args=({"k": b"first"},), daemon=True)
    first.start()
    assert back.entered.wait(10)
    second = threading.Thread(target=store.put_many, args=({"k": b"second"},), daemon=True)
    second.start()
    second.join(0.3)  # done by now if nothing holds it back
    back.go_on.set()
    first.join(10)
    second.join(10)
    assert store.front.get_many(["k"]) == back.get_many(["k"]) == {"k": b"second"}


def test_layered_store_read_does_not_overwrite_a_newer_write_in_memory() -> None:
    """A read that missed memory and fetched an older value from the back store while
    another thread wrote a newer one returns, and leaves in memory, the newer one."""
    back = _HeldBack()
    back.fetched = {"k": b"older"}
    store = LayeredStore(MemoryStore(), back)
    back.while_fetching = lambda: store.front.put_many({"k": b"newer"})  # the other write
    assert store.get_many(["k"]) == {"k": b"newer"}
    assert store.front.get_many(["k"]) == {"k": b"newer"}


# -- first writer wins ----------------------------------------------------------------
@pytest.fixture(params=["sqlite", "redis"])
def shared_spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where two replicas share their entries: one SQLite file, or one Redis server."""
    if request.param == "sqlite":
        return str(tmp_path / "shared.sqlite3")
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


def test_replicas_agree_on_the_first_value_written_under_a_key(shared_spec: str) -> None:
    """Two replicas (each its own memory layer, one shared store) write different values
    under one key: both get back, and from then on read, the first one written; a key
    the other wrote nothing under takes each writer's own value."""
    first, second = (
        open_store(shared_spec, memory_entries=10, memory_bytes=10**6) for _ in range(2)
    )
    assert isinstance(second, LayeredStore)
    second.front.put_many({"k": b"remembered"})  # its memory held a value of its own
    assert put_first(first, {"k": b"first"}) == {"k": b"first"}
    assert put_first(second, {"k": b"second", "other": b"own"}) == {
        "k": b"first",
        "other": b"own",
    }
    for replica in (first, second):
        assert replica.get_many(["k", "other"]) == {"k": b"first", "other": b"own"}
    fresh = open_store(shared_spec, memory_entries=10, memory_bytes=10**6)
    assert fresh.get_many(["k", "other"]) == {"k": b"first", "other": b"own"}


def test_first_writer_wins_across_many_threads(shared_spec: str) -> None:
    """Eight writers racing on the same keys, each through its own store: every one gets
    back the same value per key, and it is what the shared store holds."""
    stores = [open_store(shared_spec, memory_entries=100, memory_bytes=10**6) for _ in range(8)]
    keys = [f"race{i}" for i in range(20)]
    results: dict[int, dict[str, bytes]] = {}

    def write(number: int) -> None:
        results[number] = put_first(stores[number], {k: f"{k} by {number}".encode() for k in keys})

    run_threads(write, 8)
    winners = results[0]
    assert all(result == winners for result in results.values())
    assert open_store(shared_spec, memory_entries=100, memory_bytes=10**6).get_many(keys) == winners


def test_redis_first_writer_keeps_its_ttl(redis_server: RedisServer) -> None:
    import redis

    store = open_store(redis_server.url, memory_entries=10, memory_bytes=10**6, ttl=600)
    put_first(store, {"k": b"v"})
    assert 0 < redis.Redis.from_url(redis_server.url).ttl("k") <= 600


def test_put_first_writes_a_store_without_put_new_plainly() -> None:
    """A store written before put_new existed still takes the write; its values come back."""

    class OldStore:
        where = "old"

        def __init__(self) -> None:
            self.held: dict[str, bytes] = {"k": b"held"}

        def get_many(self, keys: Any) -> dict[str, bytes]:
            return {k: self.held[k] for k in keys if k in self.held}

        def put_many(self, items: Any) -> None:
            self.held.update(items)

        def close(self) -> None:
            pass

    old = OldStore()
    assert put_first(old, {"k": b"new"}) == {"k": b"new"}
    assert old.held == {"k": b"new"}


def test_unwritable_sqlite_gives_the_writers_own_value_back(tmp_path: Path) -> None:
    """A store that cannot write (here: the file is not a database, left alone) still
    answers put_first, with the value given, so the cache carries on from memory."""
    path = tmp_path / "notes.txt"
    path.write_text("not a database")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = open_store(str(path), memory_entries=10, memory_bytes=10**6)
        assert put_first(store, {"k": b"mine"}) == {"k": b"mine"}
        assert store.get_many(["k"]) == {"k": b"mine"}


# -- SQLite ----------------------------------------------------------------------------
def test_sqlite_round_trip_is_plain_bytes_with_parameterized_queries(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    store = SQLiteStore(path)
    items = {**values(1200), HOSTILE_KEY: b"\x80\x04not a pickle, just bytes"}
    store.put_many(items)
    store.close()
    again = SQLiteStore(path)
    assert again.get_many([*items, "absent"]) == items  # more keys than one SELECT takes
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        kinds = {row[0] for row in db.execute("SELECT typeof(value) FROM ctxwindow_cache")}
    assert kinds == {"blob"}


def test_sqlite_commits_without_waiting_on_the_disk(tmp_path: Path) -> None:
    """WAL with synchronous=NORMAL: a cache's write (one a chat turn) does not fsync;
    the file stays sound after a crash, only the newest writes may be lost."""
    store = SQLiteStore(tmp_path / "cache.sqlite3")
    store.put_many(values(3))
    db = store._db
    assert db is not None
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL (FULL is 2)


def test_sqlite_connections_cache_enough_pages_for_a_full_file(tmp_path: Path) -> None:
    """SQLite's default 2 MiB page cache kept reading a large file's inner B-tree
    pages from the OS again: 0.5 ms a lookup in a 280 MB cache (a turn of ``semantic``
    looks its new message up), 0.04 ms with PAGE_CACHE_KIB. Both kinds of connection
    set it: the one that writes and the read-only one."""
    store = SQLiteStore(tmp_path / "cache.sqlite3")
    store.put_many(values(3))
    assert store._db is not None
    reader = store._connect_read_only()
    try:
        for db in (store._db, reader):
            assert db.execute("PRAGMA cache_size").fetchone()[0] == -PAGE_CACHE_KIB
    finally:
        reader.close()


def test_sqlite_file_that_is_not_a_database_is_left_alone_with_one_warning(
    tmp_path: Path, caught: list[warnings.WarningMessage]
) -> None:
    path = tmp_path / "notes.txt"
    garbage = os.urandom(64) + b"my notes, not a cache" * 500
    path.write_bytes(garbage)
    store = LayeredStore(MemoryStore(), SQLiteStore(path))
    for _ in range(3):
        store.put_many({"a": b"1"})
        assert store.get_many(["a"]) == {"a": b"1"}  # memory keeps serving
    assert store.back.get_many(["a"]) == {}
    messages = runtime_warnings(caught)
    assert len(messages) == 1
    assert str(path) in messages[0] and "not a SQLite database" in messages[0]
    assert path.read_bytes() == garbage  # never touched


def test_another_applications_database_is_left_untouched_with_one_warning(
    tmp_path: Path, caught: list[warnings.WarningMessage]
) -> None:
    path = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO users (name) VALUES ('alma')")
        db.commit()
    before = path.read_bytes()
    store = LayeredStore(MemoryStore(), SQLiteStore(path))
    for _ in range(3):
        store.put_many({"a": b"1"})
        assert store.get_many(["a"]) == {"a": b"1"}  # memory keeps serving
    messages = runtime_warnings(caught)
    assert len(messages) == 1
    assert str(path) in messages[0] and "'users'" in messages[0]
    assert "a file of its own" in messages[0]
    assert path.read_bytes() == before  # no table added, journal mode not switched to WAL
    assert not Path(f"{path}-wal").exists()


def _database(path: Path, count: int = 400) -> dict[str, bytes]:
    items = {f"k{i}": os.urandom(1500) for i in range(count)}
    store = SQLiteStore(path)
    store.put_many(items)
    store.close()  # checkpoints the WAL into the file
    return items


@pytest.mark.parametrize("damage", ["truncated mid-page", "pages overwritten"])
def test_damaged_sqlite_file_is_moved_aside_and_rebuilt_with_one_warning(
    tmp_path: Path, caught: list[warnings.WarningMessage], damage: str
) -> None:
    path = tmp_path / "cache.sqlite3"
    items = _database(path)
    size = path.stat().st_size
    with path.open("r+b") as file:
        if damage == "truncated mid-page":
            file.truncate(size // 2 + 1234)
        else:
            file.seek(4096)
            file.write(os.urandom(size - 8192))
    damaged = path.read_bytes()
    store = SQLiteStore(path)
    found = store.get_many(list(items))
    assert all(items[key] == value for key, value in found.items())  # nothing wrong comes back
    store.put_many({"new": b"fresh"})
    assert store.get_many(["new"]) == {"new": b"fresh"}
    messages = runtime_warnings(caught)
    assert len(messages) == 1 and str(path) in messages[0] and "moved it to" in messages[0]
    assert Path(f"{path}.corrupt").read_bytes() == damaged  # kept, not deleted
    assert SQLiteStore(path).get_many(["new"]) == {"new": b"fresh"}  # a real new database


def test_sqlite_locked_by_an_exclusive_transaction_skips_then_recovers(
    tmp_path: Path, caught: list[warnings.WarningMessage]
) -> None:
    path = tmp_path / "cache.sqlite3"
    other = sqlite3.connect(path, isolation_level=None)  # another connection, rollback journal
    other.execute(_SCHEMA[0])  # the cache's own table (a file with others' is refused)
    other.execute("BEGIN EXCLUSIVE")
    other.execute(f"INSERT INTO {TABLE} (key, value) VALUES ('theirs', x'01')")
    store = SQLiteStore(path, timeout=0.05, retry_after=0.2)
    for _ in range(5):
        assert store.get_many(["a"]) == {}  # locked: a miss, not an error
        store.put_many({"c": b"3"})
    messages = runtime_warnings(caught)
    assert len(messages) == 1 and "locked" in messages[0] and str(path) in messages[0]
    other.execute("COMMIT")
    time.sleep(0.3)  # past retry_after: the store tries the file again
    store.put_many({"c": b"3"})
    assert store.get_many(["c"]) == {"c": b"3"}
    assert store.get_many(["theirs"]) == {"theirs": b"\x01"}  # theirs, intact
    other.close()


def test_sqlite_file_is_pruned_to_its_entry_bound_oldest_first(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    store = SQLiteStore(path, max_entries=100)
    for batch in range(100):
        store.put_many({f"b{batch}-{i}": b"v" for i in range(10)})
        assert len(store) <= 100 + 5 + 10  # checked every 5 writes
    newest = {f"b99-{i}": b"v" for i in range(10)}
    assert store.get_many(list(newest)) == newest
    assert store.get_many(["b0-0", "b50-0"]) == {}


def test_sqlite_in_wal_mode_reads_while_another_connection_holds_the_write_lock(
    tmp_path: Path, caught: list[warnings.WarningMessage]
) -> None:
    path = tmp_path / "cache.sqlite3"
    store = SQLiteStore(path, timeout=0.05, retry_after=60)
    store.put_many({"a": b"1"})
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        store.put_many({"b": b"2"})  # cannot write: skipped
        store.put_many({"c": b"3"})
        assert store.get_many(["a", "b"]) == {"a": b"1"}  # reads still run
    finally:
        other.execute("ROLLBACK")
        other.close()
    messages = runtime_warnings(caught)
    assert len(messages) == 1 and "writes are skipped" in messages[0]


READ_ONLY_CHECK = """
import json, sys, warnings
warnings.simplefilter("always")
from ctxwindow_stores import SQLiteStore
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    store = SQLiteStore(sys.argv[1])
    before = store.get_many(["a"])
    for _ in range(3):
        store.put_many({"b": b"2"})
    after = store.get_many(["a", "b"])
print(json.dumps({
    "before": {k: v.decode() for k, v in before.items()},
    "after": {k: v.decode() for k, v in after.items()},
    "warnings": [str(w.message) for w in caught],
}))
"""


def _unprivileged(script: str, *args: str) -> dict[str, Any]:
    """Run ``script`` where file permissions apply (root here ignores them otherwise)."""
    command = [sys.executable, "-c", script, *args]
    if os.geteuid() == 0:
        command = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("what", ["file", "folder"])
def test_read_only_sqlite_is_read_and_never_written(tmp_path: Path, what: str) -> None:
    folder = tmp_path / "cache"
    path = folder / "cache.sqlite3"
    SQLiteStore(path).put_many({"a": b"1"})
    path.chmod(0o444)
    if what == "folder":
        folder.chmod(0o555)
    try:
        result = _unprivileged(READ_ONLY_CHECK, str(path))
    finally:
        folder.chmod(0o755)
        path.chmod(0o644)
    assert result["before"] == {"a": "1"} and result["after"] == {"a": "1"}
    assert len(result["warnings"]) == 1 and "read-only" in result["warnings"][0]


LEAVE_WAL_BEHIND = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("SELECT count(*) FROM ctxwindow_cache").fetchone()
os._exit(0)  # as a killed process does: its -wal and -shm files stay
"""


def test_wal_sqlite_whose_shm_file_cannot_be_made_is_read(tmp_path: Path) -> None:
    """A -wal file left behind in a folder made read-only, its -shm file gone: opening
    for writing fails with CANTOPEN (not READONLY), and the file is still read."""
    folder = tmp_path / "cache"
    path = folder / "cache.sqlite3"
    store = SQLiteStore(path)
    store.put_many({"a": b"1"})
    store.close()
    subprocess.run([sys.executable, "-c", LEAVE_WAL_BEHIND, str(path)], check=True, timeout=60)
    assert Path(f"{path}-wal").exists()
    Path(f"{path}-shm").unlink()
    folder.chmod(0o555)
    try:
        result = _unprivileged(READ_ONLY_CHECK, str(path))
    finally:
        folder.chmod(0o755)
    assert result["before"] == {"a": "1"} and result["after"] == {"a": "1"}
    assert len(result["warnings"]) == 1 and "read-only" in result["warnings"][0]


def test_sqlite_on_a_read_only_filesystem_is_read_and_never_written(tmp_path: Path) -> None:
    """The cache folder bind-mounted read-only (in a private mount namespace, gone with
    the process): even root cannot make the -shm file there, and the file is read."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a read-only folder")
    if subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False).returncode:
        pytest.skip("no mount namespaces here")
    folder, mounted = tmp_path / "cache", tmp_path / "mounted"
    mounted.mkdir()
    store = SQLiteStore(folder / "cache.sqlite3")
    store.put_many({"a": b"1"})
    store.close()
    mount_then_check = (
        'mount --bind -o ro "$1" "$2" || exit 77; exec "$3" -c "$4" "$2/cache.sqlite3"'
    )
    command = ["unshare", "--mount", "sh", "-c", mount_then_check, "sh"]
    done = subprocess.run(
        [*command, str(folder), str(mounted), sys.executable, READ_ONLY_CHECK],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode == 77:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["before"] == {"a": "1"} and result["after"] == {"a": "1"}
    assert len(result["warnings"]) == 1 and "read-only" in result["warnings"][0]


def test_sqlite_deleted_while_open_is_recreated(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    store = SQLiteStore(path)
    store.put_many({"a": b"1"})
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    store.put_many({"b": b"2"})
    assert store.get_many(["a", "b"]) == {"b": b"2"}
    assert SQLiteStore(path).get_many(["a", "b"]) == {"b": b"2"}  # on disk, not an orphan


DISK_FULL_CHECK = """
import json, os, resource, signal, sys, warnings
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, like ENOSPC
from ctxwindow_stores import SQLiteStore
path = sys.argv[1]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    store = SQLiteStore(path)
    store.put_many({"a": b"1"})
    limit = os.path.getsize(path) + os.path.getsize(path + "-wal") + 60_000
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    for batch in range(40):
        store.put_many({f"k{batch}-{i}": os.urandom(2000) for i in range(20)})
    kept = store.get_many(["a"])
print(json.dumps({"kept": list(kept), "warnings": [str(w.message) for w in caught]}))
"""


def test_sqlite_disk_full_stops_writing_keeps_reading_one_warning(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    done = subprocess.run(
        [sys.executable, "-c", DISK_FULL_CHECK, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["kept"] == ["a"]
    assert len(result["warnings"]) == 1 and str(path) in result["warnings"][0]


def write_from_threads(store: Store) -> dict[str, bytes]:
    """8 threads at once each write 30 batches of 5 entries and read each batch back at
    once; all that was written."""
    written: dict[str, bytes] = {}
    lock = threading.Lock()

    def work(worker: int) -> None:
        for batch in range(30):
            items = {f"w{worker}-{batch}-{i}": os.urandom(64) for i in range(5)}
            store.put_many(items)
            with lock:
                written.update(items)
            assert store.get_many(list(items)) == items

    run_threads(work, 8)
    assert len(written) == 8 * 150
    return written


def test_sqlite_from_many_threads_loses_no_writes(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    store = open_store(path, memory_entries=100, memory_bytes=10**6)  # most reads miss memory
    written = write_from_threads(store)
    assert SQLiteStore(path).get_many(list(written)) == written


WRITER = """
import os, sys
from ctxwindow_stores import SQLiteStore
store = SQLiteStore(sys.argv[1], timeout=30)
name = sys.argv[2]
for batch in range(60):
    store.put_many({f"{name}-{batch}-{i}": f"{name}:{batch}:{i}".encode() for i in range(10)})
"""


def test_two_processes_writing_one_sqlite_file_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning either: nothing skipped
        writers = [
            subprocess.Popen([sys.executable, "-W", "error", "-c", WRITER, str(path), name])
            for name in ("p1", "p2")
        ]
        assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    expected = {
        f"{name}-{batch}-{i}": f"{name}:{batch}:{i}".encode()
        for name in ("p1", "p2")
        for batch in range(60)
        for i in range(10)
    }
    assert SQLiteStore(path).get_many(list(expected)) == expected


# -- Redis -----------------------------------------------------------------------------
def test_redis_round_trip_with_ttl_and_no_text_in_keys(redis_server: RedisServer) -> None:
    import redis

    store = open_store(redis_server.url, memory_entries=10, memory_bytes=10**6, ttl=600)
    key = cache_key("embedding", "model-a", content_hash("hello there"))
    store.put_many({key: b"\x00\x01bytes"})
    client = redis.Redis.from_url(redis_server.url)
    assert client.get(key) == b"\x00\x01bytes"
    assert 0 < client.ttl(key) <= 600
    assert all(b"hello" not in name for name in client.keys("*"))
    fresh = open_store(redis_server.url, memory_entries=10, memory_bytes=10**6)
    assert fresh.get_many([key, "absent"]) == {key: b"\x00\x01bytes"}


def test_redis_outage_falls_back_to_memory_warns_once_and_reconnects(
    redis_server: RedisServer,
    caught: list[warnings.WarningMessage],
) -> None:
    from ctxwindow_stores import RedisStore

    back = RedisStore(redis_server.url, timeout=0.5, retry_after=0.2)
    store = LayeredStore(MemoryStore(), back)
    store.put_many({"a": b"1"})
    redis_server.stop()  # mid-run
    for round_ in range(5):
        store.put_many({f"during{round_}": b"2"})
        assert store.get_many(["a", f"during{round_}"]) == {"a": b"1", f"during{round_}": b"2"}
    messages = runtime_warnings(caught)
    assert len(messages) == 1 and "unreachable" in messages[0] and redis_server.url in messages[0]
    assert not back.available
    redis_server.start()  # back on the same port, empty
    time.sleep(0.3)
    store.put_many({"after": b"3"})
    assert back.available and back.get_many(["after"]) == {"after": b"3"}
    assert len(runtime_warnings(caught)) == 1


def test_an_error_redis_answers_with_is_quoted_not_taken_for_an_outage(
    redis_server: RedisServer, caught: list[warnings.WarningMessage]
) -> None:
    from ctxwindow_stores import RedisStore

    store = RedisStore(f"redis://127.0.0.1:{redis_server.port}/99", retry_after=0.2)
    assert store.get_many(["a"]) == {}
    messages = runtime_warnings(caught)
    assert len(messages) == 1 and "DB index is out of range" in messages[0]
    assert "answered with an error" in messages[0] and "database number" in messages[0]
    assert "unreachable" not in messages[0] and "is running" not in messages[0]


def test_redis_wrong_port_and_a_hung_server_cost_a_timeout_not_an_error(
    redis_server: RedisServer,
    caught: list[warnings.WarningMessage],
) -> None:
    from ctxwindow_stores import RedisStore

    wrong = RedisStore("redis://127.0.0.1:1/0", timeout=0.2)
    wrong.put_many({"a": b"1"})
    assert wrong.get_many(["a"]) == {}
    assert redis_server.process is not None
    hung = RedisStore(redis_server.url, timeout=0.2, retry_after=60)
    hung.put_many({"a": b"1"})
    os.kill(redis_server.process.pid, signal.SIGSTOP)  # accepts nothing, answers nothing
    try:
        started = time.monotonic()
        for _ in range(5):
            assert hung.get_many(["a"]) == {}
        assert time.monotonic() - started < 30  # one timeout, then skipped: no hang
    finally:
        os.kill(redis_server.process.pid, signal.SIGCONT)
    messages = runtime_warnings(caught)
    assert len(messages) == 2 and all("unreachable" in m for m in messages)


def test_a_key_of_another_type_is_a_foreign_value_of_that_key_only(
    redis_server: RedisServer, caught: list[warnings.WarningMessage]
) -> None:
    """A hash under a cache key: read as a miss, overwritten, no warning, server in use."""
    import redis

    from ctxwindow_stores import RedisStore

    client = redis.Redis.from_url(redis_server.url)
    key = cache_key("summary", "extractive", "72:abc")
    client.hset(key, "field", "not ours")
    back = RedisStore(redis_server.url, ttl=600)
    store = LayeredStore(MemoryStore(), back)
    assert store.get_many([key]) == {}
    mine = b'{"text": "t", "summarizer": "extractive"}'
    assert put_first(store, {key: mine, "other": b"2"}) == {key: mine, "other": b"2"}
    store.put_many({"after": b"3"})
    assert client.type(key) == b"string" and client.get(key) == mine and client.ttl(key) > 0
    assert client.get("other") == b"2" and client.get("after") == b"3"
    assert back.available and back.outages == 0 and runtime_warnings(caught) == []
    assert put_first(RedisStore(redis_server.url), {key: b"later"}) == {key: mine}


def test_the_redis_hints_name_the_extra_that_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    from redis_server import require_redis_server

    from ctxwindow.errors import InvalidOption
    from ctxwindow_stores import RedisStore

    project = (STORES / "pyproject.toml").read_text(encoding="utf-8")  # 3.10: no tomllib
    assert '\nname = "ctxwindow-stores"\n' in project and '\nredis = ["redis' in project
    hint = "pip install 'ctxwindow-stores[redis]'"
    monkeypatch.setitem(sys.modules, "redis", None)  # the client is not installed
    with pytest.raises(InvalidOption) as raised:
        RedisStore("redis://127.0.0.1:1/0")
    assert hint in str(raised.value)
    monkeypatch.setenv("REDIS_SERVER", sys.executable)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        require_redis_server()
    assert hint in str(skipped.value)


def test_default_is_a_keyword_of_the_strategy_that_defines_it_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'default' on a cache whose default is not 'default' names no file made here."""
    from ctxwindow.errors import InvalidOption
    from ctxwindow_stores import cache_options, spec_problem

    monkeypatch.chdir(tmp_path)
    own, _ = cache_options("a summary", None, "where")
    with pytest.raises(InvalidOption, match="'memory', a SQLite file path or a redis:// URL"):
        own.validate("strategy 'summarize'", "default")
    with pytest.raises(InvalidOption, match=r"'\./default'"):
        open_store("default", memory_entries=1, memory_bytes=1000)
    semantic, _ = cache_options("an embedding", "default", "where")
    assert semantic.validate("strategy 'semantic'", "default") == "default"
    assert spec_problem("./default") is None and spec_problem(Path("default")) is None
    assert list(tmp_path.iterdir()) == []


def test_redis_password_never_appears_in_warnings(caught: list[warnings.WarningMessage]) -> None:
    from ctxwindow_stores import RedisStore

    store = RedisStore("redis://user:hunter2@127.0.0.1:1/0", timeout=0.2)
    store.get_many(["a"])
    assert "hunter2" not in store.where
    assert runtime_warnings(caught) and all("hunter2" not in m for m in runtime_warnings(caught))


def test_redis_from_many_threads_loses_no_writes(redis_server: RedisServer) -> None:
    store = open_store(redis_server.url, memory_entries=50, memory_bytes=10**6)
    written = write_from_threads(store)
    fresh = open_store(redis_server.url, memory_entries=10, memory_bytes=10**6)
    assert fresh.get_many(list(written)) == written


def test_redis_fixture_skips_or_fails_without_redis_server(tmp_path: Path) -> None:
    """Without redis-server: a skip locally, a failure under CI=true."""
    script = (
        "import pytest\n"
        "from redis_server import redis_server\n"
        "def test_needs(redis_server):\n"
        "    pass\n"
    )
    (tmp_path / "test_needs_redis.py").write_text(script)
    results = {}
    for ci in ("", "true"):
        env = {**os.environ, "PATH": str(tmp_path), "REDIS_SERVER": "", "CI": ci}
        env["PYTHONPATH"] = str(SUPPORT)
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
            cwd=tmp_path,
        )
        results[ci] = done
    assert results[""].returncode == 0 and "redis-server is not installed" in results[""].stdout
    assert results["true"].returncode == 1 and "CI=true" in results["true"].stdout


def test_no_cache_module_can_unpickle() -> None:
    """Cached values are bytes and JSON: no cache module imports a deserializer that runs
    code (pickle, marshal, shelve, dill), so a poisoned shared cache cannot."""
    import ast
    import importlib.util

    modules = [
        "ctxwindow_stores",
        "ctxwindow_stores._memory",
        "ctxwindow_stores._sqlite",
        "ctxwindow_stores._redis",
        "ctxwindow_stores._layered",
        "ctxwindow_semantic.cache",
        "ctxwindow_summarize.rolling",
    ]
    unsafe = {"pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
    checked = 0
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue  # a plugin that is not installed here
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
            else:
                continue
            assert not names & unsafe, f"{name} imports {names & unsafe}"
        checked += 1
    assert checked >= 5
