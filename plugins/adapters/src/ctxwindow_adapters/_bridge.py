"""What every adapter shares: read a framework's items into ctxwindow Messages, window
those, and give back the caller's own items.

An item (a framework message) may stand for several Messages (an Anthropic user message
holding tool results and text, a pydantic-ai request holding a tool return and a user
prompt) and several items may stand for one Message (a Responses API reasoning item and
the function calls that follow it). Each Message remembers its items and, for a split
item, which of the item's parts it holds. An item whose Messages are all in the window
comes back as the very object passed in; one partly kept is rebuilt from its kept parts.
A stand-in for one Message (``metadata.stands_in_for``: a strategy's cleared tool output,
or a tool result the host cut to fit) comes back as a copy of that Message's item with
the stand-in's text in its place, so a tool result stays the framework's own result
answering the same call.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from ctxwindow import (
    Conversation,
    Decision,
    DecisionRun,
    Message,
    Strategy,
    TokenCounter,
    Window,
    Windower,
    WindowRecord,
    cached_windower,
)
from ctxwindow.errors import BudgetTooSmall, InvalidMessage, InvalidOption
from ctxwindow.kit import covers_position

T = TypeVar("T")

#: ``rebuild(item, kept, cut)``: the item with only the parts in ``kept`` (None: all),
#: and, when ``cut`` is set, the text of the parts in ``cut[0]`` (None: the whole item's
#: text) replaced by ``cut[1]``: the host's truncation of the newest user message, or a
#: strategy's stand-in for one of the item's Messages (a tool result's new content; an
#: empty one for the later items of a Message read from several, its first holding the
#: stand-in). None: nothing of the item is left to send (it is left out).
Rebuild = Callable[[Any, "Sequence[int] | None", "tuple[frozenset[int] | None, str] | None"], Any]


class HostCut(str):
    """A ``cut`` text (see :data:`Rebuild`) that is the host's cut of the item's own
    words (the newest user message, a current-turn tool result cut to fit), not a
    strategy's stand-in for all of it: the cut Message the record counts keeps the
    item's images and files, so a rebuild may keep them beside it. A ``str`` still."""

    __slots__ = ()


class Prefix(Sequence[T]):
    """The first ``size`` items of a list that only grows: a remembered conversion's
    Messages handed out without copying them (see :meth:`Converted.truncate`)."""

    __slots__ = ("_size", "held")

    def __init__(self, items: list[T], size: int) -> None:
        #: The list these are the first of (it only grows).
        self.held = items
        self._size = size

    def __len__(self) -> int:
        return self._size

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, Prefix)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        picked = range(self._size)[index]  # negative indices, and IndexError, as a list's
        if isinstance(picked, range):
            return [self.held[position] for position in picked]
        return self.held[picked]


#: By ``id`` of a summary's covers: (the covers, what they name in the caller's items,
#: None when that is the covers as they are, one past the last Message they depend on).
MadeCovers = dict[int, tuple[Any, tuple[Any, ...] | None, int]]


@dataclass
class Converted(Generic[T]):
    """A framework's items read as Messages, each with the items and parts it stands for."""

    items: Sequence[T]
    messages: Sequence[Message] = field(default_factory=list)
    sources: list[tuple[int, ...]] = field(default_factory=list)
    parts: list[frozenset[int] | None] = field(default_factory=list)
    #: Per split item: how many of its parts its Messages hold (an item not here is whole).
    split: dict[int, int] = field(default_factory=dict)
    #: Each Message's position by ``id``, when the reader kept one (a remembered
    #: conversion's, which may also hold later Messages); else made when needed.
    where: dict[int, int] | None = None
    #: The Messages read into a Conversation already, when the reader keeps one across
    #: calls (a remembered conversion): windowed in place of ``messages``, so that a
    #: history that grew by one item costs that item's Message, not a look over all.
    conversation: Conversation | None = None
    #: The positions whose Messages' items do not follow on from those of the Message
    #: before (see :meth:`items_at`), ascending; kept as Messages are added (found
    #: once from ``sources`` when not given), and only ever grown, as those lists.
    breaks: list[int] | None = None
    #: How many of the first Messages are read for good (a remembered conversion's: the
    #: newest are read again on each call), and what the summaries' ``covers`` named in
    #: the caller's items, by ``id`` of the covers (see :func:`_made_in_items`).
    settled: int = 0
    made_covers: MadeCovers | None = None

    def __post_init__(self) -> None:
        if self.breaks is None:
            self.breaks = [p for p in range(len(self.sources)) if not self._follows_on(p)]

    def _follows_on(self, position: int) -> bool:
        """Whether the items of the Message at ``position`` are a run of the caller's
        items that starts where the Message before's end, or just after."""
        items = self.sources[position]
        if not position or not _run_of_items(items):
            return False
        before = self.sources[position - 1]
        return bool(before) and before[-1] <= items[0] <= before[-1] + 1

    def items_at(self, positions: Sequence[int]) -> Sequence[int]:
        """The caller's items the Messages at ``positions`` stand for, ascending: a
        range when they lie end to end. A range of positions with no break in it is
        read from its ends: a run of a long history's units costs no look at each."""
        sources, breaks = self.sources, self.breaks
        assert breaks is not None  # set in __post_init__
        if type(positions) is range and positions.step == 1 and positions:
            start, stop = positions.start, positions.stop
            if _run_of_items(sources[start]) and bisect.bisect_right(
                breaks, start
            ) == bisect.bisect_left(breaks, stop):
                return range(sources[start][0], sources[stop - 1][-1] + 1)
        return _as_range(sorted({item for p in positions for item in sources[p]}))

    def position_of(self, message: Message) -> int | None:
        """The position of one of these Messages (None for any other message)."""
        return self.positions()(message)

    def positions(self) -> Callable[[Message], int | None]:
        """:meth:`position_of`, with what it reads looked up once: for a loop over a
        window's messages."""
        if self.where is None:
            self.where = {id(m): position for position, m in enumerate(self.messages)}
        where, messages = self.where, self.messages
        size = len(messages)
        held = messages.held if isinstance(messages, Prefix) else messages

        def position_of(message: Message) -> int | None:
            position = where.get(id(message))
            if position is None or position >= size:
                return None
            return position if held[position] is message else None

        return position_of

    def add(
        self, message: Message, items: tuple[int, ...], parts: frozenset[int] | None = None
    ) -> None:
        if self.where is not None:
            self.where[id(message)] = len(self.messages)
        self.growing().append(message)
        self.sources.append(items)
        self.parts.append(parts)
        position = len(self.sources) - 1
        if not self._follows_on(position):
            assert self.breaks is not None  # set in __post_init__
            self.breaks.append(position)
        if parts is not None:
            (item,) = items
            self.split[item] = self.split.get(item, 0) + len(parts)

    def growing(self) -> list[Message]:
        """The Messages as the list a reader grows (its own conversion's, never one handed out)."""
        messages = self.messages
        assert isinstance(messages, list), "only a reader's own conversion grows"
        return messages

    def truncate(self, count: int) -> None:
        """Forget the Messages from ``count`` on (to be read again), in new lists: one
        handed out before keeps what it held, so these lists only ever grow and a
        conversion can be handed out without copying them. Their ``where`` entries stay:
        :meth:`position_of` checks the Message at the position it finds."""
        if count >= len(self.messages):
            return
        for items, parts in zip(self.sources[count:], self.parts[count:], strict=True):
            if parts is not None:
                (item,) = items
                left = self.split[item] - len(parts)
                if left:
                    self.split[item] = left
                else:
                    del self.split[item]
        breaks = self.breaks or []
        self.messages, self.sources, self.parts, self.breaks = (
            self.growing()[:count],
            self.sources[:count],
            self.parts[:count],
            breaks[: bisect.bisect_left(breaks, count)],
        )


@dataclass(frozen=True)
class Trim:
    """A last pass over a window in the framework's shape: ``remove(window)`` gives the
    indices to take out (whole units only), and ``reason`` says why, for the record.
    ``before(messages)``, when given, runs first on the window's ctxwindow messages and
    gives the indices of those to take out (whole units): where an item holds parts of
    two units (an Anthropic user turn with a tool result and new words), the item is
    rebuilt from the parts that stay."""

    remove: Callable[[list[Any]], set[int]]
    reason: str
    before: Callable[[Sequence[Message]], set[int]] | None = None


@dataclass(frozen=True)
class Shape(Generic[T]):
    """How one framework's items come back out of a window."""

    name: str
    rebuild: Rebuild
    #: A message a strategy made (a summary) as an item; gets the items before it.
    made: Callable[[Message, Sequence[Any]], T]
    item_id: Callable[[Any], str | None] = lambda item: None
    #: Whether ``rebuild`` is given a host's cut as a :class:`HostCut` (to keep the
    #: item's images beside it); else as a plain ``str``, never a subclass in the output.
    host_cuts: bool = False


def windower_for(
    windower: Windower | None,
    strategy: str | Strategy | None,
    budget: int | None,
    counter: TokenCounter | str | None,
    options: Mapping[str, Any],
) -> Windower:
    """The Windower an adapter call runs: the one given, or one built from the arguments."""
    if windower is not None:
        if not isinstance(windower, Windower):
            raise InvalidOption(
                f"windower must be a ctxwindow.Windower (from ctxwindow.from_config), "
                f"got {type(windower).__name__}"
            )
        given = [name for name, value in (("strategy", strategy), ("counter", counter)) if value]
        if given or options:
            listed = ", ".join([*given, *options])
            raise InvalidOption(
                f"pass either windower= or the strategy and its options, not both "
                f"(also given: {listed}); budget= alone may override the windower's"
            )
        return windower
    if budget is None:
        raise InvalidOption("budget is required (tokens) unless a configured windower is given")
    if strategy is None:
        strategy = "fixed"
    if isinstance(strategy, str):  # shared with ctxwindow.select: built once per configuration
        return cached_windower(strategy, budget, counter=counter, **options)
    if options:
        raise InvalidOption(
            f"options {', '.join(map(repr, options))} go to the strategy's constructor "
            f"when it is given as an instance; pass its name instead to set them here"
        )
    return Windower(strategy, budget, counter)


@dataclass(frozen=True)
class Call:
    """One adapter call, ready to run: ``select`` and ``aselect`` share all of it but
    the wait."""

    windower: Windower
    converted: Converted[Any]
    shape: Shape[Any]
    query: str | None = None
    budget: int | None = None
    trim: Trim | None = None

    def select(self) -> Window[Any]:
        """Window the converted Messages and give back the framework's items."""
        converted, select = self.converted, self.windower.select
        with self._in_items():
            window = select(self._history(), query=self.query, budget=self.budget)
            if not self._of_these(window):  # the conversion grew meanwhile: see _of_these
                window = select(list(converted.messages), query=self.query, budget=self.budget)
        return finish(window, converted, self.shape, self.windower, self.trim)

    async def aselect(self) -> Window[Any]:
        """Async :meth:`select`."""
        converted, aselect = self.converted, self.windower.aselect
        with self._in_items():
            window = await aselect(self._history(), query=self.query, budget=self.budget)
            if not self._of_these(window):
                window = await aselect(
                    list(converted.messages), query=self.query, budget=self.budget
                )
        return finish(window, converted, self.shape, self.windower, self.trim)

    def _history(self) -> Conversation | Sequence[Message]:
        converted = self.converted
        return converted.messages if converted.conversation is None else converted.conversation

    def _of_these(self, window: Window[Any]) -> bool:
        """Whether ``window`` is of this call's Messages: a remembered conversion's
        Conversation is shared, and a call on the same history grown further (another
        thread's) may have grown it before this call's visit read it."""
        return window.record.messages_before == len(self.converted.messages)

    @contextmanager
    def _in_items(self) -> Iterator[None]:
        try:
            yield
        except InvalidMessage as error:
            raise _in_items(error, self.converted) from None


def prepare(
    read: Callable[[], Converted[Any]],
    shape: Shape[Any],
    windower: Windower | None,
    strategy: str | Strategy | None,
    budget: int | None,
    counter: TokenCounter | str | None,
    options: Mapping[str, Any],
    *,
    query: str | None,
    trim: Trim | None = None,
) -> Call:
    """An adapter's ``select``/``aselect`` arguments as a Call: the Windower first (a bad
    option is named before the items are read), then the items, read by ``read()``."""
    chosen = windower_for(windower, strategy, budget, counter, options)
    return Call(chosen, read(), shape, query, budget, trim)


@contextmanager
def budget_in_items(call: Call) -> Iterator[None]:
    """BudgetTooSmall naming the caller's item (``position`` and the text), not the
    converted Message: those differ wherever an item is split or items are joined."""
    try:
        yield
    except BudgetTooSmall as error:
        raise _budget_in_items(error, call.converted) from None


def _budget_in_items(error: BudgetTooSmall, converted: Converted[Any]) -> BudgetTooSmall:
    position = error.position
    if position is None or not 0 <= position < len(converted.sources):
        return error
    items = converted.sources[position]
    biggest = error.biggest
    if biggest and not items:  # "message 0, a system message, ...": no item of the list
        named: str | None = _NO_ITEM.sub(_SYSTEM_PARAMETER, biggest, count=1)
    else:
        named = _note_in_items(biggest, converted) if biggest else biggest
    mapped = BudgetTooSmall(
        error.needed,
        error.budget,
        biggest=named,
        position=items[0] if items else None,  # none: Anthropic's system parameter
        biggest_tokens=error.biggest_tokens,
    )
    text = str(error)
    mapped.args = (text.replace(biggest, named, 1) if biggest and named else text,)
    return mapped


#: How a message standing for no item of the caller's list is named (Anthropic's
#: ``system`` parameter, read as if it opened the list), and its words in the host's
#: BudgetTooSmall ("message 0, a system message"), which name a position of the list.
_SYSTEM_PARAMETER = "the system parameter"
_NO_ITEM = re.compile(r"^message \d+, [^,]+")


def _in_items(error: InvalidMessage, converted: Converted[Any]) -> InvalidMessage:
    """The same error, naming the caller's item rather than the converted message."""
    if error.index is None or not 0 <= error.index < len(converted.sources):
        return error
    items = converted.sources[error.index]
    if not items:  # a message standing for no item: Anthropic's system parameter
        return type(error)(None, f"system: {error.problem}")
    return type(error)(items[0], error.problem)


class _Slot:
    """One entry of the output: an item (with its kept parts) or a made message. Plain
    slots: a window of a long chat makes one per message, on every turn."""

    __slots__ = ("cut", "item", "kept", "made", "messages", "stand_ins")

    def __init__(
        self,
        item: int | None,
        made: Message | None = None,
        kept: set[int] | None = None,  # None: the whole item
        messages: list[Message] | None = None,
    ) -> None:
        self.item = item
        self.made = made
        self.kept = kept
        self.cut: tuple[frozenset[int] | None, str] | None = None  # the newest user message, cut
        self.stand_ins: list[tuple[frozenset[int] | None, str]] = []
        self.messages: list[Message] = messages if messages is not None else []


def finish(
    window: Window[Any],
    converted: Converted[Any],
    shape: Shape[Any],
    windower: Windower,
    trim: Trim | None,
) -> Window[Any]:
    """The window as the framework's items, with the record in the caller's positions."""
    early = trim.before(window.messages) if trim and trim.before else set()
    taken_early = [_Slot(None, messages=[window.messages[i]]) for i in sorted(early)]
    if early:
        kept = [message for i, message in enumerate(window.messages) if i not in early]
        window = Window(kept, window.record)
    read = _items_alone(window.messages, converted)
    if read is not None:  # the common case: each a whole item, given back as it is or
        # around a strategy's stand-in (a cleared tool output), or a message the
        # strategy made (a summary)
        alone, stood = read
        messages = window.messages

        def slot(number: int) -> _Slot:
            item, message = alone[number], messages[number]
            made = _Slot(item, made=message if item is None else None, messages=[message])
            if number in stood:
                made.stand_ins.append((None, stood[number]))
            return made

        items = converted.items
        if None in alone or stood:
            output: list[Any] = []
            for number, (item, message) in enumerate(zip(alone, messages, strict=True)):
                if item is None:
                    output.append(shape.made(_made_in_items(message, converted), output))
                elif number in stood:
                    output.append(shape.rebuild(items[item], None, (None, stood[number])))
                else:
                    output.append(items[item])
        else:
            output = [items[item] for item in alone]  # type: ignore[index]
    else:
        slots = _slots(window, converted)

        def slot(number: int) -> _Slot:
            return slots[number]

        output = _items(slots, converted, shape)
    gone = trim.remove(output) if trim else set()
    trimmed = [*taken_early, *(slot(number) for number in sorted(gone))]
    if gone:
        output = [entry for number, entry in enumerate(output) if number not in gone]
    record = _record(window.record, converted, shape, len(output), trimmed, windower, trim)
    return Window(output, record)


def _slots(window: Window[Any], converted: Converted[Any]) -> list[_Slot]:
    """The output's entries, in order: each item once with the parts kept and any
    stand-ins, and each message a strategy made."""
    newest_user = functools.cache(functools.partial(_newest_user, converted))  # for a cut
    slots: list[_Slot] = []
    by_item: dict[int, _Slot] = {}
    sources, parts_of, position_of = converted.sources, converted.parts, converted.positions()
    for message in window.messages:
        position = position_of(message)
        if position is not None and parts_of[position] is None:
            items = sources[position]
            if len(items) == 1 and items[0] not in by_item:  # a whole item of its own
                alone = by_item[items[0]] = _Slot(items[0], messages=[message])
                slots.append(alone)
                continue
        cut = stand_in = None
        # a stand-in: a strategy's (a cleared tool output) or the host's cut tool result
        stood = _stands_in_for(message, len(converted.messages)) if position is None else None
        truncated = position is None and bool(message.metadata.get("truncated"))
        if truncated and (newest := newest_user()) is not None and stood in (None, newest):
            # the host's cut of the newest user message: a cut, not a stand-in, so that
            # its item is rebuilt once, from its kept parts, with all its text in the cut
            # (applied as a stand-in first, a split item's blocks would be renumbered)
            position, cut = newest, (parts_of[newest], HostCut(message.text))
        elif stood is not None:
            text = HostCut(message.text) if truncated else message.text
            position, stand_in = stood, (parts_of[stood], text)
        if position is None:
            slots.append(_Slot(None, made=message, messages=[message]))
            continue
        parts = parts_of[position]
        for number, item in enumerate(sources[position]):
            slot = by_item.get(item)
            if slot is None:
                slot = by_item[item] = _Slot(item, kept=set())
                slots.append(slot)
            slot.messages.append(message)
            if parts is None:
                slot.kept = None
            elif slot.kept is not None:
                slot.kept.update(parts)
            if cut is not None:
                slot.cut = cut
            if stand_in is not None:  # one stand-in a Message: in its first item alone
                slot.stand_ins.append(stand_in if not number else (stand_in[0], ""))
    return _in_item_order(slots)


def _newest_user(converted: Converted[Any]) -> int | None:
    """The position of the newest user Message, looked for only when a window holds a
    host's cut: in an agent run after one instruction it opens the history, so the look
    goes back over all of it (a list's own items read, not a Prefix's, for speed)."""
    messages = converted.messages
    held = messages.held if isinstance(messages, Prefix) else messages
    return next((p for p in range(len(messages) - 1, -1, -1) if held[p].role == "user"), None)


def _in_item_order(slots: list[_Slot]) -> list[_Slot]:
    """The caller's items in the caller's order between made messages: a Message read
    from several items (a Responses turn whose outputs the caller put between its
    calls) lays its items out before the outputs read after it."""
    out: list[_Slot] = []
    group: list[_Slot] = []
    for slot in slots:
        if slot.item is None:
            out.extend(sorted(group, key=lambda s: s.item or 0))
            out.append(slot)
            group = []
        else:
            group.append(slot)
    out.extend(sorted(group, key=lambda s: s.item or 0))
    return out


def _items(slots: list[_Slot], converted: Converted[Any], shape: Shape[Any]) -> list[Any]:
    """The framework's items for ``slots``: the caller's own where kept whole, else
    rebuilt from the kept parts, the cut text and the stand-ins."""
    output: list[Any] = []
    for slot in slots:
        if slot.made is not None:
            output.append(shape.made(_made_in_items(slot.made, converted), output))
            continue
        assert slot.item is not None
        item = converted.items[slot.item]
        if slot.kept is None and slot.cut is None and not slot.stand_ins:
            output.append(item)
            continue
        whole = slot.kept is None or len(slot.kept) == converted.split.get(slot.item, -1)
        for stand_in in slot.stand_ins:  # results keep their places: parts do not move
            item = shape.rebuild(item, None, _as_taken(stand_in, shape))
        if item is not None and not (whole and slot.cut is None):
            kept = None if whole else sorted(slot.kept or ())
            item = shape.rebuild(item, kept, _as_taken(slot.cut, shape))
        if item is not None:
            output.append(item)
    return output


def _as_taken(
    cut: tuple[frozenset[int] | None, str] | None, shape: Shape[Any]
) -> tuple[frozenset[int] | None, str] | None:
    """``cut`` as ``shape.rebuild`` takes it: a :class:`HostCut` as a plain ``str``
    unless the shape asks for it (:attr:`Shape.host_cuts`)."""
    if cut is None or shape.host_cuts or type(cut[1]) is str:
        return cut
    return cut[0], str(cut[1])


def _made_in_items(message: Message, converted: Converted[Any]) -> Message:
    """A message a strategy made (a summary) with its ``metadata.covers`` naming the
    caller's items, as the record does: a framework whose items are read into several
    Messages (a pydantic-ai request) must not name the adapter's positions. ``#position``
    of a converted Message becomes ``#item`` of each item it was read from (an int
    position, the item as an int), each item once, in order (none for Anthropic's
    ``system`` parameter, which is no item); an id stays as it is."""
    covers = message.metadata.get("covers")
    if not isinstance(covers, (list, tuple)):
        return message
    memo = converted.made_covers
    held = memo.get(id(covers)) if memo is not None else None
    if held is not None and held[0] is covers and held[2] <= converted.settled:
        mapped = held[1]  # a summary names the same messages turn after turn
    else:
        mapped, top = _covers_in_items(covers, converted.sources)
        if memo is not None and top <= converted.settled:  # read for good: they stay
            if len(memo) >= MADE_COVERS_KEPT:
                memo.clear()
            memo[id(covers)] = (covers, mapped, top)
    if mapped is None:
        return message
    metadata = {**message.metadata, "covers": mapped if isinstance(covers, tuple) else list(mapped)}
    return dataclasses.replace(message, metadata=metadata)


#: Summaries' covers remembered per conversion (see :func:`_made_in_items`).
MADE_COVERS_KEPT = 8


def _covers_in_items(
    covers: Sequence[Any], sources: Sequence[tuple[int, ...]]
) -> tuple[tuple[Any, ...] | None, int]:
    """``covers`` naming the caller's items (None: as it is), and one past the last
    converted position it names (the Messages it depends on)."""
    size, top = len(sources), 0
    named: dict[object, None] = {}  # ordered, each once
    for ref in covers:
        position = _covered_position(ref, size)
        if position is None:
            named[ref] = None
            continue
        top = max(top, position + 1)
        if type(ref) is int:
            named.update((item, None) for item in sources[position])
        else:
            named.update((f"#{item}", None) for item in sources[position])
    mapped = tuple(named)
    return (None if mapped == tuple(covers) else mapped), top


def _covered_position(ref: object, size: int) -> int | None:
    """The converted position a ``covers`` reference names by position (``#3``, or 3),
    or None for an id (or anything out of range)."""
    position = ref if type(ref) is int else covers_position(ref)
    return position if position is not None and 0 <= position < size else None


def _items_alone(
    messages: Sequence[Message], converted: Converted[Any]
) -> tuple[list[int | None], dict[int, str]] | None:
    """The item each of ``messages`` is, when each is one of the converted Messages
    standing alone for a whole item of its own, a strategy's stand-in for one (a
    cleared tool output: by number in ``messages``, with its text), each item once, or
    a message the strategy made (None: a summary, not the host's cut); else None. What
    most windows are, given back without a slot per message."""
    position_of, sources, parts = converted.positions(), converted.sources, converted.parts
    size = len(converted.messages)
    alone: list[int | None] = []
    stood: dict[int, str] = {}
    for number, message in enumerate(messages):
        position = position_of(message)
        if position is None:
            if message.metadata.get("truncated"):
                return None
            standing = _stands_in_for(message, size)
            if standing is None:
                alone.append(None)
                continue
            position, stood[number] = standing, message.text
        if parts[position] is not None:
            return None
        items = sources[position]
        if len(items) != 1:
            return None
        alone.append(items[0])
    named = [item for item in alone if item is not None]
    return (alone, stood) if len(set(named)) == len(named) else None


def _stands_in_for(message: Message, size: int) -> int | None:
    """The converted position a strategy's stand-in is sent in place of (the host marks
    it ``metadata.stands_in_for``), or None for a message the strategy made."""
    position = message.metadata.get("stands_in_for")
    if type(position) is int and 0 <= position < size:
        return position
    return None


def _record(
    record: WindowRecord,
    converted: Converted[Any],
    shape: Shape[Any],
    size: int,
    trimmed: list[_Slot],
    windower: Windower,
    trim: Trim | None,
) -> WindowRecord:
    """The core's record, its positions and counts in the caller's items."""
    gone = {id(m): m for slot in trimmed for m in slot.messages}
    # positions of the messages taken out before the items were built (Trim.before)
    early = {
        position
        for slot in trimmed
        if slot.item is None
        for position in map(converted.position_of, slot.messages)
        if position is not None
    }
    removed = {slot.item for slot in trimmed if slot.item is not None}
    taken = _Taken(removed, early, trim.reason if trim else "") if trimmed else None
    freed = sum(windower.counter.count_message(m) for m in gone.values())
    mapped = _record_in_items(record, converted, shape, taken)
    notes = mapped.notes
    if taken is not None:
        notes = (*notes, f"removed {len(trimmed)} more message(s): {taken.why}")
    return dataclasses.replace(
        mapped,
        messages_before=len(converted.items),
        messages_after=size,
        tokens_after=record.tokens_after - freed,
        notes=notes,
    )


@dataclass(frozen=True)
class _Taken:
    """What an adapter's last pass (:class:`Trim`) took out of the window: the caller's
    ``items``, and the ``early`` converted positions taken before the items were built."""

    items: set[int]
    early: set[int]
    why: str

    def of(self, decision: Decision, items: Sequence[int]) -> bool:
        """Whether ``decision`` (its unit's caller's ``items``) lost a message to it."""
        return bool(self.items.intersection(items) or self.early.intersection(decision.positions))


def _record_in_items(
    record: WindowRecord, converted: Converted[Any], shape: Shape[Any], taken: _Taken | None
) -> WindowRecord:
    """``record`` speaking of the caller's items: its decisions and their runs (mapped
    when first read, as the core builds them: a chat loop that reads neither pays for
    neither), its notes, and the records of the stages that windowed the caller's list."""

    @functools.cache
    def decide() -> tuple[Decision, ...]:
        return tuple(_decision_in_items(d, converted, shape, taken) for d in record.decisions)

    def decide_runs() -> tuple[DecisionRun, ...]:
        if taken is not None:  # its units went one by one: grouped from the decisions
            return _runs_of(decide())
        return tuple(
            DecisionRun(run.units, converted.items_at(run.positions), run.action, run.reason)
            for run in record.decision_runs  # the core's, cached there for its next visit
        )

    size = len(converted.messages)
    stages = tuple(  # those of a stage whose input is another's window stay as they are
        _stage_in_items(stage, converted, shape) if stage.messages_before == size else stage
        for stage in record.stages
    )
    notes = tuple(_note_in_items(note, converted) for note in record.notes)
    return dataclasses.replace(
        record,
        notes=_stage_counts_in_notes(notes, record.stages, stages),
        stages=stages,
        _decide=decide,
        _decide_runs=decide_runs,
    )


#: Actions after which a unit's items are in a stage's output (as they were, or copies).
_HELD = frozenset({"kept", "truncated", "replaced"})


def _stage_in_items(
    stage: WindowRecord, converted: Converted[Any], shape: Shape[Any]
) -> WindowRecord:
    """A stage that windowed the caller's list, speaking of the caller's items: its
    decisions and notes, and its message counts (the items in, the items its window
    holds and the messages it made), never the count of Messages read from them."""
    mapped = _record_in_items(stage, converted, shape, None)
    held = [run for run in stage.decision_runs if run.action in _HELD]
    items = _item_runs(converted.items_at(run.positions) for run in held)
    made = max(0, stage.messages_after - sum(len(run.positions) for run in held))
    after = sum(last - first + 1 for first, last in items) + made
    return dataclasses.replace(mapped, messages_before=len(converted.items), messages_after=after)


def _stage_counts_in_notes(
    notes: tuple[str, ...], stages: Sequence[WindowRecord], mapped: Sequence[WindowRecord]
) -> tuple[str, ...]:
    """A pipeline's notes on its stages ("stages[0] fixed: ..., messages 62 -> 32")
    with the counts of the stages mapped to the caller's items."""
    swaps = {
        f"stages[{number}] ": (
            f"messages {was.messages_before} -> {was.messages_after}",
            f"messages {now.messages_before} -> {now.messages_after}",
        )
        for number, (was, now) in enumerate(zip(stages, mapped, strict=True))
        if was is not now
    }
    if not swaps:
        return notes
    out = []
    for note in notes:
        swap = next((pair for start, pair in swaps.items() if note.startswith(start)), None)
        out.append(note.replace(*swap, 1) if swap else note)
    return tuple(out)


def _decision_in_items(
    decision: Decision, converted: Converted[Any], shape: Shape[Any], taken: _Taken | None
) -> Decision:
    """One decision in the caller's items, ``dropped`` if the last pass took its unit."""
    positions = tuple(converted.items_at(decision.positions))
    action, reason = decision.action, decision.reason
    if taken is not None and action != "dropped" and taken.of(decision, positions):
        action, reason = "dropped", f"{reason}; then removed: {taken.why}"
    items = converted.items
    return dataclasses.replace(
        decision,
        positions=positions,
        ids=tuple(shape.item_id(items[p]) for p in positions),
        action=action,
        reason=reason,
    )


def _runs_of(decisions: Sequence[Decision]) -> tuple[DecisionRun, ...]:
    """Decisions in runs of consecutive units with one action and reason, each run's
    items once (a unit may share an item with the next: a user message split in two)."""
    groups: list[list[Decision]] = []
    for decision in decisions:
        last = groups[-1][-1] if groups else None
        if (
            last is not None
            and 0 <= last.unit == decision.unit - 1
            and (last.action, last.reason) == (decision.action, decision.reason)
        ):
            groups[-1].append(decision)
        else:
            groups.append([decision])
    return tuple(
        DecisionRun(
            range(group[0].unit, group[-1].unit + 1) if group[0].unit >= 0 else range(0),
            _as_range(sorted({p for decision in group for p in decision.positions})),
            group[0].action,
            group[0].reason,
        )
        for group in groups
    )


def _run_of_items(items: tuple[int, ...]) -> bool:
    """Whether ``items`` is a run of consecutive items, ascending (most are one item)."""
    if len(items) == 1:
        return True
    return bool(items) and items == tuple(range(items[0], items[0] + len(items)))


def _as_range(items: list[int]) -> Sequence[int]:
    """Ascending distinct ``items`` as a range when they lie end to end, else a tuple."""
    if items and items[-1] - items[0] == len(items) - 1:
        return range(items[0], items[-1] + 1)
    return tuple(items)


#: A note's positions: "message 3", "messages 4-6", "messages 2-3, 6"; not a count
#: ("messages 20 -> 12", a pipeline's note on a stage).
_POSITIONS = re.compile(r"\b(messages?) (\d+(?:-\d+)?(?:, \d+(?:-\d+)?)*)(?![\d-]| ->)")


def _note_in_items(note: str, converted: Converted[Any]) -> str:
    """The host's note ("truncated message 3 ...", "dropped messages 4-6: ...", "(messages
    2-3, 6)") with its positions in the caller's items."""
    size = len(converted.messages)

    def swap(match: re.Match[str]) -> str:
        spans = [tuple(map(int, piece.split("-"))) for piece in match.group(2).split(", ")]
        if any(not 0 <= span[0] <= span[-1] < size for span in spans):
            return match.group(0)  # not positions of these Messages (a count, say)
        runs = _item_runs(converted.items_at(range(s[0], s[-1] + 1)) for s in spans)
        if not runs:  # a message that is no item: Anthropic's system parameter
            return _SYSTEM_PARAMETER
        words = ", ".join(f"{first}-{last}" if last > first else f"{first}" for first, last in runs)
        one = len(runs) == 1 and runs[0][0] == runs[0][1]
        return f"message {words}" if one else f"messages {words}"

    return _POSITIONS.sub(swap, note)


def _item_runs(pieces: Iterable[Sequence[int]]) -> list[tuple[int, int]]:
    """The items of ``pieces`` (each ascending) as runs of consecutive items (first,
    last), in order: a piece that is a range is one run, however long."""
    edges: list[tuple[int, int]] = []
    for piece in pieces:
        if isinstance(piece, range):
            edges.extend([(piece.start, piece.stop - 1)] if piece else [])
        else:
            edges.extend((item, item) for item in piece)
    runs: list[tuple[int, int]] = []
    for first, last in sorted(edges):
        if runs and first <= runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], max(last, runs[-1][1]))
        else:
            runs.append((first, last))
    return runs


def text_of(value: Any) -> str:
    """A best-effort text rendering of a tool's output or arguments, for counting."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    import json

    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def get(item: Any, key: str, default: Any = None) -> Any:
    """A field of a dict, or an attribute of an SDK object (a pydantic model)."""
    if isinstance(item, Mapping):
        return item.get(key, default)
    return getattr(item, key, default)
