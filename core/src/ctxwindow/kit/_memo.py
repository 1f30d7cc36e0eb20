"""State a helper keeps per conversation: made once, dropped with the conversation, and
started from the state of the conversation a branch came from."""

from __future__ import annotations

import enum
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, overload

if TYPE_CHECKING:
    from ctxwindow._history import Branch, Conversation

S = TypeVar("S")


class PerConversation(Generic[S]):
    """One ``S`` per conversation, made by ``make`` on first use, and held by the
    conversation itself: a conversation the app lets go of takes its state with it,
    even a state that refers back to it (the last selection a strategy made there,
    for :meth:`~ctxwindow.Selection.carry`: a history of the conversation). Held by a
    mapping of its own, keyed weakly by conversation, such a state would keep its key
    alive for good. Thread-safe.

    With ``branch``, a conversation read as a branch of another
    (:meth:`~ctxwindow.Conversation.branch`: a list that parts from a remembered history
    only near its end, as a pipeline's stage input does each turn) starts from the
    other's state: ``branch(state, conversation, origin)`` makes the branch's from the
    parent's ``state`` (its lock is the caller's to take), keeping what it holds of the
    first ``origin.units`` units (``origin.messages`` messages), which the two share.
    It must copy whatever either may still change: the parent stays valid. ``origin``
    may be the parent's own origin (``origin.parent`` is then not ``branched_from``'s):
    a parent branched again before its first visit made its state has none yet.
    """

    def __init__(
        self,
        make: Callable[[], S],
        branch: Callable[[S, Conversation, Branch], S] | None = None,
    ) -> None:
        self._make = make
        self._branch = branch
        #: The conversations holding a state of this one's (weakly: for len()).
        self._holders: weakref.WeakSet[Conversation] = weakref.WeakSet()
        self._lock = threading.Lock()

    def of(self, conversation: Conversation) -> S:
        """The state of ``conversation``: made (or branched) on first use. Made outside
        this object's lock, which every conversation's first use takes: a branch's state
        is read from its parent's under the parent state's own lock, which a long visit
        of the parent (a cold one) holds, and every other conversation would wait for
        it. Two threads making one conversation's state at once keep the first made."""
        held = conversation._states
        state: S | None = held.get(self)  # one dict read: atomic
        if state is not None:
            return state
        made = self._first(conversation)
        with self._lock:
            state = held.get(self)
            if state is None:
                state = held[self] = made
                self._holders.add(conversation)
            return state

    def peek(self, conversation: Conversation) -> S | None:
        """The state of ``conversation`` if it has one, without making it."""
        with self._lock:
            found: S | None = conversation._states.get(self)
            return found

    def _first(self, conversation: Conversation) -> S:
        """Branched from the nearest origin that holds a state of this one's (a parent
        branched again before its own first visit has none yet: its parent may)."""
        if self._branch is not None:
            for origin in conversation.origins:
                parent: S | None = origin.parent._states.get(self)
                if parent is not None:
                    return self._branch(parent, conversation, origin)
        return self._make()

    def __len__(self) -> int:
        return len(self._holders)


V = TypeVar("V")
D = TypeVar("D")
Span = tuple[int, int]


class _Missing(enum.Enum):
    MISSING = enum.auto()


#: What a lookup that found nothing gives by default (a memo may hold None as a value).
MISSING: Final = _Missing.MISSING
#: A branch's entries copied (not shared) from the memo it came from, beyond which it
#: takes them all as its own (a copy of every entry) and shares nothing.
OWN_AT_MOST = 256


class SpanMemo(Generic[V]):
    """Values by unit span ``(start, stop)`` of a conversation, each made once (units
    never change once made), whose :meth:`branch` does not copy them: a branch reads
    the spans within the messages it shares from the memo it came from. A pipeline's
    later stage gets an input that parts from the last turn's near its end on every
    turn, and copying thousands of entries each time made its turn cost the history.

    A memo reads another's entries without its lock, and never iterates them but as a
    copy made at once (atomic in CPython). Its owner's lock guards its writes, as for
    a dict.
    """

    __slots__ = ("_cut", "_own", "_shared")

    def __init__(self) -> None:
        self._own: dict[Span, V] = {}
        #: Another memo's entries, valid here for the spans ending by ``_cut``.
        self._shared: dict[Span, V] = {}
        self._cut = 0

    @overload
    def get(self, span: Span) -> V | None: ...
    @overload
    def get(self, span: Span, default: D) -> V | D: ...
    def get(self, span: Span, default: Any = None) -> Any:
        """The value of ``span``, else ``default`` (:data:`MISSING` to tell a value of
        None from none)."""
        found = self._own.get(span, MISSING)
        if found is not MISSING:
            return found
        if span[1] <= self._cut:
            return self._shared.get(span, default)
        return default

    def __setitem__(self, span: Span, value: V) -> None:
        self._own[span] = value

    def branch(self, cut: int) -> SpanMemo[V]:
        """The memo of a branch that shares this memo's conversation's first ``cut``
        messages: its spans ending by ``cut``, without copying them. This memo's own
        entries are shared when it shares none of another's; else its own (a branch
        of a branch's: what was made since the first) are copied while they are few,
        and everything is taken as the branch's own once they are not."""
        twin: SpanMemo[V] = SpanMemo()
        if not self._cut:
            twin._shared, twin._cut = self._own, cut
            return twin
        own = {span: value for span, value in self._own.copy().items() if span[1] <= cut}
        limit = min(self._cut, cut)
        if len(own) <= OWN_AT_MOST:
            twin._own, twin._shared, twin._cut = own, self._shared, limit
            return twin
        shared = self._shared.copy().items()
        twin._own = {span: value for span, value in shared if span[1] <= limit}
        twin._own.update(own)
        return twin
