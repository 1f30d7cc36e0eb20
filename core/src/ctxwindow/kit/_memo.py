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
    """One ``S`` per conversation, made by ``make`` on first use; held weakly, so a
    conversation the app lets go of takes its state with it. Thread-safe.

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
        self._states: weakref.WeakKeyDictionary[Conversation, S] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def of(self, conversation: Conversation) -> S:
        """The state of ``conversation``: made (or branched) on first use."""
        with self._lock:
            state = self._states.get(conversation)
            if state is None:
                state = self._states[conversation] = self._first(conversation)
            return state

    def peek(self, conversation: Conversation) -> S | None:
        """The state of ``conversation`` if it has one, without making it."""
        with self._lock:
            return self._states.get(conversation)

    def _first(self, conversation: Conversation) -> S:
        origin = conversation.branched_from
        parent = self._states.get(origin.parent) if origin is not None else None
        if parent is None or self._branch is None or origin is None:
            return self._make()
        return self._branch(parent, conversation, origin)

    def __len__(self) -> int:
        return len(self._states)
