"""Where the summary ends, and the summaries already written.

The boundary between the summarized past and the verbatim recent part moves in steps:
checkpoints every ``step`` tokens of history. A summary is written only when the
boundary must pass the next checkpoint, so the summarizer is called once per ``step``
tokens of new conversation, not once per turn (hysteresis: summarize when the recent
part outgrows its room, down to ``low_water`` of it). Boundaries depend only on the
history, so re-selecting the same history finds the same boundary and its cached summary.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ctxwindow import History


@dataclass(frozen=True)
class Summary:
    """A written summary and who wrote it. Which messages it stands for is worked out
    from each visit's history, never cached: the same text may recur in another
    conversation, or at other positions."""

    text: str
    summarizer: str


def message_ref(history: History, position: int) -> str:
    """A message's id, or its position when it has none."""
    return history.message_id(position) or f"#{position}"


def candidates(history: History) -> list[int]:
    """Units that may be summarized: everything but the must-keep units."""
    return [unit for unit in range(len(history.units)) if unit not in history.must_keep]


def boundary(history: History, units: Sequence[int], room: int, step: int) -> tuple[int, list[int]]:
    """Index into ``units`` where the verbatim part starts, and the checkpoints before it.

    The verbatim part ``units[b:]`` fits ``room``; ``b`` is the first checkpoint that
    allows that (or, if a single newest unit is too big, the first index that does).
    """
    tokens = [history.unit_tokens(unit) for unit in units]
    before = [0]
    for cost in tokens:
        before.append(before[-1] + cost)
    total = before[-1]
    if total <= room:
        return 0, []
    checkpoints = []
    next_mark = step
    for index in range(1, len(units) + 1):
        if before[index] >= next_mark:
            checkpoints.append(index)
            next_mark = (before[index] // step + 1) * step
    chosen = next((c for c in checkpoints if total - before[c] <= room), len(units))
    while chosen < len(units) and total - before[chosen] > room:
        chosen += 1
    return chosen, [c for c in checkpoints if c < chosen]


class SummaryCache:
    """Summaries by (summarizer, target, the exact content they cover). Bounded, shared
    by threads."""

    def __init__(self, entries: int = 4_096) -> None:
        self.entries = entries
        self._saved: dict[tuple[str, int, str], Summary] = {}
        self._lock = threading.Lock()

    @staticmethod
    def prefix_keys(texts: Sequence[str]) -> list[str]:
        """Key of every prefix: entry i stands for the first i texts."""
        keys = [""]
        running = hashlib.sha256()
        for text in texts:
            running.update(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
            keys.append(running.copy().hexdigest())
        return keys

    def get(self, summarizer: str, target: int, key: str) -> Summary | None:
        return self._saved.get((summarizer, target, key))

    def put(self, summarizer: str, target: int, key: str, summary: Summary) -> None:
        with self._lock:
            if len(self._saved) >= self.entries:
                for stale in list(self._saved)[: self.entries // 4]:
                    del self._saved[stale]
            self._saved[(summarizer, target, key)] = summary
