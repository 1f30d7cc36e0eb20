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


class _DroppedAtOnce(_EachDropped):
    """What _EachDropped decides, its drops without a score given in one drop_each()
    call (after a run over some of them, which each unit's own reason overrides)."""

    name = "dropped-at-once"

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        count = len(history.units)
        for unit in range(count - 6, count):
            selection.keep(unit, "newest")
        selection.drop(range(4, 6), "a run the units' own reasons override")
        reasons: dict[int, str] = {}
        for unit in range(count - 6):
            if unit in history.must_keep:
                continue
            if unit % 3 == 0:
                reasons[unit] = None  # type: ignore[assignment]  # the default, as drop() takes
            elif unit == 2:
                selection.drop(unit, "scored", score=0.5)
            else:
                reasons[unit] = f"older: {unit}"
        reasons[count - 6] = "dropped after it was kept"
        selection.drop_each(reasons)
        return selection


def test_units_dropped_at_once_record_what_units_dropped_one_by_one_do() -> None:
    at_once, each = _said(_DroppedAtOnce()), _said(_EachDropped())
    assert at_once.pop("strategy") == "dropped-at-once" and each.pop("strategy") == "each-dropped"
    assert at_once == each


@pytest.mark.parametrize(
    ("reasons", "named"),
    [
        ({True: "a bool"}, "unit True is not a unit"),
        ({3: "fine", 10_000: "past the end"}, "unit 10000 is not a unit"),
        ({-1: "before the start"}, "unit -1 is not a unit"),
        ({2: ""}, "unit 2 dropped without a reason"),
        ({2: 7}, "the reason for unit 2 must be a string"),
    ],
)
def test_a_bad_drop_each_names_the_unit_as_drop_does(reasons: Any, named: str) -> None:
    history = ctxwindow.Conversation(HISTORY).view(ctxwindow.get_counter("approx"), 600)
    with pytest.raises(InvalidSelection) as raised:
        history.selection().drop_each(reasons)
    assert named in str(raised.value)


def test_drop_each_takes_numpy_units_and_an_empty_mapping() -> None:
    import numpy as np

    history = ctxwindow.Conversation(HISTORY).view(ctxwindow.get_counter("approx"), 600)
    selection = history.selection()
    selection.keep(range(3, 6), "kept first")
    selection.drop_each({})
    selection.drop_each({np.int64(4): "a numpy unit", 5: "an int"})
    assert selection.kept.isdisjoint({4, 5}) and 3 in selection.kept
    assert (selection.reason(4), selection.reason(5)) == ("a numpy unit", "an int")
