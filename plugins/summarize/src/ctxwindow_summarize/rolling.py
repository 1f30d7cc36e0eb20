"""Where the summary ends, and the summaries already written.

The boundary between the summarized past and the verbatim recent part moves in steps:
checkpoints every ``step`` tokens of history. A summary is written only when the
boundary must pass the next checkpoint, so the summarizer is called once per ``step``
tokens of new conversation, not once per turn (hysteresis: summarize when the recent
part outgrows its room, down to ``low_water`` of it). Boundaries depend only on the
history, so re-selecting the same history finds the same boundary and its cached summary.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from ctxwindow import Message
from ctxwindow_stores import Store, as_store, cache_key, put_first
from ctxwindow_summarize.ledger import Candidates


@dataclass(frozen=True)
class Summary:
    """A written summary and who wrote it. Which messages it stands for is worked out
    from each visit's history, never cached: the same text may recur in another
    conversation, or at other positions."""

    text: str
    summarizer: str

    @cached_property
    def counted(self) -> Message:
        """The summary as the message a window sends, but for its metadata (which no
        counter counts): made once, as the same summary serves turn after turn."""
        return Message("system", self.text)

    def sent(self, covers: tuple[str, ...]) -> Message:
        """The message a window sends for this summary, written from the messages
        ``covers`` names: made again only for another tuple (a conversation's ledger
        hands the same one over until the next checkpoint). A Message is frozen, its
        metadata read-only, so windows can share it."""
        made: tuple[tuple[str, ...], Message] | None = self.__dict__.get("_sent")
        if made is None or made[0] is not covers:
            metadata = {"synthetic": True, "covers": covers, "summarizer": self.summarizer}
            made = (covers, Message(role="system", content=self.text, metadata=metadata))
            self.__dict__["_sent"] = made  # frozen: the one made last, beside the fields
        return made[1]


def boundary(candidates: Candidates, room: int, step: int) -> int:
    """How many of the candidates the summary covers. The verbatim part (the rest) must
    fit ``room``: it starts at the first checkpoint that allows that, and is empty when
    none does. A checkpoint is where the candidates' running token count first reaches
    a multiple of ``step``; found by bisection, never by a pass over the history."""
    total = candidates.tokens(len(candidates))
    if total <= room:
        return 0
    reach = candidates.first_reaching(total - room)  # the first start the rest fits from
    mark = (candidates.tokens(reach - 1) // step + 1) * step  # the next multiple after
    return candidates.first_reaching(mark) if mark <= total else len(candidates)


def later_checkpoints(candidates: Candidates, start: int, stop: int, step: int) -> list[int]:
    """The checkpoints after ``start`` up to ``stop``, newest first: where a summary
    written on a coarser grid of the same ladder may sit (a step halved as a turn grew
    keeps the coarser grid's checkpoints), covering more than the first that fits."""
    found: list[int] = []
    first = candidates.tokens(start) // step + 1
    for multiple in range(first, candidates.tokens(stop) // step + 1):
        index = candidates.first_reaching(multiple * step)
        if start < index <= stop and (not found or index > found[-1]):
            found.append(index)
    return found[::-1]


#: Sizes (the step between checkpoints, a summary's target) are rounded down to this
#: ladder, powers of 2 ** (1/4) (about 19% apart): a few percent of change in the budget
#: or in the system prompt moves them only when it crosses a rung, so the same
#: checkpoints and cache keys are found again.
LADDER = tuple(sorted({round(2 ** (k / 4)) for k in range(4 * 40)}))


#: The sizes a summary is asked for: a finer ladder (powers of 2 ** (1/8), about 9%
#: apart), as a summary is rounded down to fit its room and the rest is not its; a
#: visit that does not find one at its own size looks at the sizes about it too.
SIZES = tuple(sorted({round(2 ** (k / 8)) for k in range(8 * 40)}))


def rung(tokens: int, ladder: tuple[int, ...] = LADDER) -> int:
    """The largest size on ``ladder`` at most ``tokens`` (``tokens`` below 1)."""
    if tokens < 1:
        return tokens
    return ladder[bisect.bisect_right(ladder, tokens) - 1]


def nearest_rung(tokens: int) -> int:
    """The size on :data:`LADDER` nearest ``tokens`` (by ratio): a step rounded so, not
    down, is on average as long as the one it stands for, so the calls are as rare."""
    below = rung(tokens)
    if below < 1 or below == tokens:
        return below
    above = LADDER[bisect.bisect_right(LADDER, tokens)]
    return above if above * below < tokens * tokens else below


def checkpoints(candidates: Candidates, start: int, step: int) -> Iterator[int]:
    """The checkpoints before ``start``, newest first (a visit reads only the few it
    needs: the newest that has a summary)."""
    last = start
    for multiple in range(candidates.tokens(start - 1) // step, 0, -1) if start else ():
        index = candidates.first_reaching(multiple * step)
        if index < last:
            last = index
            yield index


#: Stored values whose summaries are kept as read (see SummaryCache._decoded).
DECODED_KEPT = 16
#: The in-memory layer's bounds: 4,096 summaries or 16 MiB, whichever comes first.
MEMORY_ENTRIES = 4_096
MEMORY_BYTES = 16 * 2**20
KIND = "summary"
#: What a summary is held under: (summarizer, target size, the prefix key it covers).
Entry = tuple[str, int, str]


class SummaryCache:
    """Summaries by (summarizer, target size, the exact content they cover), kept in a
    :mod:`ctxwindow_stores` store: memory only (bounded), or memory in front of a
    SQLite file or a Redis server that app replicas share. Stored as JSON, never
    pickled; an entry that does not read back as a summary is ignored. Thread-safe."""

    def __init__(
        self,
        where: str | Path | Store | None = None,
        entries: int = MEMORY_ENTRIES,
        memory_bytes: int = MEMORY_BYTES,
        ttl: float | None = None,
    ) -> None:
        self.store: Store = as_store(
            where, memory_entries=entries, memory_bytes=memory_bytes, ttl=ttl
        )
        self.entries = entries
        self.where = self.store.where
        self._recent: OrderedDict[bytes, Summary | None] = OrderedDict()  # see _decoded
        self._lock = threading.Lock()

    @staticmethod
    def store_key(summarizer: str, target: int, key: str) -> str:
        return cache_key(KIND, summarizer, f"{target}:{key}")

    def get(self, summarizer: str, target: int, key: str) -> Summary | None:
        return self.get_many(summarizer, target, [key]).get(key)

    def get_many(self, summarizer: str, target: int, keys: Sequence[str]) -> dict[str, Summary]:
        """The summaries held for prefix ``keys``, in one round trip to the store."""
        found = self.get_any([(summarizer, target, key) for key in keys])
        return {key: summary for (_, _, key), summary in found.items()}

    def get_any(self, wanted: Sequence[Entry]) -> dict[Entry, Summary]:
        """The summaries held for ``wanted`` (summarizer, target, prefix key) entries, in
        one round trip to the store: a visit asks for several summarizers' and sizes'
        at once when the one it expects is not held."""
        stored = {self.store_key(*entry): entry for entry in wanted if entry[2]}
        found: dict[Entry, Summary] = {}
        for at, value in self.store.get_many(list(stored)).items():
            summary = self._decoded(value)
            if summary is not None:
                found[stored[at]] = summary
        return found

    def _decoded(self, value: bytes) -> Summary | None:
        """:func:`_decode` of ``value``, remembered for the few values read most
        recently: a turn reads the summary the last turn read."""
        if type(value) is not bytes:  # a store of another kind's (a bytearray): as it is
            return _decode(value)
        with self._lock:
            if value in self._recent:
                self._recent.move_to_end(value)
                return self._recent[value]
        summary = _decode(value)
        with self._lock:
            self._recent[value] = summary
            while len(self._recent) > DECODED_KEPT:
                self._recent.popitem(last=False)
        return summary

    def put(self, summarizer: str, target: int, key: str, summary: Summary) -> Summary:
        """Hold ``summary`` unless one is held for this prefix already; the one held
        after. The first summary written wins, so that replicas sharing the store send
        one summary for a prefix, not each its own (a rolling summary depends on which
        earlier ones were cached, so two replicas can write different ones). Each
        summarizer writes under its own name: a fallback's summary never takes the
        place of the one the summarizer itself may write later."""
        stored = self.store_key(summarizer, target, key)
        value = json.dumps({"text": summary.text, "summarizer": summary.summarizer})
        item = {stored: value.encode("utf-8")}
        held = put_first(self.store, item).get(stored)
        first = _decode(held) if held is not None else None
        if first is None:  # what the key held is not a summary (damaged): replace it
            self.store.put_many(item)
            return summary
        return first


def _decode(value: bytes) -> Summary | None:
    try:
        data = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    text, by = data.get("text"), data.get("summarizer")
    if not (isinstance(text, str) and text.strip() and isinstance(by, str) and by):
        return None
    return Summary(text, by)
