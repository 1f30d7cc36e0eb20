"""A query's distinct terms, each line's words read once in a while: the query of a
loop's step is read anew each step, and in an agent's history it is the whole current
turn (up to 32,000 characters), most of it the lines of the last step's query."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxwindow.kit import _words, query_terms, terms
from ctxwindow.kit._words import _LineWords

#: Words of other scripts (whose lowercase is longer, or depends on the letters around),
#: stopwords, stems, ids; and what may lie between them, line breaks of every kind.
PIECES = (
    "when", "What", "HOW", "café", "Барсик", "ΣΑΣ", "σας", "İstanbul", "Straße", "the",
    "paintings", "painted", "R-1990", "2024-05-03", "reservation_id", "李", "x",
)  # fmt: skip
GAPS = (" ", "", "\n", ".", "  ", "\r\n", "_", "-", "\n\n", "\u2028", "\t")
texts = st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(GAPS)), max_size=14).map(
    lambda pairs: "".join(piece + gap for piece, gap in pairs)
)


@given(texts)
def test_query_terms_are_the_distinct_terms_in_order(text: str) -> None:
    assert query_terms(text) == list(dict.fromkeys(terms(text)))


def test_query_terms_of_lines() -> None:
    text = "Paintings of R-1990\nthe painted R-1990, ΣΑΣ\n\nwhen café"
    assert query_terms(text) == ["paint", "r", "1990", "σας", "café"]


@given(st.lists(texts, min_size=1, max_size=6))
def test_query_terms_hold_when_lines_are_forgotten(queries: list[str]) -> None:
    """Lines too long to be held, and all held lines forgotten past a bound: read anew."""
    small = _LineWords(most=12, held=40)
    before = _words._LINE_WORDS
    _words._LINE_WORDS = small
    try:
        for text in queries:
            assert query_terms(text) == list(dict.fromkeys(terms(text)))
            assert small._chars <= small.held
            assert all(len(line) <= small.most for line in small._words)
    finally:
        _words._LINE_WORDS = before


def test_a_line_is_read_once_while_it_is_held() -> None:
    memo = _LineWords()
    read: list[str] = []
    original = _words.words

    def counted(lowered: str) -> list[str]:
        read.append(lowered)
        return original(lowered)

    _words.words = counted
    try:
        assert memo.of("Flight HAT001, status ok") == ("flight", "hat001", "status", "ok")
        assert memo.of("Flight HAT001, status ok") == ("flight", "hat001", "status", "ok")
    finally:
        _words.words = original
    assert read == ["flight hat001, status ok"]
