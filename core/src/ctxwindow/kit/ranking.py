"""Older units ranked in numpy: :func:`~ctxwindow.kit.keep_best` at the cost of the units
that can make the window, not of every older unit. Needs numpy (``ctxwindow[ranking]``).

:func:`~ctxwindow.kit.best_first` values every candidate before it takes the first: a
Python call per unit of the history, on every visit, which in an agent's history (where
every tool result holds identifiers) is every unit. Here a strategy that scores all units
at once (a numpy array of relevance) gets the same choice from the figures each unit is
read for once (:class:`UnitFigures`: tokens, identifiers, excerpt) and a bound of every
unit's value computed at once, lowered as the window covers identifiers: a candidate
is valued only when it comes to the top on its bound. The units taken, and their
order, are exactly the kit's (ties included). ``semantic`` and ``sliding`` rank this
way.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple

try:
    import numpy as np
    from numpy.typing import ArrayLike, DTypeLike
except ImportError as error:  # numpy is the ranking extra's: `import ctxwindow` does without
    raise ModuleNotFoundError(
        f"ctxwindow.kit.ranking needs numpy ({error}): pip install 'ctxwindow[ranking]'",
        name=error.name,
    ) from error

from ctxwindow.kit._coverage import NOVELTY_TOKENS, Coverage, identifiers
from ctxwindow.kit._excerpt import excerpt_unit, keep_best
from ctxwindow.kit._text import unit_text

if TYPE_CHECKING:
    from ctxwindow._history import Branch, Conversation, History
    from ctxwindow._selection import Selection

#: Below this many older units, keep_ranked values every key (the kit's keep_best):
#: numpy's fixed costs outweigh the Python calls it saves (measured on agent steps:
#: the two cost about the same at 250 to 500 messages). The windows are the same.
VALUE_EVERY_KEY_BELOW = 300
#: About this many candidates go into the heap first; each time more are needed, twice
#: as many.
FIRST_CHUNK = 32
#: The terms of this many of the newest units are kept apart (:class:`Postings`), so that
#: a branch of the conversation (a pipeline stage's input, which parts from the last
#: turn's near its end) finds the postings it does not share without a pass over all.
RECENT_UNITS = 1_024
#: Bounds sampled to find the cut that leaves about a chunk above it (a full partition of
#: every bound costs more than the whole ranking of a chat loop's turn).
SAMPLE = 2_048
#: At most this many candidates (older units worth something: a chat's matches) are
#: ranked by the kit's keep_best, valued one by one: numpy's fixed costs (some 20
#: arrays made per visit) outweigh Python calls for so few. The windows are the same.
FEW_CANDIDATES = 64
#: Units that make up less than 1/FEW_SHARE of a history are "few": read where they
#: are (an index search, a scatter) rather than with a pass over every unit.
FEW_SHARE = 8

__all__ = [
    "Older",
    "Posting",
    "Postings",
    "Rows",
    "UnitFigures",
    "best_first",
    "distinct",
    "keep_ranked",
    "older_units",
    "stable_units",
]


class Rows:
    """Rows appended at the end, kept in one contiguous buffer that doubles when full,
    so appending a turn copies that turn only (amortized), not everything before it.

    Readers slice :attr:`view`: rows before ``len(self)`` never change, and a reader
    that took a view before a reallocation keeps the old buffer alive, so a reader
    needs no lock against one appending writer.
    """

    def __init__(self, dtype: DTypeLike) -> None:
        self.dtype = np.dtype(dtype)
        self._buffer: np.ndarray | None = None
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def view(self) -> np.ndarray:
        """The rows so far (a view: no copy)."""
        if self._buffer is None:
            return np.zeros(0, dtype=self.dtype)
        return self._buffer[: self._size]

    def extend(self, rows: ArrayLike) -> None:
        """Append ``rows`` (their first axis), growing the buffer to at least twice
        its size when they do not fit; the first rows with an eighth more room, so that
        the turns after a cold read do not copy all of it at once (a semantic index's
        vectors: 15 MB at 10,000 messages) for a little memory."""
        new = np.asarray(rows, dtype=self.dtype)
        buffer = self._buffer
        if buffer is not None and new.shape[1:] != buffer.shape[1:]:
            raise ValueError(f"rows of shape {new.shape[1:]} added to rows of {buffer.shape[1:]}")
        size = self._size + len(new)
        if buffer is None or size > len(buffer):
            capacity = size + size // 8 if buffer is None else max(size, 2 * len(buffer))
            grown = np.empty((capacity, *new.shape[1:]), dtype=self.dtype)
            if buffer is not None:
                grown[: self._size] = buffer[: self._size]
            self._buffer = buffer = grown
        buffer[self._size : size] = new
        self._size = size

    def count_below(self, bound: int) -> int:
        """How many of the rows are below ``bound``, for ascending single values (a
        binary search): where the rows a smaller history shares end."""
        size, buffer = self._size, self._buffer
        if buffer is None or not size or buffer[size - 1] < bound:  # all: the common case
            return size
        return int(np.searchsorted(buffer[:size], bound))

    def copy(self, size: int | None = None) -> Rows:
        """Rows of their own holding the first ``size`` rows (all of them by default)."""
        twin = Rows(self.dtype)
        rows = self.view[: len(self) if size is None else size]
        if len(rows):
            twin.extend(rows)
        return twin

    def append(self, value: float) -> None:
        """Append one value to rows of single values: what a term's postings gain in a
        turn, at the cost of one store rather than an array's making."""
        buffer = self._buffer
        if buffer is None or buffer.ndim != 1 or self._size == len(buffer):
            self.extend([value])
            return
        buffer[self._size] = value
        self._size += 1


class Posting:
    """The units that hold a term, ascending, and how many times each holds it (as
    ``counts``: a BM25 index's float type), grown a unit at a time."""

    def __init__(self, counts: DTypeLike = np.float64) -> None:
        self.units = Rows(np.int64)
        self.counts = Rows(counts)

    def before(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Units and counts among the first ``size`` units (a binary search, no copy)."""
        cut = self.units.count_below(size)
        return self.units.view[:cut], self.counts.view[:cut]

    def copy(self, size: int) -> Posting:
        """A posting of its own holding the entries of the first ``size`` units."""
        twin = Posting(self.counts.dtype)
        cut = self.units.count_below(size)
        twin.units, twin.counts = self.units.copy(cut), self.counts.copy(cut)
        return twin

    @property
    def last(self) -> int:
        """The newest unit that holds the term (-1: none)."""
        units = self.units
        return int(units.view[-1]) if len(units) else -1


class Postings(dict[str, Posting]):
    """Each term's :class:`Posting`, grown a unit at a time, and shared with the postings
    of a branch of the conversation (:meth:`branch`) until either adds to one: a branch
    copies only the postings the units it does not share are in."""

    def __init__(self, counts: DTypeLike = np.float64) -> None:
        super().__init__()
        self.counts = np.dtype(counts)
        #: The terms whose postings are this object's own to grow.
        self._own: set[str] = set()
        #: The terms of the newest units, a tuple per unit: what a branch copies.
        self._recent: deque[tuple[str, ...]] = deque(maxlen=RECENT_UNITS)

    def growing(self, term: str, size: int) -> Posting:
        """``term``'s posting, this object's own to append units from ``size`` on."""
        posting = self.get(term)
        if posting is None:
            posting = self[term] = Posting(self.counts)
            self._own.add(term)
        elif term not in self._own:  # shared with a branch's: copied first
            posting = self[term] = posting.copy(size)
            self._own.add(term)
        return posting

    def read(self, held: Iterable[str]) -> None:
        """Note the terms of the unit just added (in unit order)."""
        self._recent.append(tuple(held))

    def branch(self, units: int, size: int) -> Postings:
        """The postings of the first ``units`` of the ``size`` units these hold."""
        twin = Postings(self.counts)
        twin.update(self)
        later = size - units
        if later <= len(self._recent):
            changed: set[str] = set().union(*itertools.islice(reversed(self._recent), later))
        else:
            changed = {term for term, posting in self.items() if posting.last >= units}
        for term in changed:
            posting = self[term].copy(units)
            if len(posting.units):
                twin[term] = posting
                twin._own.add(term)
            else:
                del twin[term]
        twin._recent.extend(itertools.islice(self._recent, max(0, len(self._recent) - later)))
        self._own = set()  # every posting is shared now
        return twin


# -- the order ---------------------------------------------------------------------------
class _Pending:
    """The candidates not in the heap yet, handed out best bounds first (ties to the
    lower rank), in chunks; those too big for the room left are dropped as they are met (the
    room only shrinks, so they could never be taken: the kit's heap pops them and passes
    over them)."""

    def __init__(self, bounds: np.ndarray, sizes: np.ndarray) -> None:
        self.bounds = bounds
        self.sizes = sizes
        self.rest = np.arange(len(bounds))  # ascending: by rank
        self.chunk = FIRST_CHUNK
        self.top = -math.inf
        self.top_rank = -1
        self.read_top()

    def read_top(self, values: np.ndarray | None = None) -> None:
        """Read the best pending bound again (and the lowest rank holding it): once on
        a chunk's taking, and when the bound at :attr:`top_rank` was lowered (lowering
        any other cannot change which bound is best). ``values``: the pending bounds,
        when the caller has them already."""
        rest = self.rest
        if not len(rest):
            self.top, self.top_rank = -math.inf, -1
            return
        if values is None:
            values = self.bounds[rest]
        at = int(np.argmax(values))  # the first of the best: the lowest rank, as ascending
        self.top = float(values[at])
        self.top_rank = int(rest[at])

    def outranks(self, key: float, rank: int) -> bool:
        """Whether a pending candidate could come before one worth ``key`` at ``rank``:
        its bound is higher, or as high at a lower rank."""
        return bool(len(self.rest)) and (
            self.top > key or (self.top == key and self.top_rank < rank)
        )

    def take(self, room: int) -> np.ndarray:
        """The next chunk that fits ``room``: about :attr:`chunk` pending candidates
        whose bounds are above every other's, ties to the lower ranks."""
        rest = self.rest
        rest = rest[self.sizes[rest] <= room]
        values = self.bounds[rest]
        if len(rest) <= self.chunk:
            self.rest = rest[:0]
            self.read_top()
            return rest
        near = np.flatnonzero(values >= _about_kth_largest(values, self.chunk))
        if len(near) > self.chunk:  # many as good (ties), or the sample erred
            near = near[np.lexsort((near, -values[near]))[: self.chunk]]
        left = np.ones(len(rest), dtype=bool)
        left[near] = False
        self.rest = rest[left]
        self.read_top(values[left])
        self.chunk *= 2
        taken: np.ndarray = rest[~left]  # by rank, as ``rest`` is
        return taken


def _about_kth_largest(values: np.ndarray, k: int) -> float:
    """A value with about ``k`` of ``values`` above it, read from an even sample."""
    sample = values[:: max(1, len(values) // SAMPLE)]
    rank = min(len(sample) - 1, k * len(sample) // len(values))
    return float(np.partition(sample, len(sample) - 1 - rank)[len(sample) - 1 - rank])


def best_first(
    candidates: np.ndarray,
    sizes: np.ndarray,
    bounds: np.ndarray,
    exact: np.ndarray,
    room: int,
    value: Callable[[int], float],
    *,
    above: float | None = None,
    tighten: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None,
) -> Iterator[int]:
    """What ``ctxwindow.kit.best_first(history, candidates, room, value, above=above)``
    yields: the candidate worth most now (ties to the one given first) while any fits,
    as the kit's lazy greedy takes them, valuing only those that can come first.

    ``candidates``: units in the order that breaks ties; ``sizes``: their tokens;
    ``value(unit)``: what a unit is worth now, never rising as units are taken;
    ``bounds``: for each candidate, a number at least its value, and ``exact`` where it
    is the value itself, now and after any unit is taken (``value`` is not called
    there: in a chat loop most of the window is such units). A key ``~unit`` is
    ``unit``'s other form (its excerpt): once one form is taken, the other is worth
    nothing (as ``value`` says of the keys it values). With ``above``, units valued at
    or below it are not taken. The caller keeps what it takes, as with the kit's.
    ``tighten()``, called before a pending bound is read once the caller has kept keys
    since the last call, names candidates (by index) and lower bounds for them, which
    replace those in ``bounds`` (in place): the values that fell as the window grew, so
    fewer candidates need valuing.
    """
    #: (-value, rank, size, key, exact): ordered as the kit's heap, by its first two
    heap: list[tuple[float, int, int, int, bool]] = []
    pending = _Pending(bounds, sizes)
    smallest = int(sizes.min()) if len(sizes) else 0
    taken: set[int] = set()  # units taken, in either form
    #: Keys taken since the pending bounds were last tightened. Tightening is put off
    #: until a pending bound is read: the bounds only fall, so one that does not
    #: outrank as it stands would not once tightened, and the keys taken meanwhile are
    #: tightened for at once (what is taken, and in what order, is the same).
    untightened = False

    def tighten_pending() -> None:
        nonlocal untightened
        untightened = False
        assert tighten is not None
        ranks, lower = tighten()
        if len(ranks):
            bounds[ranks] = np.minimum(bounds[ranks], lower)
            if (ranks == pending.top_rank).any():  # else the best pending bound stands
                pending.read_top()

    def outranks(key: float, rank: int) -> bool:
        """Whether a pending candidate could come before one worth ``key`` at ``rank``,
        on the pending bounds tightened when that could change the answer."""
        if not pending.outranks(key, rank):
            return False
        if untightened:
            tighten_pending()
            return pending.outranks(key, rank)
        return True

    def settle() -> None:
        """Move candidates into the heap, on their bounds, until its top outranks every
        one still pending: then no candidate can be worth more than the top says."""
        while len(pending.rest) and (not heap or outranks(-heap[0][0], heap[0][1])):
            if untightened:  # the chunk is taken by the bounds as they are now
                tighten_pending()
            ranks = pending.take(room)
            constant = exact[ranks]
            heap.extend(
                zip(
                    (-bounds[ranks]).tolist(),
                    ranks.tolist(),
                    sizes[ranks].tolist(),
                    candidates[ranks].tolist(),
                    constant.tolist(),
                    strict=True,
                )
            )
            heapq.heapify(heap)

    pop = heapq.heappop
    while room >= smallest:
        # settle (a call each turn of the loop costs more than the test that skips it)
        if len(pending.rest) and (not heap or outranks(-heap[0][0], heap[0][1])):
            settle()
        if not heap:
            return
        stale, rank, size, unit, constant = pop(heap)
        if size > room:
            continue
        if constant:  # still worth its bound, so it comes now, as the kit's would
            if (~unit if unit < 0 else unit) in taken:
                continue  # its other form was taken: worth nothing now, and never again
            fresh = -stale
        else:
            fresh = value(unit)
            if fresh == -math.inf:  # worth nothing now, and never again (as the kit's)
                continue
            # valued again, it goes back unless it still comes first (ties by rank)
            if fresh < -stale and (
                (heap and (-fresh, rank) > heap[0][:2]) or outranks(fresh, rank)
            ):
                heapq.heappush(heap, (-fresh, rank, size, unit, constant))
                continue
        if above is not None and fresh <= above:
            return
        room -= size
        taken.add(~unit if unit < 0 else unit)
        yield unit
        untightened = tighten is not None


# -- what each unit is read for, once ---------------------------------------------------
def stable_units(history: History) -> int:
    """How many leading units read the same on every visit: all of them, unless the host
    stood a cut copy in for a message on this one (the newest user message, or the
    current turn's tool results): then the units before the first that holds one. Nor
    the newest unit when it is a legacy function call alone, the history's last
    message: its result, when it comes next, joins that unit."""
    cut = [history.unit_of(position) for position in history.replacements]
    stable = min((unit for unit in cut if unit is not None), default=len(history.units))
    if stable and stable == len(history.units):  # then the history has a last message
        last = len(history) - 1
        if history.messages[last].function_call is not None and history.unit_of(last) == stable - 1:
            return stable - 1
    return stable


def excerpt_figures(history: History, unit: int) -> tuple[int, int, int]:
    """``unit``'s excerpt's tokens (0: it has none), how many identifiers it holds, and
    how many of those the unit itself does not (its markers' token counts, say)."""
    found = excerpt_unit(history, unit)
    if found is None:
        return (0, 0, 0)
    own = identifiers(unit_text(history, unit))
    return (found.tokens, len(found.identifiers), len(found.identifiers - own))


class UnitFigures:
    """What a visit ranks a conversation's units by, read once per unit: each unit's
    tokens and its excerpt's (under the counter whose running sums the conversation
    keeps: another counter starts them again), and how many identifiers it holds. Only
    units before the first host stand-in are stored (:func:`stable_units`); a strategy
    keeps one per conversation."""

    def __init__(self) -> None:
        self.tokens = Rows(np.int64)
        #: Of each unit's excerpt (:func:`excerpt_figures`): three columns.
        self.excerpts = Rows(np.int64)
        self.identifiers = Rows(np.int64)
        #: The stored units holding any identifier, ascending: a visit that ranks only
        #: the units worth something finds those without a pass over every unit.
        self.holding_any = Rows(np.int64)
        #: Of each unit's identifiers, how many a user or assistant wrote anywhere in
        #: the conversation read so far: at least as many as any visit counts as spoken
        #: (so a bound). Grown in place as identifiers are found written (under the lock).
        self.spoken = Rows(np.int64)
        self._holders: dict[str, list[int]] = {}  # identifier -> stored units holding it
        #: The identifiers of the newest stored units, one set per unit: those a branch
        #: parting near the end no longer shares, found without a pass over them all.
        self._recent: deque[frozenset[str]] = deque(maxlen=RECENT_UNITS)
        #: The identifiers whose list of holders is this object's own to append to: a
        #: branch shares the others with the figures it came from, until it adds to one.
        self._own: set[str] = set()
        #: The identifiers found written (:meth:`Coverage.written_since`), each with the
        #: message that first wrote it, in the order first written: ascending messages.
        self._written: dict[str, int] = {}
        self._sums: list[int] | None = None
        #: The counter whose running sums ``_sums`` are (a cache's: the one it wraps).
        self._counter: object = None
        self.lock = threading.Lock()

    def branch(self, conversation: Conversation, origin: Branch) -> UnitFigures:
        """The figures of a branch of the conversation (see
        :class:`~ctxwindow.kit.PerConversation`): those of the units the two share, an
        identifier written only after them no longer counted as spoken."""
        twin = UnitFigures()
        with self.lock:
            twin._sums = _sums_in(conversation, origin.parent, self._sums)
            if twin._sums is not None:
                twin.tokens = self.tokens.copy(min(origin.units, len(self.tokens)))
                twin.excerpts = self.excerpts.copy(min(origin.units, len(self.excerpts)))
            kept = min(origin.units, len(self.identifiers))
            twin.identifiers, twin.spoken = self.identifiers.copy(kept), self.spoken.copy(kept)
            twin.holding_any = self.holding_any.copy(self.holding_any.count_below(kept))
            twin._holders = dict(self._holders)
            later = len(self.identifiers) - kept
            if later <= len(self._recent):
                changed: Iterable[str] = set().union(
                    *itertools.islice(reversed(self._recent), later)
                )
            else:  # a unit the branch does not share holds it
                changed = [found for found, held in self._holders.items() if held[-1] >= kept]
            for identifier in changed:
                held = self._holders[identifier]
                mine = held[: bisect.bisect_left(held, kept)]
                if mine:
                    twin._holders[identifier] = mine
                    twin._own.add(identifier)
                else:
                    del twin._holders[identifier]
            twin._recent.extend(itertools.islice(self._recent, max(0, len(self._recent) - later)))
            self._own = set()  # every list is shared now: copied before it grows
            gone = []  # first written in messages the branch does not share: the newest
            for identifier in reversed(self._written):
                if self._written[identifier] < origin.messages:
                    break
                gone.append(identifier)
            twin._written = self._written.copy()  # then less the newest: a copy in C
            counts = twin.spoken.view
            for identifier in gone:
                del twin._written[identifier]
                counts[twin._holders.get(identifier, [])] -= 1
        return twin

    def unit_tokens(self, history: History, stop: int) -> np.ndarray:
        """The tokens of each of the first ``stop`` units (stand-in free)."""
        with self.lock:
            return self._unit_tokens(history, stop)

    def _unit_tokens(self, history: History, stop: int) -> np.ndarray:
        counter = history.counter
        if stop <= len(self.tokens) and getattr(counter, "inner", counter) is self._counter:
            # all stored, under this counter: a visit asks several times, a turn adds
            # a few units, and the running sums need not be looked up for none
            return self.tokens.view[:stop]
        sums = history.conversation.cumulative_tokens(counter, len(history))
        if sums is not self._sums:
            self.tokens, self._sums = Rows(np.int64), sums
            self.excerpts = Rows(np.int64)
        self._counter = getattr(counter, "inner", counter)  # what the sums count by
        spans = [history.span(unit) for unit in range(len(self.tokens), stop)]
        if spans:
            self.tokens.extend([sums[span.stop] - sums[span.start] for span in spans])
        return self.tokens.view[:stop]

    def excerpt_figures(self, history: History, stop: int) -> np.ndarray:
        """Of each of the first ``stop`` units (stand-in free), :func:`excerpt_figures`,
        as three columns, under :meth:`unit_tokens`'s counter."""
        with self.lock:
            self._unit_tokens(history, stop)  # the counter's figures, or anew for another
            read = [excerpt_figures(history, u) for u in range(len(self.excerpts), stop)]
            if read:
                self.excerpts.extend(np.asarray(read, dtype=np.int64).reshape(-1, 3))
            figures: np.ndarray = self.excerpts.view[:stop].reshape(-1, 3)
            return figures

    def identifier_counts(
        self, history: History, stop: int, read: Callable[[int], frozenset[str]] | None = None
    ) -> np.ndarray:
        """How many identifiers each of the first ``stop`` units (stand-in free) holds,
        read on first need by ``read``: a visit's :class:`~ctxwindow.kit.Coverage` keeps
        each unit's identifiers with the conversation, so a unit read here is not read
        again when a later visit keeps it."""
        with self.lock:
            return self._identifier_counts(history, stop, read)

    def _identifier_counts(
        self, history: History, stop: int, read: Callable[[int], frozenset[str]] | None
    ) -> np.ndarray:
        if stop <= len(self.identifiers):  # all read: a visit asks more than once
            return self.identifiers.view[:stop]
        found = read or (lambda unit: identifiers(unit_text(history, unit)))
        counts, spoken, holding = [], [], []
        for unit in range(len(self.identifiers), stop):
            held = found(unit)
            counts.append(len(held))
            spoken.append(len(held & self._written.keys()))
            if held:
                holding.append(unit)
            for identifier in held:
                self._hold(identifier, unit)
            self._recent.append(held)
        self.identifiers.extend(counts)
        self.spoken.extend(spoken)
        if holding:
            self.holding_any.extend(holding)
        return self.identifiers.view[:stop]

    def _hold(self, identifier: str, unit: int) -> None:
        holders = self._holders.get(identifier)
        if holders is None:
            self._holders[identifier] = [unit]
            self._own.add(identifier)
        elif identifier in self._own:
            holders.append(unit)
        else:  # shared with the figures of a branch: copied first
            self._holders[identifier] = [*holders, unit]
            self._own.add(identifier)

    def spoken_counts(self, history: History, stop: int, coverage: Coverage) -> np.ndarray:
        """Of each of the first ``stop`` units (stand-in free), at least how many of its
        identifiers ``coverage`` counts as spoken: those written anywhere in the
        conversation read so far, and those its stand-ins write on this visit. What is
        newly written raises the units holding it, so a visit costs what was added."""
        with self.lock:
            self._identifier_counts(history, stop, coverage.of)
            counts = self.spoken.view
            for identifier, at in coverage.written_since(len(self._written)):  # new ones only
                self._written[identifier] = at
                counts[self._holders.get(identifier, [])] += 1
            counts = counts[:stop]
            later = [found for found in coverage.spoken_later if found not in self._written]
            if later:
                counts = counts.copy()
                for identifier in later:
                    holders = [unit for unit in self._holders.get(identifier, ()) if unit < stop]
                    counts[holders] += 1
            return counts

    def holding(
        self, identifiers: Iterable[str], stop: int, coverage: Coverage
    ) -> tuple[list[int], list[int]]:
        """The stored units before ``stop`` that hold each of ``identifiers`` (a unit
        once per identifier it holds), and those of the identifiers
        :meth:`spoken_counts` counts as spoken for this visit."""
        held: list[int] = []
        spoken: list[int] = []
        counts_spoken = bool(coverage.spoken_weight)
        later = coverage.spoken_later
        with self.lock:
            holders_of, written = self._holders.get, self._written
            for identifier in identifiers:
                holders = holders_of(identifier)
                if not holders:
                    continue
                units = (
                    holders if holders[-1] < stop else holders[: bisect.bisect_left(holders, stop)]
                )
                held += units
                if counts_spoken and (identifier in written or identifier in later):
                    spoken += units
        return held, spoken


def _sums_in(
    conversation: Conversation, parent: Conversation, sums: list[int] | None
) -> list[int] | None:
    """The branch's running token sums for the counter whose sums of ``parent`` are
    ``sums`` (None: the branch has none for it)."""
    for key, (_, theirs) in parent._sums.items():
        if theirs is sums:
            mine = conversation._sums.get(key)
            return mine[1] if mine is not None else None
    return None


def _per_unit(
    history: History,
    stop: int,
    stored: Callable[[History, int], np.ndarray],
    read: Callable[[int], object],
    columns: int = 1,
) -> np.ndarray:
    """A figure of each unit before ``stop``: ``stored`` for the units without a
    stand-in, ``read`` from the view for those from the first stand-in on."""
    stable = min(stable_units(history), stop)
    rest = [read(unit) for unit in range(stable, stop)]
    known = stored(history, stable)
    if not rest:
        return known
    fresh = np.asarray(rest, dtype=np.int64)
    return np.concatenate([known, fresh.reshape(-1, columns) if columns > 1 else fresh])


# -- the older units and their bounds ------------------------------------------------------
class Older(NamedTuple):
    """The older units a visit may keep, in the order that breaks ties; their tokens; a
    bound of each one's value; and where that bound is the value itself."""

    candidates: np.ndarray
    sizes: np.ndarray
    bounds: np.ndarray
    exact: np.ndarray


def older_units(
    history: History,
    figures: UnitFigures,
    relevance: np.ndarray,
    stop: int,
    coverage: Coverage | None,
    *,
    first: int | None = None,
    newest_first: bool = False,
) -> Older:
    """The units before ``stop`` not kept by rule (ascending, or newest first), each
    worth its ``relevance`` plus, with ``coverage``, the novelty of the identifiers it
    holds: a bound of that (each identifier the window lacks as if new, and spoken where
    it may be: :meth:`UnitFigures.spoken_counts`), exact for a unit without
    identifiers. ``first``: a unit that comes before any other (the task statement),
    bounded by infinity."""
    return _Keys(history, figures, relevance, stop, coverage, first, newest_first).older


class _Worth:
    """Of each unit before ``stop``, at least how many identifiers it holds that the
    window lacks, and how many of those may be spoken, lowered as the window covers
    them (the units holding one are found through :meth:`UnitFigures.holding`); and
    from these, at least what its novelty is (:meth:`worth`)."""

    def __init__(
        self, history: History, figures: UnitFigures, stop: int, coverage: Coverage
    ) -> None:
        self.figures = figures
        self.coverage = coverage
        self.stop = stop
        stored = functools.partial(figures.identifier_counts, read=coverage.of)
        self.held = _per_unit(history, stop, stored, lambda unit: len(coverage.of(unit)))
        # Both are the figures' own until a unit is lowered (copied then, in cover): a
        # visit that covers nothing any older unit holds copies neither. Until then the
        # spoken counts may rise under another visit (an identifier found written): a
        # higher bound is still a bound, and the values are computed apart.
        self.new = self.held
        self._history = history
        self._spoken: np.ndarray | None = None  # read on first need (no candidate: none)
        self._own = False
        self._known: set[str] = set()

    @property
    def spoken(self) -> np.ndarray:
        """Of each unit, at least how many of the identifiers the window lacks may be
        spoken (:func:`_spoken_counts`, lowered as :attr:`new` is)."""
        if self._spoken is None:
            coverage, stop = self.coverage, self.stop
            self._spoken = (
                _spoken_counts(self._history, self.figures, stop, coverage)
                if coverage.spoken_weight
                else np.zeros(stop, dtype=np.int64)
            )
        return self._spoken

    def worth(self, new: np.ndarray, spoken: np.ndarray) -> np.ndarray:
        """:meth:`Coverage.worth` of ``new`` identifiers of which ``spoken`` are spoken,
        in its arithmetic: the same counts give the same float, more give no less."""
        weight = self.coverage.spoken_weight
        return new + weight * spoken if weight else new.astype(np.float64)

    def holding_any(self) -> np.ndarray:
        """The units before ``stop`` that hold any identifier, ascending, read from the
        figures (and, from the first stand-in on, from :attr:`held`): no pass over
        every unit."""
        stable = min(stable_units(self._history), self.stop)
        holding = self.figures.holding_any
        known = holding.view[: holding.count_below(stable)]
        if stable == self.stop:
            return known
        fresh = stable + np.flatnonzero(self.held[stable:])
        return np.concatenate([known, fresh])

    def cover(self) -> np.ndarray:
        """Lower the units holding the identifiers covered since the last call (the
        first call: those covered before any unit was taken); the units lowered,
        ascending. Each unit falls by one for each of them it holds (a unit is listed
        once among an identifier's holders)."""
        new = self.coverage.covered - self._known
        if not new:
            return _NO_UNITS
        self._known |= new
        held, spoken = self.figures.holding(new, self.stop, self.coverage)
        if not held:
            return _NO_UNITS
        if not self._own:
            self.new, self._spoken, self._own = self.new.copy(), self.spoken.copy(), True
        lowered = np.asarray(held, dtype=np.int64)
        _lower(self.new, lowered)
        if spoken:
            _lower(self.spoken, np.asarray(spoken, dtype=np.int64))
        return distinct(lowered)


def _lower(counts: np.ndarray, units: np.ndarray) -> None:
    """Take one from ``counts`` at each of ``units`` (a unit listed twice, twice): at
    the cost of the units when they are few, of a pass over every count when many."""
    if len(units) * FEW_SHARE < len(counts):
        np.subtract.at(counts, units, 1)
    else:
        counts -= np.bincount(units, minlength=len(counts))


def distinct(units: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, ascending: ``np.unique`` without the
    import of ``numpy.ma`` its first call makes (about 14 ms)."""
    ordered = np.sort(units)
    if len(ordered) < 2:
        return ordered
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    found: np.ndarray = ordered[first]
    return found


_NO_UNITS = np.zeros(0, dtype=np.int64)


def _spoken_counts(
    history: History, figures: UnitFigures, stop: int, coverage: Coverage
) -> np.ndarray:
    """Of each unit before ``stop``, at least how many of its identifiers ``coverage``
    counts as spoken (exactly, for a unit holding a stand-in)."""

    def read(unit: int) -> int:
        return sum(map(coverage.spoken, coverage.of(unit)))

    counted = functools.partial(figures.spoken_counts, coverage=coverage)
    return _per_unit(history, stop, counted, read)


class _Keys:
    """``keep_best``'s keys for the older units (each unit whole, then as ``~unit`` each
    one's excerpt where it has one, when offered), in the order that breaks ties, with
    their sizes, value bounds and where the bound is the value itself; and, with
    coverage, the bounds lowered as the window covers identifiers (:meth:`tighten`).

    A unit is worth its relevance plus the novelty of its identifiers the window lacks;
    an excerpt, its unit's relevance scaled by the share of tokens it keeps plus the
    novelty of its own identifiers, which are some of its unit's and a few of its own.
    Each bound is computed in the arithmetic of the value it bounds (``keep_best``'s),
    from counts at least the value's: so it is the value itself when the counts are,
    and never below it (correctly rounded operations are monotone)."""

    def __init__(
        self,
        history: History,
        figures: UnitFigures,
        relevance: np.ndarray,
        stop: int,
        coverage: Coverage | None,
        first: int | None,
        newest_first: bool,
        above: float | None = None,
        support: np.ndarray | None = None,
    ) -> None:
        self.relevance = relevance
        self.first = first
        self.worth = None if coverage is None else _Worth(history, figures, stop, coverage)
        self.weight = 0.0 if coverage is None else coverage.weight
        ascending = self._candidates(history, stop, above, support)
        candidates = ascending[::-1] if newest_first else ascending
        self.units = candidates
        self.wholes = len(candidates)
        #: Of each excerpt offered: its relevance, identifiers, those that may be spoken,
        #: tokens, and identifiers its unit does not hold.
        self._excerpt: tuple[np.ndarray, ...] | None = None
        #: Where each unit's excerpt key is (None: no excerpt offered).
        self.excerpt_at: _Where | None = None
        if not len(candidates):  # nothing to rank (a chat's question no unit matched)
            self.sizes, self.bounds = _NO_UNITS, _NO_BOUNDS
            self.exact = np.zeros(0, dtype=bool)
            self.whole_at = _Where(_NO_UNITS, _NO_UNITS, stop)
            return
        tokens = _per_unit(history, stop, figures.unit_tokens, history.unit_tokens)
        self.sizes = tokens[candidates]
        self.exact = np.ones(len(candidates), dtype=bool)
        if self.worth is not None:
            self.worth.cover()  # what the window holds before any unit is taken
            self.exact = self.worth.held[candidates] == 0
        self.bounds = self._whole_bounds(candidates, self.sizes)
        #: Where each unit's whole key is (-1: none).
        self.whole_at = _Where(candidates, np.arange(len(candidates)), stop)

    def _candidates(
        self, history: History, stop: int, above: float | None, support: np.ndarray | None
    ) -> np.ndarray:
        """The units before ``stop`` not kept by rule that may be taken, ascending: with
        ``above``, only those whose relevance is above it, those holding identifiers
        (worth their novelty) and :attr:`first`. ``support``: the units outside which no
        relevance is above ``above``, ascending, when the caller knows them: when these
        candidates are few, they are found there, without a pass over every unit."""
        must = [unit for unit in history.must_keep if unit < stop]
        if above is not None and support is not None:
            found = self._few_candidates(stop, above, support, must)
            if found is not None:
                return found
        free = np.ones(stop, dtype=bool)
        free[must] = False
        if above is not None:
            # a unit without identifiers is worth its relevance: at or below ``above``,
            # never taken, so not a candidate (in a chat, most of the history)
            worth = self.relevance[:stop] > above
            if self.worth is not None:
                worth |= self.worth.held > 0
            if self.first is not None and self.first < stop:
                worth[self.first] = True
            free &= worth
        candidates: np.ndarray = np.flatnonzero(free)
        return candidates

    def _few_candidates(
        self, stop: int, above: float, support: np.ndarray, must: list[int]
    ) -> np.ndarray | None:
        """:meth:`_candidates` read from ``support`` and the units holding identifiers,
        when they are few (None: many, found with a pass over every unit instead)."""
        scoring = support[: int(np.searchsorted(support, stop))]
        parts = [scoring[self.relevance[scoring] > above]]
        if self.worth is not None:
            parts.append(self.worth.holding_any())
        if self.first is not None and self.first < stop:
            parts.append(np.asarray([self.first], dtype=np.int64))
        found = distinct(np.concatenate(parts).astype(np.int64, copy=False))
        if len(found) * FEW_SHARE >= stop:
            return None
        if must:
            found = found[~_among(found, np.asarray(sorted(must), dtype=np.int64))]
        return found

    @property
    def older(self) -> Older:
        return Older(self.units, self.sizes, self.bounds, self.exact)

    def _whole_bounds(self, units: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        bounds: np.ndarray = self.relevance[units].astype(np.float64)
        if self.worth is not None:
            worth = self.worth.worth(self.worth.new[units], self.worth.spoken[units])
            bounds = bounds + self.weight * worth * NOVELTY_TOKENS / np.maximum(sizes, 1)
        if self.first is not None:
            bounds[units == self.first] = math.inf
        return bounds

    def offer_excerpts(self, history: History, figures: UnitFigures, stop: int) -> None:
        """Add each candidate's excerpt, where it has one, as the key ``~unit``."""
        assert self.worth is not None, "excerpts are offered only where identifiers count"
        rows = _per_unit(history, stop, figures.excerpt_figures, _excerpt_row(history), columns=3)
        found = rows[self.units]
        has = found[:, 0] > 0
        units, tokens, held, extra = self.units[has], found[has, 0], found[has, 1], found[has, 2]
        # the unit's relevance scaled by the share of its tokens the excerpt keeps
        own = self.relevance[units].astype(np.float64) * (tokens / np.maximum(self.sizes[has], 1))
        # its identifiers are some of its unit's, and a few of its own (``extra``)
        spoken = np.minimum(held, self.worth.spoken[units] + extra)
        self._excerpt = (own, held, spoken, tokens, extra)
        self.excerpt_at = _Where(units, len(self.units) + np.arange(len(units)), stop)
        bounds = self._excerpt_bounds(np.arange(len(units)), units)
        self.units = np.concatenate([self.units, ~units])
        self.sizes = np.concatenate([self.sizes, tokens])
        self.bounds = np.concatenate([self.bounds, bounds])
        self.exact = np.concatenate([self.exact, np.zeros(len(units), dtype=bool)])

    def _excerpt_bounds(self, rows: np.ndarray, units: np.ndarray) -> np.ndarray:
        """The bounds of the excerpts at ``rows`` (of those offered), of ``units``."""
        assert self._excerpt is not None and self.worth is not None
        own, held, spoken, tokens, extra = self._excerpt
        # no more than its unit's identifiers the window lacks, and its own
        new = np.minimum(held[rows], self.worth.new[units] + extra[rows])
        spoken = np.minimum(spoken[rows], self.worth.spoken[units] + extra[rows])
        worth = self.worth.worth(new, spoken)
        bounds: np.ndarray = own[rows] + self.weight * worth * NOVELTY_TOKENS / tokens[rows]
        if self.first is not None:
            bounds[units == self.first] = math.inf
        return bounds

    def tighten(self) -> tuple[np.ndarray, np.ndarray]:
        """Once keys were taken: the keys whose units hold an identifier they covered,
        and their bounds as the window now stands (:func:`best_first`'s ``tighten``)."""
        assert self.worth is not None
        units = self.worth.cover()
        if not len(units):
            return _NO_UNITS, _NO_BOUNDS
        whole = self.whole_at[units]
        units_whole = units[whole >= 0]
        whole = whole[whole >= 0]
        at = [whole]
        bounds = [self._whole_bounds(units_whole, self.sizes[whole])]
        if self._excerpt is not None and self.excerpt_at is not None:
            excerpt = self.excerpt_at[units]
            units_excerpt = units[excerpt >= 0]
            excerpt = excerpt[excerpt >= 0]
            at.append(excerpt)
            bounds.append(self._excerpt_bounds(excerpt - self.wholes, units_excerpt))
        return np.concatenate(at), np.concatenate(bounds)


_NO_BOUNDS = np.zeros(0, dtype=np.float64)


class _Where:
    """Where each of some units' keys is among the keys (-1: not among them), looked
    up for a few units at a time: through an array over every unit when the units are
    many, else by a binary search of them (no pass over every unit)."""

    def __init__(self, units: np.ndarray, at: np.ndarray, stop: int) -> None:
        self._table: np.ndarray | None = None
        self._units = self._at = _NO_UNITS
        if len(units) * FEW_SHARE >= stop:
            self._table = np.full(stop, -1, dtype=np.int64)
            self._table[units] = at
        elif len(units):
            order = np.argsort(units, kind="stable")
            self._units, self._at = units[order], at[order]

    def __getitem__(self, units: np.ndarray) -> np.ndarray:
        if self._table is not None:
            found: np.ndarray = self._table[units]
            return found
        if not len(self._units):
            return np.full(len(units), -1, dtype=np.int64)
        near = _nearest(self._units, units)
        return np.where(self._units[near] == units, self._at[near], -1)


def _among(units: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Which of ``units`` are among ``others`` (ascending), as a mask."""
    if not len(others):
        return np.zeros(len(units), dtype=bool)
    found: np.ndarray = others[_nearest(others, units)] == units
    return found


def _nearest(ordered: np.ndarray, units: np.ndarray) -> np.ndarray:
    """For each of ``units``, the index in ``ordered`` (ascending, not empty) of the
    first value at or above it, or of the last: where the unit is, if it is there."""
    near: np.ndarray = np.minimum(np.searchsorted(ordered, units), len(ordered) - 1)
    return near


def _few_worth_ranking(
    history: History,
    figures: UnitFigures,
    relevance: np.ndarray,
    stop: int,
    coverage: Coverage | None,
    first: int | None,
    above: float,
    support: np.ndarray | None,
) -> list[int] | None:
    """The candidates :class:`_Keys` would rank (ascending), when there are at most
    :data:`FEW_CANDIDATES` of them (None: more): the units before ``stop`` whose
    relevance is above ``above`` (read from ``support`` when given, else by a pass over
    the relevance), those holding identifiers (with ``coverage``) and ``first``, less
    those kept by rule: what :meth:`_Keys._candidates` finds, so the kit's keep_best
    over them keeps what the bounded ranking of them keeps (each keeps what valuing
    every key keeps)."""
    held = _NO_UNITS  # the units holding identifiers, first: in an agent's steps, many
    if coverage is not None:
        stable = min(stable_units(history), stop)
        figures.identifier_counts(history, stable, coverage.of)
        holding = figures.holding_any
        cut = holding.count_below(stable)
        if cut > FEW_CANDIDATES:
            return None
        held = holding.view[:cut]
    if support is None:  # many units score, but those before ``stop`` may be few
        worth = np.flatnonzero(relevance[:stop] > above)
    else:
        scoring = support[: int(np.searchsorted(support, stop))]
        if len(scoring) > 4 * FEW_CANDIDATES:
            return None
        worth = scoring[relevance[scoring] > above]
    if len(worth) + len(held) > FEW_CANDIDATES:
        return None
    found = set(worth.tolist())
    found.update(held.tolist())
    if coverage is not None:
        found.update(unit for unit in range(stable, stop) if coverage.of(unit))
    if first is not None and first < stop:
        found.add(first)
    if len(found) > FEW_CANDIDATES:
        return None
    must = history.must_keep
    return sorted(unit for unit in found if unit not in must)


def _excerpt_row(history: History) -> Callable[[int], tuple[int, int, int]]:
    return functools.partial(excerpt_figures, history)


def keep_ranked(
    history: History,
    selection: Selection,
    relevance: np.ndarray,
    stop: int,
    room: int,
    score: Callable[[int], float],
    coverage: Coverage | None,
    reason: Callable[[int, int, int], str],
    *,
    figures: UnitFigures,
    excerpts: bool = True,
    above: float | None = None,
    first: int | None = None,
    newest_first: bool = False,
    support: np.ndarray | None = None,
) -> int:
    """:func:`~ctxwindow.kit.keep_best` over the units before ``stop`` not kept by rule
    (:func:`older_units`), valuing only the keys that can come first; the room left.
    ``score(unit)`` is each unit's ``relevance`` (infinity for ``first``); with
    ``coverage`` and ``excerpts``, tool results are offered as excerpts too, ranked the
    same way; as the window covers identifiers, the bounds of the units holding them
    fall, so a visit values about the keys it takes, however many units hold some.
    ``support`` (with ``above``): the units outside which no ``relevance`` is above
    ``above``, ascending, when the caller knows them (a keyword match's): when the units
    worth something are few, a visit then costs them, not a pass over every unit. With
    ``above``, when they are a handful (:data:`FEW_CANDIDATES`, a chat loop's turn), the
    kit's keep_best ranks them, without the numpy bounds' fixed costs."""
    few: list[int] | None = None
    if stop < VALUE_EVERY_KEY_BELOW:  # every older unit, but those kept by rule
        few = [u for u in range(stop) if u not in history.must_keep]
    elif above is not None:  # a chat loop's turn: a handful of candidates, or None
        few = _few_worth_ranking(history, figures, relevance, stop, coverage, first, above, support)
    if few is not None:
        # numpy's fixed costs would outweigh valuing each key one by one in Python: the
        # kit's own order, over the same keys as below, so the same window
        return keep_best(
            history,
            selection,
            few[::-1] if newest_first else few,
            room,
            score,
            coverage,
            reason,
            excerpts=excerpts,
            above=above,
        )
    keys = _Keys(history, figures, relevance, stop, coverage, first, newest_first, above, support)
    if not keys.wholes:  # no candidate, so no excerpt either: nothing is taken
        return room
    if coverage is not None and excerpts:
        keys.offer_excerpts(history, figures, stop)
    tighten = keys.tighten if coverage is not None else None

    def order(
        value: Callable[[int], float],
        _first_value: Callable[[int], float],
        _size: Callable[[int], int],
    ) -> Iterator[int]:
        return best_first(
            keys.units,
            keys.sizes,
            keys.bounds,
            keys.exact,
            room,
            value,
            above=above,
            tighten=tighten,
        )

    return keep_best(
        history,
        selection,
        [],
        room,
        score,
        coverage,
        reason,
        excerpts=excerpts,
        above=above,  # applied by the order: given for a stand-in of it (tests' every key)
        order=order,
    )
