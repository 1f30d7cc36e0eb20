"""What a strategy returns: which units it keeps, drops or summarizes, and why."""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, overload

from ctxwindow._messages import Message
from ctxwindow.errors import InvalidSelection

if TYPE_CHECKING:
    from ctxwindow._history import History

DROPPED_BY_DEFAULT = "not chosen by the strategy"

#: A decision about a range of units at once: (start, stop, action, reason).
Run = tuple[int, int, str, "str | None"]
#: What a selection decided, as it decided it: by unit, and the runs of units.
Decisions = tuple[dict[int, tuple[str, "str | None"]], tuple[Run, ...]]


def in_range(units: Collection[int], run: range) -> list[int]:
    """The units of ``units`` within ``run`` (step 1), in time linear in the smaller of
    the two: a run of 100,000 units against a few decisions, or the reverse."""
    if len(run) < len(units):
        return [unit for unit in run if unit in units]
    return [unit for unit in units if run.start <= unit < run.stop]


#: A decision without a reason: the record could not say why (a drop without one gets
#: the selection's ``default_reason``; a unit kept needs its own).
_NO_REASON = (
    "{what} {action} without a reason: give a non-empty string saying why (the record "
    'shows it), such as "recent" or "relevant to the query"'
)


_LOCKED = (
    "{what}: decided already, carried from an earlier visit by carry(); carry fewer "
    "units to decide it again"
)
#: The types drop_each() records at C speed: a unit, a reason (None: the default's).
_INT = {int}
_REASON_TYPES = {str, type(None)}


class UnitScores(Protocol):
    """One real number per unit, by unit: a list of floats, a numpy array."""

    def __len__(self) -> int: ...

    def __getitem__(self, unit: Any, /) -> Any: ...


class Outcome(NamedTuple):
    """What the runner made of a selection it finished (checked, laid out, recorded):
    what a later visit's :meth:`Selection.carry` takes over instead of doing again."""

    history: History
    #: The runner's checked copy of the selection: its ``decisions`` as the strategy
    #: made them (by unit, and the runs), ``kept``, ``stand_ins``, ``scores`` and
    #: ``default_reason``.
    chosen: Any
    #: The positions the host cut (the current turn's), whose window items are its own.
    cut: Collection[int]
    #: The window's messages, and the runs of positions they were laid out from.
    output: Sequence[Any]
    layout: Sequence[tuple[int, int]]
    #: The record: its decision runs are taken over when read by the next visit.
    record: Any


class Carried(NamedTuple):
    """A selection's units taken over from an earlier visit's (see :meth:`Selection.carry`):
    the first ``units`` units, messages before ``position``."""

    outcome: Outcome
    units: int
    position: int
    #: The units of those kept, and the stand-ins they hold (by position, in the
    #: order they were given: the earlier visit's own, read only).
    kept: set[int]
    stand_ins: Mapping[int, Message]
    #: How many of the selection's decisions by unit are carried: they come first,
    #: this visit's own after them.
    decided: int


class Selection:
    """A strategy's decisions on one visit: which units it keeps, and why.

    Starts with the must-keep units kept and every other unit dropped; the strategy
    keeps, drops or summarizes units and may add synthetic messages (a summary).
    A unit that is not one of the history's raises InvalidSelection.
    """

    def __init__(self, history: History) -> None:
        count = len(history.units)
        self.history = history
        self._count = count
        #: The decisions made, by unit, until ``actions`` or ``reasons`` is first read:
        #: a visit that only keeps, drops and summarizes costs what it decides, not
        #: what the history holds (every unit not here is dropped, with no reason).
        self._decided: dict[int, tuple[str, str | None]] | None = {}
        #: ``_decided`` while keep() may write it inline (no unit carried, nothing spelled out).
        self._open: dict[int, tuple[str, str | None]] | None = self._decided
        #: Decisions about a whole range of units at once (``summarize(range(...))``),
        #: oldest first, as (start, stop, action, reason). A unit's own decision in
        #: ``_decided`` is always newer than any run that covers it.
        self._runs: list[Run] = []
        self._actions: list[str] = []
        self._reasons: list[str | None] = []
        #: The reason of every unit given none of its own (None in ``reasons``).
        self.default_reason = DROPPED_BY_DEFAULT
        self.scores: dict[int, float] = {}
        #: One score per unit, for the record of the units given none in ``scores`` (a
        #: sequence, such as a numpy array, read only when the record's decisions are;
        #: NaN or infinity: no score, as for a unit in neither): a strategy that scores every unit
        #: records them without a dict of thousands of entries on every visit.
        self.unit_scores: UnitScores | None = None
        self.kept: set[int] = set()
        self.synthetic: list[tuple[int, Message]] = []
        #: Messages sent in place of the history's own, by position (see :meth:`replace`).
        self.stand_ins: dict[int, Message] = {}
        self.llm: Any = None
        self.notes: list[str] = []
        #: The records of the strategies a composed strategy ran, in order (a pipeline's).
        self.stages: list[Any] = []
        #: Whether summarize() was called: only then may a unit be summarized without
        #: the lists spelled out (the runner then looks for the summary standing for it).
        self._summarizes = False
        #: Units below this were carried from an earlier visit: decided, not to change.
        self._locked = 0
        self._carried: Carried | None = None
        #: Set by the runner once it has finished a visit with this selection.
        self._outcome: Outcome | None = None
        for unit, reason in history.must_keep.items():
            self.keep(unit, reason)

    @property
    def actions(self) -> list[str]:
        """Each unit's action, by unit: ``kept``, ``dropped`` (the start) or ``summarized``."""
        if self._decided is not None:
            self._spell_out()
        return self._actions

    @actions.setter
    def actions(self, actions: list[str]) -> None:
        if self._decided is not None:
            self._spell_out()  # first, so that the reasons stay
        self._actions = actions

    @property
    def reasons(self) -> list[str | None]:
        """Each unit's reason, by unit (None: :attr:`default_reason`)."""
        if self._decided is not None:
            self._spell_out()
        return self._reasons

    @reasons.setter
    def reasons(self, reasons: list[str | None]) -> None:
        if self._decided is not None:
            self._spell_out()  # first, so that the actions stay
        self._reasons = reasons

    def _spell_out(self) -> None:
        """The decisions as one list of actions and one of reasons (kept from then on)."""
        decided, self._decided = self._decided or {}, None
        self._open = None
        runs, self._runs = self._runs, []
        actions: list[str] = ["dropped"] * self._count
        reasons: list[str | None] = [None] * self._count
        for start, stop, action, reason in runs:
            actions[start:stop] = [action] * (stop - start)
            reasons[start:stop] = [reason] * (stop - start)
        for unit, (action, reason) in decided.items():
            actions[unit] = action
            reasons[unit] = reason
        self._actions, self._reasons = actions, reasons

    def _decisions(self) -> Decisions | None:
        """The decisions made so far: by unit (a copy), and the runs of units decided at
        once, oldest first (a unit's own decision is newer than the runs covering it;
        a unit in neither is dropped with no reason). None once ``actions`` or
        ``reasons`` has been read: then those lists hold everything."""
        if self._decided is None:
            return None
        return dict(self._decided), tuple(self._runs)

    def carry(self, previous: Selection, units: int) -> int:
        """Decide the first ``units`` units as ``previous`` decided them, and say how many
        that was: the rest (from that unit on) are this visit's to decide.

        For a strategy whose decisions about old units stay the same from turn to turn
        (clearing old tool outputs): ``previous`` is the selection it returned on an
        earlier visit of the same conversation, and the runner checks and lays out only
        what changed, so a turn costs what is new rather than the whole history.
        Carried: each unit's action and reason (a reason left to the default takes this
        selection's ``default_reason``), its score, and the stand-ins of those units;
        they cannot be decided again on this visit. Fewer units are carried (0: decide
        everything) where the two visits differ: from the first unit whose must-keep
        status or reason changed, the newest unit ``previous`` saw (it may have grown),
        the messages the host cut, and, for a list the runner read as a branch of the
        one ``previous`` saw (a message near its end changed), the unit where the two
        part; none when the messages are not the very ones read before, or when
        ``previous`` was not finished by the runner, was counted by another counter,
        made messages (a summary) or gave ``unit_scores``. Call it first, before any
        other decision.
        """
        if not isinstance(previous, Selection):
            raise InvalidSelection(
                f"carry() takes the Selection of an earlier visit, got {type(previous).__name__}"
            )
        if type(units) is not int or units < 0:
            raise InvalidSelection(f"carry(units={units!r}): give a whole number of units >= 0")
        must_keep, decided = self.history.must_keep, self._decided
        fresh = (  # as history.selection() made it
            decided is not None
            and len(decided) == len(must_keep) == len(self.kept)
            and all(decided.get(unit) == ("kept", why) for unit, why in must_keep.items())
            and not (self._runs or self.stand_ins or self.synthetic or self._carried)
        )
        if not fresh:
            raise InvalidSelection("carry() comes first, before the selection decides anything")
        found = _carriable(previous, self.history, units)
        if found is None:
            return 0
        outcome, count, position = found
        decided = self._decided
        assert decided is not None
        own = {unit: made for unit, made in decided.items() if unit >= count}
        decided.clear()
        chosen = outcome.chosen
        earlier, runs = chosen.decisions
        below = list(map(count.__gt__, earlier))  # at C speed: thousands of units
        carried = itertools.compress(earlier, below)
        decided.update(zip(carried, itertools.compress(earlier.values(), below), strict=True))
        taken = len(decided)
        decided.update(own)
        self._runs = [
            (start, min(stop, count), action, reason)
            for start, stop, action, reason in runs
            if start < count
        ]
        old = outcome.history
        kept = _below(chosen.kept, count, len(old.units))
        self.kept = kept | self.kept
        stand_ins = chosen.stand_ins
        if reaches(stand_ins, position, len(old)):
            stand_ins = {at: m for at, m in stand_ins.items() if at < position}
        self.stand_ins.update(stand_ins)  # empty before: these come first
        self.scores.update((unit, s) for unit, s in chosen.scores.items() if unit < count)
        self._locked, self._open = count, None
        self._carried = Carried(outcome, count, position, kept, stand_ins, taken)
        return count

    def keep(self, unit: int | range, reason: str, score: float | None = None) -> None:
        """Keep ``unit`` in the window, saying why (a non-empty string: the record shows
        it). A ``range`` of units keeps each of them at the cost of one call (with no
        score)."""
        if type(unit) is range:
            self._decide_run(unit, "kept", reason, score)
            self.kept.update(unit)
            return
        decided = self._open
        if (  # the common case, as _decide records it, inline: a strategy keeps each unit
            decided is not None
            and type(unit) is int
            and 0 <= unit < self._count
            and type(reason) is str
            and reason
            and (score is None or (type(score) is float and -math.inf < score < math.inf))
        ):
            decided[unit] = ("kept", reason)
            if score is not None:
                self.scores[unit] = score
            self.kept.add(unit)
            return
        self.kept.add(self._decide(unit, "kept", reason, score))

    @overload
    def drop(self, unit: int, reason: str | None, score: float | None = None) -> None: ...
    @overload
    def drop(self, unit: range, reason: str, score: None = None) -> None: ...
    def drop(self, unit: int | range, reason: str | None, score: float | None = None) -> None:
        """Leave ``unit`` (or each unit of a ``range``) out of the window, saying why
        (for one unit, None: :attr:`default_reason` says it; an empty string is an
        error)."""
        if type(unit) is range:
            self._decide_run(unit, "dropped", reason, score)
            self._unkeep(unit)
            return
        decided = self._open
        if (  # the common case, inline, as in keep(): a composed strategy drops each unit
            decided is not None
            and type(unit) is int
            and 0 <= unit < self._count
            and (reason is None or (type(reason) is str and reason))
            and score is None
        ):
            decided[unit] = ("dropped", reason)
            self.kept.discard(unit)
            return
        self.kept.discard(self._decide(unit, "dropped", reason, score))

    def drop_each(self, reasons: Mapping[int, str | None]) -> None:
        """Leave out each unit of ``reasons`` with its own reason, as ``drop(unit,
        reason)`` would (None too), in one call: a composed strategy that
        gives thousands of units reasons of their own on every visit (a pipeline saying
        what each stage did to each) costs no Python call per unit."""
        units, given = list(reasons), list(reasons.values())
        decided = self._open
        if not units:
            return
        if decided is None or not self._plain_drops(units, given):
            for unit, reason in zip(units, given, strict=True):  # each checked, or named
                self.drop(unit, reason)
            return
        dropped = zip(itertools.repeat("dropped"), given, strict=False)
        decided.update(zip(units, dropped, strict=True))
        self.kept.difference_update(units)

    def _plain_drops(self, units: list[int], reasons: list[str | None]) -> bool:
        """Whether drop_each() may record these at C speed: units that are ints of this
        history, reasons that are non-empty strings or None (anything else goes through
        drop(), which says what is wrong)."""
        return (
            set(map(type, units)) <= _INT
            and min(units) >= 0
            and max(units) < self._count
            and set(map(type, reasons)) <= _REASON_TYPES
            and "" not in reasons
        )

    def summarize(self, unit: int | range, reason: str) -> None:
        """Record that ``unit`` (or each unit of a ``range``) is in a summary the
        strategy adds. A range costs one call, not one per unit: a rolling summary
        stands for nearly the whole history, every turn."""
        self._summarizes = True
        if type(unit) is range:
            self._decide_run(unit, "summarized", reason, None)
            self._unkeep(unit)
            return
        self.kept.discard(self._decide(unit, "summarized", reason, None))

    def replace(self, position: int, message: Message, reason: str) -> None:
        """Keep the unit of message ``position`` with ``message`` sent in its place: a
        shorter stand-in, such as a cleared tool output, that keeps the unit whole.

        The host checks that it is marked ``metadata.synthetic`` and keeps the original's
        role, ``tool_call_id`` and tool calls, so a tool exchange stays valid; the record
        says ``replaced``. Must-keep messages cannot be replaced.
        """
        if not isinstance(message, Message):
            raise InvalidSelection(
                f"replace() takes a ctxwindow.Message, got {type(message).__name__}"
            )
        history = self.history
        valid = type(position) is int and 0 <= position < len(history)
        unit = history.unit_of(position) if valid else None
        if unit is None:
            raise InvalidSelection(
                f"replace({position!r}): not the position of a message in one of the "
                f"history's units (0 to {len(history) - 1}, defective messages excluded)"
            )
        if unit < self._locked:
            raise InvalidSelection(_LOCKED.format(what=f"message {position}"))
        self.stand_ins[position] = message
        self.keep(unit, reason)

    def add_synthetic(self, message: Message, before_unit: int) -> None:
        """Insert a message the strategy made (``metadata.synthetic`` must be true)
        before unit ``before_unit`` (the number of units: at the end)."""
        if not isinstance(message, Message):
            raise InvalidSelection(
                f"add_synthetic() takes a ctxwindow.Message, got {type(message).__name__}"
            )
        if type(before_unit) is int and 0 <= before_unit < self._locked:
            raise InvalidSelection(_LOCKED.format(what=f"a made message before unit {before_unit}"))
        if type(before_unit) is not int or not 0 <= before_unit <= self._count:
            raise InvalidSelection(
                f"add_synthetic(before_unit={before_unit!r}): units are numbered "
                f"0 to {self._count - 1}, and {self._count} puts it at the end"
            )
        self.synthetic.append((before_unit, message))

    def _decide(self, unit: int, action: str, reason: str | None, score: float | None) -> int:
        """Record the decision; the unit's index (checked) for the kept set."""
        if type(unit) is not int or not 0 <= unit < self._count:
            unit = self._unit_index(unit)
        if unit < self._locked:
            raise InvalidSelection(_LOCKED.format(what=f"unit {unit}"))
        if reason is not None and not isinstance(reason, str):
            raise InvalidSelection(
                f"the reason for unit {unit} must be a string, got {type(reason).__name__}"
            )
        if reason == "" or (reason is None and action == "kept"):
            raise InvalidSelection(_NO_REASON.format(what=f"unit {unit}", action=action))
        decided = self._decided
        if decided is not None:
            decided[unit] = (action, reason)
        else:
            self._actions[unit] = action
            self._reasons[unit] = reason
        if score is not None:
            try:
                number = float(score)
            except (TypeError, ValueError):
                number = math.nan
            if not math.isfinite(number):  # NaN and infinity: no JSON record could hold them
                raise InvalidSelection(
                    f"the score for unit {unit} must be a finite number, got {score!r}"
                )
            self.scores[unit] = number
        return unit

    def _decide_run(
        self, units: range, action: str, reason: str | None, score: float | None
    ) -> None:
        """Record one decision for every unit of ``units``, in time linear in the
        smaller of the range and the decisions made so far (:func:`in_range`)."""
        count = self._count
        if units.step != 1 or not 0 <= units.start <= count or not 0 <= units.stop <= count:
            method = {"kept": "keep", "dropped": "drop"}.get(action, "summarize")
            raise InvalidSelection(
                f"{method}({units!r}): a range of units must step by 1 within 0 to {count} "
                f"(units are numbered 0 to {count - 1})"
            )
        if score is not None:
            raise InvalidSelection("a score is given per unit, not for a range of units")
        if not isinstance(reason, str):
            raise InvalidSelection(
                f"the reason for units {units.start}-{units.stop - 1} must be a string, "
                f"got {type(reason).__name__}"
            )
        if not reason:
            what = f"units {units.start}-{units.stop - 1}"
            raise InvalidSelection(_NO_REASON.format(what=what, action=action))
        start, stop = units.start, units.stop
        if start >= stop:
            return
        if start < self._locked:
            raise InvalidSelection(_LOCKED.format(what=f"units {start}-{stop - 1}"))
        decided = self._decided
        if decided is None:
            self._actions[start:stop] = [action] * (stop - start)
            self._reasons[start:stop] = [reason] * (stop - start)
            return
        if stop - start == 1:  # a run of one is that unit's own decision, not a run
            decided[start] = (action, reason)
            return
        for unit in in_range(decided, units):  # the run is newer: their own decisions go
            del decided[unit]
        self._runs.append((start, stop, action, reason))

    def _unkeep(self, units: range) -> None:
        """Take ``units`` out of the kept set."""
        self.kept.difference_update(in_range(self.kept, units))

    def _unit_index(self, unit: object) -> int:
        """``unit`` as an index into the units (an int subclass, numpy's ints), or raise."""
        try:
            index = operator.index(unit)  # type: ignore[arg-type]
        except TypeError:
            index = None
        if index is None or isinstance(unit, bool) or not 0 <= index < self._count:
            raise InvalidSelection(
                f"unit {unit!r} is not a unit of this history: units are numbered "
                f"0 to {self._count - 1}"
            )
        return index

    def reason(self, unit: int) -> str:
        decided = self._decided
        if decided is None:
            return self._reasons[unit] or self.default_reason
        if not -self._count <= unit < self._count:
            raise IndexError(unit)
        unit %= self._count
        given = decided.get(unit)
        if given is None:
            given = next((run[2:] for run in reversed(self._runs) if run[0] <= unit < run[1]), None)
        return (given[1] if given else None) or self.default_reason


def _carriable(
    previous: Selection, history: History, units: int
) -> tuple[Outcome, int, int] | None:
    """The outcome of ``previous`` and how many of its units (and messages) ``history``
    can take over, or None (see :meth:`Selection.carry`)."""
    outcome = previous._outcome
    if outcome is None or previous.synthetic or previous.unit_scores is not None:
        return None
    if outcome.chosen.decisions is None:  # spelled out: what it decided is not known
        return None
    old = outcome.history
    if old.counter is not history.counter or old.defects or history.defects:
        return None
    count = min(units, len(old.units) - 1, len(history.units))
    branch = history.conversation.branched_from
    if branch is not None and branch.parent is old.conversation:
        # a list read as a branch of the one ``previous`` saw: a message near its end
        # changed (a result cut anew, a reply edited), and the two share the units before
        count = min(count, branch.units)
    for position in itertools.chain(outcome.cut, history._replacements):  # the host's cuts
        unit = history.unit_of(position)
        count = min(count, unit if unit is not None else 0)
    before, now = old.must_keep, history.must_keep
    for unit in before.keys() | now.keys():
        if unit < count and before.get(unit) != now.get(unit):
            count = unit
    if count <= 0:
        return None
    position = old.span(count - 1).stop
    if history.span(count - 1) != old.span(count - 1) or not _same_messages(old, history, position):
        return None
    return outcome, count, position


def _below(units: set[int], stop: int, count: int) -> set[int]:
    """The units of ``units`` (units of ``count``: checked by the runner) below
    ``stop``, in time linear in the smaller part: a copy less the units from ``stop``
    on when most are below (a transform keeps them all)."""
    if count - stop < stop:
        below = set(units)
        below.difference_update(range(stop, count))
        return below
    return units.intersection(range(stop))


def reaches(keys: Collection[int], start: int, stop: int) -> bool:
    """Whether any of ``keys`` (ints below ``stop``) is ``start`` or more, going over
    the shorter of the two: the few positions an earlier visit saw past what a carried
    visit takes over, not its thousands of stand-ins."""
    if stop - start < len(keys):
        return any(map(keys.__contains__, range(start, stop)))
    return any(map(start.__le__, keys))


def _below_is(units: set[int], stop: int, count: int, before: set[int]) -> bool:
    """Whether the units of ``units`` below ``stop`` are ``before`` (units of ``count``,
    ``before`` all below ``stop``), and ``units`` holds none outside ``0`` to ``count``:
    in time linear in ``before`` and the units from ``stop`` on, at C speed, building no
    copy of a transform's thousands of kept units."""
    newer = in_range(units, range(stop, count))
    return len(units) - len(newer) == len(before) and before.issubset(units)


def _same_messages(old: History, new: History, stop: int) -> bool:
    """Whether the first ``stop`` messages of the two views are the very ones read: the
    same conversation (append-only), a branch of the other taken past ``stop``, or
    else the same objects, compared one by one at C speed."""
    before, now = old.conversation, new.conversation
    if before is now:
        return True
    branch = now.branched_from
    if branch is not None and branch.parent is before and branch.messages >= stop:
        return True
    return all(map(operator.is_, itertools.islice(before._messages, stop), now._messages[:stop]))
