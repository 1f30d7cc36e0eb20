"""Per-conversation index of unit vectors and term statistics, grown as units arrive."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from ctxwindow import History
from ctxwindow.kit import identifiers, unit_text
from ctxwindow_semantic.lexical import BM25Index
from ctxwindow_semantic.rows import Rows


class UnitIndex:
    """Vectors and BM25 statistics of a conversation's units, in unit order, and the
    per-unit figures a visit ranks by (tokens, identifiers), each read once per unit.

    Only units whose messages are final are stored: those before a view's first
    stand-in (see :meth:`update`).
    """

    def __init__(self) -> None:
        self.vectors = Rows(np.float32)
        self.lexical = BM25Index()
        self.identifiers = Rows(np.int64)  # how many identifiers each unit holds
        self.tokens = Rows(np.int64)  # each unit's tokens, under the counter of _sums
        self._sums: list[int] | None = None
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.lexical)

    def update(
        self, history: History, embed: Callable[[Sequence[str]], np.ndarray], stop: int
    ) -> None:
        """Index the units before ``stop`` this index has not seen yet (a chat loop: one
        or two). Units from ``stop`` on are not stored: they hold a stand-in message (the
        host's cut of an oversized newest message) that a later visit may not need."""
        with self.lock:
            start = len(self.lexical)
            if start >= stop:
                return
            texts = [unit_text(history, unit) for unit in range(start, stop)]
            self.vectors.extend(embed(texts))
            self.lexical.extend(texts)

    def similarity(self, query: np.ndarray, stop: int) -> np.ndarray:
        """Dense similarity of each of the first ``stop`` units to ``query``: one
        matrix-vector product over the stored vectors, which are not copied."""
        if stop == 0:
            return np.zeros(0, dtype=np.float32)
        similarity: np.ndarray = self.vectors.view[:stop] @ query
        return similarity

    def unit_tokens(self, history: History, stop: int) -> np.ndarray:
        """The tokens of each of the first ``stop`` units (stand-in free) under the
        view's counter. Kept for the counter whose running sums the conversation keeps,
        so a chat loop reads its new units only; another counter starts them again."""
        with self.lock:
            sums = history.conversation.cumulative_tokens(history.counter, len(history))
            if sums is not self._sums:
                self.tokens, self._sums = Rows(np.int64), sums
            spans = [history.span(unit) for unit in range(len(self.tokens), stop)]
            self.tokens.extend([sums[span.stop] - sums[span.start] for span in spans])
            return self.tokens.view[:stop]

    def identifier_counts(self, history: History, stop: int) -> np.ndarray:
        """How many identifiers each of the first ``stop`` units (stand-in free) holds,
        read on first need: only an agent's history ranks by them."""
        with self.lock:
            units = range(len(self.identifiers), stop)
            self.identifiers.extend([len(identifiers(unit_text(history, u))) for u in units])
            return self.identifiers.view[:stop]


#: The per-conversation indexes' bounds: at most this many conversations, and this many
#: units across them (a 384-dimension unit costs about 1.6 KB, so 100,000 units about
#: 160 MB); the least recently used conversations' indexes go first.
MAX_CONVERSATIONS = 1_024
MAX_UNITS = 100_000


class IndexPool:
    """The index of each live conversation, bounded by conversations and by units.

    Held by weak reference, so an index goes with its conversation; past a bound the
    least recently used indexes are forgotten (the one in use never is). A forgotten
    index is rebuilt on the conversation's next visit, from the embedding cache.
    """

    def __init__(
        self, max_conversations: int = MAX_CONVERSATIONS, max_units: int = MAX_UNITS
    ) -> None:
        self.max_conversations = max_conversations
        self.max_units = max_units
        self._entries: OrderedDict[int, tuple[weakref.ref[object], UnitIndex]] = OrderedDict()
        self._dead: list[tuple[int, weakref.ref[object]]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            self._purge()
            return len(self._entries)

    @property
    def units(self) -> int:
        """Units held across every index."""
        with self._lock:
            self._purge()
            return sum(len(index) for _ref, index in self._entries.values())

    def get(self, conversation: object) -> UnitIndex:
        """The index of ``conversation``, created empty the first time."""
        key = id(conversation)
        with self._lock:
            self._purge()
            entry = self._entries.get(key)
            if entry is not None and entry[0]() is conversation:
                self._entries.move_to_end(key)
                return entry[1]
            index = UnitIndex()
            ref = weakref.ref(conversation, self._forget(key))
            self._entries[key] = (ref, index)
            self._trim(keep=key)
            return index

    def trim(self, keep: object) -> None:
        """Apply the bounds now (an index grew), never dropping ``keep``'s index."""
        with self._lock:
            self._trim(keep=id(keep))

    def _trim(self, keep: int) -> None:
        self._purge()
        total = sum(len(index) for _ref, index in self._entries.values())
        for key in list(self._entries):
            if len(self._entries) <= self.max_conversations and total <= self.max_units:
                break
            if key == keep:
                continue
            _ref, index = self._entries.pop(key)
            total -= len(index)

    def _forget(self, key: int) -> Callable[[weakref.ref[object]], None]:
        """A conversation was collected: note it, and drop its index at the next use
        (the collector may run while the lock is held, so it must not take it)."""

        def forget(ref: weakref.ref[object]) -> None:
            self._dead.append((key, ref))

        return forget

    def _purge(self) -> None:
        while self._dead:
            key, ref = self._dead.pop()
            entry = self._entries.get(key)
            if entry is not None and entry[0] is ref:
                del self._entries[key]
