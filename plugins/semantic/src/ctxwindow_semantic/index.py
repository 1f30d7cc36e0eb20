"""Per-conversation index of unit vectors and term statistics, grown as units arrive."""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from ctxwindow import Branch, Conversation, History
from ctxwindow.kit import unit_text
from ctxwindow.kit.ranking import Rows, UnitFigures
from ctxwindow_semantic.lexical import BM25Index


def dot_rows(rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Each row's dot product with ``vector``, without a BLAS matrix-vector product:
    OpenBLAS spreads one over its threads, which on a busy machine wait on each other
    (8,000 x 384 floats: 8 ms with 2 shared cores busy, 0.1 ms otherwise), and a chat
    turn needs one such product. numpy's ``vecdot`` (2.0 on) takes each row's product
    on its own, single-threaded, at 1.6x the speed of ``einsum``'s own loop."""
    product: np.ndarray = _vecdot(rows, vector)
    return product


def _einsum_rows(rows: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """:func:`dot_rows` for numpy before 2.0."""
    product: np.ndarray = np.einsum("ij,j->i", rows, vector)
    return product


_vecdot: Callable[[np.ndarray, np.ndarray], np.ndarray] = getattr(np, "vecdot", _einsum_rows)


class UnitIndex:
    """Vectors and BM25 statistics of a conversation's units, in unit order, and the
    per-unit figures a visit ranks by (:class:`~ctxwindow.kit.ranking.UnitFigures`),
    each read once per unit.

    Only units whose messages are final are stored: those before a view's first
    stand-in (see :meth:`update`).
    """

    def __init__(self) -> None:
        self.vectors = Rows(np.float32)
        self.lexical = BM25Index()
        self.figures = UnitFigures()
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.lexical)

    def branch(self, conversation: Conversation, origin: Branch) -> UnitIndex:
        """The index of a branch of the conversation: the units the two share (see
        :class:`~ctxwindow.kit.PerConversation`), none embedded or read again."""
        twin = UnitIndex()
        with self.lock:
            kept = min(origin.units, len(self))
            twin.vectors = self.vectors.copy(kept)
            twin.lexical = self.lexical.branch(kept)
            twin.figures = self.figures.branch(conversation, origin)
        return twin

    def update(
        self,
        history: History,
        embed: Callable[[Sequence[str]], np.ndarray],
        stop: int,
        also: Sequence[str] = (),
    ) -> np.ndarray:
        """Index the units before ``stop`` this index has not seen yet (a chat loop: one
        or two); the vectors of the texts ``also`` (the query, stand-ins), embedded in
        the same call, so a turn pays one cache look-up and at most one model call.
        Units from ``stop`` on are not stored: they hold a stand-in message (the host's
        cut of an oversized newest message) that a later visit may not need."""
        with self.lock:
            start = len(self.lexical)
            texts = [unit_text(history, unit) for unit in range(start, stop)]
            if not texts and not also:
                return np.zeros((0, 0), dtype=np.float32)
            vectors = embed([*texts, *also])
            if texts:
                self.vectors.extend(vectors[: len(texts)])
                self.lexical.extend(texts)
            return vectors[len(texts) :]

    def similarity(self, query: np.ndarray, stop: int) -> np.ndarray:
        """Dense similarity of each of the first ``stop`` units to ``query``: one
        matrix-vector product over the stored vectors, which are not copied."""
        if stop == 0:
            return np.zeros(0, dtype=np.float32)
        return dot_rows(self.vectors.view[:stop], query)


#: The per-conversation indexes' bounds: at most this many conversations, and this many
#: units across them (a 384-dimension unit costs about 1.6 KB, so 100,000 units about
#: 160 MB); the least recently used conversations' indexes go first.
MAX_CONVERSATIONS = 1_024
MAX_UNITS = 100_000
#: An index's key in a pool: the conversation's id and the embedder's name.
_Key = tuple[int, str]


class IndexPool:
    """The index of each live conversation and embedder, bounded by conversations and by
    units. An index is kept per embedder (its ``name``): strategies with different
    embedders may share one pool (one memory bound for an app) without mixing vectors.

    Held by weak reference, so an index goes with its conversation; past a bound the
    least recently used indexes are forgotten (the one in use never is). A forgotten
    index is rebuilt on the conversation's next visit, from the embedding cache.

    The units are counted as each index is trimmed for (:meth:`trim`, after it grew),
    into a running total: a turn reads its own index's size, not every index's (a
    server holds hundreds of conversations).
    """

    def __init__(
        self, max_conversations: int = MAX_CONVERSATIONS, max_units: int = MAX_UNITS
    ) -> None:
        self.max_conversations = max_conversations
        self.max_units = max_units
        self._entries: OrderedDict[_Key, tuple[weakref.ref[object], UnitIndex]] = OrderedDict()
        #: Each held index's units when last counted, and their sum.
        self._counted: dict[_Key, int] = {}
        self._total = 0
        self._dead: list[tuple[_Key, weakref.ref[object]]] = []
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

    def get(self, conversation: object, embedder: str = "") -> UnitIndex:
        """The index of ``conversation`` for the embedder named ``embedder``, created
        empty the first time. A branch's is made outside the pool's lock: it waits for
        its parent's index, which a cold visit of the parent holds while it embeds, and
        every other conversation would wait too. Two threads making one conversation's
        index at once keep the first made."""
        key = (id(conversation), embedder)
        with self._lock:
            held = self._held(key, conversation)
            if held is not None:
                return held
            make = self._first(conversation, embedder)
        made = make()
        with self._lock:
            held = self._held(key, conversation)
            if held is not None:
                return held
            ref = weakref.ref(conversation, self._forget(key))
            self._entries[key] = (ref, made)
            self._trim(keep=key)
            return made

    def _held(self, key: _Key, conversation: object) -> UnitIndex | None:
        """``conversation``'s index if the pool holds it (now the most recently used);
        the lock held."""
        self._purge()
        entry = self._entries.get(key)
        if entry is None or entry[0]() is not conversation:
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def _first(self, conversation: object, embedder: str) -> Callable[[], UnitIndex]:
        """How to make a new conversation's index, read with the lock held and called
        without it: empty, or, for a branch of a conversation with an index here, that
        index's units the two share (the nearest origin with an index: a parent branched
        again before its first visit has none yet, its own parent may)."""
        if isinstance(conversation, Conversation):
            for origin in conversation.origins:
                entry = self._entries.get((id(origin.parent), embedder))
                if entry is not None and entry[0]() is origin.parent:
                    return functools.partial(entry[1].branch, conversation, origin)
        return UnitIndex

    def trim(self, keep: object, embedder: str = "") -> None:
        """Apply the bounds now (an index grew), never dropping ``keep``'s index for
        ``embedder``."""
        with self._lock:
            self._trim(keep=(id(keep), embedder))

    def _trim(self, keep: _Key) -> None:
        """Count ``keep``'s index again (it may have grown), then drop the least recently
        used others while past a bound."""
        self._purge()
        entry = self._entries.get(keep)
        if entry is not None:
            units = len(entry[1])
            self._total += units - self._counted.get(keep, 0)
            self._counted[keep] = units
        if len(self._entries) <= self.max_conversations and self._total <= self.max_units:
            return
        for key in list(self._entries):
            if len(self._entries) <= self.max_conversations and self._total <= self.max_units:
                break
            if key != keep:
                self._drop(key)

    def _drop(self, key: _Key) -> None:
        del self._entries[key]
        self._total -= self._counted.pop(key, 0)

    def _forget(self, key: _Key) -> Callable[[weakref.ref[object]], None]:
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
                self._drop(key)
