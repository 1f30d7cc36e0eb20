"""Per-conversation index of unit vectors and term statistics, grown as units arrive."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from ctxwindow import History
from ctxwindow.text import unit_text
from ctxwindow_semantic.lexical import BM25Index


class UnitIndex:
    """Vectors and BM25 statistics of a conversation's units, in unit order."""

    def __init__(self) -> None:
        self.vectors = np.zeros((0, 0), dtype=np.float32)
        self.lexical = BM25Index()
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
            fresh = embed(texts)
            self.vectors = fresh if start == 0 else np.concatenate([self.vectors, fresh])
            for text in texts:
                self.lexical.add(text)
