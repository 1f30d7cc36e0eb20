"""The recency-decay window: every unit scored by its age and the keywords it mentions."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any, ClassVar

from ctxwindow import BaseStrategy, History, Option, Selection
from ctxwindow.kit import terms

KEPT = "among the highest scores that fit"
#: The task statement (the first user message) comes first among the units this
#: strategy ranks: the core keeps it outright when it costs at most a quarter of the
#: budget, and a strategy that scores units gives it a protected place when it is bigger.
TASK_FIRST = "task statement (ranked first)"
DROPPED = "does not fit the room left by units with higher scores"


def _check_keywords(value: Sequence[Any]) -> str | None:
    for keyword in value:
        if not isinstance(keyword, str) or not terms(keyword):
            return f"must hold words to look for, got {keyword!r}"
    return None


class RecencyDecay(BaseStrategy):
    """Keeps the units with the highest score that fit the budget.

    A unit's score halves every ``half_life`` units of age (the newest unit has age 0)
    and is multiplied by ``1 + keyword_boost`` for each keyword it mentions, so an old
    message about the invoice can outrank yesterday's small talk. Units are taken
    best score first (the newer one on a tie) while they fit, the task statement first
    of all when the core could not keep it; the window keeps them in conversation order.
    """

    name = "recency-decay"
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option(
            "half_life",
            (int, float),
            8.0,
            "Units of age after which a unit's score has halved.",
            minimum=0.5,
        ),
        Option(
            "keywords",
            (list, tuple),
            (),
            "Words that make a unit worth keeping, matched case-insensitively as "
            "ctxwindow.kit.terms reads them (lightly stemmed: 'refunds' meets 'refund').",
            check=_check_keywords,
        ),
        Option(
            "keyword_boost",
            (int, float),
            4.0,
            "How much each keyword a unit mentions multiplies its score, less one.",
            minimum=0,
        ),
    )

    def score(self, history: History, unit: int) -> float:
        """How much ``unit`` is worth keeping: decayed by age, boosted by keywords."""
        age = len(history.units) - 1 - unit
        decay: float = 0.5 ** (age / self.options["half_life"])
        hits = len(self.keyword_terms & set(terms(history.unit_text(unit))))
        boost: float = (1 + self.options["keyword_boost"]) ** hits
        return decay * boost

    @cached_property
    def keyword_terms(self) -> frozenset[str]:
        """The keywords as the words they match: lowercased and stemmed."""
        return frozenset(word for keyword in self.options["keywords"] for word in terms(keyword))

    def choose(self, history: History) -> Selection:
        selection = history.selection()  # must-keep units kept, every other one dropped
        room = history.budget - history.must_keep_tokens
        candidates = [unit for unit in range(len(history.units)) if unit not in history.must_keep]
        scores = {unit: self.score(history, unit) for unit in candidates}
        task = history.task_unit  # None when the task_statement option is off
        for unit in sorted(candidates, key=lambda u: (u != task, -scores[u], -u)):
            tokens = history.unit_tokens(unit)
            if tokens <= room:
                selection.keep(unit, TASK_FIRST if unit == task else KEPT, score=scores[unit])
                room -= tokens
            else:
                selection.drop(unit, DROPPED, score=scores[unit])
        return selection
