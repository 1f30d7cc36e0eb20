"""A selection that carried units from an earlier visit is checked against that visit's
kept set for those units: the kept set changed by hand among them (a unit taken out,
one put in as a float, one that is no unit) is still a violation, and a selection left
alone gives what deciding every unit again gives."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from ctxwindow import BaseStrategy, Conversation, History, Option, Selection, Windower
from ctxwindow.errors import ContractViolation
from ctxwindow.testing import assistant, user


class _KeepsAll(BaseStrategy):
    """Keeps every unit; with ``carry``, takes all but the newest two over from its
    last visit; ``tamper`` then changes the kept set by hand."""

    name = "keeps-all"
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option("carry", bool, True, "Carry from the last visit."),
        Option("tamper", str, "", "What to change in the kept set after carrying."),
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.last: Selection | None = None

    def engages_within_budget(self, history: History) -> bool:
        return True

    def transform(self, history: History) -> Selection:
        return self.choose(history)

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        count = len(history.units)
        first = 0
        if self.options["carry"] and self.last is not None:
            first = selection.carry(self.last, count - 2)
        for unit in range(first, count):
            if unit not in history.must_keep:
                selection.keep(unit, f"kept {unit % 3}")
        tamper = self.options["tamper"]
        if first > 3 and tamper:
            if tamper == "discard":
                selection.kept.discard(2)
            elif tamper == "float":
                selection.kept.discard(2)
                selection.kept.add(2.0)  # type: ignore[arg-type]
            elif tamper == "past":
                selection.kept.add(count + 5)
            elif tamper == "negative":
                selection.kept.add(-1)
        self.last = selection
        return selection


def _turns(count: int) -> list[list[dict[str, Any]]]:
    return [
        [user(f"question {turn} " * 5), assistant(f"answer {turn} " * 8)] for turn in range(count)
    ]


def _windows(strategy: _KeepsAll) -> list[Any]:
    conversation = Conversation([{"role": "system", "content": "be brief"}])
    windows = []
    for turn in _turns(8):
        conversation.extend(turn)
        windows.append(Windower(strategy, 100_000, "approx").transform(conversation))
    return windows


def test_a_carried_selection_left_alone_gives_what_deciding_everything_gives() -> None:
    carried, fresh = _windows(_KeepsAll()), _windows(_KeepsAll(carry=False))
    for ours, theirs in zip(carried, fresh, strict=True):
        assert ours.messages == theirs.messages
        assert ours.record.decisions == theirs.record.decisions
        assert ours.record.decision_runs == theirs.record.decision_runs


@pytest.mark.parametrize("tamper", ["discard", "float", "past", "negative"])
def test_a_kept_set_changed_by_hand_among_carried_units_is_a_violation(tamper: str) -> None:
    with pytest.raises(ContractViolation):
        _windows(_KeepsAll(tamper=tamper))
