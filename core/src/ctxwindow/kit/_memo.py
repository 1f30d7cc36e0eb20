"""State a helper keeps per conversation: made once, dropped with the conversation."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from ctxwindow._history import Conversation

S = TypeVar("S")


class PerConversation(Generic[S]):
    """One ``S`` per conversation, made by ``make`` on first use; held weakly, so a
    conversation the app lets go of takes its state with it. Thread-safe."""

    def __init__(self, make: Callable[[], S]) -> None:
        self._make = make
        self._states: weakref.WeakKeyDictionary[Conversation, S] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def of(self, conversation: Conversation) -> S:
        with self._lock:
            state = self._states.get(conversation)
            if state is None:
                state = self._states[conversation] = self._make()
            return state
