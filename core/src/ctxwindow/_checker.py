"""The contract's checker: what the runner checks of every selection and window,
always on.

It is linear in the window's runs of kept units and the messages a strategy made, not
in the history (nor in the window's messages): cheap enough never to switch off. It
takes what must be kept and the counter from the runner, never from state a strategy
could have changed. (``ctxwindow.testing.check_window`` is the independent oracle the
tests hold strategies and this checker to.)
"""

from __future__ import annotations

import bisect
import operator
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress, repeat
from typing import Any, Protocol

from ctxwindow._history import History
from ctxwindow._messages import Message
from ctxwindow._refs import covers_position
from ctxwindow._selection import _below_is, in_range
from ctxwindow._tokens import TokenCounter


def kept_units_problems(
    history: History,
    kept: set[int],
    runs: Sequence[tuple[int, int]],
    limit: int | None,
    must_keep: Mapping[int, str],
    made: Sequence[tuple[int, Message]] = (),
    counter: TokenCounter | None = None,
) -> tuple[list[str], int]:
    """Problems with a window, and its token count, in time linear in its runs and the
    messages the strategy made, not in its messages.

    The runner lays every window out itself: the kept units whole and in order, as
    ``runs`` of message positions, and each made message (``made``: the position of
    the unit it goes before, or the history's length, and the message, in window
    order) between units. So only what the strategy decided can be wrong: the
    must-keep units, the budget (made messages counted by ``counter``), what a made
    message is, and where it sits against what it says it covers. ``limit`` is the
    budget less the strategy's declared overhead (None for a transform, which may stay
    over it); ``must_keep`` maps the units that must stay to why, as the runner found
    them before the strategy ran."""
    tokens = history.positions_tokens(runs, kept)
    problems = [
        f"unit {unit} ({reason}) must be kept but was dropped"
        for unit, reason in must_keep.items()
        if unit not in kept
    ]
    for _, message in made:
        tokens += counter.count_message(message) if counter is not None else 0
        problems.extend(_made_problems(message))
    problems.extend(_placement_problems(history, runs, made))
    if limit is not None and tokens > limit:
        problems.append(f"window has {tokens} tokens, over the limit of {limit}")
    return problems, tokens


def _placement_problems(
    history: History, runs: Sequence[tuple[int, int]], made: Sequence[tuple[int, Message]]
) -> list[str]:
    """A made message that says what it covers (``metadata.covers``: a list or tuple of
    message ids, or ``#position``, naming at least one message of this history) sits
    where that was: after no kept message newer than what it covers, before none older
    (held to the references found in this history: a rolling summary may name messages
    the caller no longer sends). And none sits after the newest user message (with none,
    in an agent's history, after the current turn's first message) unless it stands for
    the current turn's own older rounds, nor ends the window standing for nothing after
    the turn's last message kept: the request ends with what the user asked and the
    exchanges that answer it."""
    problems: list[str] = []
    if not made:
        return problems
    starts = [start for start, _ in runs]
    turn = _turn_start(history)
    for at, message in made:
        metadata = message.metadata
        span = None
        if "covers" in metadata:  # it says what it stands for: it must, in this history
            span, problem = _covers_span(metadata["covers"], history)
            if problem:
                problems.append(f"a made {message.role} message's metadata.covers {problem}")
                continue
        late = _late_problem(history, runs, turn, at, span)
        if late:
            problems.append(f"a made {message.role} message {late}")
            continue
        if span is None:
            continue  # says nothing of what it stands for: nothing to hold it to
        low, high = span
        index = bisect.bisect_left(starts, at)  # the runs from here on start at or after it
        before = min(runs[index - 1][1], at) - 1 if index else None
        inside = index and runs[index - 1][1] > at  # a run goes on after it
        after = at if inside else (starts[index] if index < len(runs) else None)
        if before is not None and before > high:
            where = f"after message {before}"
        elif after is not None and after < low:
            where = f"before message {after}"
        else:
            continue
        problems.append(
            f"a made message covering messages {low}-{high} sits {where}: a summary "
            f"goes where what it covers was"
        )
    return problems


def _turn_start(history: History) -> tuple[int, str] | None:
    """The current turn's first message, and what it is in words: the newest user
    message, or with none (an agent's history) the first after the instructions."""
    if history.newest_user is not None:
        return history.newest_user, f"the newest user message (message {history.newest_user})"
    turn = history.current_turn
    if not turn:
        return None
    first = history.span(turn.start).start
    return first, f"the current turn's first message (message {first}; no user message)"


def _late_problem(
    history: History,
    runs: Sequence[tuple[int, int]],
    turn: tuple[int, str] | None,
    at: int,
    span: tuple[int, int] | None,
) -> str:
    """Why a made message placed at ``at`` sits too late (empty: it does not): after
    the current turn's start, standing for what is not the turn's own; or after the
    window's last message, which by then is the turn's (what the model answers), when
    it stands for nothing that came after that message (a summary of a dropped final
    reply sits where that was)."""
    if turn is None:
        return ""
    start, where = turn
    if at > start and (span is None or span[0] < start):
        what = (
            "says nothing it covers (metadata.covers)"
            if span is None
            else f"covers messages {span[0]}-{span[1]}"
        )
        return (
            f"sits after {where} and {what}: only a summary of the current turn's own older "
            f"rounds may go after it (place it before unit {history.unit_of(start)})"
        )
    last = runs[-1][1] - 1 if runs else -1
    if at > last >= start and (span is None or span[1] <= last):
        return (
            f"ends the window, after its last message (message {last}, of the current "
            f"turn), and stands for nothing after it: the request ends with what the user "
            f"asked and the exchanges that answer it (place it before unit "
            f"{history.unit_of(last)})"
        )
    return ""


#: How a ``covers`` reference is written, for errors.
_REF_HINT = "a message id or '#position', as history.covers_ref(position) gives"


def _covers_span(covers: object, history: History) -> tuple[tuple[int, int] | None, str]:
    """The first and last position ``covers`` names in ``history``, or why it cannot
    place its message: not a list or tuple of references (a string, a set: no order,
    or nothing to read), a reference of another type, or none found here. A summary
    that names nothing here could sit anywhere, so the check would be no check."""
    if not isinstance(covers, (list, tuple)):
        return None, (
            f"is a {type(covers).__name__}, not a list or tuple of the messages it "
            f"stands for ({_REF_HINT})"
        )
    try:
        span = _SPANS.span(covers, history)
    except _BadRef as bad:
        return None, f"holds {bad.ref!r}, not a reference ({_REF_HINT})"
    if span is None:
        shown = ", ".join(map(repr, covers[:3])) + (", ..." if len(covers) > 3 else "")
        return None, (
            f"names no message of this history ([{shown}]): a summary names the messages "
            f"it stands for ({_REF_HINT}), so that it sits where they were"
        )
    return span, ""


class _BadRef(Exception):
    """A ``covers`` entry that is not a reference (neither a str nor an int)."""

    def __init__(self, ref: object) -> None:
        super().__init__(ref)
        self.ref = ref


class _CoverSpans:
    """The first and last position each recent ``covers`` tuple names, per conversation.

    A summary covers nearly the whole history, so resolving its references is linear in
    the history; a strategy that keeps a summary across turns hands over the same tuple
    each turn, and a conversation only grows, so what a tuple named stays where it was.
    Tuples only (a list may be changed in place), held strongly so that an ``id`` is
    never reused while remembered; the conversation weakly. Thread-safe, bounded."""

    KEPT = 16

    def __init__(self) -> None:
        self._spans: OrderedDict[tuple[int, int], _Held] = OrderedDict()
        self._lock = threading.Lock()

    def span(self, covers: Sequence[object], history: History) -> tuple[int, int] | None:
        """(low, high) of the positions ``covers`` names, or None when none is found."""
        if not isinstance(covers, tuple):
            return _resolved(covers, history)[0]
        conversation = history.conversation
        key = (id(covers), id(conversation))
        with self._lock:
            held = self._spans.get(key)
            if held is not None:
                self._spans.move_to_end(key)
        if held is not None:
            kept, owner, remembered, missing = held
            if kept is covers and owner() is conversation and remembered[1] < len(history):
                if not missing:
                    return remembered
                span, missing = _grown(remembered, missing, history)  # found since?
                self._remember(key, (covers, owner, span, missing))
                return span
        found, missing = self._extended(covers, history)
        if found is not None:
            self._remember(key, (covers, weakref.ref(conversation), found, missing))
        return found

    def _remember(self, key: tuple[int, int], held: _Held) -> None:
        with self._lock:
            self._spans[key] = held
            self._spans.move_to_end(key)
            while len(self._spans) > self.KEPT:
                self._spans.popitem(last=False)

    def _extended(
        self, covers: tuple[object, ...], history: History
    ) -> tuple[tuple[int, int] | None, tuple[object, ...]]:
        """Resolve ``covers``, reading only what it adds to the longest remembered tuple
        of the same conversation it starts with (and what that one named but the view
        it was read in did not hold): a rolling summary's next tuple is the last one
        and the messages folded in since, so a new fold costs what it adds. With the
        references not found (see :func:`_resolved`)."""
        conversation = history.conversation
        with self._lock:
            held = sorted(self._spans.values(), key=_held_length, reverse=True)
        for kept, owner, remembered, missing in held:  # the longest first: one comparison
            if (
                len(kept) <= len(covers)
                and owner() is conversation
                and remembered[1] < len(history)
                and kept[-1:] == covers[len(kept) - 1 : len(kept)]
                and covers[: len(kept)] == kept
            ):
                return _grown(remembered, (*missing, *covers[len(kept) :]), history)
        return _resolved(covers, history)


#: A remembered tuple: itself, its conversation (weakly), the span of the references
#: found, and those not found (a message named but not in that view may be in a later).
_Held = tuple[tuple[object, ...], "weakref.ref[Any]", tuple[int, int], tuple[object, ...]]


def _held_length(held: _Held) -> int:
    return len(held[0])


_SPANS = _CoverSpans()


def _resolved(
    covers: Sequence[object], history: History
) -> tuple[tuple[int, int] | None, tuple[object, ...]]:
    """(low, high) of the positions the references found in ``history`` name (None
    when none is found), and the references not found."""
    positions = list(map(_covered, covers, repeat(history)))
    covered = [p for p in positions if p is not None]
    missing = tuple(ref for ref, p in zip(covers, positions, strict=True) if p is None)
    return ((min(covered), max(covered)) if covered else None), missing


def _grown(
    span: tuple[int, int], refs: Sequence[object], history: History
) -> tuple[tuple[int, int], tuple[object, ...]]:
    """``span`` grown by the positions of ``refs`` found in ``history``, and those not."""
    more, missing = _resolved(refs, history)
    if more is None:
        return span, missing
    return (min(span[0], more[0]), max(span[1], more[1])), missing


def _covered(ref: object, history: History) -> int | None:
    """The position a ``covers`` reference names: ``#position`` (what
    ``history.covers_ref`` gives), a message id, or a position as an int; _BadRef for
    anything else (a bool, a float, None: each read as an id would name nothing)."""
    if type(ref) is int:
        return ref if 0 <= ref < len(history) else None
    if not isinstance(ref, str):
        raise _BadRef(ref)
    position = covers_position(ref)
    if position is not None:
        return position if position < len(history) else None
    return history.position_of_id(str(ref))


def _made_problems(message: Message) -> list[str]:
    """A made message must say it was made, and cannot be half of a tool exchange."""
    problems = []
    if not message.synthetic:
        problems.append("a message not in the input is not marked synthetic")
    if message.role == "tool":
        problems.append(
            "a made message has role 'tool': a tool result cannot be sent without its call"
        )
    if message.tool_calls:
        problems.append(
            "a made message carries tool_calls: a tool call cannot be sent without its results"
        )
    return problems


def stand_in_problems(position: int, original: Message, stand_in: object) -> list[str]:
    """Why ``stand_in`` cannot be sent in place of ``original``: it must say it was made,
    and keep the role, tool_call_id, tool calls and legacy function_call that pair a
    tool exchange, so the unit stays valid with it."""
    if not isinstance(stand_in, Message):
        kind = type(stand_in).__name__
        return [f"the stand-in for message {position} is a {kind}, not a Message"]
    problems = []
    if not stand_in.synthetic:
        problems.append(f"the stand-in for message {position} is not marked synthetic")
    if stand_in.role != original.role:
        problems.append(
            f"the stand-in for message {position} has role {stand_in.role!r}, "
            f"the original {original.role!r}"
        )
    if stand_in.tool_call_id != original.tool_call_id:
        problems.append(
            f"the stand-in for message {position} answers {stand_in.tool_call_id!r}, "
            f"the original {original.tool_call_id!r}"
        )
    # Exactly the same calls, arguments included: a dict input's stand-in is sent as the
    # original's fields with only the content swapped, so only the content may differ.
    if list(stand_in.tool_calls) != list(original.tool_calls):
        problems.append(f"the stand-in for message {position} changes its tool calls")
    if stand_in.name != original.name:
        problems.append(f"the stand-in for message {position} changes its name")
    if stand_in.function_call != original.function_call:
        problems.append(
            f"the stand-in for message {position} changes its legacy function_call: keep "
            f"the original's (dataclasses.replace(original, content=...)), or its "
            f"'function' result goes without its call"
        )
    return problems


def record_problems(
    actions: Sequence[str],
    kept: set[int],
    count: int,
    decided: Decided | None = None,
    carried: tuple[int, set[int]] | None = None,
    own: Mapping[int, str] | None = None,
) -> list[str]:
    """Whether the actions (what the record says) and the kept set (what the window
    holds) agree: the same units kept, and only the strategy's three actions.

    ``decided``: the actions the strategy gave, by unit and by run of units, when every
    other unit is dropped; then the check costs what was decided (a run as one), not the
    length of the history. ``carried``: with ``decided``, the units below ``carried[0]``
    were decided as on an earlier visit (``Selection.carry``), whose checked kept set
    held ``carried[1]`` of them: the decisions about those are not gone over again.
    ``own``: with ``carried``, the units from ``carried[0]`` on decided one by one, when
    ``decided.given`` holds the carried ones as the runner recorded them (``replaced``)."""
    agrees = decided is not None and _agrees(decided, kept, carried, count)
    problems = [] if agrees else _kept_problems(actions, kept, count)
    if problems or decided is None:
        return problems or _listed_problems(actions, kept, count)
    given = decided.given
    for start, stop, action in decided.runs:
        if action == "kept" and not agrees:  # each unit kept, unless decided otherwise since
            stray = [u for u in range(start, stop) if u not in kept and u not in given]
            problems = _unexpected_actions([(u, action) for u in stray[:1]], kept)
        elif action != "kept":
            problems = _unexpected_actions([(start, action)], kept)
        if problems:
            return problems
    return _given_problems(own if own is not None and agrees else given, kept)


def _kept_problems(actions: Sequence[str], kept: set[int], count: int) -> list[str]:
    """A kept unit that is not a unit, or that the record does not say is kept."""
    action_of = actions.__getitem__
    for unit in kept:
        if type(unit) is not int or not 0 <= unit < count:
            return [f"the selection keeps {unit!r}, which is not a unit of its history"]
        if action_of(unit) != "kept":
            return [
                f"unit {unit} is in the window but its record says {actions[unit]!r}; "
                f"use keep(), drop() and summarize(), not the kept set"
            ]
    return []


def _listed_problems(actions: Sequence[str], kept: set[int], count: int) -> list[str]:
    """What :func:`_unexpected_actions` finds of actions listed unit by unit."""
    # the common case in one fast pass: every other unit dropped or summarized (mostly
    # the very "dropped" object a Selection starts with, so the count compares identities)
    listed = list(actions)
    if listed.count("dropped") + listed.count("summarized") + len(kept) == count:
        return []
    return _unexpected_actions(enumerate(actions), kept)


def _agrees(
    decided: Decided, kept: set[int], carried: tuple[int, set[int]] | None, count: int
) -> bool:
    """Whether ``kept`` is exactly the units the decisions keep, all ints (a float or a
    bool compares equal): one comparison of sets. With ``carried`` (see
    :func:`record_problems`), the units below ``carried[0]`` are compared with the kept
    set checked on their visit (their decisions are that visit's, which kept those),
    and the decisions are gone over from there on: a turn that carries thousands of
    units builds no set of them from the decisions."""
    if carried is None:
        return kept == _kept_by(decided) and set(map(type, kept)) <= {int}
    if not set(map(type, kept)) <= {int}:  # first: ints compare in order
        return False
    units, before = carried
    if not kept:
        return not before and not _kept_by(decided, units)
    since = range(units, count)
    return _below_is(kept, units, count, before) and set(in_range(kept, since)) == _kept_by(
        decided, units
    )


def _kept_by(decided: Decided, first: int = 0) -> set[int]:
    """The units from ``first`` on that the decisions keep (those before are decided by
    no run that starts from ``first`` on, and none of them by its own): runs in order,
    then each unit's own decision (set operations on ranges, so a run of hundreds of
    units costs about one, and on the units decided one by one, at C speed: a
    transform decides thousands so)."""
    units: set[int] = set()
    for start, stop, action in decided.runs:
        if start < first:
            continue
        if action == "kept":
            units.update(range(start, stop))
        else:
            units.difference_update(in_range(units, range(start, stop)))
    given: Mapping[int, str] = decided.given
    if first and given:
        given = {unit: given[unit] for unit in compress(given, map(first.__le__, given))}
    if given:  # each unit once: the order among them does not matter
        keeping = list(map(operator.eq, given.values(), repeat("kept")))
        units.update(compress(given.keys(), keeping))
        units.difference_update(compress(given.keys(), map(operator.not_, keeping)))
    return units


def _given_problems(given: Mapping[int, str], kept: set[int]) -> list[str]:
    """:func:`_unexpected_actions` of the units decided one by one, after a check of
    all of them at once at C speed (the loop then only names the first problem)."""
    try:
        allowed = set(given.values()) <= {"kept", "dropped", "summarized"}
    except TypeError:  # an action that cannot be hashed: not one of those
        allowed = False
    keeping = compress(given.keys(), map(operator.eq, given.values(), repeat("kept")))
    if allowed and kept.issuperset(keeping):
        return []
    return _unexpected_actions(given.items(), kept)


class Decided(Protocol):
    """A record's actions held as the units decided one by one and the runs of units
    decided at once (the runner's compact copy of a selection)."""

    @property
    def given(self) -> Mapping[int, str]: ...
    @property
    def runs(self) -> Sequence[tuple[int, int, str]]: ...


def _unexpected_actions(actions: Iterable[tuple[int, str]], kept: set[int]) -> list[str]:
    """A unit recorded as kept that the window lacks, or an action not the strategy's."""
    for unit, action in actions:
        if action == "kept" and unit not in kept:
            return [
                f"unit {unit} is recorded as kept but is not in the window; "
                f"use keep(), drop() and summarize(), not the kept set"
            ]
        if action not in ("kept", "dropped", "summarized"):
            return [f"the selection holds action {action!r}; use keep(), drop() or summarize()"]
    return []


def synthetic_problems(synthetic: Sequence[object], count: int) -> list[str]:
    """Each made message must be a Message placed before a unit (or at the end)."""
    problems = []
    for entry in synthetic:
        before, message = entry if isinstance(entry, tuple) and len(entry) == 2 else (-1, None)
        if type(before) is not int or not 0 <= before <= count:
            problems.append(f"a made message is placed before unit {before!r}, not a unit")
        if not isinstance(message, Message):
            problems.append(f"a made message is a {type(message).__name__}, not a Message")
    return problems


def stand_ins_problems(
    history: History,
    stand_ins: Mapping[int, Message],
    kept: set[int],
    must_keep: Mapping[int, str],
    cut: Mapping[int, Message],
) -> list[str]:
    """A stand-in goes in a kept unit, for a message that may change (not must-keep,
    not ``cut`` by the runner), and keeps the unit's tool exchange valid."""
    problems = []
    for position, message in stand_ins.items():
        unit = history.unit_of(position) if type(position) is int else None
        if unit is None or unit not in kept:
            problems.append(f"a stand-in for message {position!r}, which is not in the window")
        elif unit in must_keep or position in cut:
            why = must_keep.get(unit, "cut by the host")
            problems.append(f"message {position} ({why}) cannot be replaced by a strategy")
        else:
            problems.extend(stand_in_problems(position, history.messages[position], message))
    return problems
