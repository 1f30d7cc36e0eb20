"""The kit's numpy ranking (``ctxwindow.kit.ranking``): the rows it grows and the order
it yields, which must be exactly the kit's ``best_first`` (ties and ``above``
included) while valuing fewer candidates."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np
import pytest

from ctxwindow.kit import best_first, ranking
from ctxwindow.kit.ranking import Postings, Rows


def test_rows_grow_by_doubling_and_keep_every_row() -> None:
    rows = Rows(np.float32)
    buffers = set()
    expected = []
    for step in range(1_000):
        row = np.full((1, 3), step, dtype=np.float32)
        rows.extend(row)
        expected.append(row)
        buffers.add(id(rows.view.base))
    assert np.array_equal(rows.view, np.concatenate(expected))
    assert len(buffers) <= 12  # 1, 2, 4, ... 1024: no copy of everything every turn
    with pytest.raises(ValueError, match="shape"):
        rows.extend(np.zeros((1, 4)))


def test_rows_read_at_once_leave_room_for_the_turns_after() -> None:
    """A cold read's rows get an eighth more room: the next turns append into the same
    buffer rather than copying all of them at once."""
    rows = Rows(np.float32)
    rows.extend(np.zeros((10_000, 4), dtype=np.float32))
    buffer = rows.view.base
    for step in range(1_250):
        rows.extend(np.full((1, 4), step, dtype=np.float32))
    assert rows.view.base is buffer and len(rows) == 11_250
    assert rows.view[-1, 0] == 1_249 and not rows.view[:10_000].any()


def _index(postings: Postings, unit: int, terms: tuple[str, ...]) -> None:
    """Add a unit's terms as an index does: each posting grown through ``growing``."""
    for term in terms:
        posting = postings.growing(term, unit)
        posting.units.append(unit)
        posting.counts.append(1.0)
    postings.read(terms)


def _units_by_term(postings: Postings) -> dict[str, list[int]]:
    return {term: posting.units.view.tolist() for term, posting in postings.items()}


@pytest.mark.parametrize("recent", [ranking.RECENT_UNITS, 1])
def test_postings_and_their_branch_share_until_either_grows(
    recent: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A branch shares the postings of the units it shares (``recent`` 1: the terms it
    does not share found by a pass over every posting, not from the newest units');
    after it, each side grows its own copy, the other's postings unchanged."""
    monkeypatch.setattr(ranking, "RECENT_UNITS", recent)
    parent = Postings()
    for unit, terms in enumerate([("a", "b"), ("b", "c"), ("a", "c")]):
        _index(parent, unit, terms)
    twin = parent.branch(2, 3)
    assert _units_by_term(twin) == {"a": [0], "b": [0, 1], "c": [1]}
    assert twin["b"] is parent["b"]  # shared, not copied: no unit after the branch holds it
    _index(parent, 3, ("a", "b"))
    assert _units_by_term(twin) == {"a": [0], "b": [0, 1], "c": [1]}
    _index(twin, 2, ("b", "d"))
    assert _units_by_term(parent) == {"a": [0, 2, 3], "b": [0, 1, 3], "c": [1, 2]}
    assert _units_by_term(twin) == {"a": [0], "b": [0, 1, 2], "c": [1], "d": [2]}


class Case:
    """Random candidates: sizes, base values with many ties (some below 0), identifiers
    that lose their worth once a taken unit holds them (coverage), maybe a task
    statement (infinite), maybe a value at or below which nothing is taken."""

    def __init__(self, rng: random.Random, ties: bool) -> None:
        self.units = sorted(rng.sample(range(200), rng.randint(0, 80)))
        self.sizes = {u: rng.randint(1, 40) for u in self.units}
        levels = [-0.5, 0.0, 0.25, 0.5, 0.5, 1.0]
        jitter = 0.0 if ties else 1.0
        self.base = {u: rng.choice(levels) + rng.random() * jitter for u in self.units}
        self.holds = {u: frozenset(rng.sample(range(12), rng.randint(0, 4))) for u in self.units}
        if self.units and rng.random() < 0.3:
            self.base[rng.choice(self.units)] = math.inf
        self.at_start = frozenset(rng.sample(range(12), 3))
        self.room = rng.randint(0, 300)
        self.above = rng.choice([None, None, 0.0, 0.6])

    def unit_tokens(self, unit: int) -> int:  # the kit's best_first reads sizes here
        return self.sizes[unit]

    def valuer(self, covered: set[int] | frozenset[int]) -> Callable[[int], float]:
        def value(unit: int) -> float:
            new = len(self.holds[unit] - covered)
            return self.base[unit] + 0.7 * (new * 10 / self.sizes[unit])

        return value

    def kit(self) -> list[int]:
        covered = set(self.at_start)
        taken = []
        for unit in best_first(
            self,  # type: ignore[arg-type]
            self.units,
            self.room,
            self.valuer(covered),
            above=self.above,
        ):
            taken.append(unit)
            covered |= self.holds[unit]
        return taken

    def ours(self, told_exact: bool, tightened: bool = False) -> list[int]:
        covered = set(self.at_start)
        bounds = [self.valuer(frozenset())(unit) for unit in self.units]
        exact = [told_exact and not self.holds[unit] for unit in self.units]

        def tighten() -> tuple[np.ndarray, np.ndarray]:
            """Every candidate's value now, a hair above (as floats may err)."""
            now = [self.valuer(covered)(unit) + 1e-9 for unit in self.units]
            return np.arange(len(self.units)), np.array(now, dtype=np.float64)

        taken = []
        for unit in ranking.best_first(
            np.array(self.units, dtype=np.int64),
            np.array([self.sizes[u] for u in self.units], dtype=np.int64),
            np.array(bounds, dtype=np.float64),
            np.array(exact, dtype=bool),
            self.room,
            self.valuer(covered),
            above=self.above,
            tighten=tighten if tightened else None,
        ):
            taken.append(unit)
            covered |= self.holds[unit]
        return taken


def test_ranking_takes_the_kits_best_first_units_in_its_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ranking, "FIRST_CHUNK", 2)  # many chunks, even on small cases
    monkeypatch.setattr(ranking, "SAMPLE", 8)  # cuts read from a sample
    rng = random.Random(11)
    for case in range(600):
        example = Case(rng, ties=case % 2 == 0)
        kits = example.kit()
        assert example.ours(told_exact=case % 3 == 0) == kits, case
        # bounds lowered to the values as they fall take the same units, in that order
        assert example.ours(told_exact=case % 3 == 0, tightened=True) == kits, case


def test_ranking_values_no_key_whose_bound_is_exact() -> None:
    """A key whose bound is its value (a unit without identifiers) is taken on its bound:
    in a chat loop that is most of the window, and valuing it is a Python call each. Its
    other form (``~unit``, an excerpt) is still never taken once it is."""
    valued: list[int] = []
    taken: list[int] = []

    worth = {0: 0.9, 1: 0.8, 2: 0.7, 3: 0.1, ~1: 0.5}

    def value(key: int) -> float:  # an excerpt's: nothing once its unit is taken whole
        valued.append(key)
        return -math.inf if ~key in taken else worth[key]

    keys = np.array(list(worth), dtype=np.int64)
    taken.extend(
        ranking.best_first(
            keys,
            np.array([5, 5, 5, 5, 2], dtype=np.int64),
            np.array([0.9, 0.8, 0.7, 0.1, 0.85], dtype=np.float64),
            np.array([True, True, True, True, False]),
            17,
            value,
        )
    )
    assert taken == [0, 1, 2]  # ~1 fits the last room, but 1 was taken whole
    assert set(valued) == {~1}  # only the key whose bound is not its value


def test_distinct_is_numpys_unique() -> None:
    rng = random.Random(3)
    for _ in range(300):
        units = np.array([rng.randrange(40) for _ in range(rng.randint(0, 30))], dtype=np.int64)
        assert ranking.distinct(units).tolist() == np.unique(units).tolist()


@pytest.mark.parametrize("count", [0, 1, 3, 500])
def test_where_finds_each_units_key_or_none(count: int) -> None:
    """A unit's key position among few units (a binary search) or many (a table over
    every unit): -1 for a unit that has none."""
    rng = random.Random(count)
    stop = 1_000
    units = np.array(sorted(rng.sample(range(stop), count)), dtype=np.int64)[::-1]
    at = np.arange(len(units)) + 7
    where = ranking._Where(units, at, stop)
    asked = np.array([*units.tolist(), *rng.sample(range(stop), 50)], dtype=np.int64)
    expected = dict(zip(units.tolist(), at.tolist(), strict=True))
    assert where[asked].tolist() == [expected.get(unit, -1) for unit in asked.tolist()]


def test_lower_takes_one_per_listing_whether_few_or_many() -> None:
    for listed in ([3, 3, 9], list(range(100)) * 2):
        counts = np.full(120, 5, dtype=np.int64)
        ranking._lower(counts, np.array(listed, dtype=np.int64))
        expected = [5 - listed.count(unit) for unit in range(120)]
        assert counts.tolist() == expected
