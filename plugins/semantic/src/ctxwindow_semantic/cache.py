"""Embeddings cached by (model, content hash) in a :mod:`ctxwindow_stores` store: memory
only, or memory in front of a SQLite file or a Redis server shared by app replicas.

A vector is stored as bytes, never pickled: a tag, the hash of the model's name, the
dimension, then raw little-endian float32. It is checked when read back: a value of the
wrong size, for another model, non-finite or not of unit length is ignored and the text
embedded again, so a damaged or foreign entry can cost time but never give a message a
wrong vector. A store that fails reports it once and the cache carries on without it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from ctxwindow_stores import Store, as_store, cache_key, content_hash

#: The in-memory layer's bounds: 100,000 vectors or 64 MiB (about 40,000 vectors of
#: all-MiniLM-L6-v2's 384 dimensions), whichever is reached first.
MEMORY_ENTRIES = 100_000
MEMORY_BYTES = 64 * 2**20
KIND = "embedding"
_TAG = b"cwv1"
#: An all-zero vector (an embedder's answer for a text it knows nothing of): the header
#: alone, under its own tag, so a damaged value zeroed in place is never read as one.
_ZERO_TAG = b"cwv0"
_HEAD = struct.Struct("<4s8sI")  # tag, model hash, dimension
#: The largest dimension a zero vector's header may claim (it allocates that many).
_MAX_DIMENSION = 65_536


class Embeds(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def content_key(model: str, text: str) -> str:
    """The store key of ``text``'s vector under ``model`` (no text in the key)."""
    return cache_key(KIND, model, content_hash(text))


def default_cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ctxwindow" / "embeddings.sqlite3"


def encode(model: str, vector: np.ndarray) -> bytes:
    data = np.ascontiguousarray(vector, dtype="<f4")
    if not data.any():
        return _HEAD.pack(_ZERO_TAG, _model_tag(model), int(data.shape[0]))
    return _HEAD.pack(_TAG, _model_tag(model), int(data.shape[0])) + data.tobytes()


def decode(model: str, value: bytes) -> np.ndarray | None:
    """The vector ``value`` holds for ``model``, or None if it is not a sound one."""
    return decode_many(model, {"": value}).get("")


def decode_many(model: str, values: dict[str, bytes]) -> dict[str, np.ndarray]:
    """The sound vectors among ``values`` (for ``model``, whole, finite, of unit length,
    or an all-zero vector stored under its own tag: see :func:`encode`), checked
    together: one norm computation per dimension, not one per vector."""
    owner = _model_tag(model)
    by_dim: dict[int, list[tuple[str, bytes]]] = {}
    out: dict[str, np.ndarray] = {}
    for key, value in values.items():
        if len(value) < _HEAD.size:
            continue
        tag, found, dim = _HEAD.unpack_from(value)
        if tag == _ZERO_TAG and found == owner and 0 < dim <= _MAX_DIMENSION:
            if len(value) == _HEAD.size:
                out[key] = np.zeros(dim, dtype=np.float32)
            continue
        if tag != _TAG or found != owner or dim <= 0 or len(value) != _HEAD.size + 4 * dim:
            continue
        by_dim.setdefault(dim, []).append((key, value))
    for dim, entries in by_dim.items():
        payload = b"".join(value[_HEAD.size :] for _key, value in entries)
        matrix = np.frombuffer(payload, dtype="<f4").reshape(len(entries), dim)
        matrix = matrix.astype(np.float32)
        norms = np.linalg.norm(matrix, axis=1)
        sound = np.isfinite(norms) & (np.abs(norms - 1.0) < 1e-3)
        for row, (key, _value) in enumerate(entries):
            if sound[row]:
                out[key] = matrix[row]
    return out


@functools.lru_cache(maxsize=64)  # bounded: a few model names per process
def _model_tag(model: str) -> bytes:
    return hashlib.sha256(model.encode("utf-8", "surrogatepass")).digest()[:8]


class EmbeddingCache:
    """Thread-safe. ``where``: None or ``"memory"`` (memory only), a SQLite path, a
    ``redis://`` URL, or a ready :class:`~ctxwindow_stores.Store`. ``ttl``: seconds an
    entry lives in Redis (None: no expiry)."""

    def __init__(
        self,
        where: str | Path | Store | None = None,
        memory_entries: int = MEMORY_ENTRIES,
        memory_bytes: int = MEMORY_BYTES,
        ttl: float | None = None,
    ) -> None:
        self.store: Store = as_store(
            where, memory_entries=memory_entries, memory_bytes=memory_bytes, ttl=ttl
        )
        self.where = self.store.where
        self._count = threading.Lock()
        self.embedded = 0  # texts actually sent to a model, for tests and the bench

    def embed(self, embedder: Embeds, texts: Sequence[str]) -> np.ndarray:
        """Vectors for ``texts``, embedding only those not cached, in one batch."""
        model = embedder.name
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        # each distinct text hashed once (a turn's new message is a unit and the query)
        key_of = {text: content_key(model, text) for text in texts}
        keys = [key_of[text] for text in texts]
        text_of = {key: text for text, key in key_of.items()}
        unique = list(text_of)
        found = decode_many(model, self.store.get_many(unique))
        todo = [key for key in unique if key not in found]
        if todo:
            found.update(self._fresh(embedder, todo, text_of))
        if len({vector.shape[0] for vector in found.values()}) > 1:
            # sound entries of another size (the model changed): the fresh vectors' size
            # is the right one, else the most common size
            sizes = Counter(vector.shape[0] for vector in found.values())
            size = found[todo[0]].shape[0] if todo else sizes.most_common(1)[0][0]
            stale = [key for key, vector in found.items() if vector.shape[0] != size]
            found.update(self._fresh(embedder, stale, text_of))
            if len({vector.shape[0] for vector in found.values()}) > 1:
                raise ValueError(
                    f"embedder {model!r} returned vectors of different sizes; fix the "
                    "embedder, or choose another with the 'embedder' option"
                )
        # filled row by row: np.stack's checks cost more than a turn's two rows
        first = found[keys[0]]
        out = np.empty((len(keys), first.shape[0]), dtype=first.dtype)
        for row, key in enumerate(keys):
            out[row] = found[key]
        return out

    def _fresh(
        self, embedder: Embeds, keys: list[str], text_of: dict[str, str]
    ) -> dict[str, np.ndarray]:
        model = embedder.name
        vectors = _checked(embedder.embed([text_of[key] for key in keys]), len(keys), model)
        with self._count:
            self.embedded += len(keys)
        new = dict(zip(keys, vectors, strict=True))
        self.store.put_many({key: encode(model, vector) for key, vector in new.items()})
        return new

    def close(self) -> None:
        self.store.close()


def _checked(vectors: object, count: int, model: str) -> np.ndarray:
    """``vectors`` as unit rows. An all-zero row (an empty text, or one the embedder
    knows no word of: a hashing or static embedder's answer) stays zero, so its unit is
    similar to nothing (dense score 0) rather than failing the window; a non-finite
    row is an embedder's fault and raises (the visit fails, a PluginError naming
    the strategy and this message)."""
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2 or array.shape[0] != count or array.shape[1] == 0:
        raise ValueError(
            f"embedder {model!r} returned shape {array.shape} for {count} texts (one row a "
            "text is wanted); fix the embedder, or choose another with the 'embedder' option"
        )
    # np.linalg.norm's own expression for rows (the same float32 sums), without its
    # dispatch: a turn checks one vector
    norms = np.sqrt(np.add.reduce(array * array, axis=1, keepdims=True))
    if not np.isfinite(norms).all():
        raise ValueError(
            f"embedder {model!r} returned a non-finite vector (NaN or infinity); "
            "fix the embedder, or choose another with the 'embedder' option"
        )
    if norms.all():
        normalized: np.ndarray = array / norms
        return normalized
    return np.divide(array, norms, out=np.zeros_like(array), where=norms > 0)
