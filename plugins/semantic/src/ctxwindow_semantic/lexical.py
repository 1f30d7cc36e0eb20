"""BM25 over units, built incrementally: appending a unit updates the statistics.

Ready-made BM25 libraries index a fixed corpus; a chat grows by one message a turn, so
the index here grows with it and scores the whole history against a query in numpy.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

K1 = 1.2
B = 0.75
_WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves s t don re ve ll m d""".split()
)


def stem(word: str) -> str:
    """A light suffix strip, so 'paintings', 'painting' and 'paint' meet."""
    for suffix in ("ings", "ing", "edly", "ed", "ies", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def terms(text: str) -> list[str]:
    return [stem(word) for word in _WORD.findall(text.lower()) if word not in STOPWORDS]


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
