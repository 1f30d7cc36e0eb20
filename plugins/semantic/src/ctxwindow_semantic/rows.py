"""A growable numpy array, for per-unit data that a chat extends by one unit a turn."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike


class Rows:
    """Rows appended at the end, kept in one contiguous buffer that doubles when full,
    so appending a turn copies that turn only (amortized), not everything before it.

    Readers slice :attr:`view`: rows before ``len(self)`` never change, and a reader
    that took a view before a reallocation keeps the old buffer alive, so a reader
    needs no lock against one appending writer.
    """

    def __init__(self, dtype: DTypeLike) -> None:
        self.dtype = np.dtype(dtype)
        self._buffer: np.ndarray | None = None
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def view(self) -> np.ndarray:
        """The rows so far (a view: no copy)."""
        if self._buffer is None:
            return np.zeros(0, dtype=self.dtype)
        return self._buffer[: self._size]

    def extend(self, rows: ArrayLike) -> None:
        """Append ``rows`` (their first axis), growing the buffer to at least twice
        its size when they do not fit; the first rows are stored exactly."""
        new = np.asarray(rows, dtype=self.dtype)
        buffer = self._buffer
        if buffer is not None and new.shape[1:] != buffer.shape[1:]:
            raise ValueError(f"rows of shape {new.shape[1:]} added to rows of {buffer.shape[1:]}")
        size = self._size + len(new)
        if buffer is None or size > len(buffer):
            capacity = size if buffer is None else max(size, 2 * len(buffer))
            grown = np.empty((capacity, *new.shape[1:]), dtype=self.dtype)
            if buffer is not None:
                grown[: self._size] = buffer[: self._size]
            self._buffer = buffer = grown
        buffer[self._size : size] = new
        self._size = size

    def append(self, value: float) -> None:
        """Append one value to rows of single values: what a term's postings gain in a
        turn, at the cost of one store rather than an array's making."""
        buffer = self._buffer
        if buffer is None or buffer.ndim != 1 or self._size == len(buffer):
            self.extend([value])
            return
        buffer[self._size] = value
        self._size += 1
