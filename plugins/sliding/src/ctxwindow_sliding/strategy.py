"""The sliding window: the most recent units, plus the most important older ones."""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from ctxwindow import (
    BaseStrategy,
    Branch,
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
    PerConversation,
    excerpt_options,
    identifier_weight_option,
)
from ctxwindow.kit.ranking import UnitFigures, distinct, keep_ranked
from ctxwindow_sliding.keywords import KeywordScorer

#: What the task statement (the opening user message) adds to its importance: as much as
#: the unit that best matches the query. The core keeps it outright when it is small;
#: when it is too big for that, the ranking takes it first among older units (TASK_FIRST).
TASK_BOOST = 1.0
#: Why the task statement was kept when the runner could not keep it outright.
TASK_FIRST = "task statement (ranked first among older units)"
RECENT = "recent"
#: Up to this many units kept, the recent run is found by bisection between them, sorted.
SORTED_KEPT = 64
DROPPED = "neither among the most recent units nor important enough to fit"


def _share(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must be between 0 and 1"


class _ConversationState:
    """What a conversation says about importance, read once per message or unit: the
    ``metadata.importance`` marks, and the figures older units are ranked by (tokens,
    identifiers, excerpts)."""

    def __init__(self) -> None:
        self.read = 0
        self.importance: list[tuple[int, object]] = []  # (position, metadata value)
        self.figures = UnitFigures()
        self.lock = threading.Lock()

    def update(self, history: History) -> None:
        with self.lock:
            for position in range(self.read, len(history)):
                message = history.messages[position]
                value = message.metadata.get("importance") if message.metadata else None
                if value is not None:
                    self.importance.append((position, value))
            self.read = max(self.read, len(history))

    def branch(self, conversation: Conversation, origin: Branch) -> _ConversationState:
        """A branch's state: what the two conversations share (see PerConversation)."""
        twin = _ConversationState()
        with self.lock:
            twin.read = min(self.read, origin.messages)
            twin.importance = [mark for mark in self.importance if mark[0] < origin.messages]
            twin.figures = self.figures.branch(conversation, origin)
        return twin


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
        self._states: PerConversation[_ConversationState] = PerConversation(
            _ConversationState, _ConversationState.branch
        )

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

    def importance(self, history: History, notes: list[str] | None = None) -> np.ndarray:
        """Each unit's importance (float64, one per unit): the scorer's scores scaled so
        the largest is 1 in size, plus the ``metadata.importance`` of the unit's messages,
        plus TASK_BOOST for the task statement's unit (unless ``task_statement`` is off).
        Scaled over the units the scorer says may score (see :meth:`_scores`) alone,
        when it says."""
        return self._importance(history, notes)[0]

    def _importance(
        self, history: History, notes: list[str] | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`importance`, and the units outside which it is 0, ascending, when the
        scorer says where it scores (None: any unit may be important)."""
        scores, support = self._scores(history)
        looked = scores if support is None else scores[support]
        top = float(np.abs(looked).max()) if len(looked) else 0.0
        if top > 0 and top != 1:
            if support is None:
                scores /= top
            else:
                scores[support] /= top
        marked: list[int] = []
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
                scores[unit] += number
                marked.append(unit)
        task = history.task_unit
        if task is not None:
            scores[task] += TASK_BOOST
            marked.append(task)
        if support is not None and marked:
            support = distinct(np.concatenate([support, np.asarray(marked, dtype=np.int64)]))
        return scores, support

    def _scores(self, history: History) -> tuple[np.ndarray, np.ndarray | None]:
        """The scorer's scores, one per unit, as a float64 array of their own, and the
        units outside which they are 0 when the scorer says (None: any may score). A
        scorer that names only its scores that are not 0 does so through
        ``nonzero_scores(history)``; the keywords scorer gives its scores with the units
        that may score; any other's full list (or array) is read."""
        scorer = self.scorer
        size = len(history.units)
        nonzero = getattr(scorer, "nonzero_scores", None)
        if callable(nonzero):
            found = _checked_nonzero(scorer, nonzero(history), size)
            out = np.zeros(size)
            out[list(found)] = list(found.values())
            return out, np.asarray(sorted(found), dtype=np.int64)
        if isinstance(scorer, KeywordScorer):  # its own: trusted to say where it scores
            scores, support = scorer.score_with_support(history)
            if support is not None and _fresh_scores(scores, support, size):
                return scores, support  # its own array, 0 outside the support: not copied
            return _checked(scorer, scores, size), support
        return _checked(scorer, scorer.score(history), size), None

    def _state_of(self, history: History) -> _ConversationState:
        state = self._states.of(history.conversation)
        state.update(history)
        return state

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        selection.default_reason = DROPPED
        room = history.budget - history.must_keep_tokens
        reserved = int(room * self.options["important_share"])
        # 1. The recent run: contiguous from the newest unit, in what is not reserved.
        used, oldest_recent = _keep_recent(history, selection, room - reserved, len(history.units))
        room -= used
        # 2. The important older units, most important first, while any fits; in an
        # agent's history a unit also counts for the identifiers it would add.
        scores, support = self._importance(history, selection.notes)
        room = self._take_important(history, selection, scores, oldest_recent, room, support)
        # 3. Room the important units left extends the recent run.
        room -= _keep_recent(history, selection, room, oldest_recent)[0]
        # every unit's score that is not 0, for the record (beside those kept with one)
        if support is None:  # read when the record is, not a dict of every scoring unit
            # on every visit; the array is this visit's own and read no more here
            scores[scores == 0] = np.nan
            selection.unit_scores = scores
        else:  # few: by unit, without a pass over every unit (nor the runner's copy)
            scoring = support[scores[support] != 0]
            selection.scores.update(zip(scoring.tolist(), scores[scoring].tolist(), strict=True))
        return selection

    def _take_important(
        self,
        history: History,
        selection: Selection,
        scores: np.ndarray,
        before: int,
        room: int,
        support: np.ndarray | None = None,
    ) -> int:
        """Keep the older units (before ``before``) most important first while any fits
        ``room``; the room left. In an agent's history a unit also counts for the
        identifiers it would add (:class:`Coverage`). Only the units that can come first
        are valued (:func:`ctxwindow.kit.ranking.keep_ranked`); a unit worth 0 or less is
        never kept."""
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

        task = history.task_unit
        score: Callable[[int], float] = scores.item  # a float, read only for units valued
        if task is not None:

            def score(unit: int) -> float:
                # the task statement comes first when the runner could not keep it
                return math.inf if unit == task else scores.item(unit)

        def reason(rank: int, unit: int, added: int) -> str:
            if unit == task:
                return TASK_FIRST
            # the score itself is the decision's (Decision.score), shown beside the reason
            where = f"rank {rank + 1}" if rank >= 0 else "ranked"
            if coverage is None:
                return f"important ({where})"
            return f"important ({where}, adds {added} identifiers)"

        return keep_ranked(
            history,
            selection,
            scores,
            before,
            room,
            score,
            coverage,
            reason,
            figures=self._state_of(history).figures,
            excerpts=self.options["excerpts"],
            above=0.0,
            first=task,
            newest_first=True,  # ties go to the newer unit
            support=support,
        )


def _keep_recent(history: History, selection: Selection, room: int, before: int) -> tuple[int, int]:
    """Keep what ``recent_units(history, room, before=before, skip=selection.kept)``
    yields, as RECENT: the newest units before ``before`` back to the first that does
    not fit, passing over those kept already at no cost. Found a stretch between kept
    units at a time by bisection of the running totals (as ``recent_run`` does between
    must-keep ones), and kept a stretch a call: a turn's recent run is tens of units.
    The tokens kept, and the oldest unit kept (``before`` when none). With more units
    kept than :data:`SORTED_KEPT` (an agent's window), walked down a unit at a time
    instead: sorting them all would cost more than the few units the run adds then."""
    if len(selection.kept) > SORTED_KEPT:
        return _walk_recent(history, selection, room, before)
    passed = sorted((unit for unit in selection.kept if unit < before), reverse=True)
    low = before  # the oldest unit of the run (or one passed over, below which none fit)
    for free in [*passed, -1]:
        if free + 1 == low and free >= 0:  # kept units side by side: nothing between
            low = free
            continue
        first = history.fitting_start(range(free + 1, low), room)
        if first > free + 1 or free < 0:  # this stretch does not fit whole, or is the oldest
            low = first
            break
        room -= history.run_tokens(range(free + 1, low))
        low = free
    used, oldest, stop = 0, before, before
    for free in [*passed, -1]:  # each stretch between units passed over, from ``low`` on
        start = max(free + 1, low)
        if start < stop:
            part = range(start, stop)
            selection.keep(part, RECENT)
            used += history.run_tokens(part)
            oldest = start
        if free < low:
            break
        stop = free
    return used, oldest


def _walk_recent(history: History, selection: Selection, room: int, before: int) -> tuple[int, int]:
    """:func:`_keep_recent` walked down a unit at a time, as ``recent_units`` does, each
    stretch between kept units kept with one call."""
    kept, unit_tokens = selection.kept, history.unit_tokens
    used, oldest = 0, before
    start = stop = before  # the stretch of the run not kept yet: [start, stop)
    for unit in range(before - 1, -1, -1):
        if unit in kept:  # the must-keep units among them
            if start < stop:
                selection.keep(range(start, stop), RECENT)
            start = stop = unit
            continue
        tokens = unit_tokens(unit)
        if tokens > room:
            break
        room -= tokens
        used += tokens
        start = oldest = unit
    if start < stop:
        selection.keep(range(start, stop), RECENT)
    return used, oldest


def _fresh_scores(scores: np.ndarray, support: np.ndarray, size: int) -> bool:
    """Whether the keyword scorer's own ``scores`` can be used as they are: float64, one
    per unit, finite where they may be other than 0 (the ``support``)."""
    return (
        isinstance(scores, np.ndarray)
        and scores.dtype == np.float64
        and scores.shape == (size,)
        and bool(np.isfinite(scores[support]).all())
    )


def _checked(scorer: ImportanceScorer, scores: Sequence[float], size: int) -> np.ndarray:
    """The scorer's scores as a float64 array of their own, or PluginError saying what is
    wrong with them."""
    if isinstance(scores, np.ndarray) and scores.ndim == 1 and scores.dtype.kind in "fiu":
        values = scores.astype(np.float64)
    else:
        try:
            values = np.array([float(value) for value in scores], dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise PluginError(
                f"importance scorer {scorer.name!r} returned scores that are not numbers: {error}"
            ) from None
    if len(values) != size:
        raise PluginError(
            f"importance scorer {scorer.name!r} returned {len(values)} scores for {size} units"
        )
    if not np.isfinite(values).all():
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
