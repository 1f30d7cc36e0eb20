"""State a helper keeps per conversation: made once, dropped with the conversation, and
started from the state of the conversation a branch came from."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

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
    It must copy whatever either may still change: the parent stays valid.
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
        """The state of ``conversation``: made (or branched) on first use."""
        with self._lock:
            held = conversation._states
            state: S | None = held.get(self)
            if state is None:
                state = held[self] = self._first(conversation)
                self._holders.add(conversation)
            return state

    def peek(self, conversation: Conversation) -> S | None:
        """The state of ``conversation`` if it has one, without making it."""
        with self._lock:
            found: S | None = conversation._states.get(self)
            return found

    def _first(self, conversation: Conversation) -> S:
        origin = conversation.branched_from
        parent: S | None = origin.parent._states.get(self) if origin is not None else None
        if parent is None or self._branch is None or origin is None:
            return self._make()
        return self._branch(parent, conversation, origin)

    def __len__(self) -> int:
        return len(self._holders)
