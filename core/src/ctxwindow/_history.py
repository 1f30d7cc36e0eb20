"""A conversation read once and kept ready for windowing, and the view of it a
strategy gets on one visit.

:class:`Conversation` parses, groups and counts each message once, as it is appended,
so a chat loop that appends a message and re-selects pays for that message only.
A plain list passed to ``select`` is read into a temporary Conversation.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import operator
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import accumulate, compress, count, islice, repeat
from operator import is_, ne
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, TypeVar, overload

from ctxwindow._messages import (
    INSTRUCTION_ROLES,
    Lazy,
    Message,
    batch_entries,
    check_message_list,
    read_common,
    read_message,
    simple_entries,
    simple_message,
)
from ctxwindow._refs import covers_position
from ctxwindow._selection import Selection, reaches
from ctxwindow._tokens import TokenCounter, direct
from ctxwindow._units import Defect, Unit, answered_twice, orphan_result, unanswered_calls
from ctxwindow.kit._prefixes import CHECKED, as_now, contents_unchanged, first_changed

T = TypeVar("T")

NOT_UNIT = -1
#: Why a unit must stay: an instruction (by its role), a pinned message, and the units
#: the runner adds to those.
INSTRUCTION = {"system": "system message", "developer": "developer message"}
PINNED = "pinned"
NEWEST_USER = "newest user message"
CURRENT_TURN = "current turn (after the newest user message)"
#: The current turn's reason in a history with no user message (an agent run from its
#: system or developer instructions alone).
CURRENT_TURN_NO_USER = "current turn (after the instructions: there is no user message)"
NEWEST_EXCHANGE = "newest exchange of the current turn"
TASK_STATEMENT = "task statement (the first user message)"
#: The task statement is kept when it costs at most 1/TASK_SHARE of the budget.
TASK_SHARE = 4
#: The most of an agent's current turn the query reads (characters): long tool output
#: would otherwise make every visit's query as long as the turn.
AGENT_QUERY_CHARS = 32_000
#: Reading or counting more messages than this at once runs with the cyclic garbage
#: collector paused: the objects made are acyclic, and on 100k messages its passes over
#: them cost about a third of a cold visit.
GC_PAUSE_AT = 5_000
#: A batch this long or longer is read at once (``Conversation._read_batch``, and
#: ``simple_entries`` for what it leaves); a chat loop's new message is read as it is
#: (the batch lookups would cost it more).
BATCH_LOOKUPS_FROM = 16
#: The roles of results: a message read whole with one of these is read one at a time.
_RESULT_ROLES = ("tool", "function")
#: Running token sums are kept for this many counters per conversation (the least
#: recently used are forgotten), so a new counter object per call cannot grow it.
SUMS_KEPT = 4


#: What a small batch (a chat loop's new message) runs under: nothing to pause.
_UNPAUSED = contextlib.nullcontext()
_new_tuple = tuple.__new__


def _collector_paused(count: int) -> contextlib.AbstractContextManager[None]:
    if count < GC_PAUSE_AT or not gc.isenabled():
        return _UNPAUSED
    return _paused()


@contextlib.contextmanager
def _paused() -> Iterator[None]:
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _Grouping(NamedTuple):
    """A conversation's grouping state before a read (see ``Conversation._rewind``)."""

    last_stop: int
    units: int
    defects: int
    kept_always: int
    open_start: int | None
    open_pending: set[str]
    open_calls: tuple[str, ...]
    newest_user: int | None
    first_user: int | None
    first_call: int | None
    function_call: tuple[int, str | None] | None


class Branch(NamedTuple):
    """Where a conversation read by :meth:`Conversation.branch` came from: the first
    ``messages`` messages of ``parent`` (its first ``units`` units), which the two hold
    alike. A strategy's per-conversation state for ``parent`` holds for those units of
    the branch too (:class:`ctxwindow.kit.PerConversation` starts from it)."""

    parent: Conversation
    messages: int
    units: int


class Conversation:
    """An append-only history whose reading, grouping and counting is done once.

    Each visit compares the ``content`` of the newest 256 messages (``CHECKED``) and of
    the system, developer, pinned, first and newest user messages with what was read: a
    reply streamed into its dict, or a refreshed system prompt, is seen, and the
    conversation is read and counted again: from the first edited message on when only
    the newest were edited (a :meth:`branch`: strategies' per-conversation state starts
    from this one's), else whole (as a new one: that state starts afresh). An older
    dict edited in place is not seen: append or pass a new dict instead, or build a new
    Conversation.
    """

    def __init__(self, messages: Iterable[Any] = ()) -> None:
        self._lock = threading.RLock()
        self._originals: list[Any] = []
        #: Each message read: a Message, or the fields of a simple dict whose Message is
        #: built when first asked for (see :meth:`message`).
        self._messages: list[Message | Lazy] = []
        self._starts: list[int] = []
        self._stops: list[int] = []
        self._unit_of: list[int] = []
        self._defects: list[Defect] = []
        self._open_start: int | None = None
        self._open_pending: set[str] = set()
        #: The open exchange's call ids: a result repeating one of those answered
        #: already (a retried step) breaks the exchange, and is said to be the cause.
        self._open_calls: tuple[str, ...] = ()
        self._kept_always: list[int] = []  # positions of system, developer, pinned
        self._newest_user: int | None = None
        self._first_user: int | None = None  # the task statement
        #: The first assistant message that calls tools (an agent's history), if any.
        self._first_call: int | None = None
        #: The newest legacy function_call, a unit of its own so far: (position, name).
        #: The ``function`` message right after it with that name joins its unit: the two
        #: are kept or dropped together, as a tool call and its results are. Unpaired,
        #: each stands alone (the legacy API did not require an answer).
        self._function_call: tuple[int, str | None] | None = None
        self._sums: dict[int, tuple[object, list[int]]] = {}  # by id of the exact counter
        self._ids: dict[str, int] = {}  # each message id's first position
        self._contents: list[Any] = []  # each original's ``content`` as read
        #: Whether every original is a dict (whose contents are read at C speed), and
        #: whether every one is a ctxwindow Message (immutable: nothing to compare).
        self.all_dicts = True
        self.all_messages = True
        #: The conversation read again after an edit in place was seen: it holds the
        #: history from then on, and this one only forwards to it (the views taken
        #: before stay as they were).
        self._successor: Conversation | None = None
        self._branched_from: Branch | None = None
        #: The parent's own origin, when the parent was branched before its strategies
        #: made their states from that origin: a state is looked for there next.
        self._fallback: Branch | None = None
        #: Strategies' states for this conversation, by their PerConversation (weakly).
        self._states: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        #: Whether a visit has viewed it: strategies that keep states in pools of their
        #: own (not in ``_states``) may have made them from it.
        self._viewed = False
        self.extend(messages)

    def __len__(self) -> int:
        live = self._live()
        return len(live._messages)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.originals)

    def __repr__(self) -> str:
        """How long it is, never what the messages say (a log line may show it)."""
        live = self._live()
        messages, units = _count(len(live._messages), "message"), _count(len(live._starts), "unit")
        return f"Conversation({messages}, {units})"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Copied (``copy.copy`` too) and pickled as a new conversation of the same
        messages, read again: a copy that shared this one's lists would append to
        both, and the lock cannot be pickled."""
        return (type(self), (self.originals,))

    @property
    def originals(self) -> list[Any]:
        """The objects as they were appended (a new list; the objects themselves)."""
        live = self._live()
        return live._originals[: len(live._messages)]

    def _live(self) -> Conversation:
        """The conversation that holds the history now: this one, or the one it was
        read into again after an edit (the chain is shortened as it is followed)."""
        successor = self._successor
        if successor is None:
            return self
        live = successor._live()
        self._successor = live
        return live

    def append(self, message: Any) -> None:
        """Read, validate and group one message; a bad one raises InvalidMessage."""
        self.extend((message,))

    def extend(self, messages: Iterable[Any]) -> None:
        """Append several messages: all of them, or none if one is invalid."""
        with self._lock:
            if self._successor is not None:  # checked under the lock: _reread sets it
                self._live().extend(messages)
                return
            start = len(self._messages)
            entries: list[Any] = list(check_message_list(messages))
            try:  # for a list of dicts, at C speed
                contents: list[Any] | None = list(map(dict.get, entries, repeat("content")))
            except TypeError:  # not all dicts: Messages, SDK objects, other mappings
                contents = None
            saved = self._grouping()
            try:
                with _collector_paused(len(entries)):
                    self._read(start, entries, contents)
            except BaseException:
                self._rewind(start, saved)
                raise
            self._originals.extend(entries)
            if contents is None:
                self.all_dicts = False
                contents = list(map(_content_of, entries))
            else:
                contents = _snapshots(contents)
            if (
                self.all_messages
                and entries
                and (  # a dict list's first entry says it
                    type(entries[0]) is not Message or not set(map(type, entries)) <= {Message}
                )
            ):
                self.all_messages = False
            self._contents.extend(contents)

    def message(self, position: int) -> Message:
        """The message at ``position``, built now if it was read as a simple dict: once,
        under the lock, so that every view and thread gets the same object."""
        item = self._messages[position]
        if type(item) is tuple:
            with self._lock:
                item = self._messages[position]
                if type(item) is tuple:
                    item = simple_message(item)
                    self._messages[position] = item
        return item  # type: ignore[return-value]

    def _read(self, start: int, entries: list[Any], contents: list[Any] | None) -> None:
        """Read, group and note ``entries``: every cold visit's work. A long batch of
        dicts (``contents``: each one's ``content``; None when not all are dicts) read
        while no tool exchange is open has its well-formed start read at once
        (:meth:`_read_batch`); the rest, and anything else, a message at a time. An
        invalid entry raises with the grouping half done (:meth:`extend` rewinds it)."""
        if contents is not None and len(entries) >= BATCH_LOOKUPS_FROM and self._open_start is None:
            done = self._read_batch(start, entries, contents)
            if done == len(entries):
                return
            if done:
                start, entries, contents = start + done, entries[done:], contents[done:]
        self._read_each(start, entries, contents)

    def _read_batch(self, start: int, entries: list[Any], contents: list[Any]) -> int:
        """Read the longest start of a batch of dicts that holds no defect and no tool
        exchange left open, and return its length (0: none of it; the caller reads
        what is left a message at a time, which finds the defect and says why).

        The simple dicts and tool results are read in one pass with no call per message
        (:func:`batch_entries`), and the units, users and instructions found from the
        roles at C speed (in a well-formed run, each message but a tool result starts a
        unit). Only the other entries (an assistant's calls, any other shape) are read
        one by one: a call per message was most of a cold visit's cost. What it reads
        and notes is what :meth:`_read_each` would."""
        roles: list[Any] = list(map(dict.get, entries, repeat("role")))
        # a simple dict's or tool result's fields, as read_common reads them; None for
        # the other entries, replaced as they are read
        items = batch_entries(entries, contents, roles)
        cut = len(entries)
        calls: list[int] = []
        messages: list[int] = []
        for index in compress(range(cut), map(is_, items, repeat(None))):
            entry = entries[index]
            read = read_common(entry) or read_message(entry, start + index)
            if isinstance(read, Message):
                if read.role in _RESULT_ROLES or read.tool_calls or read.function_call is not None:
                    cut = index
                    break
                messages.append(index)
            else:
                if len(read) == 4:
                    cut = index
                    break
                ids = read[4]
                results = items[index + 1 : index + 1 + len(ids)]
                # its results, each once, right after it: else read from it one at a time
                if None in results or {result[2] for result in results} != set(ids):
                    cut = index
                    break
                calls.append(index)
            items[index] = read
        del roles[cut:], items[cut:]
        answered = roles.count("tool")
        if answered != sum(len(items[index][4]) for index in calls):
            cut = _first_orphan(roles, items, calls)  # a result that answers no call
            calls = [index for index in calls if index < cut]
            messages = [index for index in messages if index < cut]
            del roles[cut:], items[cut:]
            answered = roles.count("tool")
        if not cut:
            return 0
        if self._messages:
            self._messages.extend(items)
        else:  # a new conversation's first read: the list read is the one kept
            self._messages = items
        positions = range(start, start + cut)
        base = len(self._starts)
        if answered:  # in a well-formed run, each message but a result starts a unit
            opens = list(map(ne, roles, repeat("tool")))
            firsts = list(compress(positions, opens))
            self._unit_of.extend(islice(accumulate(opens, initial=base - 1), 1, None))
        else:
            firsts = list(positions)
            self._unit_of.extend(range(base, base + cut))
        self._starts.extend(firsts)
        self._stops.extend(islice(firsts, 1, None))
        self._stops.append(start + cut)
        if "user" in roles:
            self._newest_user = start + cut - 1 - roles[::-1].index("user")
            if self._first_user is None:
                self._first_user = start + roles.index("user")
        kept = sorted(start + at for role in INSTRUCTION_ROLES for at in _places(roles, role))
        if messages:  # read whole: a made instruction is not kept, a pinned message is
            read_whole = {start + index for index in messages}
            kept = sorted(
                {*kept} - read_whole
                | {start + index for index in messages if _always_kept(items[index])}
            )
            for index in messages:
                message_id = items[index].id
                if message_id is not None:
                    self._ids.setdefault(message_id, start + index)
        self._kept_always.extend(kept)
        if calls:
            if self._first_call is None:
                self._first_call = start + calls[0]
            self._open_pending = set()
            self._open_calls = items[calls[-1]][4]
        return cut

    def _read_each(self, start: int, entries: list[Any], contents: list[Any] | None) -> None:
        """Read, group and note ``entries`` a message at a time. A long batch of dicts
        has its simple dicts read at once by :func:`simple_entries`; anything else is
        read in full."""
        simple: Iterable[Lazy | None] = (
            repeat(None)
            if contents is None or len(entries) < BATCH_LOOKUPS_FROM
            else simple_entries(entries, contents)
        )
        parsed: list[Message | Lazy] = []
        add = parsed.append
        starts, stops, unit_of = self._starts, self._stops, self._unit_of
        kept_always = self._kept_always
        for position, entry, fields in zip(count(start), entries, simple):
            item = fields
            if item is None:  # not a simple dict: read whole, or a tool result
                read = read_common(entry) or read_message(entry, position)
                if isinstance(read, Message):
                    add(read)
                    self._read_message(position, read)
                    continue
                item = read
            add(item)
            role = item[0]
            if len(item) != 4:  # an assistant's calls
                self._group(position, role, item[4], None, None)
                if self._first_call is None:
                    self._first_call = position
                continue
            if self._open_start is None and role != "tool":  # a unit of its own
                unit_of.append(len(starts))
                starts.append(position)
                stops.append(position + 1)
            else:
                self._group(position, role, (), item[2], None)
            if role == "user":
                self._newest_user = position
                if self._first_user is None:
                    self._first_user = position
            elif role in INSTRUCTION_ROLES:
                kept_always.append(position)
        self._messages.extend(parsed)

    def _grouping(self) -> _Grouping:
        """What :meth:`_read` changes other than by appending, to rewind it by (made by
        ``tuple.__new__``: a NamedTuple's own constructor would cost each append more
        than the rest of reading a message)."""
        return _new_tuple(_Grouping, (
            self._stops[-1] if self._stops else 0,
            len(self._starts),
            len(self._defects),
            len(self._kept_always),
            self._open_start,
            set(self._open_pending),
            self._open_calls,
            self._newest_user,
            self._first_user,
            self._first_call,
            self._function_call,
        ))  # fmt: skip

    def _rewind(self, start: int, saved: _Grouping) -> None:
        """Undo a :meth:`_read` of messages from ``start`` on that raised part way."""
        units = saved.units
        del self._messages[start:]  # a batch's well-formed start is added before the rest
        del self._starts[units:], self._stops[units:], self._unit_of[start:]
        if units:
            self._stops[-1] = saved.last_stop  # a function result joins its call's unit
        if saved.open_start is not None:  # an exchange it closed is open again
            self._unit_of[saved.open_start :] = [NOT_UNIT] * (start - saved.open_start)
        del self._defects[saved.defects :], self._kept_always[saved.kept_always :]
        self._open_start, self._open_pending = saved.open_start, saved.open_pending
        self._open_calls = saved.open_calls
        self._newest_user, self._first_user = saved.newest_user, saved.first_user
        self._first_call, self._function_call = saved.first_call, saved.function_call
        for message_id in [key for key, position in self._ids.items() if position >= start]:
            del self._ids[message_id]

    def _read_message(self, position: int, message: Message) -> None:
        """Group and note a message read whole (:meth:`_read` adds it to the list)."""
        calls = message.tool_calls
        ids = tuple(call.id for call in calls) if calls else ()
        self._group(position, message.role, ids, message.tool_call_id, message)
        if _always_kept(message):
            self._kept_always.append(position)
        if (message.tool_calls or message.function_call is not None) and self._first_call is None:
            self._first_call = position
        if message.id is not None:
            self._ids.setdefault(message.id, position)
        if message.role == "user":
            self._newest_user = position
            if self._first_user is None:
                self._first_user = position

    def _group(
        self,
        position: int,
        role: str,
        call_ids: tuple[str, ...],
        tool_call_id: str | None,
        message: Message | None,
    ) -> None:
        """Put the message at ``position`` in its unit (``call_ids``: the ids of its
        tool calls; ``message``: None for one read but not built, which has no legacy
        function call or name)."""
        if self._open_start is None and role != "tool" and not call_ids:
            name = message.name if message is not None else None
            if role == "function" and self._function_call == (position - 1, name):
                self._unit_of.append(len(self._starts) - 1)  # joins its call's unit
                self._stops[-1] = position + 1
                return
            self._unit_of.append(len(self._starts))  # the common case: a unit of its own
            self._starts.append(position)
            self._stops.append(position + 1)
            if message is not None and message.function_call is not None:
                self._function_call = (position, message.function_call.name)
            return
        self._unit_of.append(NOT_UNIT)
        if self._open_start is not None:
            if role == "tool" and tool_call_id in self._open_pending:
                self._open_pending.discard(tool_call_id)
                if not self._open_pending:
                    self._close_unit(self._open_start, position + 1)
                    self._open_start = None
                return
            # not pending: one of the exchange's calls was answered already (a repeat)
            if role == "tool" and tool_call_id in self._open_calls:
                assert tool_call_id is not None  # a call's id matched it
                breaks = answered_twice(
                    self._open_start, position, tool_call_id, self._open_pending
                )
            else:
                breaks = unanswered_calls(self._open_start, position, self._open_pending)
            self._defects.append(breaks)
            self._open_start = None
        if role == "assistant" and call_ids:
            self._open_start = position
            self._open_pending = set(call_ids)
            self._open_calls = call_ids
        elif role == "tool":
            self._defects.append(orphan_result(position, tool_call_id))
        else:
            self._close_unit(position, position + 1)

    def _close_unit(self, start: int, stop: int) -> None:
        unit = len(self._starts)
        self._starts.append(start)
        self._stops.append(stop)
        for position in range(start, stop):
            self._unit_of[position] = unit

    @property
    def branched_from(self) -> Branch | None:
        """The conversation this one was branched from (see :meth:`branch`), while that
        one is alive and this one has not been branched in turn (or has, before its
        strategies made their states from it); else None."""
        return self._branched_from

    @property
    def origins(self) -> tuple[Branch, ...]:
        """Where a strategy's state for this conversation may start from, nearest first:
        :attr:`branched_from`, then the parent's own parent when the parent was branched
        again before its strategies made their states (it may have none yet); empty
        for a conversation read whole. :class:`ctxwindow.kit.PerConversation` tries each
        in turn; a pool of states of its own should too."""
        nearest, fallback = self._branched_from, self._fallback
        return tuple(origin for origin in (nearest, fallback) if origin is not None)

    def branch(self, position: int, *, originals: Sequence[Any] | None = None) -> Conversation:
        """A new conversation holding this one's messages before ``position`` (before
        the unit that holds it, so that a tool exchange is never split), as read
        already, and nothing after. The runner reads a list that differs from a
        remembered history only in its newest messages (a tool result cleared, a
        message edited or taken back) into a branch rather than whole; a strategy's
        per-conversation state starts from this one's (:attr:`branched_from`).

        The branch keeps this conversation alive until it is branched in turn, and
        this one forgets where it came from: one link back, never a chain. Unless this
        one is branched before its strategies made their states from its parent (a
        second caller's edit published first): then it keeps that link for its own
        visit, the branch may start from the parent's parent too, and that one forgets
        its own link: two links back at most.

        ``position`` is a message's index, as in :meth:`message`: a negative one counts
        from the end (``branch(-1)``: what comes before the newest message's unit); one
        past the end takes every message.

        ``originals``: the objects the branch gives back, when they are not this one's:
        equal ones the caller holds (a list whose contents the caller has compared with
        this conversation's up to ``position``)."""
        live = self._live()
        if live is not self:
            return live.branch(position, originals=originals)
        with self._lock:
            size = len(self._messages)
            cut = self._boundary(min(_position(position, size), size))
            units = self._unit_of[cut - 1] + 1 if cut else 0
            twin = Conversation()
            source = self._originals if originals is None else originals
            twin._originals = source[:cut] if type(source) is list else list(source[:cut])
            twin._messages = self._messages[:cut]
            twin._contents = self._contents[:cut]
            twin._starts, twin._stops = self._starts[:units], self._stops[:units]
            twin._unit_of = self._unit_of[:cut]
            twin._defects = [defect for defect in self._defects if defect.stop <= cut]
            twin._kept_always = self._kept_always[: bisect.bisect_left(self._kept_always, cut)]
            twin._newest_user = self._user_before(cut)
            twin._first_user = _before(self._first_user, cut)
            twin._first_call = _before(self._first_call, cut)
            last = self._messages[cut - 1] if cut else None
            if isinstance(last, Message) and last.function_call is not None:
                twin._function_call = (cut - 1, last.function_call.name)
            twin._ids = _ids_before(self._ids, self._messages, cut)
            twin._sums = {key: (c, sums[: cut + 1]) for key, (c, sums) in self._sums.items()}
            twin.all_dicts, twin.all_messages = self.all_dicts, self.all_messages
            twin._branched_from = Branch(self, cut, units)
            self._link_on(twin, cut, units)
            return twin

    def _link_on(self, twin: Conversation, cut: int, units: int) -> None:
        """Let go of where this one came from, now that ``twin`` is branched from it,
        unless its strategies have not made their states from there yet (it has fewer
        than its parent, or no visit has viewed it since its parent's: a pool of states
        of a strategy's own is not counted in ``_states``): then keep it, give ``twin``
        it as a fallback (back to what the three share), and cut the link beyond, so
        that no chain grows."""
        origin, self._fallback = self._branched_from, None
        if origin is None or not (
            len(self._states) < len(origin.parent._states)
            or (origin.parent._viewed and not self._viewed)
        ):
            self._branched_from = None
            return
        parent = origin.parent
        twin._fallback = Branch(parent, min(cut, origin.messages), min(units, origin.units))
        parent._branched_from = parent._fallback = None

    def _boundary(self, position: int) -> int:
        """The nearest position at or before ``position`` where no unit, open tool
        exchange or defective run is cut in two."""
        cut = position
        while cut > 0:
            unit = self._unit_of[cut - 1]
            if unit >= 0 and self._stops[unit] == cut:
                break
            cut = self._starts[unit] if unit >= 0 else cut - 1
        return cut

    def _user_before(self, cut: int) -> int | None:
        """The newest user message before ``cut``."""
        if self._newest_user is None or self._newest_user < cut:
            return self._newest_user
        for position in range(cut - 1, -1, -1):
            item = self._messages[position]
            if (item[0] if type(item) is tuple else item.role) == "user":  # type: ignore[union-attr]
                return position
        return None

    def cumulative_tokens(self, counter: TokenCounter, upto: int) -> list[int]:
        """Running token totals: entry i is the cost of the first i messages."""
        if self._successor is not None:
            return self._live().cumulative_tokens(counter, upto)
        exact = getattr(counter, "inner", counter)  # a cache's counts are its counter's
        with self._lock:
            entry = self._sums.pop(id(exact), None)
            if entry is None or entry[0] is not exact:
                entry = (exact, [0])
            self._sums[id(exact)] = entry  # last: the most recently used
            while len(self._sums) > SUMS_KEPT:
                del self._sums[next(iter(self._sums))]
            sums = entry[1]
            total = sums[-1]
            counting = direct(counter)
            count = counting.count_message
            # simple dicts' counts without their Messages, when the counter can
            entries = getattr(counting, "count_entries", None)
            start = len(sums) - 1
            with _collector_paused(upto - start):
                if entries is not None:  # the common case: counted in one pass, summed in C
                    counts = entries(self._messages[start:upto])
                    running = accumulate(counts, initial=total)
                    next(running)  # ``total`` itself: the last entry already
                    sums.extend(running)
                    return sums
                for position, item in enumerate(self._messages[start:upto], start):
                    if not isinstance(item, tuple):
                        total += count(item)
                    else:
                        total += count(self.message(position))
                    sums.append(total)
            return sums

    def view(
        self,
        counter: TokenCounter,
        budget: int,
        query: str | None = None,
        *,
        task_statement: bool = True,
        originals: Sequence[Any] | None = None,
    ) -> History:
        """A consistent snapshot for one visit, counted with ``counter``; with
        ``task_statement``, the first user message is kept whenever it fits (see
        :attr:`History.must_keep`). ``originals``: the objects the window gives back,
        when they are not those appended (equal ones the caller passed this time, whose
        contents the caller has compared); without them, the appended objects' contents
        are compared here, and an edit in place is read again (see the class)."""
        if self._successor is not None or (originals is None and self._edited()):
            return self._reread().view(
                counter, budget, query, task_statement=task_statement, originals=originals
            )
        with self._lock:
            self._viewed = True
            size = len(self._messages)
            defects = list(self._defects)
            if self._open_start is not None:
                defects.append(unanswered_calls(self._open_start, size, self._open_pending))
            return History(
                conversation=self,
                size=size,
                unit_count=len(self._starts),
                sums=self.cumulative_tokens(counter, size),
                defects=tuple(defects),
                kept_always=tuple(self._kept_always),
                newest_user=self._newest_user,
                first_user=self._first_user,
                task_statement=task_statement,
                agent=self._first_call is not None,
                counter=counter,
                budget=budget,
                query=query,
                originals=self._originals if originals is None else originals,
            )

    @property
    def checked_always(self) -> list[int]:
        """Positions of the messages apps edit in place wherever they stand, compared on
        every visit beside the newest CHECKED: the instructions and pins, the first and
        newest user message."""
        named = (*self._kept_always, self._first_user, self._newest_user)
        return [position for position in named if position is not None]

    def _edited(self) -> bool:
        """Whether the content of a message apps edit in place (the newest CHECKED and
        :attr:`checked_always`) is not what was read. Cheap: about 20 microseconds a
        visit, whatever the length; nothing for ctxwindow Messages, which are frozen."""
        if self.all_messages:
            return False
        with self._lock:
            checked = self.checked_always
            raw = _dict_contents if self.all_dicts else None
            return not contents_unchanged(
                self._originals, self._contents, _contents, checked, raw=raw
            )

    def _reread(self) -> Conversation:
        """The conversation that holds the history now, read again from the caller's
        objects if this one was edited in place (a bad edit raises InvalidMessage):
        from the first edited message on, as a :meth:`branch`, when only the newest
        CHECKED were edited (a streamed reply); whole when an older one was (a
        refreshed system prompt)."""
        with self._lock:
            if self._successor is None:
                edited = self._first_edited()
                if edited is None:
                    successor = Conversation(self._originals)
                else:
                    successor = self.branch(edited)
                    successor.extend(self._originals[len(successor) : len(self._messages)])
                self._successor = successor
            return self._live()

    def _first_edited(self) -> int | None:
        """The first of the newest CHECKED messages whose content is not what was read,
        or None when an older message apps edit in place was edited too (or none of
        the newest was, or a comparison failed)."""
        size = len(self._contents)
        tail = max(0, size - CHECKED)
        try:
            named = [p for p in self.checked_always if p < tail]
            if any(_content_of(self._originals[p]) != self._contents[p] for p in named):
                return None
            return first_changed(_contents(self._originals[tail:size]), self._contents, tail, None)
        except Exception:  # an odd object's __eq__ failed: read whole
            return None


def _count(number: int, noun: str) -> str:
    """``1 message``, ``2 messages``: the repr reads as a sentence."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _position(position: object, size: int) -> int:
    """``position`` as a message index of a conversation of ``size`` messages (a negative
    one counts from the end), at least 0; else IndexError or TypeError saying why."""
    if isinstance(position, bool) or not hasattr(type(position), "__index__"):
        raise TypeError(
            f"branch({position!r}): a position is a message's index, an int (a negative "
            f"one counts from the end, as in message())"
        )
    index = operator.index(position)  # type: ignore[arg-type]
    if index < 0:
        index += size
        if index < 0:
            raise IndexError(
                f"branch({position!r}): the conversation holds {size} messages, so a "
                f"negative position is -1 to -{size}"
            )
    return index


def _always_kept(message: Message) -> bool:
    """An instruction stays; a made one (an earlier visit's summary) is content. A
    pinned message stays."""
    return (message.role in INSTRUCTION_ROLES and not message.synthetic) or message.pinned


def _places(values: list[Any], value: str) -> list[int]:
    """Where ``value`` stands in ``values``: found by scans at C speed (an instruction
    is one message in thousands)."""
    found: list[int] = []
    at = -1
    with contextlib.suppress(ValueError):
        while True:
            at = values.index(value, at + 1)
            found.append(at)
    return found


def _first_orphan(roles: list[Any], items: list[Any], calls: list[int]) -> int:
    """The position of the first tool result that answers none of ``calls`` (the
    positions of the assistants' calls among ``items``, each answered right after)."""
    answered: set[int] = set()
    for index in calls:
        answered.update(range(index + 1, index + 1 + len(items[index][4])))
    return next(
        position
        for position, role in enumerate(roles)
        if role == "tool" and position not in answered
    )


def _before(position: int | None, cut: int) -> int | None:
    return position if position is not None and position < cut else None


def _content_of(message: Any) -> Any:
    """A message's ``content`` as the caller holds it (a key, or an attribute), as
    :func:`~ctxwindow.kit.as_now` keeps it."""
    if isinstance(message, Mapping):
        return as_now(message.get("content"))
    return as_now(getattr(message, "content", None))


def _snapshots(contents: list[Any]) -> list[Any]:
    """:func:`~ctxwindow.kit.as_now` of each: a chat's strings as they are, at C speed."""
    return list(map(as_now, contents)) if list in set(map(type, contents)) else contents


def _dict_contents(messages: Sequence[Any]) -> list[Any]:
    """Each dict's ``content`` as it is, at C speed (TypeError when one is not a dict):
    compared before :func:`_contents` takes snapshots (``contents_unchanged``'s ``raw``)."""
    return list(map(dict.get, messages, repeat("content")))


def _contents(messages: Sequence[Any]) -> list[Any]:
    """Each message's ``content``, as :func:`~ctxwindow.kit.as_now` keeps it: for a list
    of dicts, at C speed."""
    try:
        return _snapshots(_dict_contents(messages))
    except TypeError:  # not all dicts: Messages, SDK objects, other mappings
        return list(map(_content_of, messages))


def _calls_text(message: Message) -> str:
    """The calls a message makes, as ``name(arguments)``, legacy function call included."""
    calls = [f"{call.name}({call.arguments})" for call in message.tool_calls]
    legacy = message.function_call
    if legacy is not None:
        calls.append(f"{legacy.name}({legacy.arguments})")
    return " ".join(calls)


def _ids_before(ids: dict[str, int], messages: Sequence[Any], cut: int) -> dict[str, int]:
    """``ids`` (each message id's first position) of the messages before ``cut``: a
    copy less the ids first met from there on, read off those messages when they are
    few (a branch parts near the end), else a pass over every id."""
    if len(messages) - cut > len(ids) // 8:
        return {key: at for key, at in ids.items() if at < cut}
    kept = dict(ids)
    for position in range(cut, len(messages)):
        item = messages[position]
        if type(item) is not tuple and item.id is not None and kept.get(item.id) == position:
            del kept[item.id]
    return kept


def _in_exchange(message: Message) -> bool:
    """A call or a result: tool calls, a tool result, a legacy function call or result."""
    return bool(
        message.tool_calls
        or message.function_call is not None
        or message.role in ("tool", "function")
    )


class _Snapshot(Sequence[T], Generic[T]):
    """A read-only view of the first ``size`` items that a getter yields."""

    __slots__ = ("_get", "_size")

    def __init__(self, size: int, get: Callable[[int], T]) -> None:
        self._size = size
        self._get = get

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(self._size))]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(index)
        return self._get(index)


class History:
    """What a strategy sees on one visit: messages, units, token counts, what must stay.

    Positions index the caller's message list; units are numbered in order. Messages
    that belong to no unit (see ``defects``) are never offered to a strategy.
    """

    def __init__(
        self,
        *,
        conversation: Conversation,
        size: int,
        unit_count: int,
        sums: list[int],
        defects: tuple[Defect, ...],
        kept_always: tuple[int, ...],
        newest_user: int | None,
        first_user: int | None,
        task_statement: bool,
        agent: bool,
        counter: TokenCounter,
        budget: int,
        query: str | None,
        originals: Sequence[Any],
    ) -> None:
        self._conversation = conversation
        self._originals = originals
        self._size = size
        self._unit_count = unit_count
        self._sums = sums
        self._starts = conversation._starts
        self._stops = conversation._stops
        self._unit_of = conversation._unit_of
        self._replacements: dict[int, tuple[Message, int]] = {}
        #: What the replacements change each unit's tokens by, so that unit_tokens stays
        #: O(1) however many messages stand-ins replace (a pipeline's cleared outputs).
        self._unit_change: dict[int, int] = {}
        self._must_keep_tokens: int | None = None  # see must_keep_tokens
        self._kept_always, self._first_user = kept_always, first_user  # for :meth:`_seen_by`
        self.defects = defects
        self.counter = counter
        self.budget = budget
        self.query = query
        self.messages: Sequence[Message] = _Snapshot(size, self._message)
        self.units: Sequence[Unit] = _Snapshot(unit_count, self._unit)
        self.newest_user = newest_user
        first = self.unit_of(newest_user) if newest_user is not None else None
        #: The current turn: the newest user message's unit and every unit after it (the
        #: assistant's tool calls and their results in progress). With no user message,
        #: in an agent's history, every unit after the leading system and developer
        #: messages: a run from its instructions alone is one turn, and its newest
        #: exchange is what the model waits on; else empty.
        if first is None:
            first = self._after_instructions() if agent else unit_count
        self.current_turn = range(first, unit_count)
        #: The task statement's unit (the first user message), whether or not it is kept;
        #: None with no user message or when the ``task_statement`` option is off. A
        #: strategy that scores units gives it a protected place.
        self.task_unit = (
            self.unit_of(first_user) if first_user is not None and task_statement else None
        )
        #: Whether this is an agent's history: an assistant message in it calls tools.
        #: Scorers weigh what an agent's next step needs (identifiers) in such histories.
        self.agent = agent
        self._must_keep = MappingProxyType(self._find_must_keep(kept_always, newest_user))

    def _seen_by(
        self, counter: TokenCounter, budget: int, query: str | None, *, task_statement: bool
    ) -> History | None:
        """The same snapshot as another visit sees it (counted with ``counter``, on
        ``budget``): a strategy that windows its history through other strategies (a
        pipeline's first stage) hands them its view, which is not read again, and its
        conversation's per-conversation state is theirs too. None when the host stood
        in for some of its messages (a cut): those are read as a list."""
        if self._replacements:
            return None
        same = getattr(counter, "inner", counter) is getattr(self.counter, "inner", self.counter)
        conversation = self._conversation
        return History(
            conversation=conversation,
            size=self._size,
            unit_count=self._unit_count,
            sums=self._sums if same else conversation.cumulative_tokens(counter, self._size),
            defects=self.defects,
            kept_always=self._kept_always,
            newest_user=self.newest_user,
            first_user=self._first_user,
            task_statement=task_statement,
            agent=self.agent,
            counter=counter,
            budget=budget,
            query=query,
            originals=self._originals,
        )

    # -- reading -----------------------------------------------------------------
    def _message(self, position: int) -> Message:
        replaced = self._replacements.get(position) if self._replacements else None
        return replaced[0] if replaced else self._conversation.message(position)

    def _unit(self, index: int) -> Unit:
        return Unit(index, self._starts[index], self._stops[index])

    def unit_of(self, position: int) -> int | None:
        """The unit a message belongs to, or None for a defective message."""
        unit = self._unit_of[position] if position < self._size else NOT_UNIT
        return unit if 0 <= unit < self._unit_count else None

    def span(self, unit: int) -> range:
        # at most this view's size: the conversation may have grown since, and a legacy
        # function result that came later joins its call's unit (the stop moves on)
        stop = self._stops[unit]
        return range(self._starts[unit], stop if stop <= self._size else self._size)

    def tokens(self, position: int) -> int:
        if self._replacements and position in self._replacements:
            return self._replacements[position][1]
        return self._sums[position + 1] - self._sums[position]

    def unit_tokens(self, unit: int) -> int:
        stop = self._stops[unit]
        total = (
            self._sums[stop if stop <= self._size else self._size] - self._sums[self._starts[unit]]
        )
        return total + self._unit_change.get(unit, 0) if self._unit_change else total

    def run_tokens(self, units: range) -> int:
        """What the units of ``units`` (a step-1 range) cost together: the sum of
        :meth:`unit_tokens`, in time independent of the range's length when the history
        has no defective message (its units then lie end to end)."""
        if self.defects or units.step != 1:
            return sum(map(self.unit_tokens, units))
        start, stop = units.start, units.stop
        if start >= stop:
            return 0
        if not 0 <= start < stop <= self._unit_count:
            raise IndexError(f"units {start}-{stop - 1} are not all units of this history")
        last = self._stops[stop - 1]
        sums = self._sums
        total = sums[last if last <= self._size else self._size] - sums[self._starts[start]]
        if self._unit_change:
            total += sum(c for unit, c in self._unit_change.items() if start <= unit < stop)
        return total

    def fitting_start(self, units: range, room: int) -> int:
        """The first unit of the newest part of ``units`` (a step-1 range) that costs at
        most ``room`` together: ``units.stop`` when not even the newest unit fits.

        Two bisections in C over the running totals when the units lie end to end and
        no stand-in changed a unit's cost: a turn's window is found in about a
        microsecond, where a bisection over :meth:`run_tokens` calls takes about ten."""
        start, stop = units.start, units.stop
        if start >= stop:
            return stop
        if self.defects or self._unit_change or units.step != 1:
            low, high = start, stop  # the answer lies in [low, high]
            while low < high:
                middle = (low + high) // 2
                if self.run_tokens(range(middle, stop)) <= room:
                    high = middle
                else:
                    low = middle + 1
            return low
        if not 0 <= start < stop <= self._unit_count:
            raise IndexError(f"units {start}-{stop - 1} are not all units of this history")
        starts, sums = self._starts, self._sums
        last = self._stops[stop - 1]
        last = last if last <= self._size else self._size
        # the first message position from which the rest up to ``last`` fits, then the
        # first unit that starts there or later
        position = bisect.bisect_left(sums, sums[last] - room, starts[start], last + 1)
        return bisect.bisect_left(starts, position, start, stop)

    def positions_tokens(
        self, runs: Sequence[tuple[int, int]], units: AbstractSet[int] | None = None
    ) -> int:
        """What the messages of ``runs`` (start, stop positions within the view) cost,
        stand-ins counted as they are: one subtraction per run, not a count per unit.
        ``units``: the units the runs hold, whole (a window's kept units), when known:
        then the stand-ins are counted a unit at a time, in one set operation."""
        sums = self._sums
        total = sum(sums[stop] - sums[start] for start, stop in runs)
        change = self._unit_change
        if units is not None:
            return total + sum(map(change.__getitem__, change.keys() & units)) if change else total
        for position, (_, tokens) in self._replacements.items():
            if any(start <= position < stop for start, stop in runs):
                total += tokens - (sums[position + 1] - sums[position])
        return total

    def placement(self, position: int) -> tuple[int, int, int, int]:
        """What the checker needs of a message, in one call (it walks every window):
        its tokens, its unit (NOT_UNIT: defective), and that unit's span start and stop
        (the message's own position and the next, for a defective one)."""
        # tokens() and unit_of(), inline
        replaced = self._replacements.get(position) if self._replacements else None
        sums = self._sums
        tokens = replaced[1] if replaced else sums[position + 1] - sums[position]
        unit = self._unit_of[position] if position < self._size else NOT_UNIT
        if not 0 <= unit < self._unit_count:
            return tokens, NOT_UNIT, position, position + 1
        stop = self._stops[unit]
        return tokens, unit, self._starts[unit], stop if stop <= self._size else self._size

    def unit_text(self, unit: int) -> str:
        return "\n".join(self._message(p).text for p in self.span(unit))

    @property
    def total_tokens(self) -> int:
        """What the whole history costs, defective messages included."""
        return self._sums[self._size] + sum(
            tokens - (self._sums[p + 1] - self._sums[p])
            for p, (_, tokens) in self._replacements.items()
        )

    @property
    def usable_tokens(self) -> int:
        """What the history costs without its defective messages."""
        lost = sum(self._sums[d.stop] - self._sums[d.start] for d in self.defects)
        return self.total_tokens - lost

    @property
    def must_keep(self) -> Mapping[int, str]:
        """The units that must stay, by unit, with why (read-only, sorted by unit).

        In order: system, developer and pinned messages and the newest user message;
        then the rest of the current turn when it fits in what they leave, else its
        newest tool exchange (the one the model is waiting on) alone (a visit may then
        hold the whole turn, its older rounds' big tool results cut: see the concepts
        guide); then the task statement (the first user message) when it fits in what is
        left and costs at most a quarter of the budget (weighed again once the host has
        cut the current turn's tool results to fit: it stays when it fits in what the cut
        left).
        """
        return self._must_keep

    @property
    def must_keep_tokens(self) -> int:
        """What the must-keep units cost together: summed once, and again only after a
        stand-in or the task statement changed it (a strategy reads it several times)."""
        if self._must_keep_tokens is None:
            self._must_keep_tokens = sum(map(self.unit_tokens, self._must_keep))
        return self._must_keep_tokens

    @property
    def effective_query(self) -> str:
        """What the next message answers: the query given, else the newest user message's
        text, else the empty string. In an agent's history, the whole current turn (the
        request, then the calls and results since, newest last, up to AGENT_QUERY_CHARS):
        the agent's next step follows from the results as much as from the request."""
        if self.query is not None:
            return self.query
        if self.newest_user is None:
            return ""
        request = self._message(self.newest_user).text
        if not self.agent:
            return request
        since: list[str] = []
        room = AGENT_QUERY_CHARS - len(request)
        for position in range(len(self.messages) - 1, self.newest_user, -1):
            message = self._message(position)
            text = f"{message.text} {_calls_text(message)}".strip()
            since.append(text[:room])
            room -= len(text)
            if room <= 0:
                break
        return "\n".join([request, *reversed(since)])

    @property
    def conversation(self) -> Conversation:
        """The conversation this view was taken of: append-only, so a strategy may key
        per-conversation state (an index of its units) on it."""
        return self._conversation

    def original(self, position: int) -> Any:
        """The caller's object at ``position`` (what a window gives back)."""
        return self._originals[position]

    @property
    def originals(self) -> list[Any]:
        """The caller's objects, in order (a new list; the objects themselves)."""
        originals = self._originals
        return originals[: self._size] if type(originals) is list else list(originals[: self._size])

    def message_id(self, position: int) -> str | None:
        item = self._conversation._messages[position]
        return None if isinstance(item, tuple) else item.id  # a simple dict has no id

    def covers_ref(self, position: int) -> str:
        """How a made message's ``metadata.covers`` names message ``position``: by its
        id when the id leads back to it (ids may repeat in what apps send), else as
        ``#position``, which is what the checker reads either way."""
        message_id = self.message_id(position)
        if (
            message_id
            and self.position_of_id(message_id) == position
            and covers_position(message_id) is None
        ):
            return message_id
        return f"#{position}"

    def position_of_id(self, message_id: str) -> int | None:
        """The first position of the message with this id, in this view (None if none)."""
        position = self._conversation._ids.get(message_id)
        return position if position is not None and position < self._size else None

    def __len__(self) -> int:
        return self._size

    def _after_instructions(self) -> int:
        """The first unit that is not all system or developer messages (instructions)."""
        unit = 0
        while unit < self._unit_count and all(
            self._message(position).role in INSTRUCTION_ROLES for position in self.span(unit)
        ):
            unit += 1
        return unit

    # -- deciding ----------------------------------------------------------------
    def _find_must_keep(
        self, kept_always: tuple[int, ...], newest_user: int | None
    ) -> dict[int, str]:
        reasons: dict[int, str] = {}
        for position in kept_always:
            unit = self.unit_of(position)
            if unit is not None and unit not in reasons:
                message = self._conversation.message(position)
                reasons[unit] = INSTRUCTION.get(message.role, PINNED)
        if newest_user is not None:
            unit = self.unit_of(newest_user)
            if unit is not None and unit not in reasons:
                reasons[unit] = NEWEST_USER
        room = self.budget - sum(self.unit_tokens(unit) for unit in reasons)
        turn = self.current_turn
        held = [unit for unit in reasons if unit in turn]  # instructions, pins, the request
        # the rest of the turn's cost from the running totals: a long agent turn
        # (thousands of tool rounds after one instruction) is not summed unit by unit
        rest = self.run_tokens(turn) - sum(map(self.unit_tokens, held))
        #: Whether the current turn does not fit whole in what the first tier leaves:
        #: then its newest exchange alone must stay, unless the host holds the whole
        #: turn with its oversized tool results cut (:meth:`_hold_turn`).
        self._turn_split = not (len(held) == len(turn) or rest <= room)
        #: The turn's newest exchange when the turn does not fit (None when it fits).
        self._newest_exchange: int | None = None
        if not self._turn_split:
            reasons.update({unit: self._turn_reason for unit in turn if unit not in reasons})
        else:  # the newest exchange, unless it is kept already (pinned, say)
            units = reversed(self.current_turn)
            exchange = next((unit for unit in units if self._is_exchange(unit)), None)
            self._newest_exchange = exchange
            if exchange is not None and exchange not in reasons:
                reasons[exchange] = NEWEST_EXCHANGE
        room = self.budget - sum(self.unit_tokens(unit) for unit in reasons)
        unit = self.task_unit
        if unit is not None and unit not in reasons:
            cost = self.unit_tokens(unit)
            if cost <= room and cost <= self.budget // TASK_SHARE:
                reasons[unit] = TASK_STATEMENT
        return dict(sorted(reasons.items()))

    @property
    def _turn_reason(self) -> str:
        return CURRENT_TURN if self.newest_user is not None else CURRENT_TURN_NO_USER

    def _hold_turn(self) -> None:
        """Hold the whole current turn, which did not fit: the host cuts its oversized
        tool results next, so that it does (a result the agent read on one request is
        not dropped on the next of the same turn). The task statement is let go until
        the cut is made, then weighed again (:meth:`_admit_task_statement`): the turn
        comes before it."""
        why = self._turn_reason
        reasons = {unit: r for unit, r in self._must_keep.items() if r != TASK_STATEMENT}
        reasons.update({unit: why for unit in self.current_turn if unit not in reasons})
        self._must_keep = MappingProxyType(dict(sorted(reasons.items())))
        self._must_keep_tokens = None
        self._turn_split = False

    def _admit_task_statement(self) -> None:
        """Weigh the task statement again once the host has cut what must stay (the
        current turn's tool results): it stays when it fits in what the cut left, as
        it would have had the turn been that size."""
        unit = self.task_unit
        if unit is None or unit in self._must_keep:
            return
        cost = self.unit_tokens(unit)
        if cost <= self.budget - self.must_keep_tokens and cost <= self.budget // TASK_SHARE:
            reasons = {**self._must_keep, unit: TASK_STATEMENT}
            self._must_keep = MappingProxyType(dict(sorted(reasons.items())))
            self._must_keep_tokens = None

    def _is_exchange(self, unit: int) -> bool:
        """Whether a unit holds a tool call or result (a reply in words is not one: the
        model waits on no reply)."""
        return any(_in_exchange(self._message(p)) for p in self.span(unit))

    def _take_replacements(self, old: History, position: int, units: int) -> None:
        """Take over ``old``'s stand-ins before ``position`` (in its first ``units``
        units), counted already: the same messages, carried from the visit of ``old``
        (see ``Selection.carry``)."""
        replacements, changes = old._replacements, old._unit_change
        if reaches(replacements, position, len(old)):  # else all, at C speed
            replacements = {at: pair for at, pair in replacements.items() if at < position}
        if reaches(changes, units, len(old.units)):
            changes = {unit: change for unit, change in changes.items() if unit < units}
        self._replacements.update(replacements)
        self._unit_change.update(changes)
        self._must_keep_tokens = None

    def _replace(self, position: int, message: Message) -> None:
        """Stand ``message`` in for the one at ``position``: the host's truncation of the
        newest user message, or a strategy's stand-in once the host has checked it (the
        host checks that nothing else did this)."""
        tokens = self.counter.count_message(message)
        own = self._sums[position + 1] - self._sums[position]
        before = self._replacements.get(position)
        change = tokens - (own if before is None else before[1])
        self._replacements[position] = (message, tokens)
        unit = self._unit_of[position]
        if unit >= 0:
            self._unit_change[unit] = self._unit_change.get(unit, 0) + change
            self._must_keep_tokens = None

    @property
    def replacements(self) -> dict[int, Message]:
        return {position: pair[0] for position, pair in self._replacements.items()}

    def selection(self) -> Selection:
        """A fresh selection: must-keep units kept, everything else dropped."""
        return Selection(self)
