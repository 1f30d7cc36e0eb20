"""Identifier coverage: what an agent's next step needs from older units.

An agent passes on ids, numbers, dates and paths it saw before (a user id from the
first message, a payment id from a profile lookup, a file path from a listing). A
unit is worth keeping for the identifiers it adds to the window, not for those the
window already carries, so the value of an older unit falls as others are kept:
:func:`best_first` takes units in that order.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

from ctxwindow._options import Option
from ctxwindow.kit._memo import PerConversation, SpanMemo
from ctxwindow.kit._text import unit_text

if TYPE_CHECKING:
    from ctxwindow._history import Branch, Conversation, History

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-./@:]*[A-Za-z0-9]")
#: What makes a token of three or more characters an identifier, short of capitals.
_MARK = re.compile(r"[0-9_/.@]")
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
    # each distinct token is judged once (prose repeats its words)
    return frozenset(filter(_is_identifier, set(_TOKEN.findall(text))))


def has_identifier(text: str) -> bool:
    """Whether ``text`` holds any identifier (:func:`identifiers`)."""
    return any(map(_is_identifier, set(_TOKEN.findall(text))))


def _is_identifier(token: str) -> bool:
    """The test of :func:`identifiers`, its marks found by one regex search rather than
    a Python loop over the token's characters."""
    return len(token) >= 3 and (token.isupper() or _MARK.search(token) is not None)


class _UnitIdentifiers:
    """Identifiers of a conversation's units, read once each: units never change once
    made, so a chat loop pays for a new unit only."""

    def __init__(self) -> None:
        self.by_unit: SpanMemo[frozenset[str]] = SpanMemo()
        #: Where each identifier a user or assistant wrote was first written, for the
        #: messages read so far (``spoken_read``): a turn reads its new messages only.
        self.spoken_first: dict[str, int] = {}
        self.spoken_read = 0
        self.lock = threading.Lock()

    def branch(self, conversation: Conversation, origin: Branch) -> _UnitIdentifiers:
        """What a branch of the conversation keeps: the units and messages the two share."""
        twin = _UnitIdentifiers()
        cut = origin.messages
        with self.lock:
            twin.by_unit = self.by_unit.branch(cut)
            # in the order first written, so a reader's count of those it read holds
            twin.spoken_first = {key: at for key, at in self.spoken_first.items() if at < cut}
            twin.spoken_read = min(self.spoken_read, cut)
        return twin


_MEMO: PerConversation[_UnitIdentifiers] = PerConversation(
    _UnitIdentifiers, _UnitIdentifiers.branch
)


class Coverage:
    """The identifiers a window carries so far, and what each unit would add.

    ``add`` the units kept; ``novelty(unit)`` is the number of identifiers the unit
    would add, per :data:`NOVELTY_TOKENS` of its tokens. A unit that holds a
    stand-in (the host's cut of the newest message) is read as it is now.
    """

    def __init__(
        self,
        history: History,
        kept: Iterable[int] = (),
        *,
        spoken_weight: float = 0.0,
        weight: float = 1.0,
    ) -> None:
        self.history = history
        self.covered: set[str] = set()
        self.spoken_weight = spoken_weight
        self.weight = weight
        self._memo = memo = _MEMO.of(history.conversation)
        #: What ``of`` found on this visit, by unit: a visit values a unit many times.
        self._found: dict[int, frozenset[str]] = {}
        replaced = {history.unit_of(position) for position in history.replacements}
        self._fresh = {unit for unit in replaced if unit is not None}
        #: Messages before this one are as the conversation holds them (no stand-in).
        self._stable = min(history.replacements, default=len(history))
        self._spoken_later: frozenset[str] = frozenset()
        if spoken_weight:
            self._spoken_later = _read_spoken(history, memo, self._stable)
        for unit in kept:
            self.add(unit)

    def of(self, unit: int) -> frozenset[str]:
        """The identifiers of ``unit``'s text and tool-call arguments."""
        found = self._found.get(unit)
        if found is not None:
            return found
        if unit in self._fresh:
            found = identifiers(unit_text(self.history, unit))
        else:
            span = self.history.span(unit)
            key = (span.start, span.stop)
            found = self._memo.by_unit.get(key)
            if found is None:
                found = identifiers(unit_text(self.history, unit))
                with self._memo.lock:
                    self._memo.by_unit[key] = found
        self._found[unit] = found
        return found

    def add(self, unit: int) -> int:
        """Cover ``unit``'s identifiers; how many it added."""
        covered = self.covered
        before = len(covered)
        covered.update(self.of(unit))
        return len(covered) - before

    def add_text(self, text: str) -> None:
        self.covered.update(identifiers(text))

    def worth(self, new: Iterable[str]) -> float:
        """What identifiers not yet covered are worth: 1 each, and ``spoken_weight``
        more for one that a user or assistant wrote (text or call arguments): the ids
        in play, which an agent's next step passes on far more often than one that only
        a tool's output holds."""
        found = new if isinstance(new, (set, frozenset)) else set(new)
        if not self.spoken_weight:
            return float(len(found))
        return len(found) + self.spoken_weight * self._spoken_count(found)

    def _spoken_count(self, found: AbstractSet[str]) -> int:
        """How many of ``found`` are :meth:`spoken`: counted at C speed when every
        identifier the memo holds was written before the first stand-in (no stand-in
        writes one), the common case: a unit is valued again and again on a visit."""
        memo = self._memo
        if not self._spoken_later:
            with memo.lock:  # a visit of a longer history may be reading further now
                if memo.spoken_read <= self._stable:
                    return sum(map(memo.spoken_first.__contains__, found))
        return sum(map(self.spoken, found))

    def spoken(self, identifier: str) -> bool:
        """Whether a user or assistant message of the history wrote ``identifier``."""
        first = self._memo.spoken_first.get(identifier)
        return (first is not None and first < self._stable) or identifier in self._spoken_later

    @property
    def spoken_later(self) -> frozenset[str]:
        """The identifiers written in the messages that hold a host stand-in on this
        visit (read as they are now): spoken on this visit only."""
        return self._spoken_later

    def written_since(self, start: int) -> list[tuple[str, int]]:
        """The identifiers a user or assistant wrote in the conversation's messages read
        so far (with ``spoken_weight``), each with the message that first wrote it, from
        the ``start``-th on: in the order first written (ascending messages), which the
        messages alone decide, so a branch's (a prefix of its parent's, then its own)
        and a fresh read's agree. A reader that keeps per-unit figures learns the newly
        written ones only."""
        memo = self._memo
        with memo.lock:
            keys = itertools.islice(memo.spoken_first, start, None)
            return [(key, memo.spoken_first[key]) for key in keys]

    def novelty_of(
        self, found: frozenset[str], tokens: int, covered: AbstractSet[str] | None = None
    ) -> float:
        """The novelty of a text holding ``found`` at ``tokens`` (an excerpt's), against
        what the window covers (or ``covered``: what it covered before, say)."""
        new = found - (self.covered if covered is None else covered)
        return self.weight * self.worth(new) * NOVELTY_TOKENS / max(tokens, 1)

    def novelty(self, unit: int, covered: AbstractSet[str] | None = None) -> float:
        """The novelty of ``unit`` (see :meth:`novelty_of`)."""
        return self.novelty_of(self.of(unit), self.history.unit_tokens(unit), covered)

    def novelty_bound(self, found: frozenset[str], tokens: int) -> float:
        """At least :meth:`novelty_of` ``found`` at ``tokens``, whatever is covered and
        whoever wrote them (each identifier new and spoken), without reading either."""
        return self.weight * (1 + self.spoken_weight) * len(found) * NOVELTY_TOKENS / max(tokens, 1)


def _read_spoken(history: History, memo: _UnitIdentifiers, stable: int) -> frozenset[str]:
    """Record where the messages before ``stable`` not read yet first write each
    identifier (messages other than tool results and system ones); the identifiers the
    messages from ``stable`` on write, read as they are now (a stand-in's)."""
    with memo.lock:
        for position in range(memo.spoken_read, stable):
            for found in _written(history, position):
                memo.spoken_first.setdefault(found, position)
        memo.spoken_read = max(memo.spoken_read, stable)
    return frozenset().union(*(_written(history, p) for p in range(stable, len(history))))


def _written(history: History, position: int) -> frozenset[str]:
    """The identifiers a user or assistant wrote in message ``position`` (none for a
    tool result or a system message)."""
    message = history.messages[position]
    if message.role in ("tool", "system"):
        return frozenset()
    return identifiers(" ".join([message.text, *(call.arguments for call in message.tool_calls)]))


def best_first(
    history: History,
    candidates: Iterable[int],
    room: int,
    value: Callable[[Any], float],
    *,
    above: float | None = None,
    size: Callable[[Any], int] | None = None,
    bound: Callable[[Any], float] | None = None,
) -> Iterator[Any]:
    """The candidates that fit in ``room`` tokens, highest ``value`` first; ties in
    the order given. ``value`` may fall as units are taken (coverage), never rise:
    each unit is valued again before it is yielded (lazy greedy). With ``above``,
    units valued at or below it are not taken; a unit valued -inf never is. The
    caller keeps what it takes, and updates whatever ``value`` reads, before asking for
    the next. With ``size``, the candidates may be other keys than units (a unit's
    excerpt), sized by it. With ``bound``, a cheaper number at least ``value`` for each
    candidate: the heap starts from it, so a candidate whose bound is below what is
    taken is never valued at all; what is taken, and its order, are the same."""
    import heapq  # here: `import ctxwindow` does without it; a second import is a lookup

    order = list(candidates)
    sizes = {unit: (size or history.unit_tokens)(unit) for unit in order}
    first = bound or value
    heap = [(-first(unit), rank, unit) for rank, unit in enumerate(order)]
    heapq.heapify(heap)
    smallest = min(sizes.values(), default=0)
    while heap and room >= smallest:
        stale, rank, unit = heapq.heappop(heap)
        if sizes[unit] > room:
            continue
        fresh = value(unit)
        if fresh == -math.inf:  # worth nothing now, and never again (values never rise)
            continue
        # valued again, it goes back unless it still comes first (ties by rank)
        if heap and fresh < -stale and (-fresh, rank) > heap[0][:2]:
            heapq.heappush(heap, (-fresh, rank, unit))
            continue
        if above is not None and fresh <= above:
            return
        room -= sizes[unit]
        yield unit
