"""The query read once a step (:func:`ctxwindow.kit.query_terms`), and the kinds of
fact it asks for, found where they can begin. In an agent's history the query is the
whole current turn (up to 32,000 characters), read anew on every step of the loop."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwindow import Conversation, from_config
from ctxwindow.kit import _words
from ctxwindow.kit._words import _LineWords
from ctxwindow_sliding import keywords
from ctxwindow_sliding.keywords import NUMBER, TIME, asks_for

#: Words the patterns of asks_for begin or end with, words that hold them, words whose
#: lowercase is longer.
PIECES = (
    "when", "When", "WHEN", "what", "What", "how", "HOW", "long", "ago", "since",
    "many", "much", "year", "date", "number", "far", "_when", "whenever", "somewhat",
    "show", "swhat", "how_", "café", "İstanbul", "the",
)  # fmt: skip
GAPS = (" ", "", "\n", ".", "  ", "\r\n", "_", "-", "\n\n")
texts = st.lists(st.tuples(st.sampled_from(PIECES), st.sampled_from(GAPS)), max_size=14).map(
    lambda pairs: "".join(piece + gap for piece, gap in pairs)
)


def searched(text: str) -> int:
    """What asks_for says, by searching the whole text with each pattern."""
    lowered = text.lower()
    time = TIME if keywords._ASKS_TIME.search(lowered) else 0
    return time | (NUMBER if keywords._ASKS_NUMBER.search(lowered) else 0)


@given(texts)
def test_asks_for_finds_what_a_search_of_the_whole_text_finds(text: str) -> None:
    assert asks_for(text) == searched(text)


@pytest.mark.parametrize(
    ("pattern", "heads"),
    [
        (keywords._ASKS_TIME, keywords._ASKS_TIME_HEADS),
        (keywords._ASKS_NUMBER, keywords._ASKS_NUMBER_HEADS),
    ],
    ids=["time", "number"],
)
def test_every_alternative_of_a_pattern_begins_with_a_head(
    pattern: re.Pattern[str], heads: tuple[str, ...]
) -> None:
    """asks_for tries a pattern only where a head begins: an alternative added to a
    pattern without its head would never match, silently."""
    inner = pattern.pattern.removeprefix(r"\b(").removesuffix(r")\b")
    depth, start, alternatives = 0, 0, []
    for at, char in enumerate(inner + "|"):
        depth += (char == "(") - (char == ")")
        if char == "|" and depth == 0:
            alternatives.append(inner[start:at])
            start = at + 1
    assert len(alternatives) >= 2
    for alternative in alternatives:
        literal = alternative.split("(")[0]
        assert any(literal.startswith(head) for head in heads), alternative


def test_asks_for_reads_the_phrases_whole() -> None:
    assert asks_for("so, since when is it late?") == TIME
    assert asks_for("what year was it\nhow far is it") == TIME | NUMBER
    assert asks_for("what  year (two spaces), somewhat many, showhow many") == 0
    assert asks_for("how\nmany lines") == 0


class Counted(_LineWords):
    """Line words that count the lines read (not found held)."""

    def __init__(self) -> None:
        super().__init__()
        self.read = 0

    def of_lines(self, lines: list[str]) -> list[tuple[str, ...]]:
        self.read += sum(line not in self._words for line in set(lines))
        return super().of_lines(lines)


def round_of(number: int) -> list[dict[str, Any]]:
    call = {"id": f"c{number}", "type": "function"}
    call["function"] = {"name": "read", "arguments": json.dumps({"id": f"R-{number}"})}
    result = {"record": f"R-{number}", "status": "ok", "owner": f"u{number % 97}"}
    lines = "\n".join(f"{key}: {value}" for key, value in result.items())
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{number}", "content": lines},
    ]


def test_a_step_of_an_agent_run_reads_the_lines_it_adds(monkeypatch: pytest.MonkeyPatch) -> None:
    """One request, then a tool round a step: the query (the current turn, hundreds of
    lines) is read anew each step, and only the new round's lines and the line cut at
    the query's far end are read; the parent stemmed every word of it each step."""
    counted = Counted()
    monkeypatch.setattr(_words, "_LINE_WORDS", counted)
    messages = [
        {"role": "system", "content": "You audit records."},
        {"role": "user", "content": "Audit every record and fix what is wrong."},
    ]
    for number in range(1, 600):
        messages += round_of(number)
    conversation = Conversation(messages)
    windower = from_config({"strategy": "sliding", "budget": 2_000, "counter": "approx"})
    windower.select(conversation)
    history = conversation.view(windower.counter, 2_000)
    assert history.effective_query.count("\n") > 500  # the query holds many lines
    for number in range(600, 620):
        conversation.extend(round_of(number))
        counted.read = 0
        windower.select(conversation)
        # the round's call (one line) and result (three lines); the cut line
        assert 1 <= counted.read <= 5
