"""The sliding window: the most recent units, plus the most important older ones."""

from __future__ import annotations

import math
import numbers
import threading
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar

from ctxwindow import (
    BaseStrategy,
    Conversation,
    History,
    ImportanceScorer,
    Option,
    PluginError,
    Selection,
    get_importance_scorer,
)
from ctxwindow.kit import Coverage, best_first, identifier_weight_option, recent_units

#: What the task statement (the opening user message) adds to its importance: as much as
#: the unit that best matches the query. The core keeps it outright when it is small; the
#: boost still ranks it first among older units when it is too big for that.
TASK_BOOST = 1.0
RECENT = "recent"
DROPPED = "neither among the most recent units nor important enough to fit"


def _share(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must be between 0 and 1"


class _Marks:
    """What a conversation's messages say about importance, read once per message."""

    def __init__(self) -> None:
        self.read = 0
        self.importance: list[tuple[int, object]] = []  # (position, metadata value)
        self.lock = threading.Lock()

    def update(self, history: History) -> None:
        with self.lock:
            for position in range(self.read, len(history)):
                message = history.messages[position]
                value = message.metadata.get("importance") if message.metadata else None
                if value is not None:
                    self.importance.append((position, value))
            self.read = max(self.read, len(history))


class SlidingWindow(BaseStrategy):
    """Keeps the most recent units and, in ``important_share`` of the budget, the most
    important older units, in their original order."""

    name = "sliding"
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option(
            "important_share",
            float,
            0.9,
            "Share of the budget (after the system, pinned and newest user messages) "
            "reserved for the most important older units; the rest holds the most recent "
            "units, and whatever the important units leave extends the recent run.",
            check=_share,
        ),
        Option(
            "scorer",
            str,
            "keywords",
            "Importance scorer spec: 'keywords' (BM25 overlap with the query, spread to "
            "neighbours, raised for the named speaker and the asked-for kind of fact), "
            "'keywords:<key=value;...>', or any scorer registered through "
            "register_importance_scorers.",
        ),
        identifier_weight_option("importance"),
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._marks: weakref.WeakKeyDictionary[Conversation, _Marks] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def check_ready(self) -> None:
        """An unknown scorer fails here, at configuration, with UnknownScorer; a factory
        that makes something other than an ImportanceScorer, with PluginError."""
        self.scorer  # noqa: B018 - looked up for its errors

    @property
    def scorer(self) -> ImportanceScorer:
        spec = self.options["scorer"]
        scorer = get_importance_scorer(spec)
        if not isinstance(getattr(scorer, "name", None), str) or not callable(
            getattr(scorer, "score", None)
        ):
            raise PluginError(
                f"importance scorer {spec!r} made a {type(scorer).__name__}, which is not an "
                "ImportanceScorer (a str `name` and a `score(history)` method)"
            )
        checked: ImportanceScorer = scorer
        return checked

    def importance(self, history: History, notes: list[str] | None = None) -> list[float]:
        """Each unit's importance: the scorer's scores scaled so the largest is 1 in size,
        plus the ``metadata.importance`` of the unit's messages, plus TASK_BOOST for the
        task statement's unit (unless the ``task_statement`` option is off)."""
        scorer = self.scorer
        scores = _checked(scorer, scorer.score(history), len(history.units))
        top = max(map(abs, scores), default=0.0)
        if top > 0 and top != 1:
            scores = [value / top for value in scores]
        marks = self._marks_of(history)
        for position, value in marks.importance:
            unit = history.unit_of(position) if position < len(history) else None
            if unit is None:
                continue
            number = _finite(value)
            if number is None:
                if notes is not None:
                    notes.append(
                        f"message {position}: metadata importance {value!r} is not a number; "
                        "ignored (it must be a finite real number)"
                    )
            else:
                scores[unit] += number
        if history.task_unit is not None:
            scores[history.task_unit] += TASK_BOOST
        return scores

    def _marks_of(self, history: History) -> _Marks:
        with self._lock:
            marks = self._marks.get(history.conversation)
            if marks is None:
                marks = self._marks[history.conversation] = _Marks()
        marks.update(history)
        return marks

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        selection.default_reason = DROPPED
        must_keep = history.must_keep
        room = history.budget - history.must_keep_tokens
        reserved = int(room * self.options["important_share"])
        # 1. The recent run: contiguous from the newest unit, in what is not reserved.
        oldest_recent = len(history.units)
        for unit in recent_units(history, room - reserved):
            selection.keep(unit, RECENT)
            room -= history.unit_tokens(unit)
            oldest_recent = unit
        # 2. The important older units, most important first, while any fits; in an
        # agent's history a unit also counts for the identifiers it would add.
        scores = self.importance(history, selection.notes)
        candidates = [u for u in range(oldest_recent - 1, -1, -1) if u not in must_keep]
        weight = self.options["identifier_weight"] if history.agent else 0.0
        coverage = Coverage(history, selection.kept) if weight else None

        def value(unit: int) -> float:
            return scores[unit] + (weight * coverage.novelty(unit) if coverage else 0.0)

        for unit in best_first(history, candidates, room, value, above=0.0):
            reason = f"important (score {scores[unit]:.3g})"
            if coverage is not None:
                added = len(coverage.of(unit) - coverage.covered)
                reason = f"important (score {scores[unit]:.3g}, adds {added} identifiers)"
                coverage.add(unit)
            selection.keep(unit, reason, scores[unit])
            room -= history.unit_tokens(unit)
        # 3. Room the important units left extends the recent run.
        for unit in recent_units(history, room, before=oldest_recent, skip=selection.kept):
            selection.keep(unit, RECENT)
            room -= history.unit_tokens(unit)
        for unit, score in enumerate(scores):
            selection.scores.setdefault(unit, score)
        return selection


def _checked(scorer: ImportanceScorer, scores: Sequence[float], size: int) -> list[float]:
    """The scorer's scores as floats, or PluginError saying what is wrong with them."""
    try:
        values = [float(value) for value in scores]
    except (TypeError, ValueError) as error:
        raise PluginError(
            f"importance scorer {scorer.name!r} returned scores that are not numbers: {error}"
        ) from None
    if len(values) != size:
        raise PluginError(
            f"importance scorer {scorer.name!r} returned {len(values)} scores for {size} units"
        )
    if not all(map(math.isfinite, values)):
        raise PluginError(f"importance scorer {scorer.name!r} returned a score that is not finite")
    return values


def _finite(value: object) -> float | None:
    """``value`` as a finite float: any real number (numpy's included), not a bool."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return None
    return number if math.isfinite(number) else None
