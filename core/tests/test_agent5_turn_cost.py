"""A long agent run after one instruction: the whole history is the current turn, and
a warm visit must still cost what is new (README: "a turn costs its new message, not
the history"), not a pass over every unit of the turn. The work is counted in calls
(units summed, units' spans read), never timed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxwindow
from ctxwindow import History
from ctxwindow._visit import _ByUnit
from ctxwindow.testing import calls, result, user

BUDGET = 3000


def _round(number: int) -> list[dict[str, Any]]:
    call_id = f"c{number}"
    return [calls(call_id), result(call_id, f"row {number}: " + "amount 12.50 " * 12)]


def _run(rounds: int) -> list[dict[str, Any]]:
    """One instruction, then ``rounds`` tool rounds."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}, user("reconcile")]
    for number in range(rounds):
        messages.extend(_round(number))
    return messages


def _counted(monkeypatch: pytest.MonkeyPatch, name: str, calls_made: Counter[str]) -> None:
    """Count the calls of History method ``name`` (still doing what it did)."""
    method: Callable[..., Any] = getattr(History, name)

    def counting(self: History, *args: Any) -> Any:
        calls_made[name] += 1
        return method(self, *args)

    monkeypatch.setattr(History, name, counting)


def _warm_visit_calls(rounds: int, name: str) -> tuple[int, ctxwindow.Window[Any]]:
    """The calls of History method ``name`` one warm visit makes (the list visited at
    ``rounds`` rounds, then grown by one), and that visit's window."""
    windower = ctxwindow.from_config({"strategy": "newest", "budget": BUDGET})
    messages = _run(rounds)
    windower.select(messages)
    messages.extend(_round(rounds))
    made: Counter[str] = Counter()
    with pytest.MonkeyPatch.context() as monkeypatch:
        _counted(monkeypatch, name, made)
        window = windower.select(messages)
    return made[name], window


def _turn_note(window: ctxwindow.Window[Any]) -> str:
    return next(n for n in window.record.notes if n.startswith("the current turn is bigger"))


@pytest.mark.parametrize("name", ["span", "unit_tokens"])
def test_a_warm_visit_of_a_long_single_instruction_run_does_not_read_the_whole_turn(
    name: str,
) -> None:
    """1,000 or 4,000 rounds after one instruction: the same work on a warm visit.
    Before, the current turn's note read a span per dropped unit (``span``) and its
    must-keep units summed every unit of the turn (``unit_tokens``): 4x the calls."""
    short, short_window = _warm_visit_calls(1000, name)
    long, long_window = _warm_visit_calls(4000, name)
    assert long == short, f"{name}: {short} calls at 1,000 rounds, {long} at 4,000"
    assert short < 200  # a window's worth (about 50 units), not a turn's (2,000 units)
    # the note still names every dropped message of the turn, in runs
    for window, rounds in ((short_window, 1000), (long_window, 4000)):
        kept = len(window.messages) - 2  # the system and user messages stay
        last_gone = 2 + 2 * (rounds + 1) - kept - 1
        note = _turn_note(window)
        assert f"(messages 2-{last_gone}), its newest exchange stayed" in note
        assert f"{(last_gone - 1) // 2} of its unit(s) were dropped" in note


def test_the_note_on_a_long_turn_names_the_runs_around_a_pinned_message() -> None:
    """Units kept inside the turn (a pinned message) split what went into runs: read
    as runs of units, the note names the same messages it did unit by unit."""
    messages = [{"role": "system", "content": "s"}, user("reconcile")]
    for number in range(300):
        messages.extend(_round(number))
        if number == 100:
            messages.append({"role": "assistant", "content": "x", "metadata": {"pinned": True}})
    window = ctxwindow.select(messages, BUDGET, "newest")
    pinned = 2 + 2 * 101
    assert messages[pinned] in window.messages
    first_kept = next(p for p in range(pinned + 1, len(messages)) if messages[p] in window.messages)
    assert all(m in window.messages for m in messages[first_kept:])
    note = _turn_note(window)
    assert f"(messages 2-{pinned - 1}, {pinned + 1}-{first_kept - 1})" in note
    gone = (pinned - 2) // 2 + (first_kept - pinned - 1) // 2
    assert f"{gone} of its unit(s) were dropped" in note


def test_the_note_on_a_turn_with_a_dropped_orphan_names_the_messages_unit_by_unit() -> None:
    """A defective message (an orphan result, dropped) between the turn's units: its
    units do not lie end to end, and the note names their messages around it."""
    messages = [{"role": "system", "content": "s"}, user("reconcile")]
    for number in range(200):
        messages.extend(_round(number))
        if number == 10:
            messages.append(result("nobody", "stray"))
    windower = ctxwindow.from_config({"strategy": "newest", "budget": BUDGET, "orphans": "drop"})
    window = windower.select(messages)
    orphan = 2 + 2 * 11
    first_kept = next(p for p in range(3, len(messages)) if messages[p] in window.messages)
    note = _turn_note(window)
    assert f"(messages 2-{orphan - 1}, {orphan + 1}-{first_kept - 1})" in note


# -- counting the summarized units of a long turn ---------------------------------------------
ACTIONS = st.sampled_from(["kept", "dropped", "summarized"])


@st.composite
def decided(draw: st.DrawFn) -> tuple[_ByUnit[str], list[range]]:
    """Actions held as runs and units given one (as a visit holds them), and ascending
    runs of units apart from each other."""
    count = draw(st.integers(1, 60))
    runs = []
    for _ in range(draw(st.integers(0, 5))):
        start = draw(st.integers(0, count - 1))
        runs.append((start, draw(st.integers(start, count)), draw(ACTIONS)))
    given = draw(st.dictionaries(st.integers(0, count - 1), ACTIONS, max_size=8))
    edges = sorted(draw(st.sets(st.integers(0, count), max_size=8)))
    ranges = [range(a, b) for a, b in zip(edges[::2], edges[1::2], strict=False) if b > a]
    return _ByUnit(count, "dropped", given, runs), ranges


@settings(max_examples=300, deadline=None)
@given(decided())
def test_the_units_of_some_runs_holding_an_action_are_counted_as_one_by_one(
    case: tuple[_ByUnit[str], list[range]],
) -> None:
    actions, ranges = case
    for action in ("kept", "dropped", "summarized"):
        one_by_one = sum(actions[unit] == action for run in ranges for unit in run)
        assert actions.count_in(ranges, action) == one_by_one


def test_a_turn_summarized_as_one_run_is_counted_without_reading_its_units(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long agent turn's older rounds summarized at once: the note counts them by the
    run (the visit's note read each unit before, with a pass over the runs each)."""
    actions: _ByUnit[str] = _ByUnit(
        40_002, "dropped", {40_001: "kept"}, [(2, 40_000, "summarized")]
    )
    read: list[int] = []
    lookup = _ByUnit.__getitem__
    monkeypatch.setattr(
        _ByUnit, "__getitem__", lambda self, unit: read.append(unit) or lookup(self, unit)
    )
    assert actions.count_in([range(1, 40_001)], "summarized") == 39_998
    assert read == []
