"""The kit's best-first order over every older unit, valuing only those that can come first.

:func:`ctxwindow.kit.best_first` values every candidate before it takes the first: a
Python call per unit of the history, on every visit. Here the candidates come with an
upper bound of their value (computed for all of them at once, in numpy), and a
candidate is valued only once no unvalued candidate could outrank it: in a chat loop, a
few hundred of them however long the history. The units taken, and their order, are
exactly the kit's (ties included).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator

import numpy as np

#: About this many candidates are valued first; each time more are needed, twice as many.
FIRST_CHUNK = 512
#: Bounds sampled to find the cut that leaves about a chunk above it (a full partition of
#: every bound costs more than the whole ranking of a chat loop's turn).
SAMPLE = 2_048


class _Pending:
    """The candidates not valued yet, handed out highest bounds first, in chunks; those
    too big for the room left are dropped as they are met (the room only shrinks, so
    they could never be taken: the kit's heap pops them and passes over them)."""

    def __init__(self, bounds: np.ndarray, sizes: np.ndarray) -> None:
        self.bounds = bounds
        self.sizes = sizes
        self.rest = np.arange(len(bounds))
        self.chunk = FIRST_CHUNK
        #: No pending candidate's bound is above this.
        self.top = float(bounds.max()) if len(bounds) else -math.inf

    def take(self, room: int) -> np.ndarray:
        """The next chunk that fits ``room``: pending candidates whose bounds are above
        every other's."""
        rest = self.rest
        rest = rest[self.sizes[rest] <= room]
        values = self.bounds[rest]
        if len(rest) > self.chunk:
            cut = _about_kth_largest(values, self.chunk)
            above = values > cut
            if not above.any():  # the cut is the highest bound: take every one equal to it
                above = values >= cut
        else:
            above = np.ones(len(rest), dtype=bool)
        self.rest, left = rest[~above], values[~above]
        self.top = float(left.max()) if len(left) else -math.inf
        self.chunk *= 2
        taken: np.ndarray = rest[above]
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
    first_value: Callable[[int], float],
) -> Iterator[int]:
    """What ``ctxwindow.kit.best_first(history, candidates, room, value)`` yields.

    ``candidates``: units in the order that breaks ties; ``sizes``: their tokens;
    ``value(unit)``: what a unit is worth now, never rising as units are taken;
    ``first_value(unit)``: what it was worth before the first was taken (the kit's
    heap holds that until a unit is valued again); ``bounds``: for each candidate, a
    number at least ``first_value``, and ``exact`` where it is the value itself, now
    and after any unit is taken (neither ``first_value`` nor ``value`` is called there:
    in a chat loop most of the window is such units). A key ``~unit`` is ``unit``'s
    other form (its excerpt): once one form is taken, the other is worth nothing (as
    ``value`` says of the keys it values). The caller keeps what it takes, as with the
    kit's.
    """
    #: (-value, rank, size, key, exact): ordered as the kit's heap, by its first two
    heap: list[tuple[float, int, int, int, bool]] = []
    pending = _Pending(bounds, sizes)
    smallest = int(sizes.min()) if len(sizes) else 0
    taken: set[int] = set()  # units taken, in either form

    def settle() -> None:
        """Value candidates until the heap's top outranks every one not valued: then the
        heap's top is the kit's heap's top."""
        while len(pending.rest) and (not heap or -heap[0][0] <= pending.top):
            ranks = pending.take(room)
            constant = exact[ranks]
            keys = -bounds[ranks]
            for row in np.flatnonzero(~constant).tolist():
                keys[row] = -first_value(int(candidates[ranks[row]]))
            heap.extend(
                zip(
                    keys.tolist(),
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
        if len(pending.rest) and (not heap or -heap[0][0] <= pending.top):
            settle()
        if not heap:
            return
        stale, rank, size, unit, constant = pop(heap)
        if size > room:
            continue
        if constant:  # still worth its bound, so it comes now, as the kit's would
            if (~unit if unit < 0 else unit) in taken:
                continue  # its other form was taken: worth nothing now, and never again
        else:
            fresh = value(unit)
            if fresh == -math.inf:  # worth nothing now, and never again (as the kit's)
                continue
            settle()
            # valued again, it goes back unless it still comes first (ties by rank)
            if heap and fresh < -stale and (-fresh, rank) > heap[0][:2]:
                heapq.heappush(heap, (-fresh, rank, size, unit, constant))
                continue
        room -= size
        taken.add(~unit if unit < 0 else unit)
        yield unit
