"""A selection's decisions are held as what the strategy decided until it reads or
writes the per-unit lists: the window and the record are the same either way, and a
visit of a strategy that only keeps and drops never spells out a list per unit."""

from __future__ import annotations

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


def test_a_visit_that_only_keeps_and_drops_spells_out_no_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def spelled_out(self: Selection) -> None:
        raise AssertionError("the per-unit lists were built")

    monkeypatch.setattr(Selection, "_spell_out", spelled_out)
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
