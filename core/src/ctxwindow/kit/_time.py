"""Time as a signal: when a unit was said, the days its words point at, and the days a
question names, so that "what did Mel do on 8 May 2023?" meets "yesterday I ..." said on
9 May.

Dates are naive :class:`datetime.date` values, held as ordinals so that a span is two
ints. A zoned timestamp counts by its own local date. The grammar is English and generic
(a list of everyday time expressions), small and pure Python: no parser library earns its
import time or its false positives here.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxwindow._history import History

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        1,
    )
    for name in names
}
_WEEKDAYS = {
    name: number
    for number, names in enumerate(
        (
            ("monday",),
            ("tuesday",),
            ("wednesday",),
            ("thursday",),
            ("friday",),
            ("saturday",),
            ("sunday",),
        )
    )
    for name in names
}
_AMOUNTS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a couple": 2,
    "couple of": 2,
    "a few": 3,
    "few": 3,
    "several": 3,
}
_SEASONS = {"spring": (3, 5), "summer": (6, 8), "fall": (9, 11), "autumn": (9, 11)}

_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_FULL_MONTH = r"(?P<month>" + "|".join(n for n in _MONTHS if len(n) > 3 or n == "may") + r")"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_AMOUNT = r"(?P<amount>\d+|" + "|".join(sorted(_AMOUNTS, key=len, reverse=True)) + r")"
_WEEKDAY = r"(?P<weekday>" + "|".join(_WEEKDAYS) + r")"
_PERIOD = r"(?P<period>week|weekend|month|year|spring|summer|fall|autumn|winter)"

#: The expressions, most specific first; each match blanks its text for the later ones.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        ("iso", r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]?\d)-(?P<day>[0-3]?\d)\b"),
        ("slashed", r"\b(?P<month>[01]?\d)/(?P<day>[0-3]?\d)/(?P<year>(?:19|20)\d\d)\b"),
        ("day month", rf"\b{_DAY}(?:\s+of)?\s+{_MONTH}(?:,?\s+{_YEAR})?\b"),
        ("month day", rf"\b{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?\b(?!:)"),
        ("month year", rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b"),
        ("in month", rf"\b(?:in|during|since|until|by|early|late|mid|of)[\s-]+{_FULL_MONTH}\b"),
        ("year", rf"\b{_YEAR}\b(?!\s*(?:am|pm|:))"),
        ("before yesterday", r"\bthe day before yesterday\b"),
        ("yesterday", r"\b(?:yesterday|last night)\b"),
        ("today", r"\b(?:today|tonight|this (?:morning|afternoon|evening))\b"),
        ("tomorrow", r"\btomorrow\b"),
        ("ago", rf"\b{_AMOUNT}\s+(?P<unit>day|week|month|year)s?\s+ago\b"),
        ("relative", rf"\b(?P<which>last|past|this|next|coming)\s+{_PERIOD}\b"),
        ("weekday", rf"\b(?:(?P<which>last|this|next|on|past)\s+)?{_WEEKDAY}\b"),
        ("recently", r"\b(?:recently|lately|the other day)\b"),
    )
)
_OPEN = re.compile(r"\b(?P<side>before|after|since|until|prior to)\s*$")
_CLOCK = r"\d{1,2}(?::\d\d)?\s*[ap]\.?m\.?"
_DATE_LINES = (
    re.compile(rf"^(?:{_CLOCK}\s+(?:on\s+)?)?{_DAY}\s+{_MONTH},?\s+{_YEAR}$"),
    re.compile(rf"^(?:{_CLOCK}\s+(?:on\s+)?)?{_MONTH}\s+{_DAY},?\s+{_YEAR}(?:,?\s+{_CLOCK})?$"),
)
_ISO_LINE = re.compile(r"^(?:19|20)\d\d-\d\d-\d\d(?:[t ][\d:.]+)?(?:z|[+-]\d\d:?\d\d)?$")
_LABEL = re.compile(r"^\s*[\[(]?\s*(?:session\s*\d+\s*[:,-]?\s*)?(?P<rest>.*?)\s*[\])]?\s*$")
#: A date line is short: a header, not a message that happens to end in a date.
DATE_LINE_CHARS = 80
_FAR = 1  # date.min's ordinal: an open start
_FUTURE = date.max.toordinal()


@dataclass(frozen=True)
class Span:
    """Days ``start`` to ``end`` (inclusive) as date ordinals."""

    start: int
    end: int

    @classmethod
    def of(cls, first: date, last: date | None = None) -> Span:
        return cls(first.toordinal(), (last or first).toordinal())

    def overlaps(self, other: Span, slack: int = 0) -> bool:
        """Whether the spans share a day, or come within ``slack`` days of it."""
        return self.start - slack <= other.end and other.start - slack <= self.end

    def holds(self, day: int) -> bool:
        return self.start <= day <= self.end


def timestamp_date(value: object) -> date | None:
    """The local date of an ISO 8601 timestamp (``2023-05-08``, ``...T13:56:00Z``, with
    or without an offset), or None for anything else."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"  # 3.10's fromisoformat does not read "Z"
    try:
        return datetime.fromisoformat(text).date()
    except ValueError:
        return None


def date_line(text: str) -> date | None:
    """The date of a short line that is only a date, as a conversation's session header
    gives it ("[Session 3: 1:56 pm on 8 May, 2023]", "May 8, 2023", "2023-05-08"),
    or None."""
    if len(text) > DATE_LINE_CHARS:
        return None
    label = _LABEL.match(text.lower())
    rest = label.group("rest") if label else ""
    if _ISO_LINE.match(rest):
        return timestamp_date(rest.upper())
    for pattern in _DATE_LINES:
        match = pattern.match(rest)
        if match:
            day = int(match.group("day"))
            return _date(int(match.group("year")), _MONTHS[match.group("month")], day)
    return None


def unit_anchor(history: History, unit: int, previous: date | None) -> date | None:
    """When ``unit`` was said: its messages' ``metadata["timestamp"]``, else the date of
    a date line it is, else ``previous`` (the anchor of the unit before it)."""
    for position in history.span(unit):
        message = history.messages[position]
        if message.metadata:
            stamped = timestamp_date(message.metadata.get("timestamp"))
            if stamped is not None:
                return stamped
    for position in history.span(unit):
        dated = date_line(history.messages[position].text)
        if dated is not None:
            return dated
    return previous


def unit_anchors(history: History) -> list[date | None]:
    """Each unit's :func:`unit_anchor`, in unit order."""
    anchors: list[date | None] = []
    previous: date | None = None
    for unit in range(len(history.units)):
        previous = unit_anchor(history, unit, previous)
        anchors.append(previous)
    return anchors


def time_words(words: AbstractSet[str], lowered: str) -> frozenset[str]:
    """The :data:`TIME_WORDS` among a text's ``words`` (lowercased), and :data:`A_YEAR`
    when ``lowered`` holds a year: empty for a text that mentions no day (most texts,
    which stop at this cheap test), and what :func:`spans_in` needs to know of it."""
    found = frozenset(words & TIME_WORDS if isinstance(words, frozenset) else TIME_WORDS & words)
    return found | {A_YEAR} if _HAS_YEAR.search(lowered) else found


def spans_in(
    text: str, anchor: date | None, *, found: AbstractSet[str] | None = None
) -> tuple[Span, ...]:
    """The days ``text`` mentions, relative ones ("yesterday", "last week", "two months
    ago", "on Friday") resolved against ``anchor``, the day it was said (without one, only
    dates that name their year). ``found``: the text's :func:`time_words`, when the
    caller has read its words already."""
    lowered = text.lower()
    if found is None:
        found = time_words(set(_WORD.findall(lowered)), lowered)
    if not found:
        return ()
    return tuple(span for _, span in _found(lowered, anchor, found))


def query_spans(query: str, now: date | None) -> tuple[Span, ...]:
    """The days a question names ("on May 3, 2023", "in July 2023", "last week" said
    ``now``); "before/after/since/until <date>" opens the span on that side."""
    lowered = query.lower()
    found = time_words(set(_WORD.findall(lowered)), lowered)
    spans = []
    for start, span in _found(lowered, now, found) if found else ():
        side = _OPEN.search(lowered[:start])
        if side is None:
            spans.append(span)
        elif side.group("side") in ("before", "prior to", "until"):
            spans.append(Span(_FAR, span.start - 1 if side.group("side") != "until" else span.end))
        else:
            spans.append(
                Span(span.end + 1 if side.group("side") == "after" else span.start, _FUTURE)
            )
    return tuple(spans)


def time_match(
    spans: Sequence[Span], anchor: date | None, asked: Sequence[Span], slack: int = 1
) -> float:
    """How well a unit's time meets the question's: 1 when a day it mentions falls in
    (or within ``slack`` days of) one the question names, 0.5 when only the day it was
    said does (its session is the one asked about), else 0."""
    if any(span.overlaps(wanted, slack) for span in spans for wanted in asked):
        return 1.0
    if anchor is not None:
        day = anchor.toordinal()
        if any(wanted.holds(day) for wanted in asked):
            return 0.5
    return 0.0


def _found(
    lowered: str, anchor: date | None, found: AbstractSet[str]
) -> Iterator[tuple[int, Span]]:
    """(offset, span) of each expression in ``lowered``, in the order of :data:`_PATTERNS`;
    a pattern runs only when ``found`` holds one of the words it needs."""
    for kind, pattern in _PATTERNS:
        if found.isdisjoint(_NEEDS[kind]):
            continue
        for match in pattern.finditer(lowered):
            span = _resolve(kind, match, anchor)
            if span is None:
                continue
            yield match.start(), span
            start, end = match.span()
            lowered = lowered[:start] + " " * (end - start) + lowered[end:]


_HAS_YEAR = re.compile(r"\b(?:19|20)\d\d\b")
_WORD = re.compile(r"[a-z0-9]+")
#: The words one of which (or a year) a text that mentions a day holds.
TIME_WORDS = frozenset(
    [
        *_MONTHS,
        *_WEEKDAYS,
        *_SEASONS,
        *"""winter week weeks weekend month months year years day days night nights
        yesterday today tonight tomorrow morning afternoon evening ago recently
        lately""".split(),
    ]
)
#: Stands in :func:`time_words` for a year (19xx, 20xx) in the text.
A_YEAR = "<year>"
_MONTH_WORDS = frozenset(_MONTHS)
#: The words (of :data:`TIME_WORDS`, or :data:`A_YEAR`) a pattern's match holds one of.
_NEEDS: dict[str, frozenset[str]] = {
    "iso": frozenset({A_YEAR}),
    "slashed": frozenset({A_YEAR}),
    "day month": _MONTH_WORDS,
    "month day": _MONTH_WORDS,
    "month year": frozenset({A_YEAR}),
    "in month": _MONTH_WORDS,
    "year": frozenset({A_YEAR}),
    "before yesterday": frozenset({"yesterday"}),
    "yesterday": frozenset({"yesterday", "night"}),
    "today": frozenset({"today", "tonight", "morning", "afternoon", "evening"}),
    "tomorrow": frozenset({"tomorrow"}),
    "ago": frozenset({"ago"}),
    "relative": frozenset([*_SEASONS, "winter", "week", "weekend", "month", "year"]),
    "weekday": frozenset(_WEEKDAYS),
    "recently": frozenset({"recently", "lately", "day"}),
}


#: Expressions that name one day, as days from the anchor.
_DAYS_FROM_ANCHOR = {"before yesterday": -2, "yesterday": -1, "today": 0, "tomorrow": 1}


def _resolve(kind: str, match: re.Match[str], anchor: date | None) -> Span | None:
    groups = match.groupdict()
    if kind in ("iso", "slashed", "day month", "month day", "month year", "in month"):
        return _calendar_span(groups, anchor)
    if kind == "year":
        return _whole_year(int(groups["year"]))
    if anchor is None:
        span = None
    elif kind in _DAYS_FROM_ANCHOR:
        span = Span.of(anchor + timedelta(days=_DAYS_FROM_ANCHOR[kind]))
    elif kind == "recently":
        span = Span.of(anchor - timedelta(days=14), anchor)
    elif kind == "ago":
        amount = groups["amount"]
        count = int(amount) if amount.isdigit() else _AMOUNTS[amount]
        span = _ago(anchor, count, groups["unit"])
    elif kind == "relative":
        span = _relative(anchor, groups["which"], groups["period"])
    else:
        span = _weekday(anchor, groups["which"], _WEEKDAYS[groups["weekday"]])
    return span


def _calendar_span(groups: dict[str, str | None], anchor: date | None) -> Span | None:
    """A named date (a day when one is given, else its month); a missing year is
    :func:`_year_for`'s."""
    month = groups["month"] or ""
    number = int(month) if month.isdigit() else _MONTHS[month]
    named = groups.get("year")
    year = int(named) if named else _year_for(number, anchor)
    if not year:
        return None
    if groups.get("day") is None:
        return _month(year, number)
    day = _date(year, number, int(groups["day"] or 0))
    return None if day is None else Span.of(day)


def _ago(anchor: date, count: int, unit: str) -> Span | None:
    if unit == "day":
        return Span.of(anchor - timedelta(days=count))
    if unit == "week":
        middle = anchor - timedelta(days=7 * count)
        return Span.of(middle - timedelta(days=3), middle + timedelta(days=3))
    if unit == "month":
        year, month = divmod(anchor.year * 12 + anchor.month - 1 - count, 12)
        return _month(year, month + 1) if year >= 1 else None
    return _whole_year(anchor.year - count)


#: "the past week/month/year": that many days up to the anchor.
_PAST_DAYS = {"week": 7, "month": 30, "year": 365}


def _relative(anchor: date, which: str, period: str) -> Span | None:
    step = {"last": -1, "past": -1, "this": 0, "next": 1, "coming": 1}[which]
    if which == "past" and period in _PAST_DAYS:
        return Span.of(anchor - timedelta(days=_PAST_DAYS[period]), anchor)
    if period == "week":
        monday = anchor - timedelta(days=anchor.weekday()) + timedelta(days=7 * step)
        return Span.of(monday, monday + timedelta(days=6))
    if period == "weekend":
        saturday = anchor - timedelta(days=anchor.weekday()) + timedelta(days=5)
        if step < 0:
            saturday -= timedelta(days=7)
        elif step > 0 and anchor.weekday() >= 5:
            saturday += timedelta(days=7)
        return Span.of(saturday, saturday + timedelta(days=1))
    if period == "month":
        year, month = divmod(anchor.year * 12 + anchor.month - 1 + step, 12)
        return _month(year, month + 1)
    if period == "year":
        return _whole_year(anchor.year + step)
    return _season(anchor, step, period)


def _season(anchor: date, step: int, season: str) -> Span | None:
    """'last/this/next summer': the season's months in the year it falls in (winter runs
    December to February); 'last' is the latest one that has ended, 'next' the first to
    begin after ``anchor``."""
    first, last = _SEASONS.get(season, (12, 2))

    def spanned(year: int) -> Span | None:
        end_year = year + 1 if first > last else year
        start = _date(year, first, 1)
        stop = _date(end_year, last, calendar.monthrange(end_year, last)[1])
        return Span.of(start, stop) if start and stop else None

    candidates = [s for s in (spanned(y) for y in range(anchor.year - 2, anchor.year + 2)) if s]
    day = anchor.toordinal()
    if step < 0:
        ended = [s for s in candidates if s.end < day]
        return ended[-1] if ended else None
    if step > 0:
        coming = [s for s in candidates if s.start > day]
        return coming[0] if coming else None
    current = [s for s in candidates if s.holds(day)]
    if current:
        return current[0]
    coming = [s for s in candidates if s.start > day]
    return coming[0] if coming else None


def _weekday(anchor: date, which: str | None, weekday: int) -> Span:
    """'last/on/past Friday' and a bare 'Friday': the latest Friday before ``anchor``
    (7 days back when it is one); 'this Friday': the one in ``anchor``'s week; 'next
    Friday': the first after it."""
    if which == "this":
        return Span.of(anchor - timedelta(days=anchor.weekday() - weekday))
    if which == "next":
        return Span.of(anchor + timedelta(days=(weekday - anchor.weekday() - 1) % 7 + 1))
    return Span.of(anchor - timedelta(days=(anchor.weekday() - weekday - 1) % 7 + 1))


def _year_for(month: int, anchor: date | None) -> int | None:
    """The year of a month named without one: the anchor's, or the year before when
    that month has not come yet at the anchor (people mostly tell what has happened)."""
    if anchor is None:
        return None
    return anchor.year if month <= anchor.month else anchor.year - 1


def _month(year: int, month: int) -> Span | None:
    first = _date(year, month, 1)
    last = _date(year, month, calendar.monthrange(year, month)[1]) if first else None
    return Span.of(first, last) if first and last else None


def _whole_year(year: int) -> Span | None:
    return Span.of(date(year, 1, 1), date(year, 12, 31)) if 1 <= year <= 9999 else None


def _date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None
