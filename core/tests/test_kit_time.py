"""The kit's time grammar: a table of everyday English time expressions (written from a
generic list, not from any benchmark's misses), and hand-written conversations whose
units are anchored by timestamps or date lines."""

from __future__ import annotations

from datetime import date

import pytest

from ctxwindow import ApproxCounter, Conversation, History
from ctxwindow.kit import Span, date_line, query_spans, spans_in, time_match, unit_anchors

#: A Monday.
ANCHOR = date(2023, 5, 8)


def days(first: str, last: str | None = None) -> Span:
    return Span.of(date.fromisoformat(first), date.fromisoformat(last or first))


EXPRESSIONS = [
    ("I went there today", days("2023-05-08")),
    ("we ate out tonight", days("2023-05-08")),
    ("this morning I ran", days("2023-05-08")),
    ("it rained yesterday", days("2023-05-07")),
    ("last night was loud", days("2023-05-07")),
    ("the day before yesterday", days("2023-05-06")),
    ("see you tomorrow", days("2023-05-09")),
    ("two days ago", days("2023-05-06")),
    ("5 days ago", days("2023-05-03")),
    ("a week ago", days("2023-04-28", "2023-05-04")),
    ("3 weeks ago", days("2023-04-14", "2023-04-20")),
    ("a couple of months ago", days("2023-03-01", "2023-03-31")),
    ("a few years ago", days("2020-01-01", "2020-12-31")),
    ("a year ago", days("2022-01-01", "2022-12-31")),
    ("last week", days("2023-05-01", "2023-05-07")),
    ("this week", days("2023-05-08", "2023-05-14")),
    ("next week", days("2023-05-15", "2023-05-21")),
    ("the past week", days("2023-05-01", "2023-05-08")),
    ("last weekend", days("2023-05-06", "2023-05-07")),
    ("this weekend", days("2023-05-13", "2023-05-14")),
    ("last month", days("2023-04-01", "2023-04-30")),
    ("next month", days("2023-06-01", "2023-06-30")),
    ("last year", days("2022-01-01", "2022-12-31")),
    ("this year", days("2023-01-01", "2023-12-31")),
    ("last summer", days("2022-06-01", "2022-08-31")),
    ("this summer", days("2023-06-01", "2023-08-31")),
    ("last winter", days("2022-12-01", "2023-02-28")),
    ("on Friday", days("2023-05-05")),
    ("last Monday", days("2023-05-01")),
    ("next Tuesday", days("2023-05-09")),
    ("this Wednesday", days("2023-05-10")),
    ("recently", days("2023-04-24", "2023-05-08")),
    ("May 3, 2023", days("2023-05-03")),
    ("on 3 May 2023", days("2023-05-03")),
    ("the 4th of July", days("2022-07-04")),
    ("March 2nd", days("2023-03-02")),
    ("Dec. 25, 2021", days("2021-12-25")),
    ("March 2022", days("2022-03-01", "2022-03-31")),
    ("in June", days("2022-06-01", "2022-06-30")),
    ("in April", days("2023-04-01", "2023-04-30")),
    ("back in 2019", days("2019-01-01", "2019-12-31")),
    ("2023-04-30", days("2023-04-30")),
    ("4/30/2023", days("2023-04-30")),
]


@pytest.mark.parametrize(("text", "expected"), EXPRESSIONS)
def test_an_expression_resolves_against_its_anchor(text: str, expected: Span) -> None:
    assert spans_in(text, ANCHOR) == (expected,)


@pytest.mark.parametrize(
    "text",
    [
        "I may go",
        "we march on",
        "Mondays are slow",
        "it took 3 days",
        "weekly meetings",
        "at 10:30",
    ],
)
def test_words_that_only_look_like_time_are_not_time(text: str) -> None:
    assert spans_in(text, ANCHOR) == ()


def test_relative_expressions_need_an_anchor_and_absolute_ones_do_not() -> None:
    assert spans_in("yesterday, on May 3, 2023", None) == (days("2023-05-03"),)


def test_a_full_date_is_not_also_read_as_its_year() -> None:
    assert spans_in("on 8 May 2023 we met", ANCHOR) == (days("2023-05-08"),)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[Session 3: 1:56 pm on 8 May, 2023]", date(2023, 5, 8)),
        ("May 8, 2023", date(2023, 5, 8)),
        ("2023-05-08T13:56:00Z", date(2023, 5, 8)),
        ("(7:00 am on 30 June, 2022)", date(2022, 6, 30)),
        ("We met on 8 May, 2023 at the park", None),
        ("hello", None),
    ],
)
def test_a_date_line_is_a_short_line_that_is_only_a_date(line: str, expected: date) -> None:
    assert date_line(line) == expected


def test_a_question_names_days_and_open_sides() -> None:
    assert query_spans("Who did Maria have dinner with on May 3, 2023?", ANCHOR) == (
        days("2023-05-03"),
    )
    (before,) = query_spans("What did Bob buy before April 10, 2023?", ANCHOR)
    assert before.end == date(2023, 4, 9).toordinal() and before.start < before.end - 10_000
    (after,) = query_spans("What happened after March 2023?", ANCHOR)
    assert after.start == date(2023, 4, 1).toordinal()
    assert query_spans("What is Bob's favourite colour?", ANCHOR) == ()


def view(messages: list[dict[str, object]]) -> History:
    return Conversation(messages).view(ApproxCounter(), 100_000)


def test_units_are_anchored_by_timestamps_and_by_date_lines() -> None:
    history = view(
        [
            {"role": "user", "content": "[Session 1: 1:56 pm on 8 May, 2023]"},
            {"role": "user", "content": "I adopted a cat yesterday!", "name": "Ann"},
            {"role": "assistant", "content": "Congratulations!", "name": "Bo"},
            {"role": "user", "content": "[Session 2: 9:00 am on 20 May, 2023]"},
            {
                "role": "user",
                "content": "The cat ran off last weekend.",
                "metadata": {"timestamp": "2023-05-21T09:00:00+02:00"},
            },
            {"role": "assistant", "content": "Oh no."},
        ]
    )
    anchors = unit_anchors(history)
    assert anchors == [
        date(2023, 5, 8),
        date(2023, 5, 8),
        date(2023, 5, 8),
        date(2023, 5, 20),
        date(2023, 5, 21),
        date(2023, 5, 21),  # the latest time known before it
    ]
    asked = query_spans("What did Ann do on 7 May 2023?", anchors[-1])
    adopted = spans_in(history.messages[1].text, anchors[1])
    ran_off = spans_in(history.messages[4].text, anchors[4])
    assert time_match(adopted, anchors[1], asked) == 1.0
    assert time_match(ran_off, anchors[4], asked) == 0.0
    in_may = query_spans("What happened in May 2023?", None)
    assert time_match((), anchors[2], in_may) == 0.5
