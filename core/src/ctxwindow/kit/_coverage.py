"""Identifier coverage: what an agent's next step needs from older units.

An agent passes on ids, numbers, dates and paths it saw before (a user id from the
first message, a payment id from a profile lookup, a file path from a listing). A
unit is worth keeping for the identifiers it adds to the window, not for those the
window already carries, so the value of an older unit falls as others are kept:
:func:`best_first` takes units in that order.
"""

from __future__ import annotations

import heapq
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from ctxwindow._options import Option
from ctxwindow.kit._text import unit_text

if TYPE_CHECKING:
    from ctxwindow._history import Conversation, History

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-./@:]*[A-Za-z0-9]")
#: Novelty counts new identifiers per this many tokens of the unit.
NOVELTY_TOKENS = 10


def identifier_weight_option(adds_to: str) -> Option:
    """The ``identifier_weight`` option of a strategy that scores units with
    :class:`Coverage` (default 1.0; 0 turns it off), saying what the novelty adds to."""
    return Option(
        "identifier_weight",
        float,
        1.0,
        "In an agent's history (one with tool calls): what each identifier an older "
        "unit would add to the window (an id, number, date or path not yet in it), per "
        f"10 tokens of the unit, adds to its {adds_to}; 0 turns it off.",
        minimum=0.0,
    )


def identifiers(text: str) -> frozenset[str]:
    """The identifiers in ``text``: tokens of three or more characters that hold a
    digit, an underscore, a slash, a dot or an at sign inside, or are written in
    capitals (ids, codes, numbers, dates, paths, emails, flight numbers, airports)."""
    found = set()
    for token in _TOKEN.findall(text):
        if len(token) < 3:
            continue
        if token.isupper() or any(c.isdigit() or c in "_/.@" for c in token):
            found.add(token)
    return frozenset(found)


class _UnitIdentifiers:
    """Identifiers of a conversation's units, read once each: units never change once
    made, so a chat loop pays for a new unit only."""

    def __init__(self) -> None:
        self.by_unit: dict[tuple[int, int], frozenset[str]] = {}
        self.lock = threading.Lock()


_MEMO: weakref.WeakKeyDictionary[Conversation, _UnitIdentifiers] = weakref.WeakKeyDictionary()
_MEMO_LOCK = threading.Lock()


class Coverage:
    """The identifiers a window carries so far, and what each unit would add.

    ``add`` the units kept; ``novelty(unit)`` is the number of identifiers the unit
    would add, per :data:`NOVELTY_TOKENS` of its tokens. A unit that holds a
    stand-in (the host's cut of the newest message) is read as it is now.
    """

    def __init__(self, history: History, kept: Iterable[int] = ()) -> None:
        self.history = history
        self.covered: set[str] = set()
        with _MEMO_LOCK:
            memo = _MEMO.get(history.conversation)
            if memo is None:
                memo = _MEMO[history.conversation] = _UnitIdentifiers()
        self._memo = memo
        replaced = {history.unit_of(position) for position in history.replacements}
        self._fresh = {unit for unit in replaced if unit is not None}
        for unit in kept:
            self.add(unit)

    def of(self, unit: int) -> frozenset[str]:
        """The identifiers of ``unit``'s text and tool-call arguments."""
        if unit in self._fresh:
            return identifiers(unit_text(self.history, unit))
        span = self.history.span(unit)
        key = (span.start, span.stop)
        found = self._memo.by_unit.get(key)
        if found is None:
            found = identifiers(unit_text(self.history, unit))
            with self._memo.lock:
                self._memo.by_unit[key] = found
        return found

    def add(self, unit: int) -> None:
        self.covered.update(self.of(unit))

    def novelty(self, unit: int) -> float:
        new = len(self.of(unit) - self.covered)
        return new * NOVELTY_TOKENS / max(self.history.unit_tokens(unit), 1)


def best_first(
    history: History,
    candidates: Iterable[int],
    room: int,
    value: Callable[[int], float],
    *,
    above: float | None = None,
) -> Iterator[int]:
    """The candidates that fit in ``room`` tokens, highest ``value`` first; ties in
    the order given. ``value`` may fall as units are taken (coverage), never rise:
    each unit is valued again before it is yielded (lazy greedy). With ``above``,
    units valued at or below it are not taken. The caller keeps what it takes, and
    updates whatever ``value`` reads, before asking for the next."""
    order = list(candidates)
    sizes = {unit: history.unit_tokens(unit) for unit in order}
    heap = [(-value(unit), rank, unit) for rank, unit in enumerate(order)]
    heapq.heapify(heap)
    smallest = min(sizes.values(), default=0)
    while heap and room >= smallest:
        stale, rank, unit = heapq.heappop(heap)
        if sizes[unit] > room:
            continue
        fresh = value(unit)
        if heap and fresh < -heap[0][0] and fresh < -stale:
            heapq.heappush(heap, (-fresh, rank, unit))
            continue
        if above is not None and fresh <= above:
            return
        room -= sizes[unit]
        yield unit
