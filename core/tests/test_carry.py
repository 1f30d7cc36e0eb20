"""Selection.carry: a strategy whose decisions about old units stay the same from turn
to turn takes them over from its last visit, and the runner checks, counts and lays out
only what is new. A carried visit gives exactly the window and record a visit deciding
everything afresh gives, and falls back to deciding everything where the two visits'
histories part."""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwindow import (
    ApproxCounter,
    BaseStrategy,
    Conversation,
    History,
    Message,
    Option,
    Selection,
    Window,
    Windower,
    get_counter,
)
from ctxwindow._selection import reaches
from ctxwindow.errors import ContractViolation, InvalidSelection
from ctxwindow.testing.conversations import agent_histories, agent_loop, user

COUNTER = get_counter("approx")


class Clears(BaseStrategy):
    """Replaces every tool result older than the newest ``recent`` ones with a stub and
    keeps everything else; with ``carry``, takes the units older than those results
    over from its last visit."""

    name = "clears"
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option("recent", int, 2, "Results kept whole."),
        Option("carry", bool, True, "Carry from the last visit."),
        Option("tamper", str, "", "What to change by hand after carrying."),
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.last: tuple[Selection, int] | None = None
        self.carried: list[int] = []
        self.forgotten: int | None = None
        self.added: list[int] = []

    def engages_within_budget(self, history: History) -> bool:
        return True

    def transform(self, history: History) -> Selection:
        return self.choose(history)

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        recent = self._recent(history)
        # older than the newest results' units, now and last time: decided for good
        stable = min((history.unit_of(p) or 0 for p in recent), default=len(history.units))
        first = 0
        if self.options["carry"] and self.last is not None:
            last, settled = self.last
            first = selection.carry(last, min(settled, stable))
        self.carried.append(first)
        results = [
            position
            for unit in range(first, len(history.units))
            for position in history.span(unit)
            if history.messages[position].role == "tool"
        ]
        for unit in range(first, len(history.units)):
            if unit not in history.must_keep:  # those say why they must stay
                selection.keep(unit, "kept")
        for position in results:
            unit = history.unit_of(position)
            if position in recent or unit in history.must_keep:
                continue
            message = history.messages[position]
            stub = dataclasses.replace(
                message,
                content=f"[cleared: {history.tokens(position)} tokens]",
                metadata={"synthetic": True},
            )
            if COUNTER.count_message(stub) < history.tokens(position):
                selection.replace(position, stub, f"cleared {message.tool_call_id}")
        self._tamper(selection, history, first)
        self.last = (selection, stable)
        return selection

    def _recent(self, history: History) -> list[int]:
        """The newest ``recent`` tool results' positions."""
        wanted, found = self.options["recent"], []
        for position in range(len(history) - 1, -1, -1):
            if len(found) == wanted:
                break
            if history.messages[position].role == "tool":
                found.append(position)
        return found

    def _tamper(self, selection: Selection, history: History, first: int) -> None:
        tamper = self.options["tamper"]
        if not tamper or not first:
            return
        carried = [p for p in selection.stand_ins if p < history.span(first - 1).stop]
        if tamper == "forget" and carried:
            self.forgotten = carried[0]
            del selection.stand_ins[carried[0]]
        elif tamper == "add" and carried:
            call = history.span(history.unit_of(carried[-1]) or 0).start
            message = history.messages[call]
            note = dataclasses.replace(message, content="[a note]", metadata={"synthetic": True})
            selection.stand_ins[call] = note  # the unit is kept: a valid stand-in
            self.added.append(call)
        elif tamper == "unkeep" and carried:  # a carried unit out of the window by hand
            selection.kept.discard(history.unit_of(carried[0]))
        elif tamper == "redecide":
            selection.drop(history.unit_of(carried[0]) if carried else 0, "again")


def visit(
    strategy: Clears, messages: Any, budget: int = 100_000, how: str = "transform"
) -> Window[Any]:
    windower = Windower(strategy, budget, COUNTER)
    return windower.transform(messages) if how == "transform" else windower.select(messages)


def assert_alike(carried: Window[Any], fresh: Window[Any]) -> None:
    """The same window and the same record, but for the time taken."""
    assert carried.messages == fresh.messages
    ours, theirs = carried.record.to_dict(), fresh.record.to_dict()
    ours.pop("elapsed_ms"), theirs.pop("elapsed_ms")
    assert ours == theirs
    assert carried.record.decision_runs == fresh.record.decision_runs


def steps(rounds: int, seed: int) -> list[list[dict[str, Any]]]:
    """An agent loop cut into the messages each step adds."""
    history = agent_loop(rounds, result_words=30, instructions=rounds // 5)
    rng = random.Random(seed)
    rounds_start = [at for at in range(3, len(history)) if history[at]["role"] != "tool"]
    cuts = [*sorted(rng.sample(rounds_start, 40)), len(history)]
    return [history[: cuts[0]]] + [history[a:b] for a, b in itertools.pairwise(cuts)]


@pytest.mark.parametrize("how", ["transform", "select"])
def test_a_carried_visit_gives_what_deciding_everything_gives(how: str) -> None:
    strategy, conversation = Clears(), Conversation()
    for step in steps(120, seed=1):
        conversation.extend(step)
        window = visit(strategy, conversation, how=how)
        # read as an app reads it, so that the next visit takes its runs over too
        assert window.record.decision_runs
        assert_alike(window, visit(Clears(carry=False), conversation.originals, how=how))
    assert sum(1 for first in strategy.carried if first) >= 30
    assert max(strategy.carried) > 100


def test_a_chat_whose_last_turn_ends_is_recorded_as_one_run_again() -> None:
    """Each new question lets the last turn go from must-keep to kept like the units
    before it: the record's runs join again where the carried ones end."""
    strategy, conversation = Clears(recent=0), Conversation([{"role": "system", "content": "Hi."}])
    for turn in range(12):
        conversation.extend([user(f"question {turn}"), {"role": "assistant", "content": "ok"}])
        window = visit(strategy, conversation)
        assert window.record.decision_runs
        assert_alike(window, visit(Clears(recent=0, carry=False), conversation.originals))
        assert len(window.record.decision_runs) <= 5  # system, task, kept, the turn (2)
    assert sum(1 for first in strategy.carried if first) >= 10


def test_plain_lists_rebuilt_and_taken_back_give_this_calls_objects() -> None:
    """A new list each call, some rebuilt from equal dicts, some steps taken back: the
    window gives back this call's objects wherever it sends a caller's message."""
    strategy = Clears()
    history: list[dict[str, Any]] = []
    made = steps(120, seed=2)
    for number, step in enumerate(made):
        history = history + step
        if number % 4 == 3:
            history = [dict(message) for message in history]
        if number % 6 == 5 and number + 1 < len(made):  # a step taken back
            visit(strategy, history + made[number + 1])
        window = visit(strategy, history)
        ours = {id(message) for message in history}
        assert all(id(item) in ours for item in window.messages if "metadata" not in item)
        assert_alike(window, visit(Clears(carry=False), list(history)))
    assert sum(1 for first in strategy.carried if first) >= 20


def test_one_list_grown_and_given_equal_copies_in_place_gives_this_calls_objects() -> None:
    """The same list object every call, grown, with some messages put back in place as
    equal copies: the window gives back the objects the list holds now, not the ones
    the carried visit sent."""
    strategy = Clears()
    history: list[dict[str, Any]] = []
    for number, step in enumerate(steps(120, seed=6)):
        history.extend(step)
        if number % 3 == 2:
            for position in range(0, len(history), 7):
                history[position] = dict(history[position])
        window = visit(strategy, history)
        ours = {id(message) for message in history}
        assert all(id(item) in ours for item in window.messages if "metadata" not in item)
    assert sum(1 for first in strategy.carried if first) >= 20


def test_a_list_changed_near_its_end_carries_the_units_before_the_change() -> None:
    """A list whose older result (not among the newest the strategy keeps whole) was
    changed since the last call (a host cut it anew, the app shortened it) is read as a
    branch of the last call's conversation: the units before the change are carried,
    not none (a pipeline's clearing stage then re-decided the whole history on every
    request of a turn whose log its host cut: 143 ms a request at 20,000 messages
    against 11 ms uncut), and the window is the one deciding everything gives."""
    strategy = Clears()
    history = agent_loop(40, result_words=30, instructions=8, pending=False)
    # a task of its own: no list another test made shares a prefix with this one
    history[1] = user("Task: reconcile the invoices of a list changed near its end.")
    visit(strategy, history)
    results = [at for at, message in enumerate(history) if message["role"] == "tool"]
    changed = results[-12]  # before the current turn, and settled for the strategy
    grown = [*history, {"role": "assistant", "content": "One more thing."}]
    grown[changed] = {**history[changed], "content": "shortened"}
    window = visit(strategy, grown)
    conversation = strategy.last[0].history.conversation if strategy.last else None
    assert conversation is not None and conversation.branched_from is not None
    unit = conversation.branched_from.units
    assert 0 < unit <= strategy.last[0].history.unit_of(changed)  # type: ignore[union-attr,operator]
    assert strategy.carried[-1] == unit
    assert_alike(window, visit(Clears(carry=False), list(grown)))


@settings(max_examples=40, deadline=None)
@given(agent_histories(max_rounds=24), st.lists(st.integers(1, 9), min_size=1, max_size=6))
def test_carrying_through_any_agent_loop_changes_nothing(
    history: list[dict[str, Any]], sizes: list[int]
) -> None:
    strategy, conversation = Clears(recent=1), Conversation()
    starts = [at for at in range(1, len(history)) if history[at]["role"] != "tool"]
    cuts = sorted({starts[-min(size, len(starts))] for size in sizes} | {len(history)})
    start = 0
    for cut in cuts:
        conversation.extend(history[start:cut])
        start = max(start, cut)
        window = visit(strategy, conversation, budget=10**7)
        assert window.record.decision_runs
        assert_alike(window, visit(Clears(recent=1, carry=False), list(history[:start]), 10**7))


def test_a_stand_in_taken_out_by_hand_after_carrying_is_seen() -> None:
    """The stand-ins are the strategy's own to change: one taken out by hand among the
    carried units sends the caller's message again, though the last window stubbed it."""
    strategy, conversation = Clears(tamper="forget"), Conversation()
    forgotten = 0
    for step in steps(60, seed=3)[:12]:
        conversation.extend(step)
        window = visit(strategy, conversation)
        if strategy.forgotten is None:
            continue
        forgotten += 1
        original = conversation.originals[strategy.forgotten]
        assert any(item is original for item in window.messages)
        call = original["tool_call_id"]
        assert not [i for i in window.messages if "metadata" in i and i["tool_call_id"] == call]
        tokens = sum(COUNTER.count_message(Message.from_dict(i)) for i in window.messages)
        assert window.record.tokens_after == tokens
    assert forgotten >= 5


def test_a_carried_kept_unit_taken_out_by_hand_is_the_strategys_problem_named() -> None:
    """The record of carried units is taken over from the last visit's, with its
    stand-ins' units marked replaced: a kept set changed by hand is still named as the
    selection's problem, not as an action the strategy never gave."""
    strategy, conversation = Clears(tamper="unkeep"), Conversation()
    for step in steps(60, seed=4)[:12]:
        conversation.extend(step)
        try:
            visit(strategy, conversation)
        except ContractViolation as violation:
            assert "is recorded as kept but is not in the window" in str(violation)
            assert "replaced" not in str(violation)
            return
    pytest.fail("no carried unit with a stand-in was taken out of the window")


def test_a_stand_in_put_in_by_hand_among_the_carried_units_is_sent() -> None:
    strategy, conversation = Clears(tamper="add"), Conversation()
    for step in steps(60, seed=5)[:12]:
        conversation.extend(step)
        added = len(strategy.added)
        window = visit(strategy, conversation)
        if len(strategy.added) > added:
            sent = [item for item in window.messages if "metadata" in item]
            by_position = {item["metadata"]["stands_in_for"]: item for item in sent}
            assert by_position[strategy.added[-1]]["content"] == "[a note]"
    assert len(strategy.added) >= 5


def test_a_carried_unit_cannot_be_decided_again() -> None:
    strategy, conversation = Clears(tamper="redecide"), Conversation()
    made = steps(60, seed=4)
    conversation.extend(made[0])
    visit(strategy, conversation)
    conversation.extend(made[1])
    with pytest.raises(ContractViolation, match="carried from an earlier visit"):
        visit(strategy, conversation)


def history_of(size: int) -> History:
    return Conversation(agent_loop(size)).view(COUNTER, 100_000, None, task_statement=True)


def test_carry_comes_first_and_takes_a_selection() -> None:
    history = history_of(10)
    earlier = history.selection()
    selection = history.selection()
    with pytest.raises(InvalidSelection, match="Selection of an earlier visit"):
        selection.carry("last time", 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidSelection, match="whole number"):
        selection.carry(earlier, -1)
    selection.keep(5, "kept")
    with pytest.raises(InvalidSelection, match="comes first"):
        selection.carry(earlier, 3)


def finished(strategy: Clears, messages: list[dict[str, Any]]) -> Selection:
    visit(strategy, messages)
    assert strategy.last is not None
    return strategy.last[0]


def test_nothing_is_carried_from_a_visit_the_runner_did_not_finish_or_another_counter() -> None:
    earlier = finished(Clears(), agent_loop(10))
    conversation = earlier.history.conversation
    history = conversation.view(COUNTER, 100_000, None, task_statement=True)
    assert history.selection().carry(history.selection(), 5) == 0  # never finished
    assert history.selection().carry(earlier, 5) == 5
    other = conversation.view(get_counter(ApproxCounter()), 100_000, None, task_statement=True)
    assert other.selection().carry(earlier, 5) == 0
    earlier.unit_scores = [0.0] * len(earlier.history.units)
    assert history.selection().carry(earlier, 5) == 0


def test_nothing_past_a_changed_message_is_carried() -> None:
    messages = agent_loop(10)
    earlier = finished(Clears(), messages)
    edited = list(messages)
    edited[6] = {**messages[6], "content": "changed"}
    history = Conversation(edited).view(COUNTER, 100_000, None, task_statement=True)
    assert history.selection().carry(earlier, 8) == 0  # not the messages read before
    same = Conversation(list(messages)).view(COUNTER, 100_000, None, task_statement=True)
    assert same.selection().carry(earlier, 8) == 0  # equal, but read anew: not proven alike


def test_nothing_is_carried_from_the_unit_whose_must_keep_status_changed() -> None:
    """Every unit was the current turn, the task statement the newest user message: with
    a new user message, the task statement must stay for another reason, and the units
    after it may go. Only the units before it are carried."""
    earlier = finished(Clears(), agent_loop(10, pending=False))
    conversation = earlier.history.conversation
    conversation.append(user("Another task, please."))
    history = conversation.view(COUNTER, 100_000, None, task_statement=True)
    assert earlier.history.must_keep[1] != history.must_keep[1]
    assert history.selection().carry(earlier, len(history.units)) == 1


def test_carried_units_stay_decided_and_a_made_message_goes_after_them() -> None:
    messages = agent_loop(10)
    earlier = finished(Clears(), messages)
    history = earlier.history.conversation.view(COUNTER, 100_000, None, task_statement=True)
    selection = history.selection()
    carried = selection.carry(earlier, 6)
    note = Message("assistant", "a note", metadata={"synthetic": True})
    with pytest.raises(InvalidSelection, match="carried from an earlier visit"):
        selection.add_synthetic(note, carried - 1)
    selection.add_synthetic(note, carried)
    result = history.span(carried - 1).stop - 1  # the last carried unit's last result
    stub = dataclasses.replace(history.messages[result], metadata={"synthetic": True})
    for decide in (
        lambda: selection.keep(carried - 1, "again"),
        lambda: selection.keep(range(carried - 2, carried + 1), "again"),
        lambda: selection.drop(range(0, carried), "again"),
        lambda: selection.summarize(carried - 1, "again"),
        lambda: selection.replace(result, stub, "again"),
    ):
        with pytest.raises(InvalidSelection, match="carried from an earlier visit"):
            decide()
    selection.keep(carried, "a unit of this visit's own")


@settings(deadline=None)  # no time bar: a loaded worker may run an example slowly
@given(
    keys=st.sets(st.integers(0, 199), max_size=60),
    start=st.integers(0, 200),
)
def test_reaches_says_whether_any_key_is_start_or_more(keys: set[int], start: int) -> None:
    as_dict = dict.fromkeys(keys)
    assert reaches(as_dict, start, 200) is any(key >= start for key in keys)
