"""SQLite: the embedded persistent store, one file shared by threads and processes.

WAL mode with ``synchronous=NORMAL`` (a write commits without waiting on the disk; a
power cut may lose the newest writes, never the file: right for a cache, written on
every chat turn), a busy timeout, one table of (key, value, time written), parameterized
queries only, bounded by ``max_entries`` (the oldest writes go first). What goes wrong
with the file is met without raising, each kind reported once:

- a damaged database (cut short, pages overwritten): moved aside to ``<path>.corrupt``
  and a new cache started (once per store; a second time, the cache runs without it);
- not a SQLite file at all (the option names some other file), or a database holding
  tables of its own (another application's): left untouched (no table added, its journal
  mode kept), and the cache runs without it;
- locked by another connection past the busy timeout: that operation is skipped, and
  the file is left alone for ``retry_after`` seconds (reads still run when only writes
  are blocked);
- read-only file, folder or filesystem: read, never written;
- disk full: writes paused for ``retry_after`` seconds;
- deleted or replaced while open: reopened (a new, empty file) on the next use.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

from ctxwindow.errors import InvalidOption

TABLE = "ctxwindow_cache"
_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} "
    "(key TEXT PRIMARY KEY, value BLOB NOT NULL, at REAL NOT NULL DEFAULT 0) WITHOUT ROWID",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_at ON {TABLE} (at)",
)
#: Entries a file holds by default: about 800 MB of 384-dimension vectors.
MAX_ENTRIES = 500_000
#: Each connection's page cache, in KiB (SQLite's default is 2 MiB): enough for the
#: B-tree's inner pages of a full file (a value is stored in its leaf, so a lookup
#: walks them all), which a 2 MiB cache kept reading from the OS again: a lookup in a
#: 280 MB file took 0.5 ms, with this cache 0.04 ms (a turn of ``semantic`` looks its
#: new message up, then writes it). Memory used only as pages are read.
PAGE_CACHE_KIB = 32 * 1024
_HEADER = b"SQLite format 3\x00"
_CHUNK = 500  # keys per SELECT, below SQLite's limit on host parameters
#: Where stores start their count of writes: a generator of their own, so that opening
#: a store leaves a seeded program's random numbers as they were.
_STARTS = random.Random()
#: Seconds between tries for the write lock another connection holds.
_BUSY_POLL = 0.02

# SQLite's primary result codes (the low byte of an extended code).
_PERM, _BUSY, _LOCKED, _READONLY, _CORRUPT = 3, 5, 6, 8, 11
_FULL, _CANTOPEN, _NOTADB = 13, 14, 26
#: What opening for writing fails with when the file, its folder or its filesystem is
#: read-only (CANTOPEN: the -wal, -shm or journal file cannot be made, say on a read-only
#: mount); a file that can still be read is then read.
_CANNOT_WRITE = (_PERM, _READONLY, _CANTOPEN)


class ForeignDatabase(Exception):
    """The file is a database holding other tables than the cache's: someone's data."""


class SQLiteStore:
    """Entries in a SQLite file at ``path``. ``timeout``: seconds to wait for another
    connection's lock; ``retry_after``: seconds a locked or full file is left alone;
    ``max_entries``: past it, the entries written longest ago are deleted (checked every
    ``max_entries // 20`` writes, down to nine tenths of the bound). A store starts its
    count of writes at a random point, so that processes writing a few entries each (CLI
    runs, short-lived workers) check the file as often, between them, as one process
    writing as many would."""

    def __init__(
        self,
        path: str | Path,
        *,
        timeout: float = 2.0,
        retry_after: float = 30.0,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise InvalidOption(
                f"SQLite cache: max_entries must be an int >= 1 (the entries the file "
                f"holds at most), got {max_entries!r}"
            )
        self.path = Path(path).expanduser()
        self.where = str(self.path)
        self.timeout = timeout
        self.max_entries = max_entries
        self._check_every = max(1, max_entries // 20)
        #: Writes since the bound was last checked, started at random (see the class).
        self._since_check = _STARTS.randrange(self._check_every)
        self.retry_after = retry_after
        self.read_only = False
        self.rebuilt = False
        self.disabled = False
        self._db: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        self._paused_until = 0.0
        self._writes_paused_until = 0.0
        self._warned: set[str] = set()
        self._lock = threading.RLock()

    # -- the two operations ---------------------------------------------------------
    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        with self._lock:
            db = self._usable(writing=False)
            if db is None:
                return {}
            try:
                return _select(db, keys)
            except sqlite3.Error as error:
                self._trouble(error, writing=False)
                return {}

    def put_many(self, items: Mapping[str, bytes]) -> None:
        self._write(items, "INSERT OR REPLACE")

    def put_new(self, items: Mapping[str, bytes]) -> dict[str, bytes]:
        """Hold ``items`` under the keys the file holds nothing for yet; what each key
        holds after (another process's value where it wrote first). When the file cannot
        be written, ``items`` as given."""
        held = self._write(items, "INSERT OR IGNORE")
        return {**items, **held}

    def _write(self, items: Mapping[str, bytes], insert: str) -> dict[str, bytes]:
        """Write ``items`` in one transaction (``insert``: replace or keep what is held);
        what the keys hold once written, read inside it ({} when nothing was written).
        While another connection holds the write lock, this waits (up to ``timeout``)
        without the store's lock, so that other threads' reads go on meanwhile."""
        if not items:
            return {}
        now = time.time()
        rows = [(key, bytes(value), now) for key, value in items.items()]
        deadline = time.monotonic() + self.timeout
        while True:
            with self._lock:
                db = self._usable(writing=True)
                if db is None:
                    return {}
                try:
                    if self._begin(db, final=time.monotonic() >= deadline):
                        return self._write_rows(db, rows, insert)
                except sqlite3.Error as error:
                    self._trouble(error, writing=True)
                    return {}
            time.sleep(_BUSY_POLL)

    def _begin(self, db: sqlite3.Connection, final: bool) -> bool:
        """``BEGIN IMMEDIATE`` without SQLite's busy wait (which would hold the store's
        lock throughout); False when another connection writes, but on the ``final``
        try, which raises its SQLITE_BUSY as a wait past the timeout would."""
        db.execute("PRAGMA busy_timeout = 0")
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if final or _code(error) not in (_BUSY, _LOCKED):
                raise
            return False
        finally:
            db.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        return True

    def _write_rows(
        self, db: sqlite3.Connection, rows: list[tuple[str, bytes, float]], insert: str
    ) -> dict[str, bytes]:
        """The transaction begun by :meth:`_begin` (the lock held): insert, read back
        for ``INSERT OR IGNORE``, prune when due, commit; rolled back on any error."""
        try:
            db.executemany(f"{insert} INTO {TABLE} (key, value, at) VALUES (?, ?, ?)", rows)
            keys = [key for key, _, _ in rows]
            held = _select(db, keys) if insert == "INSERT OR IGNORE" else {}
            self._since_check += len(rows)
            if self._since_check >= self._check_every:
                self._since_check = 0
                self._prune(db)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return held

    def _prune(self, db: sqlite3.Connection) -> None:
        """Past ``max_entries``, delete the oldest writes (inside the write transaction)."""
        count = int(db.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0])
        if count > self.max_entries:
            excess = count - self.max_entries * 9 // 10
            db.execute(
                f"DELETE FROM {TABLE} WHERE key IN (SELECT key FROM {TABLE} ORDER BY at LIMIT ?)",
                (excess,),
            )

    def close(self) -> None:
        with self._lock:
            self._drop_connection()

    def __len__(self) -> int:
        with self._lock:
            db = self._usable(writing=False)
            if db is None:
                return 0
            try:
                return int(db.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0])
            except sqlite3.Error as error:
                self._trouble(error, writing=False)
                return 0

    # -- opening --------------------------------------------------------------------
    def _usable(self, writing: bool) -> sqlite3.Connection | None:
        if self.disabled:
            return None
        now = time.monotonic()
        if now < self._paused_until:
            return None
        if writing and (self.read_only or now < self._writes_paused_until):
            return None
        if self._db is not None and _identity(self.path) != self._identity:
            self._drop_connection()  # deleted or replaced under us: start again
        if self._db is None:
            self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection | None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            self._pause(
                "folder",
                f"cannot create its folder ({error}); running without it (choose a writable path)",
            )
            return None
        try:
            db = self._connect()
        except ForeignDatabase as error:
            self._disable(
                "tables",
                f"is another application's database (it holds the tables {error}); leaving "
                "it untouched and running without it (give the cache a file of its own)",
            )
            return None
        except sqlite3.Error as error:
            if _code(error) in (_CORRUPT, _NOTADB):  # garbage, or a file cut short
                return self._rebuild(str(error))
            self._trouble(error, writing=False)
            return None
        self._identity = _identity(self.path)
        return db

    def _connect(self) -> sqlite3.Connection:
        """A connection that reads and writes; when the file cannot be written (whatever
        makes it so), one that only reads it, if it exists and can be read."""
        try:
            return self._connect_writable()
        except sqlite3.Error as error:
            if _code(error) not in _CANNOT_WRITE or not self.path.is_file():
                raise
            db = self._connect_read_only()  # raises its own error when reading fails too
        self._read_only_now()
        return db

    def _connect_writable(self) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        # Two processes opening a new file at once (replicas starting together) race to
        # switch it to WAL and create the table; the loser's SQLITE_BUSY can come back at
        # once, without the busy timeout, so it tries again within that timeout.
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                _refuse_foreign(db)
                db.execute("PRAGMA journal_mode=WAL").fetchone()
                db.execute("PRAGMA synchronous=NORMAL")  # per connection; see the docstring
                db.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
                for statement in _SCHEMA:
                    db.execute(statement)
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()
                return db
            except sqlite3.Error as error:
                if _code(error) in (_BUSY, _LOCKED) and time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                db.close()
                raise

    def _connect_read_only(self) -> sqlite3.Connection:
        """Read what the file holds, add nothing. Where a WAL database cannot make or
        open its shared-memory file (a read-only folder or filesystem), it is read as
        immutable (every value read is checked by its cache anyway)."""
        last: sqlite3.Error | None = None
        for flags in ("mode=ro", "mode=ro&immutable=1"):
            db = sqlite3.connect(
                f"file:{quote(str(self.path.resolve()))}?{flags}",
                uri=True,
                timeout=self.timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            try:
                db.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
            except sqlite3.Error as error:
                db.close()
                last = error
                continue
            db.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
            return db
        assert last is not None
        raise last

    def _rebuild(self, problem: str) -> sqlite3.Connection | None:
        """Move a damaged database aside (never delete what may be someone's data) and
        start a new one; a second rebuild in one run means something keeps breaking it.
        A file that is not SQLite at all is someone else's: it is never touched."""
        self._drop_connection()
        if not _looks_like_sqlite(self.path):
            self._disable(
                "foreign",
                f"is not a SQLite database ({problem}); leaving it untouched and running "
                "without a persistent cache (delete it or choose another path)",
            )
            return None
        if self.rebuilt:
            self._disable("broken", f"is damaged again ({problem}); running without it")
            return None
        self.rebuilt = True
        aside = Path(f"{self.path}.corrupt")
        try:
            for suffix in ("", "-wal", "-shm", "-journal"):
                source = Path(f"{self.path}{suffix}")
                if source.exists():
                    os.replace(source, Path(f"{aside}{suffix}"))
            db = self._connect()
        except (OSError, sqlite3.Error) as error:
            self._disable(
                "broken",
                f"is not a usable database ({problem}) and could not be replaced "
                f"({error}); running without it (delete the file or choose another path)",
            )
            return None
        self._identity = _identity(self.path)
        self._warn_once(
            "rebuilt",
            f"was not a usable database ({problem}); moved it to {str(aside)!r} and "
            "started a new cache",
        )
        return db

    # -- trouble --------------------------------------------------------------------
    def _trouble(self, error: sqlite3.Error, writing: bool) -> None:
        code = _code(error)
        if code in (_CORRUPT, _NOTADB):
            self._db = self._rebuild(str(error))
        elif code in (_BUSY, _LOCKED):
            what = "writes are" if writing else "the cache is"
            if writing:
                self._writes_paused_until = time.monotonic() + self.retry_after
            else:
                self._paused_until = time.monotonic() + self.retry_after
                self._drop_connection()
            self._warn_once(
                "locked",
                f"is locked by another connection ({error}); {what} skipped for "
                f"{self.retry_after:g} s at a time until it is free",
            )
        elif code == _READONLY:
            self._read_only_now()
        elif code == _FULL:
            self._writes_paused_until = time.monotonic() + self.retry_after
            self._warn_once(
                "full", f"cannot grow ({error}); not adding to it (free some disk space)"
            )
        elif writing:  # an I/O error, say: keep reading what is there
            self._writes_paused_until = time.monotonic() + self.retry_after
            self._warn_once(
                "write-error",
                f"could not be written ({error}); not adding to it for "
                f"{self.retry_after:g} s at a time",
            )
        else:
            self._drop_connection()
            self._pause("error", f"failed ({error}); running without it for now")

    def _read_only_now(self) -> None:
        self.read_only = True
        self._warn_once(
            "read-only",
            "is read-only; reading it but adding nothing (make it writable or choose another path)",
        )

    def _pause(self, kind: str, message: str) -> None:
        self._paused_until = time.monotonic() + self.retry_after
        self._warn_once(kind, f"{message}; retrying in {self.retry_after:g} s")

    def _disable(self, kind: str, message: str) -> None:
        self.disabled = True
        self._warn_once(kind, message)

    def _warn_once(self, kind: str, message: str) -> None:
        if kind in self._warned:
            return
        self._warned.add(kind)
        warnings.warn(
            f"ctxwindow: cache file {self.where!r} {message}", RuntimeWarning, stacklevel=5
        )

    def _drop_connection(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
            self._identity = None


def _refuse_foreign(db: sqlite3.Connection) -> None:
    """Raise ForeignDatabase (closing ``db``) if it holds tables or views of another's:
    the cache must not add its table to them, nor switch their file to WAL."""
    names = [
        name
        for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%'"
        )
        if name != TABLE
    ]
    if names:
        db.close()
        shown = ", ".join(repr(name) for name in names[:5])
        raise ForeignDatabase(shown + (f" and {len(names) - 5} more" if len(names) > 5 else ""))


def _select(db: sqlite3.Connection, keys: Sequence[str]) -> dict[str, bytes]:
    """The values the file holds for ``keys``, in queries of at most _CHUNK keys."""
    found: dict[str, bytes] = {}
    for start in range(0, len(keys), _CHUNK):
        chunk = list(keys[start : start + _CHUNK])
        marks = ",".join("?" * len(chunk))  # only "?" is formatted in
        rows = db.execute(
            f"SELECT key, CAST(value AS BLOB) FROM {TABLE} WHERE key IN ({marks})", chunk
        ).fetchall()
        for key, value in rows:
            if isinstance(key, str) and isinstance(value, bytes):
                found[key] = value
    return found


def _code(error: sqlite3.Error) -> int:
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF
    text = str(error).lower()
    for words, value in (
        (("malformed", "corrupt"), _CORRUPT),
        (("not a database",), _NOTADB),
        (("locked", "busy"), _BUSY),
        (("readonly", "read-only"), _READONLY),
        (("full",), _FULL),
        (("unable to open",), _CANTOPEN),
    ):
        if any(word in text for word in words):
            return value
    return 0


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _looks_like_sqlite(path: Path) -> bool:
    """Whether ``path`` starts like a SQLite database (or is empty, as a new one is)."""
    try:
        with path.open("rb") as file:
            head = file.read(len(_HEADER))
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return not head or head == _HEADER
