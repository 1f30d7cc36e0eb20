"""pipeline: strategies run in order under one budget, with one record for the visit.

Each stage windows the previous stage's output, made messages (a summary) and stand-ins
(a cleared tool output) included, through a :class:`~ctxwindow.Windower` of its own, so
every stage's window is checked like any strategy's. A message transform that is not
the last stage only transforms (``Windower.transform``); every other stage fits the
budget, so the last one guarantees it, and the runner checks the final window too.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, NamedTuple, TypeVar

from ctxwindow import (
    BaseStrategy,
    Branch,
    Conversation,
    Decision,
    DecisionRun,
    History,
    LLMUsage,
    Message,
    Option,
    Selection,
    Window,
    Windower,
    WindowRecord,
)
from ctxwindow.errors import BudgetTooSmall
from ctxwindow.kit import PerConversation, covers_position
from ctxwindow_pipeline.stages import EXAMPLE, Stage, build_stages

#: At most this many messages of the first stage's input may differ (as objects) from
#: the last visit's for the pipeline to start from that visit's bookkeeping.
MOST_READ_AGAIN = 64
#: At most this many kept reasons (and a 32nd of those below) are kept apart on top of
#: the others from visit to visit before they are folded in (see :class:`_Reasons`).
MOST_ON_TOP = 64
NOT_AS_RECORDED = "its window does not hold the very messages its record says it kept"
T = TypeVar("T")
K = TypeVar("K")
KEPT_ALL_FIT = "every stage found its input within the budget"
#: The actions of a unit that stays in a stage's window.
KEEPING = ("kept", "truncated", "replaced")


class PipelineStrategy(BaseStrategy):
    """Runs strategies in order, each windowing the previous one's output, under one budget.

    Stages are strategies looked up by name (third-party ones too), each with its own
    options. The record maps the final window back to your messages (kept, dropped,
    summarized, cleared: with the stage that decided and why) and holds each stage's own
    record in ``record.stages``; LLM usage is summed over the stages.
    """

    name = "pipeline"
    #: For tests that find strategies through the registry: a pipeline needs stages,
    #: here only this distribution's own, so the examples work wherever it is installed.
    example_options: ClassVar[tuple[dict[str, Any], ...]] = (
        {
            "stages": [
                {"strategy": "clear_tool_outputs", "keep_recent": 0, "min_tokens": 0},
                "clear_tool_outputs",
            ]
        },
        {"stages": [{"strategy": "clear_tool_outputs", "when": "always", "min_tokens": 5}]},
    )
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option(
            "stages",
            (list, tuple),
            [],
            "The strategies to run, in order: each a name or a table with 'strategy', "
            "that strategy's options and, before the last, 'budget_share' (its budget as a "
            f"share of the pipeline's; default 1.0), for example {EXAMPLE}.",
        ),
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        #: Per conversation, where each message of the first stage's input comes from,
        #: read once per unit (see :class:`_Origins`).
        self._origins: PerConversation[_Origins] = PerConversation(_Origins, _Origins.branch)

    def check_ready(self) -> None:
        """Build every stage now: a bad stage fails at configuration, named."""
        # the pipeline's task statement is its stages' (each stage's visit reads its own)
        inherited = {} if self.options["task_statement"] else {"task_statement": False}
        self.stages: tuple[Stage, ...] = build_stages(
            f"strategy {self.name!r}", self.options["stages"], inherited
        )
        paying = [s for s in self.stages if getattr(s.strategy, "requires_llm", False)]
        self.requires_llm = bool(paying)
        self._billing = getattr(paying[0].strategy, "billing", None) if paying else None

    @property
    def billing(self) -> Any:
        """The first stage that calls an LLM pays for it; the host checks it at configuration."""
        return self._billing

    def engages_within_budget(self, history: History) -> bool:
        """When any stage would engage though everything fits (clearing always, a cap)."""
        for stage in self.stages:
            engages = getattr(stage.strategy, "engages_within_budget", None)
            if engages is not None and engages(history):
                return True
        return False

    # -- visiting ------------------------------------------------------------------
    def choose(self, history: History) -> Selection:
        attempts = self._attempts()
        for shares, pins in attempts[:-1]:
            try:
                return self._choose(history, shares, pins)
            except (BudgetTooSmall, _MustKeepLost) as failed:
                if isinstance(failed, BudgetTooSmall) and not shares:
                    raise  # the pipeline's own budget: pins would not make it fit
        return self._choose(history, *attempts[-1])

    async def achoose(self, history: History) -> Selection:
        attempts = self._attempts()
        for shares, pins in attempts[:-1]:
            try:
                return await self._achoose(history, shares, pins)
            except (BudgetTooSmall, _MustKeepLost) as failed:
                if isinstance(failed, BudgetTooSmall) and not shares:
                    raise
        return await self._achoose(history, *attempts[-1])

    def _attempts(self) -> list[tuple[bool, bool]]:
        """The ways to run the stages, (budget shares, pins), in the order tried: the
        next when a stage could not keep what the pipeline must. With a share below 1,
        pinned (a smaller budget keeps less), then on the pipeline's budget. Else first
        unpinned: every stage has at least the pipeline's budget, so what it must keep
        holds the pipeline's wherever the stages before it left the sizes alone, and its
        input grows as the caller's history grows (a unit pinned while it was the
        current turn's and not after would change the input before its newest messages,
        each stage would read a branch of it on every turn, and a summarize stage, whose
        checkpoints are spaced by the pinned messages, would write its summary again on
        most of an agent's rounds); then pinned (with the shares first, if any)."""
        if self._has_shares and self._shares_shrink:
            return [(True, True), (False, True)]
        if self._has_shares:
            return [(True, False), (True, True), (False, True)]
        return [(False, False), (False, True)]

    @property
    def _shares_shrink(self) -> bool:
        """Whether a stage's share leaves it less than the pipeline's budget."""
        return any((stage.budget_share or 1.0) < 1 for stage in self.stages)

    @property
    def _has_shares(self) -> bool:
        return any(stage.budget_share not in (None, 1.0) for stage in self.stages)

    def _choose(self, history: History, shares: bool, pins: bool) -> Selection:
        run = _Run(history, self._origins, pins)
        for stage, windower in self._windowing(run, shares):
            run.apply(stage, windower, windower.select(run.input, query=history.query))
        return _checked(run, shares, pins, self._has_shares)

    async def _achoose(self, history: History, shares: bool, pins: bool) -> Selection:
        run = _Run(history, self._origins, pins)
        for stage, windower in self._windowing(run, shares):
            run.apply(stage, windower, await windower.aselect(run.input, query=history.query))
        return _checked(run, shares, pins, self._has_shares)

    def _windowing(self, run: _Run, shares: bool) -> Iterator[tuple[Stage, Windower]]:
        """The stages in order: a transform before the last is applied here; every other
        stage comes with the host that windows it, for choose (or achoose) to run on
        ``run.input`` and apply before the next. Without ``shares`` every stage gets the
        pipeline's budget."""
        history = run.history
        for stage in self.stages:
            budget = stage.budget(history.budget) if shares else history.budget
            windower = Windower(stage.strategy, budget, history.counter, stage.distribution)
            if stage.is_transform and stage is not self.stages[-1]:
                run.apply(stage, windower, windower.transform(run.input, query=history.query))
            else:
                yield stage, windower


#: Why a visit ran again without budget_share.
SHARES_SET_ASIDE = (
    "budget_share set aside for this visit: with it, a stage could not keep what it must "
    "(a stage's budget below its must-keep messages, or a stage let go of the current turn "
    "or the task statement the pipeline's budget holds); every stage ran on the pipeline's "
    "budget"
)


class _MustKeepLost(Exception):
    """A stage let go of (or stood something in for) a unit the pipeline must keep:
    the stages run again, pinned (see PipelineStrategy._attempts)."""


def _checked(run: _Run, shares: bool, pins: bool, has_shares: bool) -> Selection:
    """The run's selection, once sure that the last stage's window holds what the
    pipeline must keep, as the pipeline's host gave it (else _MustKeepLost; pinned on
    the pipeline's budget, every stage keeps it as it is), saying so in the record when
    the budget shares were set aside. Pinned, a stage still stands something in for a
    must-keep message when its share is too small for it (its host cut the current
    turn's tool results): no strategy may. (The selection keeps the must-keep units
    whatever the stages did: it is the window that must hold them.)"""
    if shares or not pins:
        present: dict[int, bool] = {}  # unit: every message of it sent as it is
        for origin in run.origins:
            if origin.position is not None:
                unit = next(iter(origin.covers))
                present[unit] = present.get(unit, True) and origin.stand_in is None
        for unit in run.history.must_keep:
            if not present.get(unit, False):
                raise _MustKeepLost
    selection = run.finish()
    if has_shares and not shares:
        selection.notes.append(SHARES_SET_ASIDE)
    return selection


def _as_copied(item: Any, position: int, history: History) -> Message | Mapping[str, Any]:
    """``item`` in a form the stages' input can hold a changed copy of (pinned, or cut by
    the host): a dict or Message as it is; any other object the core reads (an SDK's
    message, a model with ``model_dump()``) as the Message the core read from it."""
    if isinstance(item, (Message, Mapping)):
        return item
    return history.messages[position]


def _as_input(history: History, position: int, replaced: Mapping[int, Message], pin: bool) -> Any:
    """The first stage's input message for the caller's message at ``position``: the
    caller's object, or a copy of it cut as the host cut it, pinned when ``pin``."""
    item = history.original(position)
    if position not in replaced and not pin:
        return item
    item = _as_copied(item, position, history)
    if position in replaced:
        cut = replaced[position]
        item = cut if isinstance(item, Message) else {**item, **_content(cut)}
    return _pinned(item) if pin else item


def _pinned(item: Any) -> Any:
    """A copy of ``item`` pinned, for the stages. What the pipeline's budget must keep
    depends on sizes at some tiers (the task statement, the rest of the current turn),
    and a stage changes sizes (a cleared output makes the turn fit, and then the task
    statement would not): pinned, every stage keeps exactly what the pipeline must."""
    if isinstance(item, Message):
        return replace(item, metadata={**item.metadata, "pinned": True})
    return {**item, "metadata": {**(item.get("metadata") or {}), "pinned": True}}


def _kept_by_every_stage(history: History) -> set[int]:
    """The must-keep units that every stage keeps whatever the sizes, without a pin: a
    system, developer or pinned message's, and the newest user message's. Only the
    others are pinned for the stages, so that a stage's input grows as the caller's
    history grows: a pinned copy of the newest user message would differ from the
    message itself on the next turn, and the stage's runner would read its whole input
    again, as a new conversation (its strategy's per-conversation state lost)."""
    found = set()
    for unit in history.must_keep:
        for position in history.span(unit):
            message = history.messages[position]
            instruction = message.role in ("system", "developer") and not message.synthetic
            if instruction or message.pinned or position == history.newest_user:
                found.add(unit)
    return found


def _stands_in_for(item: Any, position: int) -> bool:
    """Whether ``item`` is the stand-in a stage sent for its input message ``position``."""
    if isinstance(item, Message):
        return item.metadata.get("stands_in_for") == position
    metadata = item.get("metadata") if isinstance(item, dict) else None
    return isinstance(metadata, dict) and metadata.get("stands_in_for") == position


def _as_message(item: Any) -> Message:
    """A stage's window item (a stand-in, a made message) as a Message: read only for
    those that reach the final window, so a transform that clears every old tool output
    does not cost a turn a read of each stand-in."""
    return item if isinstance(item, Message) else Message.from_dict(item)


def _at_callers_position(stand_in: Message, position: int) -> Message:
    """A cleared output's stand-in, its ``cleared_tool_output.position`` (where the
    stage that cleared it read it) the caller's ``position``: a stage's input leaves
    defective messages out, and an earlier stage's summary moves what follows it."""
    cleared = stand_in.metadata.get("cleared_tool_output")
    if not isinstance(cleared, Mapping) or cleared.get("position") == position:
        return stand_in
    moved = {**cleared, "position": position}
    return replace(stand_in, metadata={**stand_in.metadata, "cleared_tool_output": moved})


# -- following the caller's messages through the stages ---------------------------------
class _Origin(NamedTuple):
    """Where a stage's input message comes from: the caller's message at ``position``,
    or (position None) a message stage ``made_by`` made, standing for ``covers``. A
    tuple: one is made per message of the history on every visit."""

    position: int | None
    covers: frozenset[int]
    made_by: str | None = None
    #: What is sent in place of the caller's message, as the stage's window holds it
    #: (a Message, or a dict read as one by :func:`_as_message` when it is sent).
    stand_in: Any = None


class _Origins:
    """Where each message of a conversation's first stage input comes from (the
    caller's message at its position, standing for its unit), read once per unit: a
    visit would otherwise make one per message of the history. The newest unit is read
    again on each visit (its exchange may still grow). Defective messages are in no
    unit, so none has an origin: the origins are those of the input, which leaves them
    out (see :func:`_without_defects`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.origins: list[_Origin] = []
        self.starts: list[int] = []  # where each unit's origins start
        #: The last visit's first stage, for the next to start from (checked there).
        self.after_first: _AfterFirst | None = None
        #: What the made messages of recent visits cover, by their own ``covers``
        #: (see :class:`_MadeCovers`): a summary of thousands of messages is read once.
        self.made = _MadeCovers()
        #: The first stage's input of a history with defective messages, read into a
        #: Conversation of its own (see :meth:`input_view`).
        self.input: Conversation | None = None

    def branch(self, conversation: Conversation, origin: Branch) -> _Origins:
        """A branch's: those of the units the two share, but the newest of them."""
        twin = _Origins()
        with self.lock:
            units = max(0, min(len(self.starts), origin.units) - 1)
            twin.starts = self.starts[:units]
            twin.origins = self.origins[: self._start(units)]
            twin.after_first = self.after_first
        return twin

    def _start(self, unit: int) -> int:
        return self.starts[unit] if unit < len(self.starts) else len(self.origins)

    def input_view(self, items: list[Any], history: History) -> History:
        """A view of ``items`` (the caller's messages without the defective ones), read
        into a Conversation kept here, grown by what the history adds: a message found
        defective stays so, and the newest exchange, open, is left out until it closes,
        so the input only grows. The first stage's host then reads no list on each visit
        (a list would be remembered beside the next stage's, and that one read as a
        branch of it every turn), and the stages' states carry over, as for a history
        without defects. Items that are not those held (or equal ones: a list rebuilt
        from equal copies, whose objects the view gives back), grown, are read anew."""
        with self.lock:
            held = self.input
            if held is not None and len(held) <= len(items):
                known = held.originals
                if _equal(items, known, len(known)):  # at C speed: mostly the same objects
                    held.extend(items[len(known) :])
                    counter, budget, query = history.counter, history.budget, history.query
                    return held.view(counter, budget, query, originals=items)
            read = Conversation(items)
            if held is None or len(held) <= len(items):  # not an older view's: kept
                self.input = read
            return read.view(history.counter, history.budget, history.query)

    def of(self, history: History) -> list[_Origin]:
        """The origins of ``history``'s messages, in a list of the caller's own."""
        count = len(history.units)
        with self.lock:
            known = max(0, min(len(self.starts), count) - 1)
            del self.origins[self._start(known) :], self.starts[known:]
            for unit in range(known, count):
                covers = frozenset((unit,))
                self.starts.append(len(self.origins))
                self.origins.extend([_Origin(position, covers) for position in history.span(unit)])
            return self.origins[:]


def _without_defects(history: History) -> list[Any]:
    """The caller's objects but the defective messages (those in no unit, which no
    stage may see). A history mostly has none; one that has a few (an orphan result,
    dropped) is cut around them at C speed."""
    originals, defects = history.originals, history.defects
    if not defects:
        return originals
    ends = [0, *(defect.stop for defect in defects)]  # where each piece between starts
    pieces = (originals[end : defect.start] for end, defect in zip(ends, defects, strict=False))
    return [*itertools.chain.from_iterable(pieces), *originals[ends[-1] :]]


_caller_position = operator.attrgetter("position")

#: What became of a unit a stage removed: (action, reason).
Fate = tuple[str, str]


class _Fates:
    """The fates of the caller's units the stages removed, as a Selection holds its
    decisions: runs of units given one fate at once (a stage's dropped run of the
    caller's messages), oldest first, and units given one of their own, each newer than
    any run over it. A stage that drops thousands of units then costs a run, not an
    entry per unit, on every turn."""

    __slots__ = ("by_unit", "runs", "top")

    def __init__(self) -> None:
        self.runs: list[tuple[int, int, Fate]] = []
        self.by_unit: dict[int, Fate] = {}
        #: No unit given a fate of its own is above this: a stage's runs come in order,
        #: after any unit of theirs, so a run mostly has none to take over.
        self.top = -1

    def get(self, unit: int) -> Fate | None:
        """The unit's fate: its own, else the newest run's over it (None: none)."""
        fate = self.by_unit.get(unit)
        if fate is not None:
            return fate
        for start, stop, fate in reversed(self.runs):
            if start <= unit < stop:
                return fate
        return None

    def __setitem__(self, unit: int, fate: Fate) -> None:
        self.by_unit[unit] = fate
        self.top = max(self.top, unit)

    def set_run(self, units: range, fate: Fate) -> None:
        """Give every unit of ``units`` (step 1) ``fate``, over what they had."""
        by_unit = self.by_unit
        if self.top >= units.start:
            for unit in [unit for unit in by_unit if units.start <= unit < units.stop]:
                del by_unit[unit]
        self.runs.append((units.start, units.stop, fate))


class _Stretch(frozenset[int]):
    """A set of units that are one run, ``span``: what a summary of the oldest part of
    a history covers. Known to be a run, it answers what a turn asks of it (does it hold
    a run the stage summarized? which units given a fate does it cover?) from its ends,
    not from each of its thousands of units."""

    __slots__ = ("span",)
    span: range


def _as_stretch(units: frozenset[int]) -> frozenset[int]:
    """``units`` as a :class:`_Stretch` when they are one run (read once, where the set
    is made), else as they are."""
    if not units or isinstance(units, _Stretch):
        return units
    low, high = min(units), max(units)
    if high - low + 1 != len(units):
        return units
    stretch = _Stretch(units)
    stretch.span = range(low, high + 1)
    return stretch


def _joined(summarized: Iterable[int], covered: frozenset[int]) -> frozenset[int]:
    """What a made message stands for: the units its stage summarized (a run, on the
    caller's messages in their places) and those it was written from. The very set
    ``covered`` when it holds the run: a summary's covers, made again on every turn
    from a run that grows by a unit or two a turn, would cost a turn the history (and
    each comparison of it after, which the very set makes one of identity)."""
    if isinstance(summarized, range) and _holds_run(covered, summarized):
        return covered
    return covered.union(summarized)


def _holds_run(units: frozenset[int], run: range) -> bool:
    """Whether ``units`` holds every unit of ``run`` (step 1), from the ends alone when
    ``units`` is a :class:`_Stretch`."""
    if not run:
        return True
    if isinstance(units, _Stretch):
        return units.span.start <= run.start and run.stop <= units.span.stop
    return False


class _MadeCovers:
    """What a stage's made message (a summary) covers, read once for each ``covers``
    tuple it carries: a summary stands for the same thousands of messages turn after
    turn, and reading each reference, then naming each message in the caller's terms,
    would cost every turn the history. A tuple is known again when it is the one read
    before or equal to it (compared at C speed): a strategy may make the tuple anew on
    each visit (``summarize`` does for an agent's run from one instruction, whose
    summarized rounds lie in the current turn: 74 ms a step at 20,000 messages).

    Only for an input that is the caller's messages in their places, and references
    by position (``#3``), which mean the same message whatever the later messages:
    ``units`` gives the caller's units a tuple names, ``callers`` the caller's
    references for a set of units.
    Held per conversation, a few of each (a branch starts with none)."""

    KEPT = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: by _key(refs): (refs, the input length read at, the caller's units they name)
        self._units: dict[_RefsKey, tuple[tuple[Any, ...], int, frozenset[int]]] = {}
        #: by _key(refs): (refs, the units covered, the caller's references for them)
        self._callers: dict[_RefsKey, tuple[tuple[Any, ...], frozenset[int], tuple[str, ...]]] = {}

    def units(self, refs: object, inputs: int) -> frozenset[int] | None:
        """The units ``refs`` was read to name, with an input at least as long."""
        held = self._held(self._units, refs)
        if held is None or held[1] > inputs:
            return None
        units: frozenset[int] = held[2]
        return units

    def keep_units(self, refs: object, inputs: int, units: frozenset[int]) -> None:
        self._keep(self._units, refs, inputs, units)

    def callers(self, refs: object, covers: frozenset[int]) -> tuple[str, ...] | None:
        """The caller's references for ``covers``, as made for equal ``refs``."""
        held = self._held(self._callers, refs)
        if held is None or (held[1] is not covers and held[1] != covers):
            return None
        named: tuple[str, ...] = held[2]
        return named

    def keep_callers(self, refs: object, covers: frozenset[int], named: tuple[str, ...]) -> None:
        self._keep(self._callers, refs, covers, named)

    def _held(self, table: dict[_RefsKey, tuple[Any, ...]], refs: object) -> tuple[Any, ...] | None:
        """What ``table`` holds for ``refs`` (the tuple read before, or one equal)."""
        known = _as_refs(refs)
        if known is None:
            return None
        with self._lock:
            held = table.get(_key(known))
        return held if held is not None and (held[0] is known or held[0] == known) else None

    def _keep(self, table: dict[_RefsKey, Any], refs: object, *what: Any) -> None:
        """Remember ``what`` for ``refs`` when each of its references is by position."""
        known = _as_refs(refs)
        if known is not None and all(map(_by_position, known)):
            with self._lock:
                _bounded(table, self.KEPT)[_key(known)] = (known, *what)


#: A ``covers`` tuple's key in :class:`_MadeCovers`: its length and its two ends.
_RefsKey = tuple[int, object, object]


def _as_refs(refs: object) -> tuple[Any, ...] | None:
    """``refs`` if :class:`_MadeCovers` may remember it: a non-empty tuple whose ends
    are strings (references by position are; its key holds them, so they must hash)."""
    if type(refs) is not tuple or not refs:
        return None
    return refs if type(refs[0]) is str and type(refs[-1]) is str else None


def _key(refs: tuple[Any, ...]) -> _RefsKey:
    return (len(refs), refs[0], refs[-1])


def _by_position(ref: object) -> bool:
    """Whether a ``covers`` reference names a message by its position (``#3``)."""
    return covers_position(ref) is not None


def _bounded(held: dict[K, T], most: int) -> dict[K, T]:
    """``held``, its oldest entries dropped to leave room for one more."""
    while len(held) >= most:
        del held[next(iter(held))]
    return held


class _AfterFirst(NamedTuple):
    """A visit's first stage: its budget, input (messages, origins), decisions and
    window, and what the pipeline made of them (origins, and reasons by unit). It sent
    every input message in its place (else none is kept), so it removed no unit: no
    fate to keep."""

    budget: int
    items: list[Any]
    before: list[_Origin]
    decisions: Sequence[Any]
    messages: list[Any]
    origins: list[_Origin]
    kept_reason: _Reasons
    replaced_reason: dict[int, str]


class _Reasons(NamedTuple):
    """Why the first stage kept each unit, as a visit left it for the next ones to read
    without copying every unit's: ``below``'s reasons for the units under ``limit``,
    under ``top``'s. Neither dict changes once stored (a later visit, or one on a
    branch, copies ``top`` to write over), so visits may share them."""

    below: dict[int, str]
    limit: int
    top: dict[int, str]

    def get(self, unit: int) -> str | None:
        """The unit's reason, None when it has none."""
        why = self.top.get(unit)
        if why is None and unit < self.limit:
            return self.below.get(unit)
        return why

    def carried(self, units: int) -> tuple[_Reasons, dict[int, str]]:
        """For a visit that carries the units under ``units``: these reasons but
        ``top``'s, which come back as a copy for the visit to write its own over (see
        :func:`_before`)."""
        return self._replace(limit=min(self.limit, units), top={}), _before(self.top, units)

    def settled(self) -> _Reasons:
        """These reasons, ``top`` folded into ``below`` once it has grown past a small
        share of it: a visit then copies a few hundred reasons, not every unit's, and
        the fold (every unit's) comes once in many visits."""
        if len(self.top) <= len(self.below) // 32 + MOST_ON_TOP:
            return self
        if not self.below:  # the top itself, no longer written
            return _Reasons(self.top, sys.maxsize, {})
        merged = {unit: why for unit, why in self.below.items() if unit < self.limit}
        merged.update(self.top)
        return _Reasons(merged, sys.maxsize, {})


#: No reasons yet (a visit that starts from none).
NO_REASONS = _Reasons({}, 0, {})


def _before(by_unit: dict[int, T], units: int) -> dict[int, T]:
    """A copy of ``by_unit`` without the units from ``units`` on. Those come last: the
    first stage goes over its decisions in order, and what :class:`_AfterFirst` keeps
    of it was made so (the last visit's, then this one's newer decisions). Taken off
    the end (popitem), the copy has no holes: copying it on the next visit stays a
    block copy, not an entry-by-entry one."""
    kept = dict(by_unit)
    while kept and next(reversed(kept)) >= units:
        kept.popitem()
    return kept


def _equal(these: Sequence[Any], those: Sequence[Any], count: int) -> bool:
    """Whether the first ``count`` items of the two are equal: at C speed where they are
    the same objects, as they are from turn to turn but where a message was pinned anew
    (an equal copy, which says what the last one said). False when one cannot be
    compared (its ``==`` fails): then they are compared as objects."""
    try:
        return bool(these[:count] == those[:count])
    except Exception:
        return False


def _same_for(these: Sequence[Any], those: Sequence[Any]) -> int:
    """How many leading items the two share as the very same objects, then as equal
    ones: one pass at C speed that stops at the first other object (a run of decisions
    carried from turn to turn is thousands long, and only the newest few are new), then
    one a time while they are equal (a run the runner made anew, as it does of the
    newest user message's, which says the same)."""
    others = map(operator.is_not, these, those)
    same = next(itertools.compress(itertools.count(), others), min(len(these), len(those)))
    while same < len(these) and same < len(those) and these[same] == those[same]:
        same += 1
    return same


def _grown(these: Sequence[Any], those: Sequence[Any], at: int) -> DecisionRun | None:
    """What ``these[at]`` adds to ``those[at]`` when it is that run grown: the same
    action and reason, its units and positions (ranges) starting where that run's do
    and reaching further. None otherwise."""
    if at >= len(these) or at >= len(those):
        return None
    now, before = these[at], those[at]
    if not (
        isinstance(now, DecisionRun)
        and isinstance(before, DecisionRun)
        and type(now.positions) is range
        and type(before.positions) is range
        and now.action == before.action
        and now.reason == before.reason
        and now.units.start == before.units.start < before.units.stop < now.units.stop
        and now.positions.start == before.positions.start < before.positions.stop
        and before.positions.stop < now.positions.stop
    ):
        return None
    return DecisionRun(
        range(before.units.stop, now.units.stop),
        range(before.positions.stop, now.positions.stop),
        now.action,
        now.reason,
    )


def _differing(these: Sequence[Any], those: Sequence[Any], count: int) -> Iterator[int]:
    """The positions among the first ``count`` (both hold as many) whose items are not
    the same objects."""
    return itertools.compress(range(count), map(operator.is_not, these, those))


class _Run:
    """One pipeline visit: the current messages, where each came from, and the fate of
    every caller's unit that a stage removed."""

    def __init__(self, history: History, read: PerConversation[_Origins], pins: bool) -> None:
        self.history = history
        self.fate = _Fates()
        #: Why each unit was kept: this visit's reasons (written here) over those of
        #: ``kept_first`` (the first stage's, shared with other visits: never written).
        self.kept_reason: dict[int, str] = {}
        self.kept_first = NO_REASONS
        self.replaced_reason: dict[int, str] = {}
        self.records: list[WindowRecord] = []
        self.labels: list[str] = []
        #: The conversation's origins and the last visit's first stage.
        self.read = read.of(history.conversation)
        #: The first stage's input: the caller's list but its defective messages (no
        #: stage sees them), with the few pinned or cut messages changed.
        self.items = _without_defects(history)
        self.origins = self.read.of(history)  # ascending caller positions: where each is
        replaced = history.replacements  # the host's cuts (tool results, newest user)
        pin = set(history.must_keep) - _kept_by_every_stage(history) if pins else set()
        pinned = (position for unit in pin for position in history.span(unit))
        changed = sorted({*replaced, *pinned})
        for position in changed:
            unit = history.unit_of(position)
            at = bisect.bisect_left(self.origins, position, key=_caller_position)
            self.items[at] = _as_input(history, position, replaced, unit in pin)
        #: Whether the current input is the caller's messages in order, defective ones
        #: aside (each stood in for at most): a run of input positions is then a run of
        #: the caller's units.
        self.aligned = True
        #: The first stage's input when it is the caller's messages as they are (or
        #: but the defective ones): a view, which the stage's host does not read again
        #: (see input).
        self.view: History | None = None
        if not changed:
            defects = history.defects
            self.view = self.read.input_view(self.items, history) if defects else history

    @property
    def input(self) -> Any:
        """What the next stage windows: ``items``, or for the first the visit's view
        when ``items`` are the caller's messages as they are (its host then reads no
        list: no comparison with the last turn's, and the stage's per-conversation
        state is the caller's conversation's)."""
        return self.items if self.view is None else self.view

    def apply(self, stage: Stage, windower: Windower, window: Window[Any]) -> None:
        """Take a stage's window as the next input, remembering what it did."""
        self.view = None
        record = window.record
        self.records.append(record)
        self.labels.append(stage.label)
        if not record.engaged:
            return
        label = stage.label
        decisions: Sequence[Decision | DecisionRun] = record.decision_runs
        last = self.read.after_first if stage.index == 0 else None
        first = 0  # the decisions to go over: those before were the last visit's
        in_place = len(window.messages) == len(self.items) and _keeps_all(record)
        grown: DecisionRun | None = None  # what a carried run of decisions added since
        if in_place:  # every input message sent, in its place (a transform's): no walk
            first, position, differ = 0, 0, list[int]()
            if last is not None and last.budget == windower.budget:
                first, position, differ, grown = self._carried(last, decisions, window.messages)
            items = list(window.messages)
            origins: list[_Origin | None] = self._in_place(windower, items, position, last, differ)  # type: ignore[assignment]
            made: list[tuple[int, int]] = []
        else:
            items, origins, made = self._walk(windower, window, decisions)
            if _several_at_one_place(made) and _summarized_together(record.decision_runs):
                # made messages side by side are matched to what they cover unit by unit
                # (a note per exchange): the decisions one per unit, not in runs. Made
                # ones apart (a summary of the history, one of a long turn's older
                # rounds) each follow runs of their own: a unit each would cost every
                # round of the turn the history
                decisions = record.decisions
        #: (first position, units): each run a stage summarized (a range where aligned)
        summarized: list[tuple[int, range | frozenset[int]]] = []
        before, size = self.origins, len(self.origins)
        kept_reason, replaced_reason = self.kept_reason, self.replaced_reason
        labelled: dict[str, str] = {}  # each reason with the stage's label, made once
        rest = itertools.islice(decisions, first + (grown is not None), None)
        for decision in itertools.chain([grown] if grown is not None else [], rest):
            if not decision.positions:
                continue
            if (
                self.aligned
                and decision.action in ("dropped", "summarized")
                and type(decision.positions) is range
            ):
                units = self._gone(label, decision)
                if decision.action == "summarized":
                    summarized.append((decision.positions[0], units))
                continue
            carried = [before[p] for p in decision.positions if p < size]
            if decision.action in KEEPING:
                why = labelled.get(decision.reason)
                if why is None:
                    why = labelled[decision.reason] = f"{label}: {decision.reason}"
                replacing = decision.action == "replaced"
                for origin in carried:
                    if origin.position is not None:
                        (unit,) = origin.covers
                        if replacing:
                            replaced_reason[unit] = kept_reason[unit] = why
                        elif unit in replaced_reason:
                            kept_reason[unit] = f"{replaced_reason[unit]}; then {why}"
                        else:
                            kept_reason[unit] = why
            else:
                self._removed(label, decision.action, decision.reason, carried)
                if decision.action == "summarized":
                    covers = frozenset().union(*(o.covers for o in carried))
                    summarized.append((decision.positions[0], covers))
        for index, grouped in _covers(made, summarized):
            # and what the stage says its message stands for
            covered = self._covered_units(items[index], before)
            covers = _joined(grouped, covered)
            origins[index] = _Origin(None, covers, label)
        final: list[_Origin] = (
            [o if o is not None else _Origin(None, frozenset(), label) for o in origins]
            if made or not in_place
            else origins  # type: ignore[assignment]  # no made message: none is None
        )
        if stage.index == 0:  # for the next visit to start from
            self.read.after_first = None
            if in_place:
                self.read.after_first = _AfterFirst(
                    windower.budget,
                    self.items,
                    before,
                    decisions,
                    items,
                    final,
                    self._first_reasons(),
                    dict(replaced_reason),
                )
        self.items, self.origins = items, final
        self.aligned = self.aligned and in_place

    def _covered_units(self, item: Any, before: Sequence[_Origin]) -> frozenset[int]:
        """The caller's units a made message's ``metadata.covers`` names (see
        :func:`_written_from`), read once per ``covers`` tuple on an input that is the
        caller's messages in their places (:class:`_MadeCovers`)."""
        memo = self.read.made if self.aligned else None
        refs = _refs(item)
        if memo is not None:
            units = memo.units(refs, len(self.items))
            if units is not None:
                return units
        written_from = _written_from(item, self.items) or ()
        units = _as_stretch(frozenset().union(*(before[p].covers for p in written_from)))
        if memo is not None and written_from:
            memo.keep_units(refs, len(self.items), units)
        return units

    def _first_reasons(self) -> _Reasons:
        """The first stage's kept reasons, for the next visit to share: the later
        stages write theirs to a dict of their own over them, not to a copy."""
        self.kept_first = _Reasons(*self.kept_first[:2], self.kept_reason).settled()
        self.kept_reason = {}
        return self.kept_first

    def kept_why(self, unit: int) -> str:
        """Why the stages kept ``unit`` (the last one's word on it)."""
        why = self.kept_reason.get(unit)
        if why is None:
            why = self.kept_first.get(unit)
        return KEPT_ALL_FIT if why is None else why

    def _walk(
        self, windower: Windower, window: Window[Any], decisions: Sequence[Any]
    ) -> tuple[list[Any], list[_Origin | None], list[tuple[int, int]]]:
        """The window's messages, where each comes from (None: made by the stage), and
        where each made one sits: (index in the new input, input position after it)."""
        kept = sorted(p for d in decisions if d.action in KEEPING for p in d.positions)
        items: list[Any] = []
        origins: list[_Origin | None] = []
        made: list[tuple[int, int]] = []  # (index in the new input, input position after it)
        pointer = 0
        for item in window.messages:
            here = kept[pointer] if pointer < len(kept) else None
            if here is not None and item is self.items[here]:
                origins.append(self.origins[here])
                pointer += 1
            elif here is not None and _stands_in_for(item, here):
                origins.append(self.origins[here]._replace(stand_in=item))
                pointer += 1
            else:
                anchor = kept[pointer] if pointer < len(kept) else len(self.items)
                made.append((len(items), anchor))
                origins.append(None)
            items.append(item)
        if pointer != len(kept):
            raise windower.violation([NOT_AS_RECORDED])
        return items, origins, made

    def _in_place(
        self,
        windower: Windower,
        messages: list[Any],
        position: int,
        last: _AfterFirst | None,
        differ: Sequence[int] = (),
    ) -> list[_Origin]:
        """Where each message of a window that sends every input message in its place
        comes from: the input message's origin, with what the stage sent in its place
        (each item not the input's very object must stand in for it). Before
        ``position``, the last visit's, but at the positions ``differ`` names (a
        message pinned anew: equal, not the same object), read here."""
        # one copy of the last visit's (a sum of two slices would copy it twice)
        origins = last.origins[:position] if last and position else []
        origins.extend(self.origins[position:])
        items = self.items
        for at in differ:
            origins[at] = self.origins[at]
        others = map(operator.is_not, messages[position:], items[position:])
        for at in itertools.chain(
            (at for at in differ if messages[at] is not items[at]),
            itertools.compress(range(position, len(items)), others),
        ):
            item = messages[at]
            if not _stands_in_for(item, at):
                raise windower.violation([NOT_AS_RECORDED])
            origins[at] = origins[at]._replace(stand_in=item)
        return origins

    def _carried(
        self, last: _AfterFirst, decisions: Sequence[Any], messages: Sequence[Any]
    ) -> tuple[int, int, list[int], DecisionRun | None]:
        """How many of the first stage's decisions, and up to which input position, are
        the last visit's very ones (the runner carried them: Selection.carry), on the
        same input there: this visit's bookkeeping starts from the last one's for those,
        but at the positions whose input or window item is not the last one's very
        object (a message pinned anew), also returned. (0, 0, [], None): none.

        The decision after them may be the last visit's next run grown (the same action
        and reason from the same position on, further): an agent's run from one
        instruction, whose old outputs the stage clears, is one run of them that grows
        each step. Its last visit's part is carried too, and what it adds is returned,
        for the bookkeeping to go over alone."""
        count = _same_for(decisions, last.decisions)
        while count and not isinstance(decisions[count - 1].positions, range):
            count -= 1
        grown = _grown(decisions, last.decisions, count)
        if grown is not None:  # carried up to where the last visit's part of it ends
            position: int = grown.positions[0]
        elif count:
            position = decisions[count - 1].positions.stop
        else:
            return 0, 0, [], None
        # equal origins (values: position, covers) say the same, and compare at C speed
        # where they are the same objects, as they are from turn to turn
        if not (position <= len(last.items) and self.origins[:position] == last.before[:position]):
            return 0, 0, [], None
        differ: list[int] = []
        if not (
            _equal(self.items, last.items, position) and _equal(messages, last.messages, position)
        ):
            differ = sorted(
                {
                    *_differing(self.items, last.items, position),
                    *_differing(messages, last.messages, position),
                }
            )
        if len(differ) > MOST_READ_AGAIN:  # a list rebuilt from equal messages: read it all
            return 0, 0, [], None
        units = max(last.origins[position - 1].covers, default=-1) + 1 if position else 0
        self.kept_first, self.kept_reason = last.kept_reason.carried(units)
        self.replaced_reason = _before(last.replaced_reason, units)
        return count, position, differ, grown

    def _gone(self, label: str, decision: Decision | DecisionRun) -> range:
        """:meth:`_removed` of a run of the caller's own messages, in their places (the
        stage input is the caller's list, its messages stood in for at most), dropped or
        summarized: one fate for its units at once; the units. A stage that drops or
        summarizes thousands of units, an earlier one having cleared thousands of them
        first, costs a turn a run, not an entry per unit."""
        positions, origins = decision.positions, self.origins
        (first,), (last,) = origins[positions[0]].covers, origins[positions[-1]].covers
        self.fate.set_run(range(first, last + 1), (decision.action, f"{label}: {decision.reason}"))
        return range(first, last + 1)

    def _removed(self, label: str, action: str, reason: str, carried: Sequence[_Origin]) -> None:
        """Give each of the caller's units behind ``carried`` (a stage's input messages
        it removed) its fate. A caller's message says why this stage dropped or
        summarized it, whatever an earlier stage did to it first (cleared its output:
        that stage's own record says so, in ``record.stages``): the record's word on a
        unit is the stage's that removed it, and an agent's thousands of outputs cleared
        and then dropped or summarized cost a turn one fate for the run, not one each."""
        said = f"{label}: {reason}"
        for origin in carried:
            if origin.position is not None:
                (unit,) = origin.covers
                self.fate[unit] = (action, said)
                continue
            for unit in origin.covers:  # a made message goes, and what it stood for
                before = (self.fate.get(unit) or ("summarized", str(origin.made_by)))[1]
                if action == "dropped":
                    self.fate[unit] = ("dropped", f"{before}; then {label} dropped it: {reason}")
                else:
                    self.fate[unit] = ("summarized", f"{before}; then {label}: {reason}")

    def finish(self) -> Selection:
        """The pipeline's own selection over the caller's messages: what the last
        stage's window holds, traced back, and why each other unit went."""
        history = self.history
        selection = history.selection()
        present = {next(iter(o.covers)) for o in self.origins if o.position is not None}
        # the units a summary in the window was written from (its words are there), by it
        summaries = [(o.covers, o.made_by) for o in self.origins if o.position is None]
        _decide(selection, self.fate, summaries, present, self.kept_why)
        for origin in self.origins:
            if origin.position is not None and origin.stand_in is not None:
                (unit,) = origin.covers
                stand_in = _at_callers_position(_as_message(origin.stand_in), origin.position)
                selection.replace(origin.position, stand_in, self.kept_why(unit))
        count = len(history.units)
        for index, origin in enumerate(self.origins):
            if origin.position is not None:
                continue
            after = next(
                (next(iter(o.covers)) for o in self.origins[index + 1 :] if o.position is not None),
                count,
            )
            message = _as_message(self.items[index])
            made = _in_callers_terms(message, origin, history, self.read.made)
            selection.add_synthetic(made, after)
        for label, record in zip(self.labels, self.records, strict=True):
            selection.notes.append(f"{label}: {_summary(record)}")
            selection.notes.extend(f"{label}: {note}" for note in record.notes)
        selection.llm = _usage(self.records)
        selection.stages.extend(self.records)
        return selection


def _in_summary(fate: tuple[str, str] | None, made_by: str | None) -> tuple[str, str] | None:
    """A unit's fate, a later stage's drop of a unit an earlier stage's summary was
    written from (kept verbatim there, in the room it left) being a summarized unit."""
    if fate is None or made_by is None or fate[0] != "dropped":
        return fate
    return "summarized", f"{fate[1]}; in the summary {made_by} wrote"


def _several_at_one_place(made: Sequence[tuple[int, int]]) -> bool:
    """Whether two made messages sit side by side: before one input position (see
    :meth:`_Run._walk`), which :func:`_covers` matches to what they cover one by one."""
    anchors = [anchor for _, anchor in made]
    return len(set(anchors)) < len(anchors)


def _summarized_together(runs: Sequence[DecisionRun]) -> bool:
    """Whether a run of a stage's decisions summarized several units (whose made
    messages, when there are several, are matched to what they cover unit by unit)."""
    return any(run.action == "summarized" and len(run.units) > 1 for run in runs)


def _keeps_all(record: WindowRecord) -> bool:
    """Whether every decision of the record keeps its units, read from its counts (a
    transform's record holds a run per exchange it cleared, and the runner carries its
    counts from turn to turn)."""
    return not (record.count("dropped") or record.count("summarized"))


def _decide(
    selection: Selection,
    fates: _Fates,
    summaries: Sequence[tuple[frozenset[int], str | None]],
    present: set[int],
    kept_why: Callable[[int], str],
) -> None:
    """Write the units' fates into a fresh selection: the stages' runs a call each (split
    around the must-keep units, left as the selection has them), then each unit's own
    fate, overridden, in this order, by a summary's (a unit one of ``summaries`` was
    written from: what it covers, and who made it) and the window's. A turn costs the
    runs and the units with a reason of their own, not a call per unit of the history:
    a selection's own decision about a unit is newer than any run over it, as a fate's
    is."""
    apart = sorted(selection.history.must_keep)
    for start, stop, (action, reason) in fates.runs:
        for units in _around(range(start, stop), apart):
            _decided(selection, units, action, reason)
    own = dict(fates.by_unit)
    own.update(_summary_fates(fates, summaries))
    for unit in present:
        own[unit] = ("kept", kept_why(unit))
    for unit in apart:
        own.pop(unit, None)
    fates_given = list(own.values())  # most drop their units: those in one call
    dropping = list(map("dropped".__eq__, map(_first, fates_given)))
    reasons = map(_second, itertools.compress(fates_given, dropping))
    selection.drop_each(dict(zip(itertools.compress(own, dropping), reasons, strict=True)))
    for unit, (action, reason) in itertools.compress(own.items(), map(operator.not_, dropping)):
        if action == "kept":
            selection.keep(unit, reason)
        else:
            selection.summarize(unit, reason)


_first, _second = operator.itemgetter(0), operator.itemgetter(1)


def _summary_fates(
    fates: _Fates, summaries: Sequence[tuple[frozenset[int], str | None]]
) -> dict[int, Fate]:
    """The fates that a summary in the window changes (:func:`_in_summary`) or that
    are a unit's own, for the units the summaries were written from. A unit a run
    summarized keeps that run's fate, which the selection has: a summary of thousands
    of units costs a turn set operations, not a call per unit; one that is known to
    cover a run of units (:class:`_Stretch`, as a summary of the oldest part does),
    the units with a fate of their own and those dropped."""
    spans = [(covers.span, maker) for covers, maker in summaries if isinstance(covers, _Stretch)]
    if summaries and len(spans) == len(summaries):
        return _stretch_fates(fates, spans)
    made_by: dict[int, str | None] = {}
    for covers, maker in summaries:  # the last summary's word on a unit, as the window's
        made_by.update(dict.fromkeys(covers, maker))
    out: dict[int, Fate] = {}
    by_unit = fates.by_unit
    for unit in made_by.keys() & by_unit.keys():
        out[unit] = _in_summary(by_unit[unit], made_by[unit]) or by_unit[unit]
    rest = made_by.keys() - by_unit.keys()
    for start, stop, fate in reversed(fates.runs):  # the newest run over a unit decides
        if not rest:
            break
        if stop - start <= 4 * len(rest):
            inside = rest.intersection(range(start, stop))
        else:
            inside = {unit for unit in rest if start <= unit < stop}
        rest -= inside
        if fate[0] == "dropped":  # the others keep the run's fate, as in_summary does
            for unit in inside:
                out[unit] = _in_summary(fate, made_by[unit]) or fate
    return out


def _stretch_fates(fates: _Fates, spans: Sequence[tuple[range, str | None]]) -> dict[int, Fate]:
    """:func:`_summary_fates` of summaries that each cover a run of units (``spans``):
    the same fates, from each run's ends and the units given a fate (their own, or in a
    dropped run), not from every unit covered."""

    def made_by(unit: int) -> tuple[bool, str | None]:
        """Whether a summary covers ``unit``, and the last one's maker (the window's)."""
        for span, maker in reversed(spans):
            if unit in span:
                return True, maker
        return False, None

    out: dict[int, Fate] = {}
    by_unit = fates.by_unit
    for unit, fate in by_unit.items():
        covered, maker = made_by(unit)
        if covered:
            out[unit] = _in_summary(fate, maker) or fate
    newer: list[range] = []  # the runs over a unit after this one: theirs is the fate
    for start, stop, fate in reversed(fates.runs):
        if fate[0] == "dropped":
            for span, _ in spans:
                for unit in range(max(start, span.start), min(stop, span.stop)):
                    if unit in out or unit in by_unit or any(unit in run for run in newer):
                        continue
                    maker = made_by(unit)[1]
                    out[unit] = _in_summary(fate, maker) or fate
        newer.append(range(start, stop))
    return out


def _decided(selection: Selection, units: int | range, action: str, reason: str) -> None:
    """Record ``action`` for ``units`` (a unit, or a run of them) with its method."""
    if action == "kept":
        selection.keep(units, reason)
    elif action == "summarized":
        selection.summarize(units, reason)
    else:
        selection.drop(units, reason)


def _around(units: range, apart: list[int]) -> Iterator[range]:
    """The pieces of ``units`` (step 1) between the units of ``apart`` (ascending)."""
    start = units.start
    for unit in apart[bisect.bisect_left(apart, start) : bisect.bisect_left(apart, units.stop)]:
        if unit > start:
            yield range(start, unit)
        start = unit + 1
    if start < units.stop:
        yield range(start, units.stop)


def _in_callers_terms(
    message: Message, origin: _Origin, history: History, memo: _MadeCovers | None = None
) -> Message:
    """A stage's made message whose ``covers`` names what it stands for in the caller's
    messages (a stage names its own input's, which a cleared or dropped message shifts):
    a tuple, made once for a summary that covers the same units with the same ``covers``
    turn after turn (``memo``), so the runner's check of it is read once too."""
    refs = message.metadata.get("covers")
    if refs is None and "covers" not in message.metadata:
        return message
    covers = memo.callers(refs, origin.covers) if memo is not None else None
    if covers is None:
        covers = tuple(
            history.covers_ref(position)
            for unit in sorted(origin.covers)
            for position in history.span(unit)
        )
        if memo is not None:
            memo.keep_callers(refs, origin.covers, covers)
    return replace(message, metadata={**message.metadata, "covers": covers})


def _refs(item: Any) -> object:
    """A made message's ``metadata.covers`` (None: it has none)."""
    metadata = item.metadata if isinstance(item, Message) else item.get("metadata")
    return metadata.get("covers") if isinstance(metadata, Mapping) else None


def _written_from(item: Any, inputs: Sequence[Any]) -> list[int] | None:
    """The stage's input positions a made message's ``metadata.covers`` names (``#3``, or
    an id), None when it names none or one that cannot be found. A summary is written
    from more than the units the stage summarized: the newest of those it covers may
    stay verbatim, in the room it leaves, and a later stage may then drop them."""
    refs = _refs(item)
    if not isinstance(refs, (list, tuple)) or not refs:
        return None
    ids: dict[str, int] | None = None
    found = []
    for ref in refs:
        if not isinstance(ref, str):
            return None
        position = covers_position(ref)
        if position is not None and position < len(inputs):
            found.append(position)
            continue
        if ids is None:
            ids = {}
            for position, entry in enumerate(inputs):
                ids.setdefault(_id_of(entry), position)
        if ref not in ids:
            return None
        found.append(ids[ref])
    return found


def _id_of(item: Any) -> Any:
    return item.id if isinstance(item, Message) else item.get("id")


def _covers(
    made: list[tuple[int, int]], summarized: list[tuple[int, range | frozenset[int]]]
) -> list[tuple[int, range | frozenset[int]]]:
    """Which summarized units each made message stands for: those just before where it
    sits (a note where its exchange was, a summary where the verbatim part begins)."""
    if not made:
        return []
    anchors = sorted({anchor for _, anchor in made})
    groups: dict[int, list[range | frozenset[int]]] = {anchor: [] for anchor in anchors}
    for first, covers in summarized:
        anchor = next((a for a in anchors if a > first), anchors[-1])
        groups[anchor].append(covers)
    out: list[tuple[int, range | frozenset[int]]] = []
    for anchor in anchors:
        here = [index for index, a in made if a == anchor]
        found = groups[anchor]
        if len(found) == len(here):  # one message for each (a note per exchange, say)
            out.extend(zip(here, found, strict=True))
        else:
            every: frozenset[int] = frozenset().union(*found) if found else frozenset()
            out.extend((index, every) for index in here)
    return out


def _content(message: Message) -> dict[str, Any]:
    return {"content": message.to_dict()["content"]}


def _summary(record: WindowRecord) -> str:
    if not record.engaged:
        return f"not engaged (its input, {record.tokens_before:,} tokens, fits)"
    counts = ", ".join(
        f"{action} {record.count(action)}"
        for action in ("kept", "replaced", "dropped", "summarized", "truncated")
        if record.count(action)
    )
    return (
        f"tokens {record.tokens_before:,} -> {record.tokens_after:,}, messages "
        f"{record.messages_before} -> {record.messages_after} (units {counts})"
    )


def _usage(records: Sequence[WindowRecord]) -> LLMUsage | None:
    used = [record.llm for record in records if record.llm is not None]
    if not used:
        return None
    providers = sorted({u.provider for u in used if u.provider})
    models = sorted({u.model for u in used if u.model})
    return LLMUsage(
        provider="+".join(providers) or None,
        model="+".join(models) or None,
        calls=sum(u.calls for u in used),
        prompt_tokens=sum(u.prompt_tokens for u in used),
        completion_tokens=sum(u.completion_tokens for u in used),
    )
