"""The default importance scorer, ``keywords``: how much each unit has to say about the
query, scored in numpy for every unit at once.

1. **Overlap**: BM25 between the query (``history.effective_query``) and each unit's text
   (speaker name, text, tool-call names and arguments; stopwords out, light suffix
   stripping): rare shared words count for much, common ones for little, and a long
   unit does not win by length alone. Scaled so the best unit scores 1.
2. **Neighbours**: each unit inherits ``neighbours`` of an adjacent unit's score,
   shrinking by ``DECAY`` a step, up to ``reach`` units away on each side: the turn a
   question needs often sits beside the turn that matches it (the reply, the rest of
   the story).
3. **Salience**: a scoring unit is worth ``1 + speaker`` times more when its speaker is
   named in the query ("what did *Bob* say about ..."), and ``1 + salience`` times more
   when it carries the kind of fact the query asks for: a date or time for "when ...",
   a number for "how many ...".
4. **Time** (``time``, off by default): when the query names days ("on May 3, 2023",
   "in July 2023"), a unit whose words point at one of them ("yesterday", said on
   4 May) counts ``1 + time`` times more, one said on one of them ``1 + time/2`` times;
   such a unit that shares no word with the query still enters, at ``time/2`` (or
   ``time/4``) of the best match. The days come from the kit's time grammar, read once
   per unit. Not in an agent's history: there the current turn is the query, and the
   dates it holds (a booking's) are not the question's (measured: next-action recall
   fell).

Each conversation keeps an index of its units' terms, speakers and facts, grown as
units arrive (a ``Conversation`` is append-only), so a chat loop that appends a message
and selects again reads that message only. A visit reads the postings of the query's
terms and scores every unit at once, in numpy: in an agent's history the query (the
current turn) shares words such as a record's field names with most older units, and a
Python pass over them cost a step what the history holds.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import Counter
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, fields, replace
from datetime import date
from typing import Any

import numpy as np

from ctxwindow import Branch, Conversation, History, InvalidOption
from ctxwindow.kit import (
    PerConversation,
    Span,
    query_spans,
    query_terms,
    spans_in,
    terms,
    time_words,
    unit_anchor,
    unit_text,
)
from ctxwindow.kit import words as words_of
from ctxwindow.kit.ranking import Postings, Rows, distinct, stable_units

K1 = 1.2
B = 0.75
#: Each further neighbour inherits this much less than the one before.
DECAY = 0.7
#: The units sharing a query term are listed (``np.unique`` of their postings) when
#: their postings number under 1/FEW_SHARE of the units; else a pass over every score
#: finds them.
FEW_SHARE = 8

_TIME_WORDS = frozenset(
    """january february march april may june july august september october november
    december jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday
    thursday friday saturday sunday yesterday today tomorrow tonight weekend week weeks
    month months year years ago last next recently lately since until summer winter
    spring autumn christmas birthday morning evening night""".split()
)
_NUMBER_WORDS = frozenset(
    """one two three four five six seven eight nine ten eleven twelve twenty thirty
    forty fifty hundred thousand million once twice dozen half couple several""".split()
)
_YEAR = re.compile(r"\b(1[89]|20)\d\d\b")
_ASKS_TIME = re.compile(r"\b(when|what (year|month|day|date|time)|how long ago|since when)\b")
_ASKS_NUMBER = re.compile(r"\b(how (many|much|long|old|often|far)|what number)\b")
#: What every match of each begins with: a match is tried only where one of them is
#: found (at C speed), not at every position of an agent's turn of 32,000 characters.
_ASKS_TIME_HEADS = ("when", "what ", "how long ago", "since when")
_ASKS_NUMBER_HEADS = ("how ", "what number")

#: Kinds of fact, as bits: what a unit carries and what a query asks for.
TIME, NUMBER = 1, 2


def facts(text: str) -> int:
    """The kinds of fact ``text`` carries: TIME (a date, weekday, month, year or a word
    such as 'yesterday') and NUMBER (digits or a number word), as bits."""
    lowered = text.lower()
    return _facts_of_words(set(words_of(lowered)), lowered)


def _facts_of_words(words: AbstractSet[str], lowered: str) -> int:
    """:func:`facts` of the ``lowered`` text, whose distinct words are ``words``."""
    found = 0
    if words & _TIME_WORDS or _YEAR.search(lowered):
        found |= TIME
    if words & _NUMBER_WORDS or any(word.isdigit() for word in words):
        found |= NUMBER
    return found


def asks_for(query: str) -> int:
    """The kinds of fact ``query`` asks for ('when ...': TIME; 'how many ...': NUMBER)."""
    lowered = query.lower()
    return (TIME if _found(_ASKS_TIME, _ASKS_TIME_HEADS, lowered) else 0) | (
        NUMBER if _found(_ASKS_NUMBER, _ASKS_NUMBER_HEADS, lowered) else 0
    )


def _found(pattern: re.Pattern[str], heads: tuple[str, ...], text: str) -> bool:
    """``pattern.search(text)``, every match of which begins with one of ``heads``:
    tried where a head is found. A search tries the pattern at every position, 1 ms a
    step over an agent's current turn (the query there), and a head is rarely in it."""
    for head in heads:
        at = text.find(head)
        while at >= 0:
            if pattern.match(text, at):
                return True
            at = text.find(head, at + 1)
    return False


def unit_speakers(history: History, unit: int) -> frozenset[str]:
    """The names of who speaks in a unit (``name`` of its messages), as terms."""
    found: set[str] = set()
    for position in history.span(unit):
        name = history.messages[position].name
        if name:
            found.update(terms(name))
    return frozenset(found)


@functools.lru_cache(maxsize=65_536)
def _word_terms(word: str) -> tuple[str, ...]:
    """``terms(word)``, remembered: a conversation's words recur from unit to unit."""
    return tuple(terms(word))


class UnitTerms:
    """What the scorer needs of one unit."""

    __slots__ = ("counts", "facts", "length", "speakers", "timely")

    def __init__(self, text: str, speakers: frozenset[str], time: bool = False) -> None:
        # each distinct word is stemmed once (prose repeats its words): the counts are
        # those of ``terms(text)``, as a word's terms are the terms it adds to the text's
        lowered = text.lower()
        words = Counter(words_of(lowered))
        self.counts: Counter[str] = Counter()
        for word, times in words.items():
            for term in _word_terms(word):
                self.counts[term] += times
        self.length = sum(self.counts.values())
        self.facts = _facts_of_words(words.keys(), lowered)
        self.speakers = speakers
        #: The kit's time words it holds (read only with ``time``): none, no day named.
        self.timely = time_words(words.keys(), lowered) if time else frozenset()

    @classmethod
    def of(
        cls, history: History, unit: int, text: str | None = None, time: bool = False
    ) -> UnitTerms:
        text = unit_text(history, unit) if text is None else text
        return cls(text, unit_speakers(history, unit), time)


class TimeIndex:
    """When each unit was said and the days it mentions (the kit's grammar), read once
    per unit, so a visit only compares the days its query names."""

    def __init__(self) -> None:
        self.anchors: list[date | None] = []
        self.spans: dict[int, tuple[Span, ...]] = {}  # only units that mention days
        self.by_anchor: dict[int, list[int]] = {}  # day said (ordinal) -> units

    def add(self, history: History, unit: int, read: UnitTerms, text: str) -> None:
        anchor = unit_anchor(history, unit, self.anchors[-1] if self.anchors else None)
        number = len(self.anchors)
        self.anchors.append(anchor)
        spans = spans_in(text, anchor, found=read.timely) if read.timely else ()
        if spans:
            self.spans[number] = spans
        if anchor is not None:
            self.by_anchor.setdefault(anchor.toordinal(), []).append(number)

    def branch(self, units: int) -> TimeIndex:
        """The index of the first ``units`` units, of its own."""
        twin = TimeIndex()
        twin.anchors = self.anchors[:units]
        twin.spans = {unit: spans for unit, spans in self.spans.items() if unit < units}
        for day, said in self.by_anchor.items():
            mine = [unit for unit in said if unit < units]
            if mine:
                twin.by_anchor[day] = mine
        return twin

    @property
    def now(self) -> date | None:
        """The newest anchor: what a question's "last week" is resolved against."""
        return next((a for a in reversed(self.anchors) if a is not None), None)

    def matches(self, asked: tuple[Span, ...], size: int) -> dict[int, float]:
        """The kit's ``time_match`` of each of the first ``size`` units that meets
        ``asked``: 1 for a unit mentioning one of its days (give or take one), 0.5 for one
        said on one of them."""
        found: dict[int, float] = {}
        for day, units in self.by_anchor.items():
            if any(wanted.holds(day) for wanted in asked):
                found.update((unit, 0.5) for unit in units if unit < size)
        for unit, spans in self.spans.items():
            if unit < size and any(s.overlaps(w, 1) for s in spans for w in asked):
                found[unit] = 1.0
        return found


class TermIndex:
    """Postings, lengths, speakers and facts of a conversation's units, in unit order."""

    def __init__(self) -> None:
        self.postings = Postings()
        self.lengths = Rows(np.float64)
        self.length_sums: list[int] = [0]
        self.facts = Rows(np.int64)
        #: The units whose speaker names each term, ascending.
        self.speakers: dict[str, Rows] = {}
        #: Kept only by a scorer that weighs time.
        self.time: TimeIndex | None = None
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.lengths)

    def add(self, read: UnitTerms) -> None:
        unit = len(self.lengths)
        growing = self.postings.growing
        for term, count in read.counts.items():
            posting = growing(term, unit)
            posting.units.append(unit)
            posting.counts.append(count)
        self.postings.read(read.counts)
        self.lengths.append(read.length)
        self.length_sums.append(self.length_sums[-1] + read.length)
        self.facts.append(read.facts)
        for term in read.speakers:
            speaking = self.speakers.get(term) or self.speakers.setdefault(term, Rows(np.int64))
            speaking.append(unit)

    def branch(self, conversation: Conversation, origin: Branch) -> TermIndex:
        """The index of a branch of the conversation (see PerConversation): the units
        the two share, its postings shared until either index adds to one."""
        twin = TermIndex()
        with self.lock:
            kept = min(origin.units, len(self))
            twin.postings = self.postings.branch(kept, len(self))
            twin.lengths, twin.facts = self.lengths.copy(kept), self.facts.copy(kept)
            twin.length_sums = self.length_sums[: kept + 1]
            for term, speaking in self.speakers.items():
                mine = speaking.copy(speaking.count_below(kept))
                if len(mine):
                    twin.speakers[term] = mine
            twin.time = self.time.branch(kept) if self.time is not None else None
        return twin


@dataclass(frozen=True)
class Settings:
    """The scorer's weights, from its spec: ``keywords:speaker=0;reach=2``."""

    #: Share of an adjacent unit's score a unit inherits (0: none).
    neighbours: float = 0.25
    #: How many units away, on each side, a score spreads.
    reach: int = 4
    #: A scoring unit whose speaker the query names counts ``1 + speaker`` times.
    speaker: float = 1.0
    #: A scoring unit with the kind of fact the query asks for counts ``1 + salience`` times.
    salience: float = 1.0
    #: A unit mentioning a day the query names counts ``1 + time`` times (0: time unread).
    time: float = 0.0

    @classmethod
    def parse(cls, argument: str | None) -> Settings:
        """``key=value`` pairs separated by ';' (a ',' would end the option in a spec)."""
        settings = cls()
        known = [field.name for field in fields(cls)]
        for pair in filter(None, (p.strip() for p in (argument or "").split(";"))):
            key, sep, raw = (part.strip() for part in pair.partition("="))
            problem = None
            if not sep or key not in known:
                problem = f"{pair!r} is not one of {', '.join(f'{k}=...' for k in known)}"
            else:
                try:
                    value: float = int(raw) if key == "reach" else float(raw)
                except ValueError:
                    value = math.nan
                if not math.isfinite(value) or value < 0 or (key == "reach" and value > 50):
                    limit = "an integer from 0 to 50" if key == "reach" else "a number >= 0"
                    problem = f"{key} must be {limit}, got {raw!r}"
            if problem:
                raise InvalidOption(f"importance scorer 'keywords:{argument}': {problem}")
            changes: dict[str, Any] = {key: value}
            settings = replace(settings, **changes)
        return settings


class KeywordScorer:
    """BM25 overlap with the query, spread to neighbouring units, raised for units whose
    speaker the query names or that carry the kind of fact it asks for. Scored in numpy;
    one incrementally grown index per conversation; safe to share between threads."""

    def __init__(self, settings: Settings | None = None, name: str = "keywords") -> None:
        self.settings = settings or Settings()
        self.name = name
        self._indexes: PerConversation[TermIndex] = PerConversation(
            self._new_index, TermIndex.branch
        )
        #: Units read into an index so far, over all conversations (tests, bench).
        self.indexed = 0

    def _new_index(self) -> TermIndex:
        index = TermIndex()
        if self.settings.time:
            index.time = TimeIndex()
        return index

    def index(self, history: History) -> TermIndex:
        """The conversation's index, brought up to this history's units."""
        index = self._indexes.of(history.conversation)
        with index.lock:
            start, stop = len(index), stable_units(history)
            for unit in range(start, stop):
                text = unit_text(history, unit)
                read = UnitTerms.of(history, unit, text, index.time is not None)
                index.add(read)
                if index.time is not None:
                    index.time.add(history, unit, read, text)
            self.indexed += max(stop - start, 0)
        return index

    def score(self, history: History) -> np.ndarray:
        """One score per unit (float64): 0 for a unit that shares nothing with the query,
        nor sits near one that does; the best direct match scores at least 1."""
        return self.score_with_support(history)[0]

    def score_with_support(self, history: History) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`score`, and the units outside which every score is 0, ascending, when
        they are few (None: any may score): the units that share a query term and those
        within reach of one. A visit then reads those alone, not every unit's score."""
        size = len(history.units)
        index = self.index(history)
        # A unit the host changed on this visit (the newest user message, truncated) is
        # read afresh rather than indexed, even when an earlier visit indexed it whole.
        stable = min(stable_units(history), len(index), size)
        tail = [UnitTerms.of(history, unit) for unit in range(stable, size)]
        # read once: in an agent's history it is built from the whole current turn
        query_text = history.effective_query
        # each term once, in the query's order: float sums added in a set's order (which
        # varies between processes with the hash seed) vary in the last bit
        query = query_terms(query_text)
        matched, scoring = self._overlap(index, tail, query, size)
        asking = history.newest_user if history.query is None else None
        own = None if asking is None else history.unit_of(asking)
        if own is not None:
            matched[own] = 0.0  # the query does not match itself
        settings = self.settings
        timed = {} if history.agent else self._time_matches(index, query_text, stable)
        if own is not None:
            timed.pop(own, None)
        looked = matched if scoring is None else matched[scoring]
        top = float(looked.max()) if len(looked) else 0.0
        if top <= 0 and not timed:
            return matched, scoring
        if top > 0:  # scaled in place (the array is this call's): where it may score
            if scoring is None:
                matched /= top
            else:
                matched[scoring] /= top
        stretches = _stretches_of(scoring, settings.neighbours, settings.reach, size)
        out = spread(matched, settings.neighbours, settings.reach, scoring, stretches)
        support = _support(scoring, settings.neighbours, settings.reach, size, stretches)
        if support is not None and timed:
            support = distinct(np.concatenate([support, np.fromiter(timed, np.int64, len(timed))]))
        for unit, match in timed.items():
            value = float(out[unit])
            weight = settings.time * match
            out[unit] = value * (1 + weight) if value else weight / 2
        # Raised for the kind of fact asked and the speaker named: where a unit scores
        # (any other stays 0), so only the support is looked at when it is known.
        asked = asks_for(query_text) if settings.salience else 0
        if asked:
            units = np.arange(size) if support is None else support
            facts = _facts_of(index, tail, stable, units)
            out[units[(facts & asked) != 0]] *= 1 + settings.salience
        named = set(query) if settings.speaker else set()
        speaking = _speaking(index, tail, named, stable) if named else _NO_UNITS
        if len(speaking):
            out[speaking] *= 1 + settings.speaker
        return out, support

    def _time_matches(self, index: TermIndex, query: str, size: int) -> dict[int, float]:
        """The units among the first ``size`` whose time meets the days ``query`` names."""
        if index.time is None or not self.settings.time:
            return {}
        asked = query_spans(query, index.time.now)
        return index.time.matches(asked, size) if asked else {}

    @staticmethod
    def _overlap(
        index: TermIndex, tail: list[UnitTerms], query: list[str], size: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """BM25 of the first ``size`` units for the ``query`` terms (0 for a unit that
        shares none); ``tail`` holds the last units when the index does not. Every
        term's postings are scored in one pass and summed per unit in the query's term
        order (``bincount`` adds in the order given), as a loop over the terms would.
        With the scores, the units that share a term, ascending, when they are few
        (None: many), so that :func:`spread` need not look for them among all units."""
        indexed = size - len(tail)
        total = index.length_sums[indexed] + sum(read.length for read in tail)
        average = max(total / max(size, 1), 1.0)
        found: list[tuple[np.ndarray, np.ndarray]] = []
        idfs: list[float] = []
        for term in query:
            posting = index.postings.get(term)
            units, counts = posting.before(indexed) if posting else (_NO_UNITS, _NO_COUNTS)
            more = [(indexed + at, r.counts[term]) for at, r in enumerate(tail) if term in r.counts]
            if more:
                units = np.concatenate([units, np.asarray([u for u, _ in more], np.int64)])
                counts = np.concatenate([counts, np.asarray([c for _, c in more], np.float64)])
            if len(units):
                found.append((units, counts))
                idfs.append(math.log(1 + (size - len(units) + 0.5) / (len(units) + 0.5)))
        if not found:
            return np.zeros(size), _NO_UNITS
        units = np.concatenate([held for held, _ in found])
        counts = np.concatenate([times for _, times in found])
        lengths = index.lengths.view[:indexed]
        if tail:
            lengths = np.concatenate([lengths, np.asarray([r.length for r in tail], np.float64)])
        # K1 * (1 - B + B * length / average), then idf * count * (K1 + 1) / (count + norm),
        # in place, operation by operation: the same floats without a new array at each
        # step (in an agent's history the query's terms have tens of thousands of postings)
        norm = lengths[units]
        norm *= B
        norm /= average
        norm += 1 - B
        norm *= K1
        norm += counts
        # idf * count, term by term in place (the concatenation is this call's own): the
        # products a repeated idf array would give, without making it
        weights, start = counts, 0
        for (held, _), idf in zip(found, idfs, strict=True):
            weights[start : start + len(held)] *= idf
            start += len(held)
        weights *= K1 + 1
        weights /= norm
        if len(units) * FEW_SHARE >= size:
            scored: np.ndarray = np.bincount(units, weights=weights, minlength=size)
            return scored, None
        # few: summed where they are, in the order given (as bincount sums), into zeros
        # a pass over every unit never touches
        scored = np.zeros(size)
        np.add.at(scored, units, weights)
        return scored, distinct(units)


_NO_UNITS = np.zeros(0, dtype=np.int64)
_NO_COUNTS = np.zeros(0, dtype=np.float64)


def _facts_of(
    index: TermIndex, tail: list[UnitTerms], stable: int, units: np.ndarray
) -> np.ndarray:
    """The kinds of fact each of ``units`` (ascending) states: the indexed ones before
    ``stable``, then those of ``tail`` (read on this visit); no copy of every unit's."""
    cut = int(np.searchsorted(units, stable))
    read = np.asarray([r.facts for r in tail], dtype=np.int64)
    return np.concatenate([index.facts.view[units[:cut]], read[units[cut:] - stable]])


def _speaking(index: TermIndex, tail: list[UnitTerms], named: set[str], stable: int) -> np.ndarray:
    """The units whose speaker is one of the ``named`` terms, ascending (each once): the
    indexed ones before ``stable``, then those of ``tail`` (read on this visit)."""
    found = []
    for term in named:
        units = index.speakers.get(term)
        if units is not None:
            found.append(units.view[: units.count_below(stable)])
    said = [stable + at for at, read in enumerate(tail) if not named.isdisjoint(read.speakers)]
    if said:
        found.append(np.asarray(said, dtype=np.int64))
    if not found:
        return _NO_UNITS
    return found[0] if len(found) == 1 else distinct(np.concatenate(found))


def spread(
    scores: np.ndarray,
    strength: float,
    reach: int,
    scoring: np.ndarray | None = None,
    stretches: list[tuple[int, int]] | None = None,
) -> np.ndarray:
    """Each unit's score plus ``strength * DECAY**(k-1)`` of the score of the unit ``k``
    away, on both sides, for ``k`` up to ``reach`` (the left one first, then the right,
    step by step): the floats a Python pass over the scores would sum, to the last bit.
    When few units score (a chat's question), only the stretches within ``reach`` of
    one are summed: a unit farther from every scoring one stays 0, and the sums inside
    a stretch are those of the whole pass (what lies outside adds only zeros).
    ``scoring``: the units that may score, ascending, when the caller knows them (a unit
    among them that scores 0 adds a stretch of zeros); else every unit is looked at.
    ``stretches``: those of ``scoring`` (:func:`_stretches_of`), when the caller has them."""
    size = len(scores)
    if not strength or not reach:
        return scores
    span = min(reach, size - 1)
    if scoring is None:
        scoring = np.flatnonzero(scores)
    if len(scoring) * (2 * span + 1) * 4 >= size:
        return _spread_pass(scores, strength, span)
    # every score outside the stretches is 0: zeros, with each stretch's sums put in
    out: np.ndarray = np.zeros(size, dtype=scores.dtype)
    if stretches is None:
        stretches = list(_stretches(scoring.tolist(), span, size))
    for start, stop in stretches:
        out[start:stop] = _spread_pass(scores[start:stop], strength, span)
    return out


def _stretches_of(
    scoring: np.ndarray | None, strength: float, reach: int, size: int
) -> list[tuple[int, int]] | None:
    """The stretches :func:`spread` and :func:`_support` read around ``scoring``, found
    once for both (None: no spreading, or ``scoring`` None)."""
    if scoring is None or not strength or not reach or size < 2:
        return None
    return list(_stretches(scoring.tolist(), min(reach, size - 1), size))


def _support(
    scoring: np.ndarray | None,
    strength: float,
    reach: int,
    size: int,
    stretches: list[tuple[int, int]] | None = None,
) -> np.ndarray | None:
    """The units :func:`spread` may give a score to from ``scoring`` (ascending), when
    they are few (None: many, or ``scoring`` None). ``stretches``: those of
    :func:`_stretches_of`, when the caller has them."""
    if scoring is None or not strength or not reach or size < 2:
        return scoring
    if stretches is None:
        stretches = list(_stretches(scoring.tolist(), min(reach, size - 1), size))
    if sum(stop - start for start, stop in stretches) * FEW_SHARE >= size:
        return None
    if not stretches:
        return _NO_UNITS
    return np.concatenate([np.arange(start, stop) for start, stop in stretches])


def _spread_pass(scores: np.ndarray, strength: float, span: int) -> np.ndarray:
    """:func:`spread` as one pass over ``scores``, ``span`` steps at most."""
    size = len(scores)
    out: np.ndarray = scores.copy()
    weight = strength
    for step in range(1, min(span, size - 1) + 1):
        # each side adds the same products: made once (the same floats, half the arrays)
        shares = weight * scores
        out[step:] += shares[: size - step]
        out[: size - step] += shares[step:]
        weight *= DECAY
    return out


def _stretches(units: list[int], span: int, size: int) -> Iterator[tuple[int, int]]:
    """The stretches ``[start, stop)`` of the ``size`` units that lie within ``span`` of
    one of ``units`` (ascending); no unit of one stretch is within ``span`` of another's."""
    start = stop = -1
    for unit in units:
        if stop < 0 or unit - span >= stop:
            if stop >= 0:
                yield start, stop
            start = max(unit - span, 0)
        stop = min(unit + span + 1, size)
    if stop >= 0:
        yield start, stop


def keywords_factory(argument: str | None) -> KeywordScorer:
    """``keywords``, or ``keywords:<key=value;...>`` with the keys of :class:`Settings`."""
    settings = Settings.parse(argument)
    return KeywordScorer(settings, "keywords" + (f":{argument}" if argument else ""))
