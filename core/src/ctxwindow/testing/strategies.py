"""Strategies for tests: an honest reference, and strategies that fail on purpose.

:class:`Newest` keeps the must-keep units and the newest run that fits: the smallest
real strategy, for testing code that runs strategies (a host, an adapter, a proxy)
with no strategy plugin installed, and the honest base of the others.

:data:`FAULTY` fail in every way a runner must survive, each on every visit that
reaches it (a history over its budget), so that a test can inject one fault, check how
it is reported, and go on using the others in the same process. Those that hang wait
on :data:`RELEASE`; call :func:`release` to let their abandoned threads finish.
Register them with the ``ctxwindow_register`` fixture, or through an entry point as
``tests/fixtures/ctxwindow-faulty`` does.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any, ClassVar

from ctxwindow import BaseStrategy, Conversation, History, Message, Selection, ToolCall
from ctxwindow.kit import recent_units

NEWEST = "among the newest units that fit"
OLDER = "older than the newest units that fit"

#: Set by :func:`release`: every hanging strategy waits on it.
RELEASE = threading.Event()
#: Set by a test once the visit returned: MutatesLater's thread then changes its
#: selection, and sets SPOILED when done (events, not sleeps: a loaded machine may run
#: the thread late, or the host's copy slowly).
SPOIL = threading.Event()
SPOILED = threading.Event()
_sockets: list[socket.socket] = []
_lock = threading.Lock()


def release() -> None:
    """Let every hanging strategy return: set RELEASE and close the sockets they read."""
    RELEASE.set()
    with _lock:
        while _sockets:
            _sockets.pop().close()


def newest(history: History) -> Selection:
    """The must-keep units and the newest run of units that fits."""
    selection = history.selection()
    selection.default_reason = OLDER
    for unit in recent_units(history, history.budget - history.must_keep_tokens):
        selection.keep(unit, NEWEST)
    return selection


class Newest(BaseStrategy):
    """Keeps the must-keep units and the newest run of units that fits the budget."""

    name = "newest"

    def choose(self, history: History) -> Selection:
        return newest(history)


class BareNewest:
    """:class:`Newest` as a plain class, not built on BaseStrategy: the whole plugin API
    is a ``name`` and ``choose``."""

    name = "bare-newest"

    def choose(self, history: History) -> Selection:
        return newest(history)


# -- raise inside choose ---------------------------------------------------------------
class Raises(BaseStrategy):
    """Raises a plain exception while choosing."""

    name = "faulty-raises"

    def choose(self, history: History) -> Selection:
        raise ValueError("faulty: the scoring table is empty")


class Recurses(BaseStrategy):
    """Recurses without end: RecursionError."""

    name = "faulty-recursion"

    def choose(self, history: History) -> Selection:
        return self.choose(history)


class OutOfMemory(BaseStrategy):
    """Raises MemoryError, as an allocation too big for the machine would."""

    name = "faulty-memory"

    def choose(self, history: History) -> Selection:
        raise MemoryError("faulty: cannot allocate the similarity matrix")


class Interrupted(BaseStrategy):
    """Raises KeyboardInterrupt: the user's Ctrl-C, never to be turned into a plugin error."""

    name = "faulty-interrupt"

    def choose(self, history: History) -> Selection:
        raise KeyboardInterrupt


# -- break the contract ----------------------------------------------------------------
class OverBudget(BaseStrategy):
    """Keeps every unit, whatever the budget."""

    name = "faulty-over-budget"

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        for unit in range(len(history.units)):
            selection.keep(unit, "all of it")
        return selection


class DropsSystem(BaseStrategy):
    """Drops the system message."""

    name = "faulty-drops-system"

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        selection.drop(0, "no need for instructions")
        return selection


class BadUnit(BaseStrategy):
    """Keeps a unit its history does not have."""

    name = "faulty-bad-unit"

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        selection.keep(len(history.units) + 5, "a unit from somewhere else")
        return selection


class ReturnsNothing(BaseStrategy):
    """Returns None instead of a Selection."""

    name = "faulty-returns-none"

    def choose(self, history: History) -> Selection:
        return None  # type: ignore[return-value]


class ForeignSelection(BaseStrategy):
    """Returns a selection of another history (one it read itself)."""

    name = "faulty-foreign-selection"

    def choose(self, history: History) -> Selection:
        other = Conversation(list(history.conversation)).view(history.counter, history.budget)
        return newest(other)


class MakesHalfAnExchange(BaseStrategy):
    """Makes a tool call of its own: half a tool exchange, which no provider accepts."""

    name = "faulty-half-exchange"

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        calls = (ToolCall("made", "lookup"),)
        made = Message("assistant", None, tool_calls=calls, metadata={"synthetic": True})
        selection.add_synthetic(made, len(history.units))
        return selection


class Unmarked(BaseStrategy):
    """Adds a message of its own without marking it synthetic."""

    name = "faulty-unmarked"

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        selection.add_synthetic(Message("user", "injected"), 0)
        return selection


class MutatesLater(BaseStrategy):
    """Returns a correct selection, then a thread of its own changes it to keep
    everything once :data:`SPOIL` is set (and sets :data:`SPOILED`): the window and
    record already returned must not change."""

    name = "faulty-mutates-later"

    def choose(self, history: History) -> Selection:
        selection = newest(history)

        def spoil() -> None:
            if not SPOIL.wait(300):  # a guard: the test sets it once the visit returned
                return
            for unit in range(len(history.units)):
                selection.keep(unit, "changed after the visit")
            selection.notes.append("changed after the visit")
            SPOILED.set()

        threading.Thread(target=spoil, daemon=True).start()
        return selection


# -- hang ------------------------------------------------------------------------------
class Sleeps(BaseStrategy):
    """Waits until released (forever, unless a test calls release())."""

    name = "faulty-sleeps"

    def choose(self, history: History) -> Selection:
        RELEASE.wait()
        return newest(history)


class BlocksOnRead(BaseStrategy):
    """Blocks reading a socket that nobody writes to, as a call to a dead server would."""

    name = "faulty-blocks-io"

    def choose(self, history: History) -> Selection:
        reader, writer = socket.socketpair()
        with _lock:
            if RELEASE.is_set():
                writer.close()
            else:
                _sockets.append(writer)
        with reader:
            reader.recv(1)  # returns once release() closes the other end
        return newest(history)


class AsyncHangs(BaseStrategy):
    """An async strategy that awaits forever (and, called synchronously, waits too)."""

    name = "faulty-async-hangs"

    def choose(self, history: History) -> Selection:
        RELEASE.wait()
        return newest(history)

    async def achoose(self, history: History) -> Selection:
        await asyncio.Event().wait()
        return newest(history)  # pragma: no cover - never reached


class BareHangs:
    """Not built on BaseStrategy (no options, so no time limit of its own), and hangs:
    only the Windower's time_limit bounds it."""

    name = "faulty-bare-hangs"
    option_specs: ClassVar[tuple[Any, ...]] = ()

    def choose(self, history: History) -> Selection:
        RELEASE.wait()
        return newest(history)

    async def achoose(self, history: History) -> Selection:
        await asyncio.Event().wait()
        return newest(history)  # pragma: no cover - never reached


#: Every strategy here that fails, in the order of the kinds of failure.
FAULTY: tuple[Any, ...] = (
    Raises,
    Recurses,
    OutOfMemory,
    Interrupted,
    OverBudget,
    DropsSystem,
    BadUnit,
    ReturnsNothing,
    ForeignSelection,
    MakesHalfAnExchange,
    Unmarked,
    MutatesLater,
    Sleeps,
    BlocksOnRead,
    AsyncHangs,
    BareHangs,
)
