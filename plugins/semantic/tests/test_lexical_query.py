"""The BM25 query's terms: :func:`ctxwindow.kit.query_terms`, which reads an agent's
query (its whole current turn) in time linear in what changed since the last step, in
place of the counts of every term, which BM25 does not weigh for a query."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ctxwindow.kit import query_terms
from ctxwindow_semantic.lexical import BM25Index, term_counts

PIECES = ("Flight", "HAT001", "status", "the", "paintings", "painted", "café", "ΣΑΣ", "R-19")
GAPS = (" ", "", "\n", ".", "\r\n", "_", "\n\n")
texts = st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(GAPS)), max_size=12).map(
    lambda pairs: "".join(piece + gap for piece, gap in pairs)
)


@given(texts)
def test_the_query_terms_are_those_counted_in_the_same_order(text: str) -> None:
    assert query_terms(text) == list(term_counts(text))


@given(st.lists(texts, min_size=1, max_size=8), texts)
def test_scores_are_those_of_every_term_counted(units: list[str], query: str) -> None:
    """The scores summed term by term in the query's order, by BM25's formula."""
    index = BM25Index()
    index.extend(units)
    scores = index.scores(query)
    expected = np.zeros(len(units), dtype=np.float32)
    for term in term_counts(query):  # the terms BM25 summed before, in their order
        for unit, text in enumerate(units):
            if term in term_counts(text):
                expected[unit] += _term_score(index, term, unit, units)
    np.testing.assert_allclose(scores, expected, rtol=1e-5)


def _term_score(index: BM25Index, term: str, unit: int, units: list[str]) -> np.float32:
    """BM25's share of one term in one unit, from the formula (k1 1.2, b 0.75)."""
    lengths = [sum(term_counts(text).values()) for text in units]
    average = max(sum(lengths) / len(units), 1.0)
    many = sum(term in term_counts(text) for text in units)
    idf = np.float32(np.log(1 + (len(units) - many + 0.5) / (many + 0.5)))
    count = np.float32(term_counts(units[unit])[term])
    norm = 1.2 * (1 - 0.75 + 0.75 * lengths[unit] / average) + count
    return np.float32(idf * count * 2.2 / norm)


@given(st.lists(texts, min_size=1, max_size=8), texts, st.lists(texts, max_size=2))
def test_scores_are_those_of_the_counted_terms_to_the_bit(
    units: list[str], query: str, extra: list[str]
) -> None:
    """The scores of the query's terms read by query_terms and of the keys of its
    counts (as they were read before), stand-ins included: the same float32 bits."""
    from ctxwindow_semantic import lexical

    index = BM25Index()
    index.extend(units)
    now = index.scores(query, len(units), extra)
    before = lexical.query_terms
    lexical.query_terms = lambda text: list(term_counts(text))
    try:
        counted = index.scores(query, len(units), extra)
    finally:
        lexical.query_terms = before
    assert now.tobytes() == counted.tobytes()
