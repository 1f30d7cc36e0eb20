"""Holes in the contract check: state a strategy can change, made messages, the record.

The runner must not trust anything a strategy could have touched: what must be kept is
copied before the strategy runs, the history's stand-ins are the runner's alone, and the
record is checked against the window it describes. A strategy returns a Selection, never
a window: the runner builds the window, so a strategy cannot reorder messages, split a
unit or send an object twice (the checker still refuses such windows: tested below on
the checker itself).
"""

from __future__ import annotations

import asyncio
import threading
from types import MappingProxyType
from typing import Any

import pytest

import ctxwindow
from ctxwindow import (
    BaseStrategy,
    ContractViolation,
    Conversation,
    Decision,
    History,
    InvalidSelection,
    Message,
    PluginError,
    Selection,
    ToolCall,
    Window,
    Windower,
    WindowRecord,
    get_counter,
)
from ctxwindow._contract import check_registration
from ctxwindow.testing import check_window
from ctxwindow.testing.strategies import BareNewest, Newest, newest


def chat() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "S " * 40},
        {"role": "user", "content": "old question " * 20},
        {"role": "assistant", "content": "old answer " * 20},
        {"role": "user", "content": "newest " * 10},
    ]


def tools() -> list[dict[str, Any]]:
    call = {"id": "a", "type": "function", "function": {"name": "w", "arguments": "{}"}}
    return [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": "sunny"},
        {"role": "user", "content": "thanks"},
    ]


def record(budget: int = 0, decisions: tuple[Decision, ...] = ()) -> WindowRecord:
    return WindowRecord("given", budget, "approx", 0, 0, True, 0.0, 0, 0, _decide=lambda: decisions)


class Given:
    """A protocol strategy (not BaseStrategy) whose choice ``make(history)`` makes."""

    name = "given"

    def __init__(self, make: Any) -> None:
        self.make = make

    def choose(self, history: History) -> Selection:
        selection: Selection = self.make(history)
        return selection

    def engages_within_budget(self, history: History) -> bool:
        return True  # chooses on every visit, whatever fits


def keep_all(history: History) -> Selection:
    selection = history.selection()
    for unit in range(len(history.units)):
        selection.keep(unit, "all")
    return selection


def both(windower: Windower, messages: Any) -> list[Window[Any]]:
    return [windower.select(messages), asyncio.run(windower.aselect(messages))]


def violation(call: Any) -> ContractViolation:
    with pytest.raises(ContractViolation) as raised:
        call()
    return raised.value


# -- 1. must-keep and stand-ins are the host's --------------------------------------------
def test_must_keep_is_read_only() -> None:
    history = Conversation(chat()).view(get_counter(), 100)
    assert history.must_keep == {0: "system message", 3: "newest user message"}
    assert isinstance(history.must_keep, MappingProxyType)
    with pytest.raises(TypeError):
        history.must_keep[1] = "mine"  # type: ignore[index]
    with pytest.raises(AttributeError):
        history.must_keep = {}  # type: ignore[misc]
    assert not hasattr(history, "replace")


class EmptiesMustKeep(BaseStrategy):
    """Swaps the history's must-keep for an empty one before starting its selection."""

    name = "empties"

    def choose(self, history: History) -> Selection:
        history._must_keep = MappingProxyType({})  # type: ignore[misc]
        return history.selection()  # keeps nothing


def test_the_check_uses_must_keep_as_found_before_the_strategy_ran() -> None:
    caught = violation(lambda: EmptiesMustKeep().select(chat(), 60))
    assert "unit 0 (system message) must be kept but was dropped" in caught.problems
    assert "unit 3 (newest user message) must be kept but was dropped" in caught.problems


class Replaces(BaseStrategy):
    """Swaps the system message for a dangling tool call through the truncation hook."""

    name = "replaces"

    def choose(self, history: History) -> Selection:
        history._replace(0, Message("assistant", None, tool_calls=(ToolCall("x", "f"),)))
        return history.selection()


def test_only_the_host_may_stand_a_message_in() -> None:
    caught = violation(lambda: Replaces().select(chat(), 60))
    assert "only the host may" in str(caught)
    # a legitimate cut of the newest user message still passes
    window = Newest(oversize="truncate").select([*chat()[:3], chat()[1]], 60)
    assert window.record.count("truncated") == 1


# -- 2. made messages ------------------------------------------------------------------
class MakesToolMessages(BaseStrategy):
    name = "maketools"

    def __init__(self, made: Message, **options: Any) -> None:
        self.made = made
        super().__init__(**options)

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        selection.add_synthetic(self.made, 1)
        return selection


@pytest.mark.parametrize(
    ("made", "problem"),
    [
        (
            Message("tool", "fake", tool_call_id="zzz", metadata={"synthetic": True}),
            "a made message has role 'tool'",
        ),
        (
            Message(
                "assistant", None, tool_calls=(ToolCall("c1", "f"),), metadata={"synthetic": True}
            ),
            "a made message carries tool_calls",
        ),
    ],
)
def test_a_made_message_cannot_be_half_a_tool_exchange(made: Message, problem: str) -> None:
    caught = violation(lambda: MakesToolMessages(made).select(chat(), 60))
    assert any(problem in p for p in caught.problems)

    def makes(history: History) -> Selection:
        selection = keep_all(history)
        selection.add_synthetic(made, 1)
        return selection

    windower = Windower(Given(makes), 1000, "approx")  # type: ignore[arg-type]
    for call in (lambda: windower.select(chat()), lambda: asyncio.run(windower.aselect(chat()))):
        assert any(problem in p for p in violation(call).problems)


SUMMARY = Message("user", "INJECTED", metadata={"synthetic": True})


def test_a_made_message_goes_between_units_never_inside_one() -> None:
    def before_the_tool_unit(history: History) -> Selection:
        selection = keep_all(history)
        selection.add_synthetic(SUMMARY, 1)
        return selection

    window = Windower(Given(before_the_tool_unit), 1000, "approx").select(tools())  # type: ignore[arg-type]
    assert [m["content"] for m in window.messages][:2] == ["weather?", "INJECTED"]
    assert window.messages[2]["tool_calls"]  # the call and its result stay together


def test_made_messages_sit_where_their_units_were_and_count() -> None:
    """Made messages at each unit boundary up to the newest user message: each sits
    before the unit it goes before (a tool exchange never parted), in the order given,
    counted. One after the newest user message, standing for nothing of the current
    turn, would change the request: a violation."""

    def everywhere(history: History, end: bool = False) -> Selection:
        selection = keep_all(history)
        for before in range(len(history.units) + end):
            for copy in range(2):
                text = f"made {before}.{copy}"
                made = Message("system", text, metadata={"synthetic": True})
                selection.add_synthetic(made, before)
        return selection

    history = tools()
    window = Windower(Given(everywhere), 1000, "approx").select(history)  # type: ignore[arg-type]
    units = [(u.start, u.stop) for u in Conversation(history).view(get_counter(), 1000).units]
    want: list[Any] = []
    for before, (start, stop) in enumerate(units):
        want += [f"made {before}.{copy}" for copy in range(2)]
        want += history[start:stop]
    at_end = Windower(Given(lambda h: everywhere(h, end=True)), 1000, "approx")  # type: ignore[arg-type]
    with pytest.raises(ContractViolation, match=r"after the newest user message \(message 3\)"):
        at_end.select(history)
    made = [m for m in window.messages if m.get("metadata", {}).get("synthetic")]
    assert [m["content"] if m in made else m for m in window.messages] == want
    counted = sum(map(get_counter().count_message, map(Message.from_dict, window.messages)))
    assert window.tokens == counted


def ten() -> list[dict[str, Any]]:
    return [{"role": ("user", "assistant")[i % 2], "content": f"turn {i}"} for i in range(10)]


@pytest.mark.parametrize(
    ("covers", "dropped", "before", "problem"),
    [
        (["#2", "#3"], {2, 3}, 2, None),  # where what it covers was
        (["#2", "#3"], {2, 3}, 4, None),  # next to where it was: nothing kept between
        (["#2", "#3"], {2, 3}, 6, "covering messages 2-3 sits after message 5"),
        (
            ["#2", "#3"],
            {2, 3},
            10,
            r"after the newest user message \(message 8\) and covers messages 2-3",
        ),
        (["#8", "#9"], set(), 0, "covering messages 8-9 sits before message 0"),
        (["#5", "#6"], set(), 3, "covering messages 5-6 sits before message 3"),
        (["#5", "#6"], set(), 6, None),  # amid what it covers
        (["#0", "#9"], set(), 4, None),
    ],
)
def test_a_summary_sits_where_what_it_covers_was(
    covers: list[str], dropped: set[int], before: int, problem: str | None
) -> None:
    def placed(history: History) -> Selection:
        selection = history.selection()
        for unit in range(len(history.units)):
            if unit not in dropped:
                selection.keep(unit, "kept")
        made = Message("system", "summary", metadata={"synthetic": True, "covers": covers})
        selection.add_synthetic(made, before)
        return selection

    windower = Windower(Given(placed), 1000, "approx")  # type: ignore[arg-type]
    if problem is None:
        window = windower.select(ten())
        assert sum(1 for m in window.messages if m["content"] == "summary") == 1
        return
    with pytest.raises(ContractViolation, match=problem):
        windower.select(ten())


# -- 3. a strategy's own select() is never what runs it ----------------------------------
class OverridesSelect(BaseStrategy):
    name = "override"

    def choose(self, history: History) -> Selection:
        return newest(history)

    def select(
        self, messages: Any, budget: int, counter: Any = None, *, query: Any = None
    ) -> Window[Any]:
        return Window(list(messages) * 3, record(budget))


def test_the_runner_never_calls_a_strategys_own_select() -> None:
    windower = Windower(OverridesSelect(), 60, "approx")
    for window in (windower.select(chat()), asyncio.run(windower.aselect(chat()))):
        assert window.record.strategy == "override"
        assert window.tokens <= 60
        assert len(window.messages) < len(chat())


def test_a_class_with_select_but_no_choose_cannot_be_registered() -> None:
    class OldStyle:
        name = "old-style"

        def select(self, messages: Any, budget: int) -> Window[Any]:  # pragma: no cover
            raise AssertionError("never called")

    problem = check_registration(OldStyle)
    assert problem is not None
    assert "has no choose() method" in problem
    assert check_registration(BareNewest) is None


# -- 4. overhead_tokens -----------------------------------------------------------------
class Greedy(BaseStrategy):
    name = "greedy"

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        for unit in range(len(history.units)):
            selection.keep(unit, "all")
        return selection


@pytest.mark.parametrize("overhead", [-1000, True, "5", 2.5, None])
def test_overhead_tokens_must_be_a_whole_number_of_tokens(overhead: Any) -> None:
    bad = type("Bad", (Greedy,), {"name": "bad", "overhead_tokens": overhead})
    assert "overhead_tokens must be an int >= 0" in str(check_registration(bad))
    with pytest.raises(PluginError) as built:  # a BaseStrategy class is checked when built
        bad()
    said = f"overhead_tokens must be an int >= 0 (tokens), got {overhead!r}"
    assert str(built.value) == f"strategy 'bad': {said}"
    protocol = Given(keep_all)
    protocol.overhead_tokens = overhead  # type: ignore[attr-defined]
    caught = violation(lambda: Windower(protocol, 100, "approx").select(chat()))  # type: ignore[arg-type]
    assert "overhead_tokens must be an int >= 0" in str(caught)
    assert (
        check_registration(type("Fine", (Greedy,), {"name": "fine", "overhead_tokens": 5})) is None
    )


def test_overhead_eating_the_whole_budget_is_a_budget_error() -> None:
    protocol = Given(keep_all)
    protocol.overhead_tokens = 100  # type: ignore[attr-defined]
    with pytest.raises(ctxwindow.InvalidBudget, match="leaves nothing"):
        Windower(protocol, 100, "approx").select(chat())  # type: ignore[arg-type]


# -- 5. the record agrees with the window ------------------------------------------------
@pytest.mark.parametrize("unit", [-1, 4, 100, "1", True, 1.0, None])
def test_a_selection_rejects_units_the_history_lacks(unit: Any) -> None:
    selection = Conversation(chat()).view(get_counter(), 100).selection()
    for decide in (selection.keep, selection.drop, selection.summarize):
        with pytest.raises(InvalidSelection, match="not a unit of this history"):
            decide(unit, "why")
    assert selection.actions == ["kept", "dropped", "dropped", "kept"]
    assert selection.kept == {0, 3}


def test_a_selection_accepts_int_like_units_and_checks_reasons_and_scores() -> None:
    class Index:
        def __index__(self) -> int:
            return 2

    selection = Conversation(chat()).view(get_counter(), 100).selection()
    selection.keep(Index(), "an int by __index__", 0.5)  # type: ignore[arg-type]
    assert selection.kept == {0, 2, 3}
    assert selection.scores == {2: 0.5}
    with pytest.raises(InvalidSelection, match="reason for unit 1 must be a string"):
        selection.keep(1, 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidSelection, match="score for unit 1 must be a finite number"):
        selection.keep(1, "why", "high")  # type: ignore[arg-type]
    with pytest.raises(InvalidSelection, match="before_unit=5"):
        selection.add_synthetic(Message("user", "s", metadata={"synthetic": True}), 5)
    with pytest.raises(InvalidSelection, match=r"takes a ctxwindow\.Message"):
        selection.add_synthetic({"role": "user", "content": "s"}, 0)  # type: ignore[arg-type]


class Lies(BaseStrategy):
    """Makes the record and the window disagree in the way ``how`` says."""

    name = "lies"

    def __init__(self, how: str, **options: Any) -> None:
        self.how = how
        super().__init__(**options)

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        if self.how == "keep-out-of-range":
            selection.keep(-1, "kept!")
        elif self.how == "kept-set-only":
            selection.kept.add(1)
        elif self.how == "actions-only":
            selection.actions[1] = "kept"
        elif self.how == "strange-action":
            selection.actions[1] = "truncated"
        elif self.how == "kept-not-a-unit":
            selection.kept.add(99)
        elif self.how == "short-actions":
            selection.actions.pop()
        elif self.how == "bad-synthetic":
            selection.synthetic.append((99, Message("user", "s", metadata={"synthetic": True})))
        elif self.how == "not-a-selection":
            return "everything"  # type: ignore[return-value]
        return selection


@pytest.mark.parametrize(
    ("how", "problem"),
    [
        ("keep-out-of-range", "unit -1 is not a unit of this history: units are numbered 0 to 3"),
        ("kept-set-only", "unit 1 is in the window but its record says 'dropped'"),
        ("actions-only", "unit 1 is recorded as kept but is not in the window"),
        ("strange-action", "the selection holds action 'truncated'"),
        ("kept-not-a-unit", "the selection keeps 99, which is not a unit of its history"),
        ("short-actions", "one action and reason per unit (4)"),
        ("bad-synthetic", "a made message is placed before unit 99"),
        ("not-a-selection", "choose() returned str, not a Selection of its history"),
    ],
)
def test_a_record_that_disagrees_with_the_window_is_a_violation(how: str, problem: str) -> None:
    for call in (
        lambda: Lies(how).select(chat(), 150),
        lambda: asyncio.run(Lies(how).aselect(chat(), 150)),
        lambda: Windower(Lies(how), 150, "approx").select(chat()),
    ):
        caught = violation(call)
        assert caught.strategy == "lies"
        assert any(problem in p for p in caught.problems), caught.problems


class KeepsItsSelection(BaseStrategy):
    name = "keeps-selection"
    last: Selection | None = None

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        selection.keep(2, "recent", 0.5)
        KeepsItsSelection.last = selection
        return selection


def test_changing_a_selection_later_cannot_change_a_past_record() -> None:
    window = KeepsItsSelection().select(chat(), 150)
    selection = KeepsItsSelection.last
    assert selection is not None
    selection.actions[:] = ["dropped"] * len(selection.actions)
    selection.reasons[:] = ["changed"] * len(selection.reasons)
    selection.kept.clear()
    selection.scores[0] = 1.0
    selection.notes.append("later")
    decisions = window.record.decisions
    assert [d.action for d in decisions] == ["kept", "dropped", "kept", "kept"]
    assert [d.reason for d in decisions] == [
        "system message",
        "not chosen by the strategy",
        "recent",
        "newest user message",
    ]
    assert [d.score for d in decisions] == [None, None, 0.5, None]
    assert window.record.notes == ()


def test_the_conformance_check_wants_the_record_to_equal_the_window() -> None:
    """The independent oracle checks the record against the window it describes (a
    window the runner cannot make, so built here by hand)."""
    from ctxwindow.testing.checks import _check_record

    messages = chat()
    history = Conversation(messages).view(get_counter(), 100)
    claimed = tuple(
        Decision(u, (u,), (None,), "kept", "claimed", history.unit_tokens(u)) for u in range(4)
    )
    lying = Window(
        [messages[0], messages[3]],
        WindowRecord("given", 100, "approx", 0, 0, True, 0.0, 4, 2, _decide=lambda: claimed),
    )
    with pytest.raises(
        AssertionError, match=r"record says kept for messages not in the window: \[1, 2\]"
    ):
        _check_record(lying, messages, {0, 3})


# -- 6. a message appended while a strategy chooses ---------------------------------------
def test_a_message_appended_meanwhile_does_not_blame_the_strategy() -> None:
    conversation = Conversation(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    )
    seen: list[int] = []

    def keeps_all_while_one_is_appended(history: History) -> Selection:
        seen.append(len(history))
        worker = threading.Thread(
            target=conversation.append, args=({"role": "user", "content": "next?"},)
        )
        worker.start()
        worker.join()
        return keep_all(history)

    windower = Windower(Given(keeps_all_while_one_is_appended), 1000, "approx")  # type: ignore[arg-type]
    assert len(windower.select(conversation)) == 2
    assert len(asyncio.run(windower.aselect(conversation))) == 3
    assert seen == [2, 3]
    assert len(conversation) == 4


# -- 12. one object twice in the input ---------------------------------------------------
def test_one_dict_twice_in_the_input() -> None:
    ok = {"role": "assistant", "content": "ok"}
    messages = [{"role": "user", "content": "a"}, ok, {"role": "user", "content": "b"}, ok]
    windower = Windower(Given(keep_all), 1000, "approx")  # type: ignore[arg-type]
    for window in both(windower, messages):
        assert window.messages == messages
    assert check_window(Newest(), messages, 1000) is not None
    assert check_window(Newest(), messages, 12) is not None
    # the same prompt object asked twice: a window with only the newest is whole
    prompt = {"role": "user", "content": "again?"}
    repeated = [prompt, {"role": "assistant", "content": "long answer " * 30}, prompt]
    window = Newest(task_statement=False).select(repeated, 20)
    assert window.messages == [prompt]
    assert [d.action for d in window.record.decisions] == ["dropped", "dropped", "kept"]
    assert check_window(Newest(task_statement=False), repeated, 20) is not None
    # with the task statement, the object's first position is kept too: two messages
    assert Newest().select(repeated, 20).messages == [prompt, prompt]


def test_one_dict_three_times_kept_first_and_last_is_whole() -> None:
    """The window holds the object twice: as the task statement (position 1) and the
    newest user message (3), the one between dropped. Read from either end, the
    checker took positions 1 and 2 or 2 and 3, and blamed the strategy for a must-keep
    message it kept (hypothesis found it); it takes the reading that keeps order and
    the most must-keep messages."""
    asked = {"role": "user", "content": "and again?"}
    messages = [
        {"role": "system", "content": "Be brief."},
        asked,
        asked,
        asked,
        {"role": "assistant", "content": "pinned " * 3, "metadata": {"pinned": True}},
        {"role": "system", "content": "word " * 40},
    ]
    window = Newest().select(messages, 80)
    assert [m is asked for m in window.messages] == [False, True, True, False, False]
    assert [d.action for d in window.record.decisions][1:4] == ["kept", "dropped", "kept"]
    assert check_window(Newest(), messages, 80) is not None


# -- the conformance suite's generated histories -----------------------------------------
def test_generated_histories_cover_objects_names_and_broken_exchanges() -> None:
    from hypothesis import Phase, find, settings

    from ctxwindow.testing import histories
    from ctxwindow.testing.checks import broken_positions

    quick = settings(max_examples=2000, database=None, phases=[Phase.generate], derandomize=True)
    as_objects = find(
        histories(), lambda h: len(h) > 0 and isinstance(h[0], Message), settings=quick
    )
    assert all(isinstance(m, Message) for m in as_objects)
    named = find(
        histories(),
        lambda h: any(Message.from_dict(m).name for m in h),
        settings=quick,
    )
    assert named
    assert not any(broken_positions([Message.from_dict(m) for m in h]) for h in [named, as_objects])

    def has_broken_and_pinned(history: list[Any]) -> bool:
        parsed = [Message.from_dict(m) for m in history]
        return any(parsed[i].pinned for i in broken_positions(parsed))

    broken = find(histories(defects=True), has_broken_and_pinned, settings=quick)
    window = check_window(Newest(orphans="drop"), broken, 100_000)
    assert window is not None
    with pytest.raises(ctxwindow.OrphanToolResult):
        Newest().select(broken, 100_000)
    assert check_window(Newest(), broken, 100_000) is None  # rightly raised


class _MarksWhatItKeeps(BaseStrategy):
    """Writes into the caller's dicts: the bug the kit must name, with where it is."""

    name = "marks-what-it-keeps"

    def choose(self, history: History) -> Selection:
        history.original(len(history) - 1)["seen"] = True
        return newest(history)


def test_the_kit_says_which_message_a_strategy_mutated_and_how() -> None:
    messages = [{"role": "user", "content": "older " * 50}, {"role": "user", "content": "now"}]
    with pytest.raises(AssertionError, match=r"message 1's 'seen' changed \(copy a message"):
        check_window(_MarksWhatItKeeps(), messages, 20)


class _RemembersByPosition(BaseStrategy):
    """Keeps, in every conversation, only the units it kept in its first (must-keep
    aside): state by position on the instance, the leak the one-instance test is for."""

    name = "remembers-by-position"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._first_kept: set[int] | None = None

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        if self._first_kept is None:
            self._first_kept = set(selection.kept)
        for unit in set(selection.kept) - self._first_kept - set(history.must_keep):
            selection.drop(unit, "not among the units it kept before")
        return selection


def test_the_kit_catches_state_kept_across_conversations() -> None:
    from ctxwindow.testing import StrategyConformance

    with pytest.raises(AssertionError, match="state kept across conversations"):
        StrategyConformance().test_one_instance_serves_many_conversations(_RemembersByPosition())


class _NoReasons(BaseStrategy):
    """Keeps or drops without saying why, in the ways a plugin author might."""

    name = "no-reasons"
    way = "keep-none"

    def choose(self, history: History) -> Selection:
        selection = newest(history)
        older = next(u for u in range(len(history.units)) if u not in history.must_keep)
        if self.way == "keep-none":
            selection.keep(older, None)  # type: ignore[arg-type]
        elif self.way == "drop-empty":
            selection.drop(older, "")
        elif self.way == "run-empty":
            selection.drop(range(older, older + 1), "")
        elif self.way == "drop-none":  # allowed: the default reason says why
            selection.drop(older, None)  # type: ignore[arg-type]
        else:
            selection.default_reason = None  # type: ignore[assignment]
        return selection


@pytest.mark.parametrize("way", ["keep-none", "drop-empty", "run-empty", "default-none"])
def test_a_decision_without_a_reason_is_the_strategys_error(way: str) -> None:
    """A kept unit with no reason was recorded "not chosen by the strategy", an empty
    reason got the default silently, and a default_reason of None read 'None'."""
    strategy = _NoReasons()
    strategy.way = way
    messages = [{"role": "user", "content": "older " * 50}, {"role": "user", "content": "now"}]
    with pytest.raises(ContractViolation, match=r"without a reason|default_reason is None"):
        Windower(strategy, 20).select(messages)
    plain = _NoReasons()
    plain.way = "drop-none"
    window = Windower(plain, 20).select(messages)
    (dropped,) = [d for d in window.record.decisions if d.action == "dropped"]
    assert dropped.reason == "older than the newest units that fit"  # newest()'s default
