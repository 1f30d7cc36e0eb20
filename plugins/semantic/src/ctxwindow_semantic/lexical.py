"""BM25 over units, built incrementally: appending a unit updates the statistics.

Ready-made BM25 libraries index a fixed corpus; a chat grows by one message a turn, so
the index here grows with it. Each term keeps its postings (the units holding it, in
order, and how often) in numpy arrays, so a query scores only the units that hold one
of its terms, without a Python loop over them.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from ctxwindow.kit import STOPWORDS, query_terms, stem, words
from ctxwindow.kit.ranking import Postings, Rows

K1 = 1.2
B = 0.75


class BM25Index:
    """Term statistics of the units appended so far, and BM25 scores for a query."""

    def __init__(self) -> None:
        self.postings = Postings(np.float32)
        self.lengths = Rows(np.float32)
        self._ends = Rows(np.int64)  # running sums of the lengths, for any prefix's average

    def branch(self, units: int) -> BM25Index:
        """The index of the first ``units`` units, postings shared until either grows one
        (the index of a branch of the conversation)."""
        twin = BM25Index()
        twin.postings = self.postings.branch(units, len(self))
        twin.lengths, twin._ends = self.lengths.copy(units), self._ends.copy(units)
        return twin

    def __len__(self) -> int:
        return len(self.lengths)

    def extend(self, texts: Sequence[str]) -> None:
        """Append units: each term's postings grow once per batch, not once per unit."""
        if len(texts) == 1:  # a chat turn's new unit: no batch to gather
            self._append(texts[0])
            return
        first = len(self)
        batch: dict[str, tuple[list[int], list[int]]] = {}
        lengths = []
        postings = self.postings
        for unit, text in enumerate(texts, first):
            counts = term_counts(text)
            for term, count in counts.items():
                units, found = batch.setdefault(term, ([], []))
                units.append(unit)
                found.append(count)
            lengths.append(sum(counts.values()))
            postings.read(counts)
        for term, (units, found) in batch.items():
            posting = postings.growing(term, first)
            if len(units) == 1:
                posting.units.append(units[0])
                posting.counts.append(found[0])
            else:
                posting.units.extend(units)
                posting.counts.extend(found)
        before = int(self._ends.view[-1]) if first else 0
        self._ends.extend(np.cumsum(lengths, dtype=np.int64) + before)
        self.lengths.extend(lengths)

    def _append(self, text: str) -> None:
        """:meth:`extend` for one unit: a store per posting and per running figure, not
        the arrays a batch is gathered into (the same values: a turn runs this)."""
        unit = len(self)
        counts = term_counts(text)
        postings = self.postings
        for term, count in counts.items():
            posting = postings.growing(term, unit)
            posting.units.append(unit)
            posting.counts.append(count)
        postings.read(counts)
        length = sum(counts.values())
        self._ends.append((int(self._ends.view[-1]) if unit else 0) + length)
        self.lengths.append(length)

    def scores(self, query: str, size: int | None = None, extra: Sequence[str] = ()) -> np.ndarray:
        """BM25 score of each of the first ``size`` units, then of each ``extra`` text (a
        stand-in, scored but never stored). The statistics (document count, average length,
        document frequencies) are those of exactly that corpus, so a view is scored the same
        however long the conversation has grown since, and whatever an earlier visit indexed.
        """
        size = len(self) if size is None else size
        extra_counts = [term_counts(text) for text in extra]
        extra_lengths = [sum(counts.values()) for counts in extra_counts]
        total = size + len(extra_counts)
        out = np.zeros(total, dtype=np.float32)
        if total == 0:
            return out
        stored = int(self._ends.view[size - 1]) if size else 0
        average = max((stored + sum(extra_lengths)) / total, 1.0)
        # in the query's order: float32 sums added in a set's order (which varies between
        # processes) vary in the last bit; an agent's query (its current turn) read in
        # time linear in what changed since the last step's
        found = [self._units_holding(term, size, extra_counts) for term in query_terms(query)]
        held = [(units, counts) for units, counts in found if len(units)]
        if not held:
            return out
        units = np.concatenate([units for units, _counts in held])
        counts = np.concatenate([counts for _units, counts in held])
        every_length = self.lengths.view
        if extra_counts:  # the stand-ins' lengths after the stored units'
            every_length = np.concatenate(
                [every_length[:size], np.asarray(extra_lengths, dtype=np.float32)]
            )
        lengths = every_length[units]
        holders = [len(units) for units, _counts in held]
        idf = [math.log(1 + (total - many + 0.5) / (many + 0.5)) for many in holders]
        # every term's units at once, each the float32 operations of the formula term by
        # term: K1 * (1 - B + B * lengths / average), then idf * counts * (K1 + 1) /
        # (counts + norm), in place in two arrays (a common term's units are thousands at
        # 10,000 messages); a term's idf is rounded to float32 as its scalar would be
        norm = np.multiply(lengths, B)
        norm /= average
        norm += 1 - B
        norm *= K1
        norm += counts
        gain = np.multiply(counts, np.repeat(np.asarray(idf, dtype=np.float32), holders))
        gain *= K1 + 1
        gain /= norm
        # added term after term, as ``out[units] += gain`` would, a term's units distinct
        np.add.at(out, units, gain)
        return out

    def _units_holding(
        self, term: str, size: int, extra_counts: list[Counter[str]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_holding` without the lengths (read for every term at once): the units,
        of the first ``size`` then the extra texts, holding ``term``, and how often."""
        posting = self.postings.get(term)
        units, counts = posting.before(size) if posting else (_NO_UNITS, _NO_COUNTS)
        rows = [row for row, found in enumerate(extra_counts) if term in found]
        if rows:
            units = np.concatenate([units, np.asarray(rows, dtype=np.int64) + size])
            more = np.asarray([extra_counts[row][term] for row in rows], dtype=np.float32)
            counts = np.concatenate([counts, more])
        return units, counts

    def _holding(
        self, term: str, size: int, extra_counts: list[Counter[str]], extra_lengths: list[int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The units (of the first ``size``, then the extra texts) holding ``term``: their
        indexes, how often they hold it, and their lengths."""
        posting = self.postings.get(term)
        units, counts = posting.before(size) if posting else (_NO_UNITS, _NO_COUNTS)
        lengths = self.lengths.view[units]
        rows = [row for row, found in enumerate(extra_counts) if term in found]
        if rows:
            units = np.concatenate([units, np.asarray(rows, dtype=np.int64) + size])
            more = [(extra_counts[row][term], extra_lengths[row]) for row in rows]
            counts = np.concatenate([counts, np.asarray([c for c, _ in more], np.float32)])
            lengths = np.concatenate([lengths, np.asarray([n for _, n in more], np.float32)])
        return units, counts, lengths


@functools.lru_cache(maxsize=16)
def term_counts(text: str) -> Counter[str]:
    """How often ``text`` holds each of its terms, in the order they first appear; shared,
    never to be changed. Remembered for the last few texts: a stand-in is scored on each
    visit until it is stored. (A query's terms are :func:`ctxwindow.kit.query_terms`:
    the same terms in the same order, without the counts, which BM25 does not weigh.)

    :func:`ctxwindow.kit.terms`' counts, each distinct word stemmed once: a 4 MB log
    repeats a few hundred words 900,000 times (2.4 s stemmed word by word, 0.2 s so)."""
    found = Counter(word for word in words(text.lower()) if word not in STOPWORDS)
    counts: Counter[str] = Counter()
    for word, count in found.items():  # first appearances in order: so are the stems'
        counts[stem(word)] += count
    return counts


_NO_UNITS = np.zeros(0, dtype=np.int64)
_NO_COUNTS = np.zeros(0, dtype=np.float32)
