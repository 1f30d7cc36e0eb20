"""clear_tool_outputs: old, large tool results give way to a short note of what was removed.

Agents re-read every tool result on every turn, though most matter only for the turn
that asked for them. Clearing them keeps the conversation's shape (who asked what, which
tool ran) at a fraction of the tokens, before anything has to be dropped or summarized.
"""

from __future__ import annotations

import bisect
import operator
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ctxwindow import BaseStrategy, Branch, Conversation, History, Message, Option, Selection
from ctxwindow.kit import PerConversation

STUB = "[tool output of {tool} ({call_id}) cleared by ctxwindow: {tokens:,} tokens]"
KEPT = "not an old, large tool output"
FITS_AFTER = "among the most recent units that fit once tool outputs were cleared"
DROPPED = "outside the most recent units that fit once tool outputs were cleared"
#: The same, when no output in the window needed clearing (a chat, or small outputs).
FITS = "among the most recent units that fit"
DROPPED_UNCLEARED = "outside the most recent units that fit"
TOO_BIG = (
    "cleared though among the newest keep_recent results: its exchange is bigger than "
    "what the budget leaves once the must-keep messages are in"
)
NO_ROOM_LEFT = (
    "cleared though among the newest keep_recent results: its exchange did not fit whole "
    "in the room the newer units left"
)
#: Clearings are kept for this many counters per conversation (the least recently used
#: are forgotten): a strategy shared by windowers of different counters keeps each's.
COUNTERS_KEPT = 4


@dataclass(frozen=True)
class Clearing:
    """One tool exchange to clear: what stands for its results, and what it saves."""

    unit: int
    stubs: dict[int, Message]  # by position: the stand-ins for the cleared results
    tokens_before: int
    tokens_after: int
    reason: str


class ClearToolOutputs(BaseStrategy):
    """Replaces old, large tool results with a stub saying what was removed.

    A tool result older than the newest ``keep_recent`` results and costing at least
    ``min_tokens`` becomes ``[tool output of <tool> (<call id>) cleared by ctxwindow:
    <n> tokens]``: still a tool message answering the same call, which stays, so the
    exchange remains valid for every provider. A stub is made only where it is cheaper
    than the result. One of the newest results is cleared too when its exchange is
    bigger than the budget leaves: kept whole it could not be. Alone it then drops the
    oldest units if the history still does not fit; as a ``pipeline`` stage before
    others it only clears (see :meth:`transform`) and leaves the fitting to the stages
    after it.
    """

    name = "clear_tool_outputs"
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option(
            "keep_recent",
            int,
            3,
            "The newest this many tool results stay whole (counted in results, newest "
            "first), unless one's exchange is bigger than the budget leaves once the "
            "must-keep messages are in.",
            minimum=0,
        ),
        Option(
            "min_tokens",
            int,
            100,
            "Only results costing at least this many tokens are cleared.",
            minimum=0,
        ),
        Option(
            "when",
            str,
            "over_budget",
            "'over_budget': clear only when the history exceeds the budget; 'always': "
            "also when everything fits (a leaner prompt that changes less from turn to turn).",
            choices=("over_budget", "always"),
        ),
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._memos: PerConversation[_Memo] = PerConversation(_Memo, _Memo.branch)

    def plan(self, history: History) -> list[Clearing]:
        """The exchanges to clear, oldest first: only those the stubs make cheaper."""
        return [clearing for _, clearing, _ in reversed(list(self._planned(history))) if clearing]

    def engages_within_budget(self, history: History) -> bool:
        """With ``when='always'``, clear even though everything fits."""
        return self.options["when"] == "always" and any(c for _, c, _ in self._planned(history))

    def transform(self, history: History) -> Selection:
        """Clear, and keep everything else, even if the window is still over budget.

        What a ``pipeline`` calls when this is not its last stage: the stages after it
        fit the budget, with the cleared history as their input. An agent's turn adds
        an exchange or two to a history of thousands: the exchanges older than the
        newest ``keep_recent`` results were cleared (or not) for good, so the last
        visit's decisions about them are carried (:meth:`Selection.carry`) and only the
        newer ones are decided again.
        """
        selection = history.selection()
        must_keep = history.must_keep
        memo = self._memo_of(history)
        last = memo.last if not history.defects else None
        stable = self._settled(history, memo) if not history.defects else 0
        # carried: units older than the newest results' on both visits (cleared for good)
        first = selection.carry(last.selection, min(last.stable, stable)) if last else 0
        planned = [c for u, c, _ in self._planned(history, first) if c and u not in must_keep]
        planned.reverse()  # oldest first
        _apply(selection, planned, must_keep, KEPT, first)
        cleared = _Cleared.of(last.cleared if last else None, first, planned)
        _note(selection, cleared)
        memo.last = _Transformed(selection, stable, cleared)
        return selection

    def _settled(self, history: History, memo: _Counted) -> int:
        """The unit that holds the oldest of the newest ``keep_recent`` results: how
        the exchanges before it are cleared depends on them alone (their messages, and
        whether they must stay), not on the budget or on what came after."""
        found, count = memo.exchanges(history)
        wanted, seen = self.options["keep_recent"], 0
        for unit in _newest_first(found, count):
            if seen >= wanted:
                return unit + 1
            seen += _results(history, unit)
        return 0 if wanted else len(history.units)

    def choose(self, history: History) -> Selection:
        """The newest units that fit once cleared; the older ones are dropped. Only the
        units that make the window are read, and the plain units between two tool
        exchanges (each a message of its own) are taken a stretch at a time: a turn of
        an agent loop costs the exchanges in the window, not its every unit."""
        selection = history.selection()
        room = history.budget - history.must_keep_tokens
        kept: list[range] = []  # newest first
        clearings: list[Clearing] = []
        memo = self._memo_of(history)
        walk = self._walk(history, memo.exchanges(history) if not history.defects else None)
        for unit, planned, protected in walk:
            if isinstance(unit, range):  # plain units, newest last: as many as fit
                first = history.fitting_start(unit, room)
                if first < unit.stop:
                    kept.append(range(first, unit.stop))
                    room -= history.run_tokens(kept[-1])
                if first > unit.start:
                    selection.default_reason = DROPPED
                    break
                continue
            clearing = planned
            cost = clearing.tokens_after if clearing else history.unit_tokens(unit)
            if cost > room and protected:  # kept whole it would end the window here
                clearing = _with_protected(history, memo, unit, planned, protected) or planned
                cost = clearing.tokens_after if clearing else cost
            if cost > room:
                selection.default_reason = DROPPED
                break
            room -= cost
            if clearing is None:
                kept.append(range(unit, unit + 1))
            else:
                clearings.append(clearing)
        reason = FITS_AFTER if selection.default_reason == DROPPED else KEPT
        if reason == FITS_AFTER and not clearings:  # say no clearing that never happened
            reason, selection.default_reason = FITS, DROPPED_UNCLEARED
        for run in kept:
            selection.keep(run, reason)
        _note_cleared(selection, clearings)
        return selection

    def _walk(
        self, history: History, exchanges: tuple[list[int], int] | None
    ) -> Iterator[tuple[Any, Clearing | None, list[int]]]:
        """What :meth:`choose` takes, newest first and not must-keep: each exchange with
        its clearing (as :meth:`_units` plans it), and the runs of plain units between
        (a range, with None and no results); with ``exchanges`` None (a history with
        defective messages), every unit one at a time."""
        must_keep = history.must_keep
        if exchanges is None:
            for unit, planned, protected in self._units(history):
                if unit not in must_keep:
                    yield unit, planned, protected
            return
        found, count = exchanges
        planned_each = self._units(history, _newest_first(found, count))
        kept_anyway = sorted(must_keep, reverse=True)  # a few
        newest_exchange, newest_kept = count - 1, 0
        top = len(history.units)
        while True:
            exchange = found[newest_exchange] if newest_exchange >= 0 else -1
            kept = kept_anyway[newest_kept] if newest_kept < len(kept_anyway) else -1
            bound = max(exchange, kept)
            if bound < 0:
                break
            if bound + 1 < top:
                yield range(bound + 1, top), None, []
            top = bound
            if bound == kept:
                newest_kept += 1
            if bound == exchange:  # planned in turn, a must-keep one too: its results count
                newest_exchange -= 1
                plan = next(planned_each)
                if bound != kept:
                    yield plan
        if top > 0:
            yield range(0, top), None, []

    def _planned(
        self, history: History, first: int = 0
    ) -> Iterator[tuple[int, Clearing | None, list[int]]]:
        """:meth:`_units` of the tool exchanges alone, newest first down to unit
        ``first`` (the memo's, read once per unit): the plain units between hold no
        result. Of every unit when a message of the history is defective (its units are
        not the memo's to trust)."""
        if history.defects:
            return self._units(history)
        found, count = self._memo_of(history).exchanges(history)
        start = bisect.bisect_left(found, first, 0, count)
        return self._units(history, _newest_first(found, count, start))

    def _units(
        self, history: History, units: Iterable[int] | None = None
    ) -> Iterator[tuple[int, Clearing | None, list[int]]]:
        """Each unit, newest first, with how to clear it (None: as it is). A result is
        cleared when it is older than the newest ``keep_recent`` results (must-keep
        units' included), costs at least ``min_tokens``, and is not must-keep; one of
        the newest is cleared too when its exchange is bigger than the budget leaves
        once the must-keep units are in (kept whole it could not be, and the newest
        units that fit would end before it, with nothing older). Each comes with its
        results the newest ``keep_recent`` protect and this did not clear (for
        :meth:`choose`, which clears them too where the room left is too small).

        A unit's first message is never a tool result (results join the unit of the
        call they answer), so a unit of one message is passed over unread. ``units``:
        those to plan, newest first (every unit by default); a unit left out holds no
        result (a plain unit), or the results counted would not be the newest."""
        keep_recent: int = self.options["keep_recent"]
        min_tokens: int = self.options["min_tokens"]
        memo = self._memo_of(history)
        messages, span_of, must_keep = history.messages, history.span, history.must_keep
        room = history.budget - history.must_keep_tokens  # the most any older unit gets
        seen = 0
        for unit in range(len(history.units) - 1, -1, -1) if units is None else units:
            span = span_of(unit)
            if len(span) == 1:
                yield unit, None, []
                continue
            chosen: list[int] = []
            protected: list[int] = []  # among the newest keep_recent results
            for position in range(span.stop - 1, span.start, -1):
                if messages[position].role != "tool":
                    continue
                seen += 1
                if unit in must_keep or history.tokens(position) < min_tokens:
                    continue
                (protected if seen <= keep_recent else chosen).append(position)
            clearing = memo.clearing(history, unit, sorted(chosen)) if chosen else None
            if protected:
                cost = clearing.tokens_after if clearing else history.unit_tokens(unit)
                if cost > room:  # never kept whole: it would only end the window here
                    wider = _with_protected(history, memo, unit, clearing, protected, TOO_BIG)
                    clearing, protected = wider or clearing, []
            yield unit, clearing, protected

    def _memo_of(self, history: History) -> _Counted:
        return self._memos.of(history.conversation).under(history.counter)


def _with_protected(
    history: History,
    memo: _Counted,
    unit: int,
    clearing: Clearing | None,
    protected: list[int],
    why: str = NO_ROOM_LEFT,
) -> Clearing | None:
    """``clearing`` widened to the ``protected`` results of ``unit``, saying why they
    went (None: no stub saves anything)."""
    cleared = sorted({*(clearing.stubs if clearing else ()), *protected})
    wider = memo.clearing(history, unit, cleared)
    return None if wider is None else replace(wider, reason=f"{wider.reason}; {why}")


class _Memo:
    """A conversation's tool exchanges, and what it cleared under each counter (its
    :class:`_Counted`): a strategy shared by windowers of different counters keeps
    each one's apart, as a visit under one counter may run in the middle of another's."""

    def __init__(self) -> None:
        #: The units of more than one message (tool exchanges), ascending, among the
        #: first ``units_read`` units.
        self.exchange_units: list[int] = []
        self.units_read = 0
        #: By id of the exact counter (a cache's counts are its counter's), the least
        #: recently used first, with the counter: held, its id is not another's.
        self.counted: dict[int, tuple[object, _Counted]] = {}
        self.lock = threading.Lock()

    def under(self, counter: object) -> _Counted:
        """What was cleared under ``counter``: made on first use, the least recently
        used forgotten past ``COUNTERS_KEPT`` (a new counter object per call cannot
        grow the memo)."""
        exact = getattr(counter, "inner", counter)
        with self.lock:
            entry = self.counted.pop(id(exact), None)
            if entry is None:
                entry = (exact, _Counted(self))
            self.counted[id(exact)] = entry  # last: the most recently used
            while len(self.counted) > COUNTERS_KEPT:
                del self.counted[next(iter(self.counted))]
            return entry[1]

    def exchanges(self, history: History) -> tuple[list[int], int]:
        """The history's units of more than one message, ascending, as the memo's list
        and how many of its first entries are this history's: each unit read once (the
        newest again, as a legacy function result joins its call's unit). The list only
        grows, a unit once an exchange being one for good (only the newest unit gains
        a message), so a visit reads its entries without a copy."""
        count = len(history.units)
        with self.lock:
            found = self.exchange_units
            start = max(0, self.units_read - 1)
            if count > start:  # the new units, and the newest read before
                span = history.span
                newest = found[-1] if found else -1
                found.extend(
                    unit for unit in range(start, count) if unit > newest and len(span(unit)) > 1
                )
                self.units_read = max(self.units_read, count)
            return found, bisect.bisect_left(found, count)

    def branch(self, conversation: Conversation, origin: Branch) -> _Memo:
        """A branch's memo: the clearings of the exchanges the two conversations share."""
        twin = _Memo()
        with self.lock:
            # shared: an entry holds the messages it was made from, so each conversation
            # takes only its own (a turn's branch would copy every clearing made); the
            # last transform too, as Selection.carry checks which units the two share
            twin.counted = {
                key: (counter, _Counted(twin, counted.made, counted.last))
                for key, (counter, counted) in self.counted.items()
            }
            units = min(origin.units, self.units_read)
            twin.exchange_units = self.exchange_units[
                : bisect.bisect_left(self.exchange_units, units)
            ]
            twin.units_read = units
        return twin


class _Counted:
    """A conversation's clearings under one counter, made once per exchange (a chat
    loop clears the same old results on every turn), and its last transform: the
    tokens a stub saves are that counter's. An entry holds the messages it was made
    from, and is made again if they are not the messages of the view (a stand-in, a
    message read again)."""

    def __init__(
        self,
        memo: _Memo,
        made: dict[tuple[int, ...], tuple[tuple[Message, ...], Clearing | None]] | None = None,
        last: _Transformed | None = None,
    ) -> None:
        self.memo = memo
        self.made = {} if made is None else made
        #: The last transform of the conversation, for the next to carry from.
        self.last = last

    def exchanges(self, history: History) -> tuple[list[int], int]:
        """The memo's :meth:`_Memo.exchanges`: the same under every counter."""
        return self.memo.exchanges(history)

    def clearing(self, history: History, unit: int, cleared: list[int]) -> Clearing | None:
        """How to clear ``cleared`` (results of ``unit``), made once for its messages."""
        span = history.span(unit)
        key = (span.start, span.stop, *cleared)
        messages = tuple(history.messages[position] for position in span)
        lock = self.memo.lock
        with lock:
            found = self.made.get(key)
        if found is not None and all(map(operator.is_, found[0], messages)):
            return found[1]
        clearing = _clearing(history, unit, cleared)
        with lock:
            self.made[key] = (messages, clearing)
        return clearing


#: The keys a runner writes on a message it sent cut (its marks, not the message's): a
#: stage's input may hold such a copy (an earlier stage's host cut it), and its stub,
#: which stands for the message, says only that it was cleared.
_RUNNER_MARKS = ("truncated", "stands_in_for")


def _own_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` less the runner's marks (:data:`_RUNNER_MARKS`)."""
    return {key: value for key, value in metadata.items() if key not in _RUNNER_MARKS}


def _newest_first(found: list[int], count: int, start: int = 0) -> Iterator[int]:
    return (found[index] for index in range(count - 1, start - 1, -1))


def _results(history: History, unit: int) -> int:
    """How many tool results ``unit`` holds."""
    messages = history.messages
    return sum(messages[position].role == "tool" for position in history.span(unit))


def _apply(
    selection: Selection,
    done: list[Clearing],
    apart: Iterable[int],
    kept_reason: str,
    first: int = 0,
) -> None:
    """Keep every unit from ``first`` on, each of ``done`` (oldest first) cleared, but
    those ``apart`` (the must-keep units, the host's to keep). The units between those
    apart go in runs, a call per run, and a cleared unit's own decision then says why
    it was cleared (a unit's decision is newer than the run over it): a few runs, not
    one per stretch between two cleared exchanges."""
    start = first
    for unit in sorted(apart):
        if unit < first:
            continue
        if unit > start:
            selection.keep(range(start, unit), kept_reason)
        start = unit + 1
    if start < len(selection.history.units):
        selection.keep(range(start, len(selection.history.units)), kept_reason)
    _stand_in(selection, done)


def _stand_in(selection: Selection, done: list[Clearing]) -> None:
    """Stand each clearing's stubs in."""
    for clearing in done:
        for position, stub in clearing.stubs.items():
            selection.replace(position, stub, clearing.reason)


def _note_cleared(selection: Selection, done: list[Clearing]) -> None:
    """Stand each clearing's stubs in, and note what clearing saved."""
    _stand_in(selection, done)
    _note(selection, _Cleared.of(None, 0, done))


def _note(selection: Selection, cleared: _Cleared) -> None:
    """Note what clearing saved, if it cleared anything."""
    if cleared.units:
        selection.notes.append(
            f"cleared the tool output of {len(cleared.units)} exchange(s): "
            f"{cleared.before[-1]:,} -> {cleared.after[-1]:,} tokens"
        )


@dataclass(frozen=True)
class _Cleared:
    """The exchanges a visit cleared, ascending, with running sums of their tokens
    before and after: what a later visit that carries the first so many units sums up
    without going over them again."""

    units: list[int]
    before: list[int]
    after: list[int]

    @classmethod
    def of(cls, carried: _Cleared | None, first: int, done: list[Clearing]) -> _Cleared:
        """Those of ``carried`` before unit ``first``, then ``done`` (oldest first)."""
        kept = bisect.bisect_left(carried.units, first) if carried else 0
        units = carried.units[:kept] if carried else []
        before = carried.before[:kept] if carried else []
        after = carried.after[:kept] if carried else []
        for clearing in done:
            units.append(clearing.unit)
            before.append((before[-1] if before else 0) + clearing.tokens_before)
            after.append((after[-1] if after else 0) + clearing.tokens_after)
        return cls(units, before, after)


@dataclass(frozen=True)
class _Transformed:
    """A conversation's last :meth:`ClearToolOutputs.transform`: its selection, the
    units before ``stable`` (older than the newest ``keep_recent`` results' units,
    cleared for good), and what it cleared."""

    selection: Selection
    stable: int
    cleared: _Cleared


def _clearing(history: History, unit: int, cleared: list[int]) -> Clearing | None:
    """How to clear ``cleared`` (results of ``unit``), or None if it saves nothing."""
    span = history.span(unit)
    call = history.messages[span.start]
    tools = {c.id: c.name for c in call.tool_calls}
    before = history.unit_tokens(unit)
    stubs: dict[int, Message] = {}
    details: dict[int, dict[str, Any]] = {}
    for position in cleared:
        result = history.messages[position]
        call_id = result.tool_call_id or ""
        tool = tools.get(call_id) or result.name or "a tool"
        details[position] = {
            "tool": tool,
            "tool_call_id": call_id,
            "position": position,
            "id": history.message_id(position),
            "tokens": history.tokens(position),
            "characters": len(result.text),
        }
        stub = replace(
            result,
            content=STUB.format(tool=tool, call_id=call_id, tokens=history.tokens(position)),
            metadata={
                **_own_metadata(result.metadata),
                "synthetic": True,
                "cleared_tool_output": details[position],
            },
        )
        if history.counter.count_message(stub) < history.tokens(position):
            stubs[position] = stub
    if not stubs:
        return None
    named = ", ".join(
        f"{d['tool']} ({d['tool_call_id']})" for p, d in details.items() if p in stubs
    )
    after = before - sum(
        history.tokens(p) - history.counter.count_message(stub) for p, stub in stubs.items()
    )
    reason = f"tool output cleared: {named}; {before:,} -> {after:,} tokens"
    return Clearing(unit, stubs, before, after, reason)
