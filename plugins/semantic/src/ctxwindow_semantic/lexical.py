"""BM25 over units, built incrementally: appending a unit updates the statistics.

Ready-made BM25 libraries index a fixed corpus; a chat grows by one message a turn, so
the index here grows with it and scores the whole history against a query in numpy.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from ctxwindow.kit import terms

K1 = 1.2
B = 0.75


class BM25Index:
    """Term statistics of the units appended so far, and BM25 scores for a query."""

    def __init__(self) -> None:
        self.postings: dict[str, list[tuple[int, int]]] = {}
        self.lengths: list[int] = []

    def __len__(self) -> int:
        return len(self.lengths)

    def add(self, text: str) -> None:
        unit = len(self.lengths)
        counts = Counter(terms(text))
        for term, count in counts.items():
            self.postings.setdefault(term, []).append((unit, count))
        length = sum(counts.values())
        self.lengths.append(length)

    def scores(self, query: str, size: int | None = None, extra: Sequence[str] = ()) -> np.ndarray:
        """BM25 score of each of the first ``size`` units, then of each ``extra`` text (a
        stand-in, scored but never stored). The statistics (document count, average length,
        document frequencies) are those of exactly that corpus, so a view is scored the same
        however long the conversation has grown since, and whatever an earlier visit indexed.
        """
        size = len(self.lengths) if size is None else size
        extra_counts = [Counter(terms(text)) for text in extra]
        lengths_list = self.lengths[:size] + [sum(c.values()) for c in extra_counts]
        total = len(lengths_list)
        out = np.zeros(total, dtype=np.float32)
        if total == 0:
            return out
        lengths = np.asarray(lengths_list, dtype=np.float32)
        average = max(sum(lengths_list) / total, 1.0)
        norm = K1 * (1 - B + B * lengths / average)
        for term in set(terms(query)):
            posting = [(u, c) for u, c in self.postings.get(term, ()) if u < size]
            posting += [(size + row, c[term]) for row, c in enumerate(extra_counts) if term in c]
            if not posting:
                continue
            idf = math.log(1 + (total - len(posting) + 0.5) / (len(posting) + 0.5))
            units = np.fromiter((u for u, _ in posting), dtype=np.int64, count=len(posting))
            counts = np.fromiter((c for _, c in posting), dtype=np.float32, count=len(posting))
            out[units] += idf * counts * (K1 + 1) / (counts + norm[units])
        return out
