"""The importance-scorer protocol: how much each unit matters, for strategies that keep
the important units besides the recent ones (``sliding``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ctxwindow.history import History


@runtime_checkable
class ImportanceScorer(Protocol):
    """Scores every unit of a history: higher means more worth keeping."""

    name: str

    def score(self, history: History) -> Sequence[float]:
        """One finite score per unit of ``history`` (``len(history.units)`` of them)."""
        ...
