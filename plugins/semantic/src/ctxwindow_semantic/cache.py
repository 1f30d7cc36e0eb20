"""Embeddings cached by (model, content hash): in memory, and in SQLite on disk.

Vectors are stored as raw float32 bytes with their dimension, never pickled, and are
checked when read back: a row of the wrong size or not of unit length is ignored and
embedded again. A database that cannot be opened is reported once and the cache runs
in memory only; a cache must never be the reason a window fails.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sqlite3
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

MEMORY_ENTRIES = 200_000
_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL,
    key BLOB NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, key)
) WITHOUT ROWID
"""


class Embeds(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def content_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:20]


def default_cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ctxwindow" / "embeddings.sqlite3"


class EmbeddingCache:
    """Thread-safe; ``path`` None keeps vectors in memory only."""

    def __init__(
        self, path: str | Path | None = None, memory_entries: int = MEMORY_ENTRIES
    ) -> None:
        self.path = None if path is None else Path(path).expanduser()
        self.memory_entries = memory_entries
        self._memory: dict[tuple[str, bytes], np.ndarray] = {}
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.embedded = 0  # texts actually sent to a model, for tests and the bench
        if self.path is not None:
            self._db = self._open(self.path)

    def _open(self, path: Path) -> sqlite3.Connection | None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, check_same_thread=False, timeout=5.0)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)
            db.commit()
            return db
        except (sqlite3.Error, OSError) as error:
            warnings.warn(
                f"ctxwindow: embedding cache {str(path)!r} unusable ({error}); "
                f"running with an in-memory cache only",
                RuntimeWarning,
                stacklevel=3,
            )
            return None

    def embed(self, embedder: Embeds, texts: Sequence[str]) -> np.ndarray:
        """Vectors for ``texts``, embedding only those not cached, in one batch."""
        keys = [content_key(text) for text in texts]
        model = embedder.name
        found: dict[bytes, np.ndarray] = {}
        missing: list[bytes] = []
        for key in dict.fromkeys(keys):
            vector = self._memory.get((model, key))
            if vector is None:
                missing.append(key)
            else:
                found[key] = vector
        if missing:
            found.update(self._read(model, missing))
            todo = [key for key in missing if key not in found]
            if todo:
                text_of = dict(zip(keys, texts, strict=True))
                fresh = _checked(embedder.embed([text_of[key] for key in todo]), len(todo), model)
                self.embedded += len(todo)
                new = dict(zip(todo, fresh, strict=True))
                found.update(new)
                self._write(model, new)
            self._remember(model, {key: found[key] for key in missing})
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([found[key] for key in keys])

    def _remember(self, model: str, vectors: dict[bytes, np.ndarray]) -> None:
        """Keep ``vectors`` in memory; past the bound, forget the oldest (and a quarter
        more, so eviction is rare rather than on every call)."""
        with self._lock:
            for key, vector in vectors.items():
                self._memory[(model, key)] = vector
            excess = len(self._memory) - self.memory_entries
            if excess > 0:
                stale = list(itertools.islice(self._memory, excess + self.memory_entries // 4))
                for old in stale:
                    del self._memory[old]

    def _read(self, model: str, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        if self._db is None:
            return {}
        out: dict[bytes, np.ndarray] = {}
        try:
            with self._lock:
                for start in range(0, len(keys), 500):
                    chunk = keys[start : start + 500]
                    marks = ",".join("?" * len(chunk))
                    query = (  # only "?" placeholders are formatted in: still parameterized
                        "SELECT key, dim, vector FROM embeddings "
                        f"WHERE model = ? AND key IN ({marks})"
                    )
                    rows = self._db.execute(query, (model, *chunk)).fetchall()
                    for key, dim, blob in rows:
                        vector = _from_bytes(blob, dim)
                        if vector is not None:
                            out[bytes(key)] = vector
        except sqlite3.Error as error:
            self._give_up(error)
        return out

    def _write(self, model: str, vectors: dict[bytes, np.ndarray]) -> None:
        if self._db is None:
            return
        rows = [
            (model, key, int(v.shape[0]), v.astype(np.float32).tobytes())
            for key, v in vectors.items()
        ]
        try:
            with self._lock:
                self._db.executemany(
                    "INSERT OR REPLACE INTO embeddings (model, key, dim, vector) "
                    "VALUES (?, ?, ?, ?)",
                    rows,
                )
                self._db.commit()
        except sqlite3.Error as error:
            self._give_up(error)

    def _give_up(self, error: sqlite3.Error) -> None:
        warnings.warn(
            f"ctxwindow: embedding cache {str(self.path)!r} failed ({error}); "
            f"continuing with the in-memory cache only",
            RuntimeWarning,
            stacklevel=4,
        )
        self._db = None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _from_bytes(blob: bytes, dim: int) -> np.ndarray | None:
    if dim <= 0 or len(blob) != dim * 4:
        return None
    vector = np.frombuffer(blob, dtype=np.float32).copy()
    norm = float(np.linalg.norm(vector))
    return vector if np.isfinite(norm) and abs(norm - 1.0) < 1e-3 else None


def _checked(vectors: object, count: int, model: str) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[0] != count:
        raise ValueError(f"embedder {model!r} returned shape {array.shape} for {count} texts")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if not np.all(np.isfinite(norms)) or np.any(norms == 0):
        raise ValueError(f"embedder {model!r} returned a zero or non-finite vector")
    normalized: np.ndarray = array / norms
    return normalized
