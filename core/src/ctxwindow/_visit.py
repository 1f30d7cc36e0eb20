"""One visit: the runner's work before and after the strategy chooses.

Before: read and count the history (through its Conversation, so a chat loop pays for
new messages only), apply the orphan policy, return early when everything fits, apply
the oversize policy. After: check the selection and the window, build the window in
the caller's kind of objects, write the record. How the choice itself is called (time
limits, errors) is :class:`~ctxwindow.Windower`'s.
"""

from __future__ import annotations

import bisect
import contextvars
import dataclasses
import itertools
import math
import operator
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from numbers import Real
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, overload

from ctxwindow._checker import (
    kept_units_problems,
    record_problems,
    stand_ins_problems,
    synthetic_problems,
)
from ctxwindow._contract import common_option, overhead_problem
from ctxwindow._history import (
    CURRENT_TURN,
    CURRENT_TURN_NO_USER,
    INSTRUCTION,
    NEWEST_EXCHANGE,
    NEWEST_USER,
    PINNED,
    TASK_STATEMENT,
    Conversation,
    History,
)
from ctxwindow._messages import ContentPart, Message, content_as_sent, fields_of
from ctxwindow._recent import RECENT
from ctxwindow._selection import Carried, Decisions, Outcome, Selection, _below_is, reaches
from ctxwindow._units import between
from ctxwindow._window import (
    Decision,
    DecisionRun,
    LLMUsage,
    Window,
    WindowRecord,
    decisions_from,
    tally_runs,
)
from ctxwindow.errors import BudgetTooSmall, InvalidBudget, OrphanToolResult, VisitTimeout
from ctxwindow.kit import keep_run, recent_run

if TYPE_CHECKING:
    from ctxwindow._tokens import TokenCounter
    from ctxwindow._units import Defect
    from ctxwindow._windower import Windower

T = TypeVar("T")

TRUNCATION_MARKER = "\n[... {removed} characters cut by ctxwindow to fit the token budget]"
#: Between the head and the tail of a tool result the runner cut (the current turn's,
#: when what must stay exceeds the budget).
TOOL_CUT_MARKER = (
    "\n[... {removed} characters cut by ctxwindow from this tool result to fit the token "
    "budget; the whole result is in the history you passed ...]\n"
)
#: The roles of a tool result the oversize policy may cut: a tool's, and a legacy
#: function_call's result (``function``), kept with its call alike.
_RESULT_ROLES = ("tool", "function")
#: A cut current turn leaves older context 1/OLDER_SHARE of the budget, when it can.
OLDER_SHARE = 4
#: Below this many tokens a cut tool result is little more than its marker.
MIN_CUT_TOKENS = 64
#: A tool result over 1/OVERSIZED_SHARE of the budget is oversized: in a current turn's
#: older round it may be cut, so that the turn is held whole (``Visit._hold_cut_turn``).
OVERSIZED_SHARE = 2
#: The ``oversize`` policies, each cutting more than the one before.
OVERSIZE_POLICIES = ("raise", "cut", "truncate")
#: BudgetTooSmall's advice when a policy that cuts more would fit.
_HELPS = {
    "cut": "pass oversize='cut' to cut the current turn's tool results to fit (head and "
    "tail kept, with a marker)",
    "truncate": "pass oversize='truncate' to cut the newest user message's text (and the "
    "current turn's tool results) with a marker",
}
#: The reason for each unit the runner keeps when a strategy ran out of time.
RECENT_REASON = "among the newest units that fit (the strategy ran out of time)"
OLDER_REASON = "outside the newest units that fit (the strategy ran out of time)"


@dataclasses.dataclass(frozen=True)
class TimeLimit:
    """How long a strategy may take to choose, and what the runner does past it."""

    seconds: float
    on_timeout: str = "raise"  # or "recent"

    @classmethod
    def of(cls, strategy: object) -> TimeLimit | None:
        """The limit a strategy's own options set (``time_limit``), if any."""
        seconds = common_option(strategy, "time_limit")
        if seconds is None:
            return None
        return cls(float(seconds), str(common_option(strategy, "on_timeout")))

    def note(self, strategy: str) -> str:
        return (
            f"strategy {strategy!r} ran out of its time limit of {self.seconds:g} s; the "
            f"host kept the must-keep messages and the newest units that fit"
        )


class _ByUnit(Sequence[T]):
    """One value per unit, held as the few that differ from a default and the runs of
    units given one value at once: a visit's decisions cost what the strategy decided,
    and are spelled out unit by unit only when the record's decisions are read."""

    __slots__ = ("_count", "default", "given", "runs")

    def __init__(
        self,
        count: int,
        default: T,
        given: dict[int, T],
        runs: Sequence[tuple[int, int, T]] = (),
    ) -> None:
        self._count = count
        self.default = default
        #: Values by unit, each newer than any run that covers the unit.
        self.given = given
        #: (start, stop, value) for units given a value at once, oldest first.
        self.runs = tuple(runs)

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, unit: int) -> T: ...
    @overload
    def __getitem__(self, unit: slice) -> list[T]: ...
    def __getitem__(self, unit: int | slice) -> T | list[T]:
        if isinstance(unit, slice):
            return [self[u] for u in range(*unit.indices(self._count))]
        if not 0 <= unit < self._count:
            raise IndexError(unit)
        given = self.given
        if unit in given:
            return given[unit]
        for start, stop, value in reversed(self.runs):
            if start <= unit < stop:
                return value
        return self.default

    def __setitem__(self, unit: int, value: T) -> None:
        if not 0 <= unit < self._count:
            raise IndexError(unit)
        self.given[unit] = value

    def pieces(self, bounds: Sequence[int]) -> list[T]:
        """The value of each piece ``bounds[i]`` to ``bounds[i + 1]`` (sorted bounds that
        include every edge of the runs and of the units given a value, so that a piece
        has one value throughout): the runs painted oldest first, a bisection each."""
        values = [self.default] * (len(bounds) - 1)
        for start, stop, value in self.runs:
            first, end = bisect.bisect_left(bounds, start), bisect.bisect_left(bounds, stop)
            values[first:end] = [value] * (end - first)
        given = self.given
        for unit in _from(given, bounds[0]):
            values[bisect.bisect_left(bounds, unit)] = given[unit]
        return values

    def count_in(self, runs: Sequence[range], value: T) -> int:
        """How many units of ``runs`` (step-1 ranges, ascending, apart) hold ``value``:
        read by pieces between the edges of those runs, of the runs of units given a
        value at once and of the units given one there, not unit by unit (a long agent
        turn's units summarized as one run cost one piece)."""
        if not runs:
            return 0
        low, high = runs[0].start, runs[-1].stop
        given = [unit for unit in _from(self.given, low) if unit < high]
        edges = {edge for run in runs for edge in (run.start, run.stop)}
        edges.update(edge for start, stop, _ in self.runs for edge in (start, stop))
        edges.update(edge for unit in given for edge in (unit, unit + 1))
        bounds = sorted(edge for edge in edges if low <= edge <= high)
        values = [self.default] * (len(bounds) - 1)
        for start, stop, held in self.runs:
            first = bisect.bisect_left(bounds, max(start, low))
            end = bisect.bisect_left(bounds, min(stop, high))
            values[first:end] = [held] * max(end - first, 0)
        for unit in given:
            values[bisect.bisect_left(bounds, unit)] = self.given[unit]
        found, index = 0, 0
        for run in runs:
            index = bisect.bisect_left(bounds, run.start, index)
            while bounds[index] < run.stop:
                if values[index] == value:
                    found += bounds[index + 1] - bounds[index]
                index += 1
        return found

    def __iter__(self) -> Iterator[T]:
        values = [self.default] * self._count
        for start, stop, value in self.runs:
            values[start:stop] = [value] * (stop - start)
        for unit, value in self.given.items():
            values[unit] = value
        return iter(values)


def _from(units: Iterable[int], first: int) -> list[int]:
    """The units of ``units`` from ``first`` on, picked at C speed: a visit that carried
    thousands of units decided one by one goes over the few decided since."""
    return list(itertools.compress(units, map(first.__le__, units)))


def _any_summarized(actions: list[str] | _ByUnit[str]) -> bool:
    """Whether any unit's action is ``summarized``: read from what the strategy decided
    (its runs and units), or from its spelled-out list. A run summarized may since have
    given each of its units another action (a pipeline whose later stage dropped the
    summary): its units are read then, the first still summarized ending the search."""
    if isinstance(actions, _ByUnit):
        if "summarized" in actions.given.values():
            return True
        return any(
            actions[unit] == "summarized"
            for start, stop, action in actions.runs
            if action == "summarized"
            for unit in range(start, stop)
        )
    return "summarized" in actions


def _by_unit(
    selection: Selection, made: Decisions | None
) -> tuple[list[str] | _ByUnit[str], list[str | None] | _ByUnit[str | None]]:
    """The runner's own copy of a selection's actions and reasons: lists when the
    strategy spelled them out (read or changed them directly, ``made`` None), else
    what it decided (``made``: see ``Selection._decisions``)."""
    if made is None:
        return list(selection.actions), list(selection.reasons)
    decided, runs = made
    count = len(selection.history.units)
    # at C speed: a transform decides thousands of units one by one
    actions = dict(zip(decided, map(_first, decided.values()), strict=True))
    reasons: dict[int, str | None] = dict(zip(decided, map(_second, decided.values()), strict=True))
    if None in reasons.values():  # a drop left to the default reason: none of its own
        reasons = {unit: reason for unit, reason in reasons.items() if reason is not None}
    return (
        _ByUnit(count, "dropped", actions, [run[:3] for run in runs]),
        _ByUnit(count, None, reasons, [(*run[:2], run[3]) for run in runs]),
    )


_first, _second = operator.itemgetter(0), operator.itemgetter(1)


def _carried_by_unit(
    made: Decisions, carried: Carried, count: int
) -> tuple[_ByUnit[str], _ByUnit[str | None], dict[int, str]] | None:
    """The runner's copy of a carried selection's actions and reasons (see
    :func:`_by_unit`), and the actions this visit decided itself: for the carried units
    the carried visit's checked copy (its stand-ins' units marked ``replaced``, as they
    are again when every carried stand-in is as it was), copied whole at C speed, less
    its units from the first not carried on; then this visit's decisions (those after
    the carried ones in ``made``: see :meth:`Selection.carry`). A turn that carries a
    transform's thousands of decisions then costs two dict copies, not a pass over
    each. None when that copy is not held by unit."""
    earlier = carried.outcome.chosen
    actions, reasons = earlier.actions, earlier.reasons
    if not (isinstance(actions, _ByUnit) and isinstance(reasons, _ByUnit)):
        return None
    decided, runs = made
    own = list(itertools.islice(decided.items(), carried.decided, None))
    units, seen = carried.units, len(actions)
    given_actions, given_reasons = dict(actions.given), dict(reasons.given)
    for given in (given_actions, given_reasons):
        if reaches(given, units, seen):
            for unit in range(units, seen):
                given.pop(unit, None)
    own_actions = {unit: action for unit, (action, _) in own}
    given_actions.update(own_actions)
    given_reasons.update((unit, reason) for unit, (_, reason) in own if reason is not None)
    return (
        _ByUnit(count, "dropped", given_actions, [run[:3] for run in runs]),
        _ByUnit(count, None, given_reasons, [(*run[:2], run[3]) for run in runs]),
        own_actions,
    )


@dataclasses.dataclass
class _Chosen:
    """The runner's own copy of a strategy's selection, checked: a Selection changed
    after the visit cannot change its window or its record."""

    actions: list[str] | _ByUnit[str]
    reasons: list[str | None] | _ByUnit[str | None]
    default_reason: str
    scores: dict[int, float]
    unit_scores: Sequence[float] | None
    kept: set[int]
    synthetic: list[tuple[int, Message]]
    notes: tuple[str, ...]
    llm: Any
    stand_ins: dict[int, Message]
    stages: tuple[WindowRecord, ...]
    #: What the strategy decided, as it decided it (None: it spelled out the lists).
    decisions: Decisions | None = None
    #: The units carried from an earlier visit, and the stand-ins new since (or
    #: changed): only those are checked, counted and laid out again.
    carried: Carried | None = None
    fresh_stand_ins: dict[int, Message] | None = None
    #: The actions were taken over from the carried visit's copy, its stand-ins' units
    #: marked ``replaced`` there (see :func:`_carried_by_unit`): only the fresh ones
    #: are marked here.
    premarked: bool = False

    def reason(self, unit: int) -> str:
        return self.reasons[unit] or self.default_reason

    def score(self, unit: int) -> float | None:
        """The unit's score for the record: its own, else its :attr:`unit_scores` entry.
        A NaN or an infinity (there, or written into ``scores`` past ``keep()``, which
        refuses one) is no score, None: no JSON record could hold it. Checked here, as
        the decisions are read, not on every visit."""
        score = self.scores.get(unit)
        if score is None and self.unit_scores is not None:
            score = float(self.unit_scores[unit])
        return None if isinstance(score, float) and not math.isfinite(score) else score


def _view(
    messages: Any,
    counter: TokenCounter,
    budget: int,
    query: str | None,
    task: bool,
    *,
    nested: bool = False,
) -> History:
    """The visit's view of ``messages``: a Conversation's, another visit's History seen
    again (a strategy windowing its history through other strategies; with the host's
    cuts, its messages as they were sent, read as a list), else a list's."""
    if isinstance(messages, Conversation):
        return messages.view(counter, budget, query, task_statement=task)
    if isinstance(messages, History):
        seen = messages._seen_by(counter, budget, query, task_statement=task)
        if seen is not None:
            return seen
        messages = _as_sent(messages)
    return RECENT.view(messages, counter, budget, query, task_statement=task, nested=nested)


class _Choosing:
    """How many calls of one visit's strategy code are running: what a visit begun in
    its context reads (:data:`_CHOOSING`), holding nothing else of the visit (a task
    the strategy leaves running keeps this, not the visit's history)."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0


#: The running count of the visit whose strategy code runs (its choose, transform or
#: achoose): a visit begun while it runs windows that visit's history, or messages
#: made from it (a pipeline's stage, handed a list where the host cut a message), and
#: is nested in it. A context another one copies while the strategy runs (a task it
#: creates) holds the count still; a visit begun there once it is 0 is not nested.
_CHOOSING: contextvars.ContextVar[_Choosing | None] = contextvars.ContextVar(
    "ctxwindow_choosing", default=None
)


class _StrategyRuns:
    """Around a call of a visit's strategy code: its count up and in this context for
    the call (see :data:`_CHOOSING`), both put back after. A class, as the runner's
    other per-visit context managers are: no generator per visit."""

    __slots__ = ("choosing", "token")

    def __init__(self, visit: Visit) -> None:
        self.choosing = visit.choosing

    def __enter__(self) -> None:
        self.token = _CHOOSING.set(self.choosing)
        self.choosing.calls += 1

    def __exit__(self, *exc: object) -> None:
        self.choosing.calls -= 1
        _CHOOSING.reset(self.token)


def run_strategy(visit: Visit, call: Callable[[History], T]) -> T:
    """``call(visit.history)`` (the strategy's choose or transform) as the visit's
    strategy code: the visits it begins (in this context, or a copy of it, as the
    runner's worker threads and ``asyncio.to_thread`` run in) are nested in this one."""
    with _StrategyRuns(visit):
        return call(visit.history)


async def await_strategy(visit: Visit, call: Awaitable[T]) -> T:
    """``call`` (the strategy's achoose, made) awaited as the visit's strategy code (see
    :func:`run_strategy`)."""
    with _StrategyRuns(visit):
        return await call


def _nested() -> bool:
    """Whether a visit begun now is nested in one whose strategy code is running."""
    choosing = _CHOOSING.get()
    return choosing is not None and choosing.calls > 0


def _as_sent(history: History) -> list[Any]:
    """A history's messages as a strategy sees them: the caller's objects, but the
    host's stand-ins where it cut one."""
    messages = history.originals
    for position, message in history.replacements.items():
        messages[position] = message
    return messages


class Visit:
    """The state of one visit between preparing and finishing.

    ``bounded`` is False for a transform, whose window may stay over the budget: no
    oversize policy, no budget check.
    """

    def __init__(
        self, windower: Windower, messages: Any, budget: int, query: str | None, bounded: bool
    ) -> None:
        self.started = time.perf_counter()
        self.windower = windower
        self.strategy = windower.strategy
        self.budget = budget
        self.bounded = bounded
        #: The strategy method whose return the visit checks, for its errors.
        self.method = "choose()" if bounded else "transform()"
        self.counter = windower.counter
        self.limit = self._limit()
        task = bool(common_option(self.strategy, "task_statement"))
        #: Whether this visit windows another visit's history (a pipeline's stage: begun
        #: while that visit's strategy runs, handed its History or a list made from it):
        #: the outer visit held the current turn or not, under its own policy.
        self.nested = isinstance(messages, History) or _nested()
        #: How many calls of the strategy's code for this visit are running (see
        #: :func:`run_strategy`; more than one only for a strategy that re-enters).
        self.choosing = _Choosing()
        self.history: History = _view(
            messages, self.counter, self.limit, query, task, nested=self.nested
        )
        #: What must stay, copied before the strategy runs: the check trusts this alone.
        self.must_keep: Mapping[int, str] = MappingProxyType(dict(self.history.must_keep))
        #: The runner's own stand-ins (a cut newest user message), by position.
        self.replaced: dict[int, Message] = {}
        self.tokens_before = self.history.total_tokens  # before any cut of the newest message
        self.notes: list[str] = []
        self.defect_decisions: list[Decision] = []
        #: Each must-keep message's cost cut to its marker (:meth:`_floor`), of the
        #: message as given: counted once, though the oversize policy asks several times.
        self._floors: dict[int, int] = {}
        #: Whether the whole current turn is held, its older rounds' results cut, and
        #: its newest exchange then (which the cut leaves whole where it can).
        self._held_turn = False
        self._held_newest: int | None = None
        self._apply_orphan_policy()

    # -- before ------------------------------------------------------------------
    def _limit(self) -> int:
        """The budget less the strategy's declared overhead, both checked."""
        overhead = getattr(self.strategy, "overhead_tokens", 0)
        problem = overhead_problem(overhead)
        if problem:
            raise self.windower.violation([problem])
        limit: int = self.budget - overhead
        if limit <= 0:
            raise InvalidBudget(
                f"budget {self.budget} leaves nothing once strategy {self.strategy.name!r} "
                f"takes its overhead of {overhead} tokens"
            )
        return limit

    def _apply_orphan_policy(self) -> None:
        history = self.history
        for defect in history.defects:
            problem = _problem(history, defect)
            if common_option(self.strategy, "orphans") == "raise":
                raise OrphanToolResult(
                    defect.start, f"{problem}; fix the history or pass orphans='drop'"
                )
            positions = tuple(range(defect.start, defect.stop))
            span = _messages_span(defect.start, defect.stop)
            self.notes.append(f"dropped {span}: {problem}")
            reason = problem
            pinned = [p for p in positions if history.messages[p].pinned]
            if pinned:
                listed = ", ".join(map(str, pinned))
                reason += (
                    f"; dropped although pinned (message{'s' if len(pinned) > 1 else ''} "
                    f"{listed}): a broken tool exchange cannot be sent"
                )
            self.defect_decisions.append(
                Decision(
                    unit=-1,
                    positions=positions,
                    ids=tuple(history.message_id(p) for p in positions),
                    action="dropped",
                    reason=reason,
                    tokens=sum(history.tokens(p) for p in positions),
                )
            )

    def fits_untouched(self) -> bool:
        history = self.history
        return (
            not history.defects
            and history.total_tokens <= self.limit
            and not self.windower.engages(history)
        )

    def apply_oversize_policy(self) -> None:
        """What must stay exceeds the budget: cut the current turn's tool results (unless
        ``oversize='raise'``), then the newest user message (``'truncate'``), else raise
        BudgetTooSmall naming the biggest message that must stay and what would help."""
        history = self.history
        if history._turn_split and not self.nested:
            policy = common_option(self.strategy, "oversize")
            if policy != "raise":
                self._hold_cut_turn(policy)
        if history.must_keep_tokens <= self.limit:
            return
        policy = common_option(self.strategy, "oversize")
        if policy == "raise" or self._least_needed(policy) > self.limit:
            raise self._too_small(policy)  # said of the messages as given, before a cut
        level = self._cut_tool_results(policy)
        needed = history.must_keep_tokens
        newest = history.newest_user
        # in a held turn the request shares the older results' cut: cut to their size
        # even where it would fit whole, or it takes older context's share from them
        shares = (
            self._held_turn
            and policy == "truncate"
            and level is not None
            and newest is not None
            and history.tokens(newest) > level
        )
        if needed <= self.limit and not shares:
            if self.replaced:  # cut to fit: the task statement may fit in what is left
                self._admit_task_statement()
            return
        if policy != "truncate" or newest is None:
            raise self._too_small(policy)
        message = history.messages[newest]
        room = history.tokens(newest) - (needed - self.limit)
        # the tool results' common size when they were cut beside it: the rest of the
        # room is older context's share; drafts are counted past the cache, so that they
        # do not crowd it
        count = self.counter.count_uncached
        replacement = None
        if level is not None and level < room:
            replacement = _truncate(message, level, count)
        replacement = replacement or _truncate(message, room, count)
        if replacement is None:
            raise self._too_small(policy)
        history._replace(newest, replacement)
        self.replaced[newest] = replacement
        self._admit_task_statement()
        self.notes.append(
            f"truncated message {newest} from {len(message.text):,} to "
            f"{len(replacement.text):,} characters to fit the budget"
        )

    def _hold_cut_turn(self, policy: str) -> None:
        """Hold the whole current turn, which does not fit, when it would with the
        oversized tool results of its older rounds (each over half the budget; with
        ``'truncate'`` the newest user message too, if that big) cut, to no less than
        MIN_CUT_TOKENS, its newest exchange whole and older context keeping its share:
        the cut follows (:meth:`_cut_tool_results`). Else (no older result that big: a
        long run of ordinary rounds, or rounds a strategy may summarize) its newest
        exchange alone stays (cut if need be), as before. An agent that read a huge
        result on one request (cut to fit, as the newest exchange) keeps reading it on
        the next of the same turn, instead of losing it with everything older."""
        history = self.history
        turn = history.current_turn
        big = self.limit // OVERSIZED_SHARE
        held_before = [  # instructions and pins before the turn; the task waits (tier 3)
            unit
            for unit, why in history.must_keep.items()
            if unit < turn.start and why != TASK_STATEMENT
        ]
        room = self.limit - sum(map(history.unit_tokens, held_before))
        if len(held_before) < turn.start:  # older context: it keeps its share
            room -= self.limit // OLDER_SHARE
        newest = history._newest_exchange
        request = history.newest_user if policy == "truncate" else None
        needed, oversized = 0, False
        for unit in reversed(turn):  # newest first: a long run of rounds stops early
            cost = history.unit_tokens(unit)
            if cost > big and unit != newest:
                saved, result = self._cut_saves(unit, big, request)
                cost -= saved
                oversized = oversized or result
            needed += cost
            if needed > room:
                return
        if not oversized:
            return
        history._hold_turn()
        self.must_keep = MappingProxyType(dict(history.must_keep))
        self._held_turn, self._held_newest = True, newest

    def _held_rounds(self, results: list[int]) -> list[int]:
        """Those of ``results`` in a held turn's older rounds (:meth:`_hold_cut_turn`)."""
        if not self._held_turn:
            return []
        newest = self._held_newest
        return [p for p in results if self.history.unit_of(p) != newest]

    def _cut_saves(self, unit: int, big: int, request: int | None) -> tuple[int, bool]:
        """What cutting ``unit``'s oversized tool results (over ``big`` tokens; and the
        message at ``request``, the newest user message under 'truncate') to
        MIN_CUT_TOKENS saves at most (none below its marker's cost), and whether it holds
        such a tool result."""
        history = self.history
        saved, result = 0, False
        for position in history.span(unit):
            tokens = history.tokens(position)
            if tokens <= big:
                continue
            if history.messages[position].role in _RESULT_ROLES:
                result = True
            elif position != request:
                continue
            saved += max(0, tokens - max(MIN_CUT_TOKENS, self._floor(position)))
        return saved, result

    def _admit_task_statement(self) -> None:
        """Weigh the task statement again once what must stay was cut (concepts.md): it
        stays when it fits in what the cut left."""
        self.history._admit_task_statement()
        self.must_keep = MappingProxyType(dict(self.history.must_keep))

    def _too_small(self, policy: str) -> BudgetTooSmall:
        """BudgetTooSmall for what must stay under ``policy``: the first oversize policy
        that cuts more and would fit, else the least budget that works under this one."""
        needed = self.history.must_keep_tokens
        least = needed if policy == "raise" else self._least_needed(policy)
        known = policy in OVERSIZE_POLICIES  # a protocol strategy's own value: none after it
        allowed = OVERSIZE_POLICIES[OVERSIZE_POLICIES.index(policy) + 1 :] if known else ()
        lower = [(self._least_needed(p), p) for p in allowed]
        helping = next((p for cost, p in lower if cost <= self.limit and cost < least), None)
        if helping is not None:
            return BudgetTooSmall(needed, self.limit, _HELPS[helping], **self._biggest())
        detail = f"to at least {least + self.budget - self.limit:,} tokens"
        cuttable = self._cuttable(policy) if policy != "raise" else ""
        if cuttable:
            many = len(self._cut_positions(policy)) > 1
            detail += (
                f": even with {cuttable} cut to {'their markers' if many else 'its marker'}, "
                f"what must stay needs {least:,}"
            )
        fewest, other = min(lower, default=(least, policy))
        if fewest < least:  # a policy that cuts more would do with less
            detail += f" ({fewest + self.budget - self.limit:,} with oversize={other!r})"
        return BudgetTooSmall(needed, self.limit, detail, **self._biggest(), least=True)

    def _cut_tool_results(self, policy: str) -> int | None:
        """Cut the current turn's must-keep tool results, the largest first, to one
        common size that leaves older context its share of the budget (all of what is
        left when that share cannot be spared, or there is no older context); each keeps
        its head and tail, and none is cut below its marker's cost (:meth:`_floor`: it
        keeps that, and the others share what is left). With ``'truncate'`` the newest
        user message shares that size with them (it is cut after them, to fit): its
        size when a result was cut, else None. In a held turn (:meth:`_hold_cut_turn`)
        its older rounds' results are cut first, to what leaves the newest exchange
        whole, rounded down to the ladder (:func:`_rung_below`: their size stays put
        from request to request while the turn grows; no lower than MIN_CUT_TOKENS;
        with 'truncate' the newest user message shares their size); the newest exchange
        shares the rest."""
        history = self.history
        results = self._cut_positions("cut")
        if not results:
            return None
        sharing = list(results)
        newest = history.newest_user
        if policy == "truncate" and newest is not None:
            sharing.append(newest)
        sizes = {position: history.tokens(position) for position in sharing}
        floors = {position: self._floor(position) for position in sharing}
        others = history.must_keep_tokens - sum(sizes.values())
        older = len(history.units) > len(history.must_keep)  # units older context holds
        room = self.limit - others - (self.limit // OLDER_SHARE if older else 0)
        # older context's share goes only where each message keeps a useful size (one
        # smaller than that counted at its own size: it needs no cut)
        if room < _filled(sizes, floors, MIN_CUT_TOKENS):
            room = self.limit - others
        # a held turn's older rounds are cut first (with 'truncate' the request shares
        # their cut), to no less than MIN_CUT_TOKENS: the newest exchange (what the
        # model waits on) keeps all it can
        earlier = set(self._held_rounds(results))
        if earlier and newest in floors:
            earlier.add(newest)
        levels: dict[int, int] = {}  # the older rounds' results' size
        sharing_sizes = sizes
        if earlier:
            sharing_sizes = {p: size for p, size in sizes.items() if p not in earlier}
            older_sizes = {p: sizes[p] for p in earlier}
            spare = room - sum(sharing_sizes.values())
            older_level = max(_water_level(older_sizes, floors, spare), MIN_CUT_TOKENS)
            if older_level < max(older_sizes.values()):  # a cut: one that stays put
                older_level = max(_rung_below(older_level), MIN_CUT_TOKENS)
            levels = dict.fromkeys(earlier, older_level)
            room -= _filled(older_sizes, floors, older_level)
        level = _water_level(sharing_sizes, floors, room)
        cut_any = False
        for position in sorted(results, key=sizes.__getitem__, reverse=True):
            size = max(levels.get(position, level), floors[position])
            if sizes[position] <= size:
                continue
            message = history.messages[position]
            cut = _truncate(message, size, self.counter.count_uncached, tail=True)
            if cut is None:  # not at its marker's cost: the others may still make room
                continue
            history._replace(position, cut)
            self.replaced[position] = cut
            cut_any = True
            self.notes.append(
                f"cut the tool result of message {position} ({_answers(message)}) from "
                f"{sizes[position]:,} to {history.tokens(position):,} tokens to fit the budget, "
                f"its head and tail kept; the whole result is in the history you passed"
            )
        if not cut_any or newest not in floors:
            return None
        return max(levels.get(newest, level), floors[newest])

    def _floor(self, position: int) -> int:
        """What the must-keep message at ``position`` costs cut to its marker alone (its
        images kept): the least a cut leaves of it."""
        floor = self._floors.get(position)
        if floor is None:
            message = self.history.messages[position]
            marker = _cut_to(message, 0, tail=message.role in _RESULT_ROLES)
            floor = self._floors[position] = self.counter.count_uncached(marker)
        return floor

    def _cut_positions(self, policy: str) -> list[int]:
        """The must-keep messages ``policy`` may cut: the current turn's tool results,
        and with 'truncate' the newest user message."""
        history = self.history
        found = [
            position
            for unit in history.current_turn
            if unit in history.must_keep
            for position in history.span(unit)
            if history.messages[position].role in _RESULT_ROLES
        ]
        if policy == "truncate" and history.newest_user is not None:
            found.append(history.newest_user)
        return found

    def _least_needed(self, policy: str) -> int:
        """What the must-keep messages cost at the least ``policy`` allows: each message
        it may cut cut to its marker alone (:meth:`_floor`), where that is cheaper."""
        history = self.history
        least = history.must_keep_tokens
        for position in self._cut_positions(policy):
            least -= max(0, history.tokens(position) - self._floor(position))
        return least

    def _cuttable(self, policy: str) -> str:
        """The messages ``policy`` may cut, in words (empty: none)."""
        results = len(self._cut_positions("cut"))
        said = [f"the current turn's {results} tool result(s)"] if results else []
        if policy == "truncate" and self.history.newest_user is not None:
            said.append("the newest user message")
        return " and ".join(said)

    def _biggest(self) -> dict[str, Any]:
        """What must stay, for BudgetTooSmall: the kinds of message this history keeps,
        and the biggest message, in words and as its position and tokens."""
        history = self.history
        positions = [p for unit in history.must_keep for p in history.span(unit)]
        position = max(positions, key=history.tokens)
        message = history.messages[position]
        tokens = history.tokens(position)
        if message.role in _RESULT_ROLES:
            what = f"the tool result for {_answers(message)}"
        elif position == history.newest_user:
            what = "the newest user message"
        else:
            kind = f"{'pinned ' if message.pinned else ''}{message.role}"
            what = f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} message"
        return {
            "biggest": f"message {position}, {what}, {tokens:,} tokens",
            "position": position,
            "biggest_tokens": tokens,
            "kept": _kinds_kept(history),
        }

    # -- after -------------------------------------------------------------------
    def finish(self, selection: object) -> Window[Any]:
        history = self.history
        chosen = self._chosen(selection)
        cut: dict[int, str] = {}
        for position in self.replaced:
            unit = history.unit_of(position)
            if unit is not None and unit in chosen.kept:
                tool = history.messages[position].role in _RESULT_ROLES
                cut[unit] = "tool result cut" if tool else "text cut"
        for unit, what in cut.items():
            chosen.actions[unit] = "truncated"
            chosen.reasons[unit] = f"{chosen.reason(unit)}; {what} to fit the budget"
        gone = _gone_runs(history.current_turn, chosen.kept)
        if gone:
            self.notes.append(_turn_note(history, chosen, gone))
        carried = chosen.carried
        fresh = chosen.stand_ins
        if carried is not None and _as_before(chosen.stand_ins, chosen.fresh_stand_ins, carried):
            history._take_replacements(carried.outcome.history, carried.position, carried.units)
            fresh = chosen.fresh_stand_ins or {}
        else:
            carried = None
        for position, message in fresh.items():
            history._replace(position, message)  # checked: counted from here on
        _mark_replaced(history, chosen.actions, fresh if chosen.premarked else chosen.stand_ins)
        limit = self.limit if self.bounded else None
        # whole units in order, laid out by the runs of them, made messages between
        runs = _unit_runs(history, chosen.kept)
        made = _anchored(history, chosen.synthetic)
        problems, tokens = kept_units_problems(
            history, chosen.kept, runs, limit, self.must_keep, made, self.counter
        )
        if problems:
            raise self.windower.violation(problems)
        reused = _carried_output(history, runs, chosen) if carried is not None else None
        if reused is None:
            output = _run_output(history, runs, self.replaced, chosen.stand_ins)
        else:
            head, position = reused
            tail = [(max(start, position), stop) for start, stop in runs if stop > position]
            output = head + _run_output(history, tail, self.replaced, fresh)
        if made:
            output = _with_made(history, output, runs, made)
        notes = tuple(self.notes) + chosen.notes
        defect_decisions = tuple(self.defect_decisions)
        earlier = _earlier_runs(chosen) if carried is not None else None
        if chosen.carried is not None:  # no chain of visits kept alive
            chosen.carried = chosen.fresh_stand_ins = None
            selection._carried = None  # type: ignore[attr-defined]  # a Selection: checked

        def decide() -> tuple[Decision, ...]:
            return (
                decisions_from(
                    chosen.actions,
                    [reason or chosen.default_reason for reason in chosen.reasons],
                    chosen.score,
                    history.span,
                    history.message_id,
                    history.unit_tokens,
                )
                + defect_decisions
            )

        def decide_runs() -> tuple[DecisionRun, ...]:
            runs = _decision_runs(history, chosen, earlier) + tuple(
                DecisionRun(range(0), d.positions, d.action, d.reason) for d in defect_decisions
            )
            if earlier is not None and earlier.tally is not None:  # the record's counts, in
                # time linear in what changed, not in the history's runs (see _carried_tally)
                object.__setattr__(record, "_tally", _carried_tally(earlier, earlier.tally, runs))
            return runs

        record = self._record(tokens, True, len(output), notes, decide, chosen.llm, decide_runs)
        if chosen.stages:
            record = dataclasses.replace(record, stages=chosen.stages)
        if not defect_decisions:  # selection is a Selection: _chosen made sure
            selection._outcome = Outcome(history, chosen, self.replaced, output, runs, record)  # type: ignore[attr-defined]
        return Window(output, record)

    def timed_out(self, limit: TimeLimit) -> Window[Any]:
        """What the visit returns when the strategy ran out of time: VisitTimeout, or
        the runner's own window of the must-keep units and the newest units that fit."""
        name = self.strategy.name
        if limit.on_timeout != "recent":
            raise VisitTimeout(name, self.windower.distribution_for_error(), limit.seconds)
        history = self.history
        selection = history.selection()
        selection.default_reason = OLDER_REASON
        keep_run(
            selection, recent_run(history, history.budget - history.must_keep_tokens), RECENT_REASON
        )
        selection.notes.append(limit.note(name))
        return self.finish(selection)

    def _chosen(self, selection: object) -> _Chosen:
        """A checked copy of the selection; a record that disagrees is a violation."""
        history = self.history
        if not isinstance(selection, Selection) or selection.history is not history:
            kind = type(selection).__name__
            raise self.windower.violation(
                [f"{self.method} returned {kind}, not a Selection of its history"]
            )
        count = len(history.units)
        default = selection.default_reason
        if not isinstance(default, str) or not default:
            problem = f"its selection's default_reason is {default!r}, not a non-empty string"
            raise self.windower.violation([problem])
        made = selection._decisions()
        carried_in = selection._carried
        stand_ins = dict(selection.stand_ins)
        fresh = _fresh(stand_ins, carried_in) if carried_in is not None else None
        taken = None
        if made is not None and carried_in is not None and _as_before(stand_ins, fresh, carried_in):
            taken = _carried_by_unit(made, carried_in, count)
        actions, reasons = _by_unit(selection, made) if taken is None else taken[:2]
        unit_scores, unit_scores_problem = _own_copy(selection.unit_scores, count)
        chosen = _Chosen(
            actions=actions,
            reasons=reasons,
            default_reason=default,
            scores=dict(selection.scores),
            unit_scores=unit_scores,
            kept=set(selection.kept),
            synthetic=list(selection.synthetic),
            notes=tuple(map(str, selection.notes)),
            llm=selection.llm,
            stand_ins=stand_ins,
            stages=tuple(selection.stages),
            decisions=made,
            carried=carried_in,
            fresh_stand_ins=fresh,
            premarked=taken is not None,
        )
        problems = _written_problems(chosen)
        if len(chosen.actions) != count or len(chosen.reasons) != count:
            problems.append(f"the selection must hold one action and reason per unit ({count})")
        else:
            problems.extend(self._record_problems(selection, chosen, taken))
            if not problems and made is None:  # spelled out: written past keep()
                problems.extend(_kept_reason_problems(chosen))
        problems.extend(synthetic_problems(chosen.synthetic, count))
        summarizes = selection._summarizes or made is None  # else none is summarized
        if summarizes and not chosen.synthetic and not problems and _any_summarized(chosen.actions):
            problems.append(
                "units are recorded as summarized but the selection made no message to "
                "stand for them: add the summary with add_synthetic(), or drop() them"
            )
        if unit_scores_problem:
            problems.append(unit_scores_problem)
        replacements = history._replacements
        if replacements.keys() != self.replaced.keys() or any(
            replacements[p][0] is not m for p, m in self.replaced.items()
        ):
            problems.append("the strategy replaced messages of its history; only the host may")
        problems.extend(  # those carried were checked on their visit, for these messages
            stand_ins_problems(
                history,
                chosen.stand_ins if chosen.fresh_stand_ins is None else chosen.fresh_stand_ins,
                chosen.kept,
                self.must_keep,
                self.replaced,
            )
        )
        if chosen.stages and not all(isinstance(s, WindowRecord) for s in chosen.stages):
            problems.append("selection.stages must hold the WindowRecords of the stages run")
        if problems:
            raise self.windower.violation(problems)
        return chosen

    def _record_problems(
        self,
        selection: Selection,
        chosen: _Chosen,
        taken: tuple[_ByUnit[str], _ByUnit[str | None], dict[int, str]] | None,
    ) -> list[str]:
        """What :func:`record_problems` finds in the chosen record. Actions taken over
        from the carried visit mark its stand-ins' units ``replaced``: only this visit's
        own decisions are gone over, and when the record does not agree with the kept
        set, it is read again from the selection, so that the problem named is the
        strategy's."""
        count, carried = len(self.history.units), chosen.carried
        before = (carried.units, carried.kept) if carried is not None else None
        by_unit = chosen.actions if isinstance(chosen.actions, _ByUnit) else None
        own = taken[2] if taken is not None else None
        problems = record_problems(chosen.actions, chosen.kept, count, by_unit, before, own)
        if problems and taken is not None:
            chosen.actions, chosen.reasons = _by_unit(selection, chosen.decisions)
            chosen.premarked = False
            by_unit = chosen.actions if isinstance(chosen.actions, _ByUnit) else None
            problems = record_problems(chosen.actions, chosen.kept, count, by_unit, before)
        return problems

    def untouched(self) -> Window[Any]:
        history = self.history
        output = history.originals

        def decide() -> tuple[Decision, ...]:
            count = len(history.units)
            return decisions_from(
                ["kept"] * count,
                ["everything fits the budget"] * count,
                _no_score,
                history.span,
                history.message_id,
                history.unit_tokens,
            )

        return Window(
            output, self._record(self.tokens_before, False, len(output), (), decide, None)
        )

    def _record(
        self,
        tokens: int,
        engaged: bool,
        size: int,
        notes: tuple[str, ...],
        decide: Any,
        llm: Any,
        decide_runs: Any = None,
    ) -> WindowRecord:
        return WindowRecord(
            strategy=self.strategy.name,
            budget=self.budget,
            counter=self.counter.name,
            tokens_before=self.tokens_before,
            tokens_after=tokens,
            engaged=engaged,
            elapsed_ms=(time.perf_counter() - self.started) * 1000,
            messages_before=len(self.history),
            messages_after=size,
            llm=llm,
            notes=notes,
            _decide=decide,
            _decide_runs=decide_runs,
        )


def _written_problems(chosen: _Chosen) -> list[str]:
    """What a strategy wrote straight into its selection's ``llm``, ``scores`` or
    ``reasons`` (past ``keep()``, which checks them) that the record could not hold:
    found here, naming the strategy, not when the record is read. Costs what the
    strategy wrote (the reasons: only when it spelled them out)."""
    problems = []
    llm = chosen.llm
    if llm is not None and not isinstance(llm, LLMUsage):
        problems.append(
            f"selection.llm is a {type(llm).__name__}, not an LLMUsage (or None): "
            f"record the model calls made with ctxwindow.LLMUsage(...)"
        )
    scores = chosen.scores
    if not set(map(type, scores.values())) <= {float, int}:  # a numpy float: read again
        unit = next((u for u, score in scores.items() if not isinstance(score, Real)), None)
        if unit is not None:
            problems.append(
                f"selection.scores[{unit!r}] is {scores[unit]!r}, not a number: pass "
                f"keep(unit, reason, score=...) a float"
            )
    reasons = chosen.reasons
    if isinstance(reasons, list) and not set(map(type, reasons)) <= {str, type(None)}:
        written = (u for u, r in enumerate(reasons) if r is not None and not isinstance(r, str))
        unit = next(written, None)  # None: str subclasses alone
        if unit is not None:
            problems.append(
                f"selection.reasons[{unit}] is {reasons[unit]!r}, not a string (or None: "
                f"default_reason): use keep(), drop() or summarize()"
            )
    return problems


def _kept_reason_problems(chosen: _Chosen) -> list[str]:
    """A kept unit whose reason was left to ``default_reason`` (written None or empty
    into ``selection.reasons``): that says why a unit was dropped, so the record would
    contradict itself. The kept units are checked to be units by then."""
    reasons = chosen.reasons
    unkept = [unit for unit in chosen.kept if not reasons[unit]]
    if not unkept:
        return []
    unit = min(unkept)
    return [
        f"unit {unit} is kept with no reason of its own (selection.reasons[{unit}] is "
        f"{reasons[unit]!r}; default_reason says why a unit was dropped): keep(unit, reason)"
    ]


def _own_copy(scores: object, count: int) -> tuple[Sequence[float] | None, str | None]:
    """A selection's ``unit_scores`` as the runner keeps them, out of the strategy's
    reach (a numpy array of real numbers copied: microseconds for thousands; any other
    sequence read into a tuple of floats), or what is wrong with them."""
    if scores is None:
        return None, None
    dtype = getattr(scores, "dtype", None)
    copied: Sequence[float]
    if dtype is not None and getattr(scores, "ndim", None) == 1 and dtype.kind in "fiu":
        copied = scores.copy()  # type: ignore[attr-defined]
    else:
        try:
            copied = tuple(map(float, scores))  # type: ignore[call-overload]
        except (TypeError, ValueError) as error:
            return None, f"selection.unit_scores must hold one real number per unit ({error})"
    if len(copied) != count:
        return None, f"selection.unit_scores holds {len(copied)} scores for {count} units"
    return copied, None


def _no_score(_unit: int) -> None:
    return None


class _Earlier(NamedTuple):
    """An earlier visit's decision runs, the units carried from it, and its record's
    counts by action when they were read (None: not read)."""

    runs: tuple[DecisionRun, ...]
    units: int
    tally: dict[str, int] | None


def _decision_runs(
    history: History, chosen: _Chosen, earlier: _Earlier | None = None
) -> tuple[DecisionRun, ...]:
    """The chosen actions and reasons as runs of consecutive units with one of each, in
    time linear in what the strategy decided (the edges of its runs and the units it
    decided one by one) when it did not spell out a list per unit. ``earlier``: the
    runs of a visit whose decisions about the first so many units this one carried
    (see :func:`_earlier_runs`): those that end by then are taken as they are."""
    head: tuple[DecisionRun, ...] = ()
    first = 0
    if earlier is not None:
        head, first = _runs_before(earlier.runs, earlier.units)
    actions, reasons, default = chosen.actions, chosen.reasons, chosen.default_reason
    count = len(history.units)
    if isinstance(actions, _ByUnit) and isinstance(reasons, _ByUnit):
        edges = {first, count}
        for by_unit in (actions, reasons):
            edges.update(
                edge for start, stop, _ in by_unit.runs for edge in (start, stop) if edge > first
            )
            since = _from(by_unit.given, first)
            edges.update(since, map((1).__add__, since))
        bounds = sorted(edges)
        pieces = zip(
            itertools.pairwise(bounds), actions.pieces(bounds), reasons.pieces(bounds), strict=True
        )
    else:
        pieces = zip(
            ((unit, unit + 1) for unit in range(first, count)),
            actions[first:],
            reasons[first:],
            strict=True,
        )
    runs: list[tuple[int, int, str, str]] = []
    if head:  # the newest of the earlier runs goes on if the next has its decision
        last = head[-1]
        runs.append((last.units.start, last.units.stop, last.action, last.reason))
        head = head[:-1]
    for (start, stop), action, given in pieces:  # each piece: one action, one reason
        reason = given or default
        if runs and runs[-1][1] == start and runs[-1][2:] == (action, reason):
            runs[-1] = (runs[-1][0], stop, action, reason)
        else:
            runs.append((start, stop, action, reason))
    return head + tuple(
        DecisionRun(range(start, stop), _positions(history, start, stop), action, reason)  # type: ignore[arg-type]
        for start, stop, action, reason in runs
    )


def _runs_before(runs: tuple[DecisionRun, ...], units: int) -> tuple[tuple[DecisionRun, ...], int]:
    """The runs of an earlier visit's ``runs`` that end by unit ``units``, and where."""
    whole = bisect.bisect_right(runs, units, key=lambda run: run.units.stop)
    return runs[:whole], runs[whole - 1].units.stop if whole else 0


def _carried_tally(
    earlier: _Earlier, tally: dict[str, int], runs: tuple[DecisionRun, ...]
) -> dict[str, int]:
    """The counts by action of ``runs``, which begin with the earlier visit's runs but
    the newest of those that end by the carried units (:func:`_decision_runs`): the
    earlier counts, less its runs from there, plus these runs from there."""
    shared = max(0, len(_runs_before(earlier.runs, earlier.units)[0]) - 1)
    counted = dict(tally)
    for changes in (tally_runs(earlier.runs[shared:], -1), tally_runs(runs[shared:])):
        for action, change in changes.items():
            counted[action] = counted.get(action, 0) + change
    return {action: count for action, count in counted.items() if count}


def _earlier_runs(chosen: _Chosen) -> _Earlier | None:
    """The decision runs of the visit ``chosen`` carried units from, when its record's
    were read and hold for this one's first units: decided as there (the decisions
    made through the selection's methods, not spelled out; every carried stand-in as
    it was), and a reason left to the default meaning the same."""
    carried = chosen.carried
    if carried is None or chosen.decisions is None:
        return None
    outcome = carried.outcome
    record = outcome.record.__dict__
    runs = record.get("_runs")  # read by then: cached
    if runs is None or outcome.chosen.default_reason != chosen.default_reason:
        return None
    return _Earlier(runs, carried.units, record.get("_tally"))


def _as_before(
    stand_ins: dict[int, Message], fresh: dict[int, Message] | None, carried: Carried
) -> bool:
    """Whether every stand-in carried is as it was (checked and counted on its visit,
    for these very messages) and none is new among the carried units."""
    fresh = fresh or {}
    return len(stand_ins) - len(fresh) == len(carried.stand_ins) and all(
        position >= carried.position for position in fresh
    )


def _fresh(stand_ins: dict[int, Message], carried: Carried | None) -> dict[int, Message]:
    """The stand-ins not carried as they were from an earlier visit (all, with none)."""
    if carried is None:
        return stand_ins
    before = carried.stand_ins
    count = len(before)  # carry() put them first, in order: compared as lists at C speed
    if list(itertools.islice(stand_ins, count)) == list(before) and list(
        itertools.islice(stand_ins.values(), count)
    ) == list(before.values()):
        return dict(itertools.islice(stand_ins.items(), count, None))
    position = carried.position
    return {at: m for at, m in stand_ins.items() if at >= position or before.get(at) is not m}


def _mark_replaced(
    history: History, actions: list[str] | _ByUnit[str], stand_ins: Mapping[int, Message]
) -> None:
    """The record says ``replaced`` of each unit one of ``stand_ins`` went into."""
    if not stand_ins:
        return
    units = map(history._unit_of.__getitem__, stand_ins)
    if isinstance(actions, _ByUnit):
        actions.given.update(zip(units, itertools.repeat("replaced")))
    else:
        for unit in units:
            actions[unit] = "replaced"


#: What each must-keep reason is, in BudgetTooSmall's list of what must be kept.
_KINDS = {
    **{reason: role for role, reason in INSTRUCTION.items()},
    PINNED: "pinned",
    NEWEST_USER: "newest user",
    CURRENT_TURN: "the current turn",
    CURRENT_TURN_NO_USER: "the current turn",
    NEWEST_EXCHANGE: "the current turn's newest exchange",
    TASK_STATEMENT: "the task statement",
}


def _kinds_kept(history: History) -> str:
    """The kinds of message ``history`` must keep, in words, each once, in tier order."""
    order = {kind: rank for rank, kind in enumerate(dict.fromkeys(_KINDS.values()))}
    kinds = dict.fromkeys(_KINDS.get(why, why) for why in history.must_keep.values())
    return ", ".join(sorted(kinds, key=lambda kind: order.get(kind, len(order))))


def _gone_runs(turn: range, kept: set[int]) -> list[range]:
    """The current turn's units not kept, as runs of consecutive units, oldest first:
    found from the turn's units or from the kept ones, whichever are fewer, so that a
    long turn (an agent's run from one instruction) costs what its window keeps, and a
    transform's window (every unit of the history) costs the turn."""
    if len(turn) <= len(kept):
        if kept.issuperset(turn):  # the whole turn, at C speed: a transform's window
            return []
        return between(turn, list(filter(kept.__contains__, turn)))
    return between(turn, sorted(_from(kept, turn.start)))


def _turn_note(history: History, chosen: _Chosen, gone: list[range]) -> str:
    """The note on a current turn some of whose units went (``gone``: runs of units):
    how much room the turn had (what the budget leaves after the messages that stay
    before it), what became of those units, and whether its newest exchange stayed."""
    before_turn = sum(
        history.unit_tokens(unit)
        for unit, why in history.must_keep.items()
        if unit not in history.current_turn
        or why not in (CURRENT_TURN, CURRENT_TURN_NO_USER, NEWEST_EXCHANGE)
    )
    summarized = 0  # the gone units read only when some unit is summarized
    actions = chosen.actions
    if isinstance(actions, _ByUnit):
        summarized = actions.count_in(gone, "summarized") if _any_summarized(actions) else 0
    elif "summarized" in actions:
        summarized = sum(actions[unit] == "summarized" for run in gone for unit in run)
    dropped = sum(map(len, gone)) - summarized
    fates = [f"{dropped} of its unit(s) were dropped"] if dropped else []
    if summarized:
        fates.append(
            f"{summarized} summarized"
            if dropped
            else f"{summarized} of its unit(s) were summarized"
        )
    stayed = NEWEST_EXCHANGE in history.must_keep.values()
    return (
        f"the current turn is bigger than the {history.budget - before_turn:,} tokens the "
        f"budget leaves after the messages that stay before it: {' and '.join(fates)} "
        f"(messages {_positions_in_words(history, gone)})"
        + (", its newest exchange stayed" if stayed else "")
    )


def _carried_output(
    history: History, runs: Sequence[tuple[int, int]], chosen: _Chosen
) -> tuple[list[Any], int] | None:
    """The window up to the carried units' last message, as the carried visit laid it
    out, when this one lays it out alike (the same units kept before there), with the
    caller's objects of this visit where they are not that visit's (equal ones: a
    list rebuilt, a message pinned anew)."""
    carried = chosen.carried
    assert carried is not None
    outcome, position = carried.outcome, carried.position
    if not _below_is(chosen.kept, carried.units, len(history.units), carried.kept):
        return None
    originals, earlier = history._originals, outcome.output
    # a Conversation's own list only grows: the very objects the earlier output holds.
    # A caller's list may hold others by now (rebuilt, or the same list given equal
    # copies in place): compared with what the earlier output sent
    grown = outcome.history._originals is originals is history.conversation._originals
    head: list[Any] = []
    stand_ins = outcome.chosen.stand_ins
    for start, run_stop in outcome.layout:
        if start >= position:
            break
        stop = min(run_stop, position)
        size = len(head)
        sent = earlier[size : size + stop - start]
        if not isinstance(sent, list):
            sent = list(sent)
        if size:
            head.extend(sent)
        else:  # one copy, not two: a transform's window is one run
            head = sent
        if grown:
            continue
        # the caller's objects that are not those sent, compared at C speed (none,
        # turn after turn), but where a stand-in (the runner's own) is sent
        others = map(operator.is_not, sent, originals[start:stop])
        for at in itertools.compress(range(start, stop), others):
            if at not in stand_ins:
                head[size + at - start] = originals[at]
    return head, position


def _positions(history: History, start: int, stop: int) -> Sequence[int]:
    """The positions of units ``start`` to ``stop - 1``: a range when they lie end to end."""
    if not history.defects:
        return range(history._starts[start], min(history._stops[stop - 1], len(history)))
    return tuple(position for unit in range(start, stop) for position in history.span(unit))


def _unit_runs(history: History, kept: set[int]) -> list[tuple[int, int]]:
    """The kept units' messages as runs of consecutive positions, in order: the layout
    of a window with no made message, in time linear in the kept units (set operations
    when no defective message lies between units), not in their messages (each run is
    then copied as one slice)."""
    starts, stops, size = history._starts, history._stops, len(history)
    if not history.defects:  # units lie end to end: a run of units is a run of messages
        count = len(history.units)
        if len(kept) == count:  # every unit (checked to be units): a transform's window
            return [(starts[0], min(stops[count - 1], size))] if count else []
        after = set(map((1).__add__, kept))
        firsts, ends = sorted(kept - after), sorted(after - kept)
        pairs = zip(firsts, ends, strict=True)
        return [(starts[first], min(stops[end - 1], size)) for first, end in pairs]
    runs: list[tuple[int, int]] = []
    run_start = run_stop = -1
    for unit in sorted(kept):
        start = starts[unit]
        if start != run_stop:
            if run_stop > run_start:
                runs.append((run_start, run_stop))
            run_start = start
        run_stop = min(stops[unit], size)
    if run_stop > run_start:
        runs.append((run_start, run_stop))
    return runs


def _anchored(
    history: History, synthetic: Sequence[tuple[int, Message]]
) -> list[tuple[int, Message]]:
    """Each made message, in window order, with the position of the unit it goes before
    (the history's length: after every unit)."""
    if not synthetic:
        return []
    count, starts, size = len(history.units), history._starts, len(history)
    ordered = sorted(synthetic, key=lambda pair: pair[0])  # stable: their order kept
    return [(starts[before] if before < count else size, message) for before, message in ordered]


def _with_made(
    history: History,
    output: list[Any],
    runs: Sequence[tuple[int, int]],
    made: Sequence[tuple[int, Message]],
) -> list[Any]:
    """The window with each made message where it goes (as a dict when the caller's
    messages are not ctxwindow Messages)."""
    wants_dicts = len(history) == 0 or not isinstance(history.original(0), Message)
    window: list[Any] = []
    taken = run = before = 0  # output items placed; runs passed; their messages
    for at, message in made:
        while run < len(runs) and runs[run][1] <= at:
            before += runs[run][1] - runs[run][0]
            run += 1
        offset = before + (max(0, at - runs[run][0]) if run < len(runs) else 0)
        window.extend(output[taken:offset])
        window.append(message.to_dict() if wants_dicts else message)
        taken = offset
    window.extend(output[taken:])
    return window


def _run_output(
    history: History,
    runs: list[tuple[int, int]],
    replacements: Mapping[int, Message],
    stand_ins: Mapping[int, Message],
) -> list[Any]:
    """The caller's own messages of each run, in order (a slice per run of a list),
    with what is sent instead of a message in its place."""
    originals = history._originals
    if isinstance(originals, (list, tuple)):
        output = [message for start, stop in runs for message in originals[start:stop]]
    else:
        output = [originals[position] for start, stop in runs for position in range(start, stop)]
    changed = sorted(stand_ins.keys() | replacements.keys())
    if changed:
        offset, index = 0, 0
        for start, stop in runs:
            while index < len(changed) and changed[index] < stop:
                position = changed[index]
                if position >= start:
                    output[offset + position - start] = _sent_instead(
                        history, position, replacements, stand_ins
                    )
                index += 1
            offset += stop - start
    return output


def _sent_instead(
    history: History,
    position: int,
    replacements: Mapping[int, Message],
    stand_ins: Mapping[int, Message],
) -> Any:
    """What the window sends in place of message ``position``, in the caller's kind: a
    Message for a Message, else a dict (of an SDK object's fields, for one).

    The original's fields with the stand-in's content, refusal and audio (a strategy's
    stand-in, or the host's cut copy: what was counted is what is sent), and metadata
    that says what it is and which message it stands for: an app tells every cut or
    made copy apart the same way."""
    original = history.original(position)
    made = stand_ins[position] if position in stand_ins else replacements[position]
    metadata = {**made.metadata, "stands_in_for": position}
    if isinstance(original, Message):
        return dataclasses.replace(made, metadata=metadata)
    sent = {**fields_of(original, position), "content": content_as_sent(made), "metadata": metadata}
    for key, value in (("refusal", made.refusal), ("audio", made.audio)):
        if value is not None:
            sent[key] = {"id": value} if key == "audio" else value
        elif sent.get(key) is not None:  # the stand-in goes without it: so does what is sent
            del sent[key]
    return sent


def _answers(result: Message) -> str:
    """What a tool result answers, in words: its call's id, or a legacy function
    result's function (it has no call id)."""
    if result.role == "function":
        return f"function {result.name!r}"
    return f"call {result.tool_call_id!r}"


def _problem(history: History, defect: Defect) -> str:
    """What is wrong with a defective run, in words: a tool result that repeats one the
    exchange before it already holds (a retried step appended twice) is said to be
    that, not a result without its call."""
    message = history.messages[defect.start]
    if defect.stop - defect.start != 1 or message.role != "tool":
        return defect.problem
    before = defect.start - 1  # past the results repeated before this one
    while before >= 0 and history.unit_of(before) is None:
        if history.messages[before].tool_call_id is None:
            return defect.problem
        before -= 1
    unit = history.unit_of(before) if before >= 0 else None
    if unit is None:
        return defect.problem
    span = history.span(unit)
    if message.tool_call_id not in {call.id for call in history.messages[span.start].tool_calls}:
        return defect.problem
    return (
        f"tool result for call {message.tool_call_id!r} repeats one the exchange before it "
        f"(messages {span.start}-{span.stop - 1}) already holds: a call is answered once"
    )


def _positions_in_words(history: History, units: Sequence[range]) -> str:
    """The messages of ``units`` (runs of units, ascending) as runs: ``2-3, 6``. With
    no defective message the units of a run lie end to end: its messages are read from
    its first and last unit, not unit by unit (thousands, in a long agent turn)."""
    runs: list[list[int]] = []
    for run in units:
        if history.defects:
            spans: Iterable[range] = map(history.span, run)
        else:
            spans = (range(history.span(run[0]).start, history.span(run[-1]).stop),)
        for span in spans:
            if runs and runs[-1][1] == span.start - 1:
                runs[-1][1] = span.stop - 1
            else:
                runs.append([span.start, span.stop - 1])
    return ", ".join(f"{start}-{stop}" if stop > start else f"{start}" for start, stop in runs)


def _filled(sizes: Mapping[int, int], floors: Mapping[int, int], level: int) -> int:
    """What items cost cut to ``level``: each at most its size, at least its floor."""
    return sum(min(size, max(level, floors[key])) for key, size in sizes.items())


def _rung_below(tokens: int) -> int:
    """The greatest ``2 ** (k / 4)`` (``k`` an integer) at most ``tokens``, rounded down
    (``tokens`` below 1: itself): the size a held turn's older results are cut to. The
    room they share shrinks by a round every request; cut to the ladder below it, they
    keep one size (their text, which a provider's prompt cache of the request keys on,
    the same) until the room passes the next step down, about 16% lower."""
    if tokens < 1:
        return tokens
    step = math.floor(4 * math.log2(tokens))
    size = int(2 ** (step / 4))
    while size > tokens:  # a float a hair high at an exact power: the rung under it
        step -= 1
        size = int(2 ** (step / 4))
    return size


def _water_level(sizes: Mapping[int, int], floors: Mapping[int, int], room: int) -> int:
    """The greatest size items above it are cut to (none below its floor) for them to
    fit ``room``; 0 when even their floors do not."""
    low, high = 0, max(sizes.values(), default=0)
    while low < high:  # the cost only grows with the level
        middle = (low + high + 1) // 2
        if _filled(sizes, floors, middle) <= room:
            low = middle
        else:
            high = middle - 1
    return low


def _cut_to(message: Message, keep: int, tail: bool) -> Message:
    """``message`` with ``keep`` characters of its text and a marker saying how many
    went (with ``tail``: head and tail, a third of what is kept from the end); its other
    parts (images) stay."""
    text = message.text
    others: tuple[ContentPart, ...] = ()
    if isinstance(message.content, tuple):
        others = tuple(part for part in message.content if part.text is None)
    removed = len(text) - keep
    if tail:
        end = keep // 3
        marker = TOOL_CUT_MARKER.format(removed=removed)
        marked = text[: keep - end] + marker + (text[len(text) - end :] if end else "")
    else:
        marked = text[:keep] + TRUNCATION_MARKER.format(removed=removed)
    content: Any = (ContentPart("text", marked), *others) if others else marked
    metadata = {**message.metadata, "truncated": True}
    return dataclasses.replace(message, content=content, metadata=metadata)


def _truncate(
    message: Message, room: int, count: Callable[[Message], int], tail: bool = False
) -> Message | None:
    """The longest head of the message's text (with ``tail``: head and tail, a third of
    what is kept from the end), with a marker, that costs <= ``room``."""
    low, high = 0, len(message.text)
    if count(_cut_to(message, 0, tail)) > room:
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if count(_cut_to(message, middle, tail)) <= room:
            low = middle
        else:
            high = middle - 1
    return _cut_to(message, low, tail)


def _messages_span(start: int, stop: int) -> str:
    """Positions ``start`` to ``stop`` (excluded) as a note names them: "message 8", or
    "messages 6-7"."""
    if stop - start == 1:
        return f"message {start}"
    return f"messages {start}-{stop - 1}"
