"""A query's distinct terms, each line's words read once in a while: the query of a
loop's step is read anew each step, and in an agent's history it is the whole current
turn (up to 32,000 characters), most of it the lines of the last step's query."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import pytest
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


@given(st.lists(texts, min_size=1, max_size=6), st.integers(0, 20), st.integers(0, 3_000))
def test_query_terms_hold_when_lines_are_let_go(queries: list[str], most: int, held: int) -> None:
    """Lines too long to be held, and the least recently read let go past the bound:
    read anew, the same terms."""
    small = _LineWords(most=most, held=held)
    before = _words._LINE_WORDS
    _words._LINE_WORDS = small
    try:
        for text in queries + queries[::-1]:
            assert query_terms(text) == list(dict.fromkeys(terms(text)))
            assert small.bytes <= small.held
            assert all(len(line) <= small.most for line in small._words)
    finally:
        _words._LINE_WORDS = before


def test_a_line_is_read_once_while_it_is_held(monkeypatch: pytest.MonkeyPatch) -> None:
    memo = _LineWords()
    read: list[str] = []
    original = _words.words

    def counted(lowered: str) -> list[str]:
        read.append(lowered)
        return original(lowered)

    monkeypatch.setattr(_words, "words", counted)
    line = "Flight HAT001, status ok"
    assert memo.of_lines([line, line]) == [("flight", "hat001", "status", "ok")] * 2
    assert memo.of_lines([line]) == [("flight", "hat001", "status", "ok")]
    assert read == ["flight hat001, status ok"]


def test_the_least_recently_read_lines_go_first() -> None:
    lines = [f"record R-{number} status ok" for number in range(20)]
    memo = _LineWords()
    memo.of_lines(lines[:1])
    memo.held = 15 * memo.bytes  # room for 15 such lines
    memo.of_lines(lines[1:10])
    memo.of_lines(lines[:1])  # read again: now the most recent
    memo.of_lines(lines[10:])
    held = list(memo._words)
    assert held[-11:] == [lines[0], *lines[10:]]  # the newest read, in the order read
    assert lines[1] not in held and 12 <= len(held) < 15  # older ones let go first
    assert memo.bytes <= memo.held


@pytest.mark.parametrize(
    "line",
    [
        lambda i: str(100_000 + i),  # one short word a line: the entries' own cost counts
        lambda i: chr(0x4E00 + i % 20_000) + chr(0x4E00 + i // 20_000),  # 2 bytes a letter
        lambda i: f"2024-05-03 INFO request {i} served in {i % 97} ms, status ok",
        lambda i: " ".join(str(i * 1_000 + j) for j in range(300)),  # many words a line
    ],
    ids=["numbers", "cjk", "log", "long"],
)
def test_what_the_lines_hold_stays_near_the_bound(line: Callable[[int], str]) -> None:
    """Filled far past its bound, the memory the memo allocates (as tracemalloc counts
    it) stays within a tenth or so of the bound: it counts its entries' own cost, not
    only their characters (which undercounted a line of one number thirtyfold)."""
    held = 2 * 2**20
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        memo = _LineWords(held=held)
        for number in range(40_000 if line(0).count(" ") < 100 else 2_000):
            memo.of_lines([line(number)])
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert memo.bytes <= held and len(memo._words) > 10
    assert allocated <= 1.15 * held
