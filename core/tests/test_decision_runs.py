"""``record.decision_runs`` says what ``record.decisions`` says, a run of units at a
time: unit by unit, the same positions, action and reason, whichever way the strategy
decided (one unit at a time, ranges, lists read and written) and with defective
messages the runner dropped."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow import BaseStrategy, History, Message, Selection, Windower, WindowRecord
from ctxwindow.testing.conversations import histories

ACTIONS = ("keep", "drop", "summarize", "keep-range", "drop-range", "summarize-range")


class _Drawn(BaseStrategy):
    """Decides as a drawn plan says, then keeps what fits of the newest units."""

    name = "drawn"

    def __init__(self, plan: list[tuple[str, int, int, int]], spell: bool, **options: Any):
        super().__init__(**options)
        self.plan, self.spell = plan, spell

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        count = len(history.units)
        free = [unit for unit in range(count) if unit not in history.must_keep]
        room = history.budget - history.must_keep_tokens
        summary = Message("system", "summary", metadata={"synthetic": True})
        for planned, first, length, reason in self.plan:
            if not free:
                break
            how = planned
            if how.startswith("summarize") and not selection.synthetic:  # what stands for them
                cost = history.counter.count_message(summary)
                if cost > room:  # no room for a summary: drop them instead
                    how = how.replace("summarize", "drop")
                else:
                    selection.add_synthetic(summary, 0)
                    room -= cost
            unit = free[first % len(free)]
            why = f"reason {reason}"
            if how.endswith("range"):
                units = range(unit, min(unit + length, count))
                units = range(
                    units.start, next((u for u in units if u in history.must_keep), units.stop)
                )
                getattr(selection, how.split("-")[0])(units, why)
            else:
                getattr(selection, how)(unit, why)
        if self.spell:
            assert len(selection.actions) == count  # spelled out from here on
        for unit in list(selection.kept):  # within the budget: drop the oldest kept
            if unit not in history.must_keep:
                selection.drop(unit, "over budget")
        for unit in reversed(free):
            if history.unit_tokens(unit) > room:
                break
            room -= history.unit_tokens(unit)
            selection.keep(unit, "recent")
        return selection


def _unit_by_unit(record: WindowRecord) -> list[tuple[int, tuple[int, ...], str, str]]:
    """The runs expanded again: one row per unit (the unit -1 for no unit)."""
    rows: list[tuple[int, tuple[int, ...], str, str]] = []
    for run in record.decision_runs:
        positions = list(run.positions)
        if not run.units:
            rows.append((-1, tuple(positions), run.action, run.reason))
            continue
        assert positions == sorted(positions)
        for unit in run.units:
            rows.append((unit, (), run.action, run.reason))
    return rows


@settings(max_examples=250, deadline=None)
@given(
    histories(defects=True),
    st.lists(
        st.tuples(
            st.sampled_from(ACTIONS), st.integers(0, 99), st.integers(1, 9), st.integers(0, 2)
        ),
        max_size=8,
    ),
    st.booleans(),
    st.sampled_from([40, 200, 800, 5000]),
)
def test_decision_runs_say_what_the_decisions_say(
    messages: list[Any], plan: list[tuple[str, int, int, int]], spell: bool, budget: int
) -> None:
    windower = Windower(_Drawn(plan, spell, orphans="drop", oversize="truncate"), budget, "approx")
    try:
        record = windower.select(messages).record
    except Exception as error:  # a budget too small for what must stay
        assert type(error).__name__ == "BudgetTooSmall", error
        return
    assert record.engaged or len(record.decision_runs) <= 1
    decisions = record.decisions
    rows = _unit_by_unit(record)
    assert [(row[0], row[2], row[3]) for row in rows] == [
        (d.unit, d.action, d.reason) for d in decisions
    ]
    for run in record.decision_runs:  # each run's positions are its units' positions
        if run.units:
            expected = [p for d in decisions[run.units.start : run.units.stop] for p in d.positions]
            assert list(run.positions) == expected
    runs = [run for run in record.decision_runs if run.units]
    for before, after in itertools.pairwise(runs):  # runs are maximal
        assert (before.action, before.reason) != (after.action, after.reason)
