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

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from ctxwindow import (
    Conversation,
    Decision,
    Message,
    Strategy,
    TokenCounter,
    Window,
    Windower,
    WindowRecord,
    cached_windower,
)
from ctxwindow.errors import InvalidMessage, InvalidOption

T = TypeVar("T")

#: ``rebuild(item, kept, cut)``: the item with only the parts in ``kept`` (None: all),
#: and, when ``cut`` is set, the text of the parts in ``cut[0]`` (None: the whole item's
#: text) replaced by ``cut[1]``: the host's truncation of the newest user message, or a
#: strategy's stand-in for one of the item's Messages (a tool result's new content).
Rebuild = Callable[[Any, "Sequence[int] | None", "tuple[frozenset[int] | None, str] | None"], Any]


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
        self.messages, self.sources, self.parts = (
            self.growing()[:count],
            self.sources[:count],
            self.parts[:count],
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
    alone = _items_alone(window.messages, converted)
    if alone is not None:  # the common case: each a whole item, given back as it is,
        # or a message the strategy made (a summary)
        messages = window.messages

        def slot(number: int) -> _Slot:
            item, message = alone[number], messages[number]
            return _Slot(item, made=message if item is None else None, messages=[message])

        items = converted.items
        if None in alone:
            output: list[Any] = []
            for item, message in zip(alone, messages, strict=True):
                output.append(shape.made(message, output) if item is None else items[item])
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
    newest_user = next(
        (p for p in range(len(converted.messages) - 1, -1, -1)
         if converted.messages[p].role == "user"),
        None,
    )  # fmt: skip
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
        if stood is not None:
            position, stand_in = stood, (parts_of[stood], message.text)
        elif position is None and message.metadata.get("truncated") and newest_user is not None:
            position, cut = newest_user, (parts_of[newest_user], message.text)
        if position is None:
            slots.append(_Slot(None, made=message, messages=[message]))
            continue
        parts = parts_of[position]
        for item in sources[position]:
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
            if stand_in is not None:
                slot.stand_ins.append(stand_in)
    return _in_item_order(slots)


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
            output.append(shape.made(slot.made, output))
            continue
        assert slot.item is not None
        item = converted.items[slot.item]
        if slot.kept is None and slot.cut is None and not slot.stand_ins:
            output.append(item)
            continue
        whole = slot.kept is None or len(slot.kept) == converted.split.get(slot.item, -1)
        for stand_in in slot.stand_ins:  # results keep their places: parts do not move
            item = shape.rebuild(item, None, stand_in)
        if whole and slot.cut is None:
            output.append(item)
        else:
            output.append(shape.rebuild(item, None if whole else sorted(slot.kept or ()), slot.cut))
    return output


def _items_alone(messages: Sequence[Message], converted: Converted[Any]) -> list[int | None] | None:
    """The item each of ``messages`` is, when each is one of the converted Messages
    standing alone for a whole item of its own, each item once, or a message the
    strategy made (None: a summary, neither a stand-in nor the host's cut); else None.
    What most windows are, given back without a slot per message."""
    position_of, sources, parts = converted.positions(), converted.sources, converted.parts
    size = len(converted.messages)
    alone: list[int | None] = []
    for message in messages:
        position = position_of(message)
        if position is None:
            if _stands_in_for(message, size) is not None or message.metadata.get("truncated"):
                return None
            alone.append(None)
            continue
        if parts[position] is not None:
            return None
        items = sources[position]
        if len(items) != 1:
            return None
        alone.append(items[0])
    named = [item for item in alone if item is not None]
    return alone if len(set(named)) == len(named) else None


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
    sources = converted.sources
    items = converted.items
    removed = {slot.item for slot in trimmed if slot.item is not None}
    why = trim.reason if trim else ""
    gone = {id(m): m for slot in trimmed for m in slot.messages}
    # positions of the messages taken out before the items were built (Trim.before)
    early = {
        position
        for slot in trimmed
        if slot.item is None
        for position in map(converted.position_of, slot.messages)
        if position is not None
    }
    freed = sum(windower.counter.count_message(m) for m in gone.values())
    inner = record

    def decide() -> tuple[Decision, ...]:
        out = []
        for decision in inner.decisions:
            positions = sorted({item for p in decision.positions for item in sources[p]})
            action, reason = decision.action, decision.reason
            taken = removed.intersection(positions) or early.intersection(decision.positions)
            if taken and action != "dropped":
                action, reason = "dropped", f"{reason}; then removed: {why}"
            out.append(
                dataclasses.replace(
                    decision,
                    positions=tuple(positions),
                    ids=tuple(shape.item_id(items[p]) for p in positions),
                    action=action,
                    reason=reason,
                )
            )
        return tuple(out)

    notes = tuple(_note_in_items(note, sources) for note in record.notes)
    if trimmed:
        notes = (*notes, f"removed {len(trimmed)} more message(s): {why}")
    return dataclasses.replace(
        record,
        messages_before=len(items),
        messages_after=size,
        tokens_after=record.tokens_after - freed,
        notes=notes,
        _decide=decide,
    )


_POSITIONS = re.compile(r"\b(messages?) (\d+)(?:-(\d+))?")


def _note_in_items(note: str, sources: Sequence[tuple[int, ...]]) -> str:
    """The host's note ("truncated message 3 ...", "dropped messages 4-6: ...") with its
    positions in the caller's items."""

    def item(position: str, last: bool) -> int | None:
        p = int(position)
        found = sources[p] if 0 <= p < len(sources) else ()
        return (found[-1] if last else found[0]) if found else None

    def swap(match: re.Match[str]) -> str:
        first = item(match.group(2), last=False)
        final = item(match.group(3) or match.group(2), last=True)
        if first is None or final is None:
            return match.group(0)
        if first == final:
            return f"message {first}"
        return f"messages {first}-{final}"

    return _POSITIONS.sub(swap, note)


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
