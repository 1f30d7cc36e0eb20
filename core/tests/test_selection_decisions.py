"""A selection's decisions are held as what the strategy decided until it reads or
writes the per-unit lists: the window and the record are the same either way, and a
visit of a strategy that only keeps and drops never spells out a list per unit."""

from __future__ import annotations

import math
from typing import Any

import pytest

import ctxwindow
from ctxwindow import BaseStrategy, ContractViolation, History, Selection, Windower
from ctxwindow.testing import assistant, calls, result, user
from ctxwindow.testing.strategies import newest

HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    *[m for turn in range(30) for m in (user(f"q{turn} " * 20), assistant(f"a{turn} " * 30))],
    calls("c1", "c2"),
    result("c1", "r " * 40),
    result("c2", "r " * 40),
    user("and now?"),
]


class _Spelled(BaseStrategy):
    """``newest``, with the per-unit lists read first and one drop written into them."""

    name = "spelled"

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        assert len(selection.actions) == len(history.units)
        oldest = min(selection.kept - set(history.must_keep))
        selection.drop(oldest, "dropped after the lists were read")
        selection.actions[oldest] = "dropped"  # the same, written directly
        return selection


class _Decided(BaseStrategy):
    """The same choice through keep() and drop() alone."""

    name = "decided"

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        oldest = min(selection.kept - set(history.must_keep))
        selection.drop(oldest, "dropped after the lists were read")
        return selection


def _record(strategy: BaseStrategy) -> dict[str, Any]:
    window = Windower(strategy, 600, "approx").select(HISTORY)
    record = window.record.to_dict()
    record.pop("elapsed_ms")
    record.pop("strategy")
    return {"messages": window.messages, **record}


def test_the_window_and_record_are_the_same_whether_the_lists_were_read_or_not() -> None:
    spelled, decided = _record(_Spelled()), _record(_Decided())
    assert spelled == decided
    assert spelled["counts"]["kept"] > 3 and spelled["counts"]["dropped"] > 3
    reasons = {d["reason"] for d in decided["decisions"]}
    assert {"dropped after the lists were read", "older than the newest units that fit"} <= reasons


@pytest.fixture
def no_spelling_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the per-unit lists fails the visit (a PluginError saying so)."""

    def spelled_out(self: Selection) -> None:
        raise AssertionError("the per-unit lists were built")

    monkeypatch.setattr(Selection, "_spell_out", spelled_out)


@pytest.mark.usefixtures("no_spelling_out")
def test_a_visit_that_only_keeps_and_drops_spells_out_no_list() -> None:
    window = Windower(_Decided(), 600, "approx").select(HISTORY)
    assert window.record.count("kept") > 3  # the record is spelled out from the decisions
    with pytest.raises(ctxwindow.PluginError, match="lists were built"):
        Windower(_Spelled(), 600, "approx").select(HISTORY)


def test_reading_the_lists_midway_keeps_every_decision_so_far() -> None:
    history = ctxwindow.Conversation(HISTORY).view(ctxwindow.get_counter("approx"), 600)
    selection = history.selection()
    selection.keep(3, "three")
    selection.drop(4, "four")
    assert selection.reason(3) == "three" and selection.reason(5) == selection.default_reason
    actions, reasons = selection.actions, selection.reasons
    assert (actions[3], reasons[3], actions[4], reasons[4]) == ("kept", "three", "dropped", "four")
    selection.summarize(5, "five")
    assert selection.actions[5] == "summarized" and selection.reason(5) == "five"
    assert selection.actions is actions


class _KeptBehindItsBack(BaseStrategy):
    """Adds a unit to the kept set without keep(): the record would not say so."""

    name = "kept-behind"

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        assert 2 not in selection.kept
        selection.kept.add(2)
        return selection


def test_a_kept_set_changed_behind_the_decisions_is_still_a_violation() -> None:
    with pytest.raises(ContractViolation, match="unit 2 is in the window but its record says"):
        Windower(_KeptBehindItsBack(), 600, "approx").select(HISTORY)


# -- decisions about a range of units at once -----------------------------------
class _Ranged(BaseStrategy):
    """``newest``, with the older units summarized and a stretch dropped as ranges,
    one unit of them then decided on its own, and a summary placed where they were."""

    name = "ranged"

    def __init__(self, by_range: bool) -> None:
        self.by_range = by_range

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        older = min(selection.kept - set(history.must_keep))
        summarized, dropped = range(2, older - 4), range(older - 4, older)  # 1: the task
        for units, decide in ((summarized, selection.summarize), (dropped, selection.drop)):
            if self.by_range:
                decide(units, f"{decide.__name__} as a range")
            else:
                for unit in units:
                    decide(unit, f"{decide.__name__} as a range")
        selection.drop(3, "one of the summarized units, dropped after all")
        summary = ctxwindow.Message("system", "a summary", metadata={"synthetic": True})
        selection.add_synthetic(summary, before_unit=2)
        return selection


def test_a_range_decides_as_a_call_per_unit_would() -> None:
    by_range, by_unit = _record(_Ranged(by_range=True)), _record(_Ranged(by_range=False))
    assert by_range == by_unit
    assert by_range["counts"]["summarized"] > 10 and by_range["counts"]["dropped"] >= 5
    actions = {d["unit"]: (d["action"], d["reason"]) for d in by_range["decisions"]}
    assert actions[3] == ("dropped", "one of the summarized units, dropped after all")
    assert actions[4] == ("summarized", "summarize as a range")


@pytest.mark.usefixtures("no_spelling_out")
def test_a_range_costs_one_decision_until_the_lists_are_read() -> None:
    window = Windower(_Ranged(by_range=True), 600, "approx").select(HISTORY)
    assert window.record.count("summarized") > 10


def test_a_newer_decision_wins_over_an_older_one_range_or_not() -> None:
    history = ctxwindow.Conversation(HISTORY).view(ctxwindow.get_counter("approx"), 600)
    selection = history.selection()
    selection.keep(5, "five on its own")
    selection.summarize(range(2, 10), "the run")
    assert selection.reason(5) == "the run" and 5 not in selection.kept
    selection.keep(range(4, 7), "kept again")
    assert {4, 5, 6} <= selection.kept and selection.reason(6) == "kept again"
    selection.drop(6, "six on its own")
    assert 6 not in selection.kept and selection.reason(6) == "six on its own"
    assert selection.reason(8) == "the run" and selection.reason(11) == selection.default_reason
    actions = selection.actions  # spelled out: the same answers
    assert actions[2:11] == ["summarized"] * 2 + ["kept"] * 2 + ["dropped"] + ["summarized"] * 3 + [
        "dropped"
    ]
    selection.summarize(range(0, 3), "after the lists were read")
    assert selection.actions[:3] == ["summarized"] * 3
    assert selection.reasons[1] == "after the lists were read"


@pytest.mark.parametrize(
    ("units", "score", "match"),
    [
        (range(0, 10, 2), None, "must step by 1"),
        (range(-1, 3), None, "must step by 1 within 0 to"),
        (range(0, 10_000), None, "within 0 to"),
        (range(0, 3), 1.0, "a score is given per unit"),
    ],
)
def test_a_bad_range_is_a_clear_error(units: range, score: float | None, match: str) -> None:
    history = ctxwindow.Conversation(HISTORY).view(ctxwindow.get_counter("approx"), 600)
    selection = history.selection()
    with pytest.raises(ctxwindow.errors.InvalidSelection, match=match):
        selection.keep(units, "why", score)
    assert selection.kept == set(history.must_keep)


class _KeptRangeBehindItsBack(BaseStrategy):
    """Keeps a range, then takes one of its units out of the kept set without drop()."""

    name = "kept-range-behind"

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        selection.keep(range(1, 4), "kept as a range")
        selection.kept.discard(2)
        return selection


def test_a_kept_range_the_window_lacks_is_a_violation() -> None:
    with pytest.raises(ContractViolation, match="unit 2 is recorded as kept but is not"):
        Windower(_KeptRangeBehindItsBack(), 600, "approx").select(HISTORY)


class _KeptUnitsBehindItsBack(BaseStrategy):
    """Keeps units one by one, then takes one of them out of the kept set without drop()."""

    name = "kept-units-behind"

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        for unit in (1, 2, 3):
            selection.keep(unit, "kept on its own")
        selection.kept.discard(2)
        return selection


def test_a_unit_kept_on_its_own_the_window_lacks_is_a_violation() -> None:
    with pytest.raises(ContractViolation, match="unit 2 is recorded as kept but is not"):
        Windower(_KeptUnitsBehindItsBack(), 600, "approx").select(HISTORY)


class _ScoresEvery(BaseStrategy):
    """``newest``, with a score for every unit in ``unit_scores`` (``given``), one unit's
    own score in ``scores``, and the given scores changed after the visit."""

    name = "scores-every"

    def __init__(self, given: Any, **options: Any) -> None:
        self.given = given
        super().__init__(**options)

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        oldest = min(selection.kept - set(history.must_keep))
        selection.keep(oldest, "kept with its own score", 9.5)
        selection.unit_scores = self.given(len(history.units))
        return selection


@pytest.mark.parametrize("kind", ["list", "numpy"])
def test_unit_scores_give_every_unit_a_score_and_a_units_own_comes_first(kind: str) -> None:
    def given(count: int) -> Any:
        values = [unit / 4 for unit in range(count)]
        if kind == "numpy":
            numpy = pytest.importorskip("numpy")
            return numpy.asarray(values, dtype=numpy.float32)
        return values

    strategy = _ScoresEvery(given)
    window = Windower(strategy, 600, "approx").select(HISTORY)
    decisions = window.record.decisions
    own = [d for d in decisions if d.reason == "kept with its own score"]
    assert [d.score for d in own] == [9.5]
    assert all(d.score == d.unit / 4 and type(d.score) is float for d in decisions if d not in own)
    assert any(d.action == "dropped" for d in decisions)


def test_a_nan_among_unit_scores_gives_its_unit_no_score() -> None:
    def given(count: int) -> list[float]:
        return [math.nan if unit % 2 else unit / 4 for unit in range(count)]

    window = Windower(_ScoresEvery(given), 600, "approx").select(HISTORY)
    for decision in window.record.decisions:
        if decision.reason != "kept with its own score":
            expected = None if decision.unit % 2 else decision.unit / 4
            assert decision.score == expected


def test_unit_scores_changed_after_the_visit_leave_the_record_as_it_was() -> None:
    held: list[Any] = []

    def given(count: int) -> list[float]:
        held.append([1.0] * count)
        return held[-1]

    window = Windower(_ScoresEvery(given), 600, "approx").select(HISTORY)
    held[-1][:] = [7.0] * len(held[-1])  # the strategy's list, changed afterwards
    assert {d.score for d in window.record.decisions} == {1.0, 9.5}


@pytest.mark.parametrize(
    ("given", "match"),
    [
        (lambda count: [0.5] * (count - 1), "unit_scores holds .* scores for .* units"),
        (lambda count: ["high"] * count, "unit_scores must hold one real number per unit"),
        (lambda count: 3.0, "unit_scores must hold one real number per unit"),
    ],
)
def test_unit_scores_that_are_not_one_number_per_unit_are_a_violation(
    given: Any, match: str
) -> None:
    with pytest.raises(ContractViolation, match=match):
        Windower(_ScoresEvery(given), 600, "approx").select(HISTORY)


class _SummaryTakenBack(BaseStrategy):
    """``newest``, having first recorded the older units as summarized at once, then
    dropped each of them after all (as a pipeline does when a later stage drops the
    summary an earlier one wrote): no unit is summarized, so no made message is due."""

    name = "summary-taken-back"
    summarized_left: int = 0  # units left summarized (the rest dropped one by one)

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        left_out = sorted(set(range(len(history.units))) - selection.kept)
        older = range(left_out[0], left_out[-1] + 1)  # after the task statement, kept
        selection.summarize(older, "in a summary")
        selection.drop_each(dict.fromkeys(older[self.summarized_left :], "its summary went"))
        return selection


def test_units_summarized_in_a_run_then_each_dropped_need_no_made_message() -> None:
    """The runner asked for a made message when any run of units was summarized, even
    one whose every unit was given another action after: a pipeline whose last stage
    dropped the first stage's summary broke the contract on its first visit. A unit
    still summarized still needs one."""
    window = Windower(_SummaryTakenBack(), 600, "approx").select(HISTORY)
    assert window.record.count("summarized") == 0
    assert {run.reason for run in window.record.decision_runs if run.action == "dropped"} == {
        "its summary went"
    }
    left = _SummaryTakenBack()
    left.summarized_left = 1
    with pytest.raises(ContractViolation, match="no message to stand for them"):
        Windower(left, 600, "approx").select(HISTORY)
