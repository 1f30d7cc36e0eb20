"""``recent_run`` finds by bisection the run ``recent_units`` walks to, and ``keep_run``
keeps it (the must-keep units with their own reasons); ``History.run_tokens`` and
``positions_tokens`` are what the per-unit counts add up to, and
``History.fitting_start`` is the first start whose run fits."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow import Conversation, History
from ctxwindow._tokens import ApproxCounter, CachedCounter
from ctxwindow.kit import keep_run, recent_run, recent_units
from ctxwindow.testing.conversations import histories

COUNTER = CachedCounter(ApproxCounter())


def _view(messages: list[Any], budget: int, task: bool) -> History:
    return Conversation(messages).view(COUNTER, budget, None, task_statement=task)


def _walked(history: History, room: int, before: int | None) -> range:
    """The run as recent_units walks it: from the oldest unit it yields to ``before``."""
    stop = len(history.units) if before is None else before
    yielded = list(recent_units(history, room, before=before))
    return range(yielded[-1] if yielded else stop, stop)


@settings(max_examples=300, deadline=None)
@given(
    histories(defects=True),
    st.integers(-5, 3000),
    st.integers(1, 5000),
    st.booleans(),
    st.data(),
)
def test_recent_run_is_the_run_recent_units_walks(
    messages: list[Any], room: int, budget: int, task: bool, data: st.DataObject
) -> None:
    history = _view(messages, budget, task)
    count = len(history.units)
    before = data.draw(st.one_of(st.none(), st.integers(0, count)))
    assert recent_run(history, room, before=before) == _walked(history, room, before)


@settings(max_examples=200, deadline=None)
@given(histories(defects=True), st.integers(1, 5000), st.booleans(), st.data())
def test_keep_run_keeps_the_run_and_leaves_the_must_keep_reasons(
    messages: list[Any], budget: int, task: bool, data: st.DataObject
) -> None:
    history = _view(messages, budget, task)
    count = len(history.units)
    start = data.draw(st.integers(0, count))
    units = range(start, data.draw(st.integers(start, count)))
    selection = history.selection()
    keep_run(selection, units, "in the run")
    assert selection.kept == set(history.must_keep) | set(units)
    for unit in range(count):
        if unit in history.must_keep:
            assert selection.reason(unit) == history.must_keep[unit]
        elif unit in units:
            assert selection.reason(unit) == "in the run"
        else:
            assert unit not in selection.kept


@settings(max_examples=200, deadline=None)
@given(histories(defects=True), st.data())
def test_run_and_positions_tokens_add_up_the_unit_counts(
    messages: list[Any], data: st.DataObject
) -> None:
    history = _view(messages, 1000, True)
    count = len(history.units)
    start = data.draw(st.integers(0, count))
    units = range(start, data.draw(st.integers(start, count)))
    assert history.run_tokens(units) == sum(map(history.unit_tokens, units))
    runs = [(span.start, span.stop) for span in map(history.span, units)]
    assert history.positions_tokens(runs) == sum(map(history.unit_tokens, units))


@settings(max_examples=300, deadline=None)
@given(histories(defects=True), st.integers(-5, 3000), st.data())
def test_fitting_start_is_the_first_start_whose_run_fits(
    messages: list[Any], room: int, data: st.DataObject
) -> None:
    history = _view(messages, 1000, True)
    count = len(history.units)
    start = data.draw(st.integers(0, count))
    units = range(start, data.draw(st.integers(start, count)))
    fitting = [s for s in units if history.run_tokens(range(s, units.stop)) <= room]
    assert history.fitting_start(units, room) == (fitting[0] if fitting else units.stop)
