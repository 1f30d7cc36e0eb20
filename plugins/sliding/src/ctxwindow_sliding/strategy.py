"""The sliding window: the most recent units, plus the most important older ones."""

from __future__ import annotations

import bisect
import math
import numbers
import threading
import weakref
from collections.abc import Mapping, Sequence
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
from ctxwindow.kit import (
    Coverage,
    excerpt_options,
    identifier_weight_option,
    keep_best,
    recent_units,
)
from ctxwindow_sliding.keywords import stable_units

#: What the task statement (the opening user message) adds to its importance: as much as
#: the unit that best matches the query. The core keeps it outright when it is small; the
#: boost still ranks it first among older units when it is too big for that.
TASK_BOOST = 1.0
RECENT = "recent"
DROPPED = "neither among the most recent units nor important enough to fit"


def _share(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must be between 0 and 1"


class _ConversationState:
    """What a conversation says about importance, read once per message or unit: the
    ``metadata.importance`` marks, and (in an agent's history) which units hold
    identifiers: with those that score, the only units that can be worth keeping."""

    def __init__(self) -> None:
        self.read = 0
        self.importance: list[tuple[int, object]] = []  # (position, metadata value)
        self.units_read = 0
        self.identified: list[int] = []  # units holding identifiers, in order
        self.lock = threading.Lock()

    def update(self, history: History) -> None:
        with self.lock:
            for position in range(self.read, len(history)):
                message = history.messages[position]
                value = message.metadata.get("importance") if message.metadata else None
                if value is not None:
                    self.importance.append((position, value))
            self.read = max(self.read, len(history))

    def identified_before(self, history: History, coverage: Coverage, before: int) -> list[int]:
        """The units before ``before`` that hold identifiers. A unit the host stood a cut
        message in for on this visit is read as it is now, and never remembered."""
        stable = stable_units(history)
        with self.lock:
            for unit in range(self.units_read, stable):
                if coverage.of(unit):
                    self.identified.append(unit)
            self.units_read = max(self.units_read, stable)
            found = self.identified[: bisect.bisect_left(self.identified, min(before, stable))]
        return found + [unit for unit in range(stable, before) if coverage.of(unit)]


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
        *excerpt_options(),
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._states: weakref.WeakKeyDictionary[Conversation, _ConversationState] = (
            weakref.WeakKeyDictionary()
        )
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

    def importance(self, history: History, notes: list[str] | None = None) -> dict[int, float]:
        """Each unit's importance, by unit, for the units whose importance is not 0 (the
        others': so a visit need not touch every unit): the scorer's scores scaled so the
        largest is 1 in size, plus the ``metadata.importance`` of the unit's messages, plus
        TASK_BOOST for the task statement's unit (unless ``task_statement`` is off)."""
        scores = self._nonzero_scores(history)
        top = max(map(abs, scores.values()), default=0.0)
        if top > 0 and top != 1:
            scores = {unit: value / top for unit, value in scores.items()}
        for position, value in self._state_of(history).importance:
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
                scores[unit] = scores.get(unit, 0.0) + number
        task = history.task_unit
        if task is not None:
            scores[task] = scores.get(task, 0.0) + TASK_BOOST
        return scores

    def _nonzero_scores(self, history: History) -> dict[int, float]:
        """The scorer's scores that are not 0, by unit. A scorer that can name them
        without a pass over every unit does so through ``nonzero_scores(history)``, as
        ``keywords`` does; any other scorer's full list is read."""
        scorer = self.scorer
        size = len(history.units)
        nonzero = getattr(scorer, "nonzero_scores", None)
        if callable(nonzero):
            return _checked_nonzero(scorer, nonzero(history), size)
        values = _checked(scorer, scorer.score(history), size)
        return {unit: value for unit, value in enumerate(values) if value}

    def _state_of(self, history: History) -> _ConversationState:
        with self._lock:
            state = self._states.get(history.conversation)
            if state is None:
                state = self._states[history.conversation] = _ConversationState()
        state.update(history)
        return state

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        selection.default_reason = DROPPED
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
        room = self._take_important(history, selection, scores, oldest_recent, room)
        # 3. Room the important units left extends the recent run.
        for unit in recent_units(history, room, before=oldest_recent, skip=selection.kept):
            selection.keep(unit, RECENT)
            room -= history.unit_tokens(unit)
        for unit, score in scores.items():
            selection.scores.setdefault(unit, score)
        return selection

    def _take_important(
        self,
        history: History,
        selection: Selection,
        scores: Mapping[int, float],
        before: int,
        room: int,
    ) -> int:
        """Keep the older units (before ``before``) most important first while any fits
        ``room``; the room left. In an agent's history a unit also counts for the
        identifiers it would add (:class:`Coverage`)."""
        weight = self.options["identifier_weight"] if history.agent else 0.0
        coverage = (
            Coverage(
                history,
                selection.kept,
                spoken_weight=self.options["spoken_weight"],
                weight=weight,
            )
            if weight
            else None
        )
        candidates = self._candidates(history, scores, before, coverage)

        def reason(rank: int, unit: int, added: int) -> str:
            # the score itself is the decision's (Decision.score), shown beside the reason
            where = f"rank {rank + 1}" if rank >= 0 else "ranked"
            if coverage is None:
                return f"important ({where})"
            return f"important ({where}, adds {added} identifiers)"

        return keep_best(
            history,
            selection,
            candidates,
            room,
            lambda unit: scores.get(unit, 0.0),
            coverage,
            reason,
            excerpts=self.options["excerpts"],
            above=0.0,
        )

    def _candidates(
        self,
        history: History,
        scores: Mapping[int, float],
        before: int,
        coverage: Coverage | None,
    ) -> list[int]:
        """The older units (before ``before``, not must-keep) that can be worth keeping,
        newest first: those whose importance is above 0 and, where identifiers count,
        those that hold any. Any other unit is worth 0 or less, which best_first never
        takes, so leaving it out changes nothing but the cost of a visit."""
        worth = {unit for unit, score in scores.items() if score > 0 and unit < before}
        if coverage is not None:
            worth.update(self._state_of(history).identified_before(history, coverage, before))
        must_keep = history.must_keep
        return sorted((unit for unit in worth if unit not in must_keep), reverse=True)


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


def _checked_nonzero(
    scorer: ImportanceScorer, scores: Mapping[int, float], size: int
) -> dict[int, float]:
    """A scorer's nonzero scores as floats by unit, or PluginError saying what is wrong."""
    try:
        values = {unit: float(value) for unit, value in scores.items()}
    except (AttributeError, TypeError, ValueError) as error:
        raise PluginError(
            f"importance scorer {scorer.name!r} returned nonzero scores that are not "
            f"numbers by unit: {error}"
        ) from None
    if not all(type(unit) is int and 0 <= unit < size for unit in values):
        raise PluginError(
            f"importance scorer {scorer.name!r} returned a score for a unit that is not "
            f"one of the {size} units"
        )
    if not all(map(math.isfinite, values.values())):
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
