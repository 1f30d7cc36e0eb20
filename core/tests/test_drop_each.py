"""A unit dropped on its own, inline or through the checks, is recorded as the lists
spelled out would record it."""

from __future__ import annotations

from typing import Any

import pytest

import ctxwindow
from ctxwindow import BaseStrategy, History, InvalidSelection, Selection, Windower
from ctxwindow.testing import assistant, user

HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    *[m for turn in range(20) for m in (user(f"q{turn} " * 20), assistant(f"a{turn} " * 30))],
    user("and now?"),
]


class _EachDropped(BaseStrategy):
    """Keeps the newest units, and drops each older one on its own: some with a reason,
    some with none (the default's), one with a score; ``spelled`` reads the lists first."""

    name = "each-dropped"

    def __init__(self, spelled: bool = False, **options: Any) -> None:
        super().__init__(**options)
        self.spelled = spelled

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        if self.spelled:
            assert len(selection.actions) == len(history.units)
        count = len(history.units)
        for unit in range(count - 6, count):
            selection.keep(unit, "newest")
        for unit in range(count - 6):
            if unit in history.must_keep:
                continue
            if unit % 3 == 0:
                selection.drop(unit, None)
            elif unit == 2:
                selection.drop(unit, "scored", score=0.5)
            else:
                selection.drop(unit, f"older: {unit}")
        selection.drop(count - 6, "dropped after it was kept")
        return selection


def _said(strategy: BaseStrategy) -> dict[str, Any]:
    window = Windower(strategy, 400, "approx").select(HISTORY)
    assert window.record.engaged
    said = window.record.to_dict()
    said.pop("elapsed_ms")
    said["runs"] = [(r.units, r.action, r.reason) for r in window.record.decision_runs]
    return {"messages": window.messages, **said}


def test_units_dropped_one_by_one_record_what_the_spelled_out_lists_do() -> None:
    inline, spelled = _said(_EachDropped()), _said(_EachDropped(spelled=True))
    assert inline == spelled
    reasons = {d["unit"]: (d["action"], d["reason"], d["score"]) for d in inline["decisions"]}
    assert reasons[3] == ("dropped", "not chosen by the strategy", None)
    assert reasons[2] == ("dropped", "scored", 0.5)
    assert reasons[4] == ("dropped", "older: 4", None)
    assert reasons[len(reasons) - 6][:2] == ("dropped", "dropped after it was kept")


@pytest.mark.parametrize(
    ("unit", "reason"), [(True, "a bool is no unit"), (10_000, "past the end"), (2, "")]
)
def test_a_bad_drop_of_one_unit_is_the_same_error_inline_or_not(unit: Any, reason: str) -> None:
    history = ctxwindow.Conversation(HISTORY).view(ctxwindow.get_counter("approx"), 600)
    with pytest.raises(InvalidSelection):
        history.selection().drop(unit, reason)
