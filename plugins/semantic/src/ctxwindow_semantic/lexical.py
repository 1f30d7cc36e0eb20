"""BM25 over units, built incrementally: appending a unit updates the statistics.

Ready-made BM25 libraries index a fixed corpus; a chat grows by one message a turn, so
the index here grows with it and scores the whole history against a query in numpy.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from ctxwindow.text import terms

K1 = 1.2
B = 0.75


class BM25Index:
    """Term statistics of the units appended so far, and BM25 scores for a query."""

    def __init__(self) -> None:
        self.postings: dict[str, list[tuple[int, int]]] = {}
        self.lengths: list[int] = []
        self.total_length = 0

    def __len__(self) -> int:
        return len(self.lengths)

    def add(self, text: str) -> None:
        unit = len(self.lengths)
        counts = Counter(terms(text))
        for term, count in counts.items():
            self.postings.setdefault(term, []).append((unit, count))
        length = sum(counts.values())
        self.lengths.append(length)
        self.total_length += length

    def scores(self, query: str, size: int | None = None) -> np.ndarray:
        """BM25 score of each of the first ``size`` units for ``query``."""
        size = len(self.lengths) if size is None else size
        out = np.zeros(size, dtype=np.float32)
        if size == 0:
            return out
        lengths = np.asarray(self.lengths[:size], dtype=np.float32)
        average = max(self.total_length / max(len(self.lengths), 1), 1.0)
        norm = K1 * (1 - B + B * lengths / average)
        for term in set(terms(query)):
            posting = [(u, c) for u, c in self.postings.get(term, ()) if u < size]
            if not posting:
                continue
            idf = math.log(1 + (size - len(posting) + 0.5) / (len(posting) + 0.5))
            units = np.fromiter((u for u, _ in posting), dtype=np.int64, count=len(posting))
            counts = np.fromiter((c for _, c in posting), dtype=np.float32, count=len(posting))
            out[units] += idf * counts * (K1 + 1) / (counts + norm[units])
        return out

    def score_texts(self, query: str, texts: list[str]) -> np.ndarray:
        """BM25 of texts that are not in the index, against the index's statistics."""
        out = np.zeros(len(texts), dtype=np.float32)
        size = len(self.lengths)
        average = max(self.total_length / max(size, 1), 1.0)
        wanted = set(terms(query))
        for row, text in enumerate(texts):
            counts = Counter(terms(text))
            norm = K1 * (1 - B + B * sum(counts.values()) / average)
            for term in wanted & counts.keys():
                found = len(self.postings.get(term, ()))
                idf = math.log(1 + (size - found + 0.5) / (found + 0.5))
                out[row] += idf * counts[term] * (K1 + 1) / (counts[term] + norm)
        return out
