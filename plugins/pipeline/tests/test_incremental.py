"""A pipeline's turn starts from the last turn's bookkeeping (the first stage's carried
decisions, where each message came from, the fates of the units the stages removed):
whatever it takes over, its window and record are those of a pipeline reading the
history afresh, turn after turn, for a growing conversation and for lists rebuilt,
edited or taken back."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from agent import agent_steps

import ctxwindow._recent as rec
from ctxwindow import Conversation, WindowRecord, get_counter
from ctxwindow_pipeline import PipelineStrategy
from ctxwindow_pipeline.pipeline import _around, _Fates

#: Stages whose windows depend on the history alone (a rolling summary depends on the
#: visits before too: summarize is compared with the code before this bookkeeping in
#: the equivalence runs, not here).
STAGES: list[list[Any]] = [
    ["clear_tool_outputs", "sliding"],
    [{"strategy": "clear_tool_outputs", "keep_recent": 1, "min_tokens": 10}, "fixed"],
    [{"strategy": "fixed", "budget_share": 0.6}, "sliding"],
    ["clear_tool_outputs", {"strategy": "fixed", "budget_share": 0.8}, "sliding"],
]


def _said(record: WindowRecord) -> dict[str, Any]:
    """Everything a record says but how long the visit took, stages included."""
    said = record.to_dict()
    said["runs"] = [
        (run.units, tuple(run.positions), run.action, run.reason) for run in record.decision_runs
    ]
    said["stages"] = [_said(stage) for stage in record.stages]
    del said["elapsed_ms"]
    return said


def _afresh(stages: list[Any], messages: list[Any], budget: int, **options: Any) -> Any:
    """What a new pipeline gives for ``messages`` with nothing remembered."""
    keep = rec.REMEMBER_FROM
    rec.REMEMBER_FROM = 10**9
    try:
        return PipelineStrategy(stages=stages, **options).select(list(messages), budget)
    finally:
        rec.REMEMBER_FROM = keep


def _assert_as_afresh(
    window: Any, stages: list[Any], messages: list[Any], budget: int, **options: Any
) -> None:
    fresh = _afresh(stages, messages, budget, **options)
    assert window.messages == fresh.messages
    assert _said(window.record) == _said(fresh.record)


def _history(seed: int) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    steps = agent_steps(140, random.Random(seed), named=True)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for step in steps[:120]:
        history.extend(step)
    return steps[120:], history


@pytest.mark.parametrize("stages", STAGES)
def test_turn_after_turn_a_growing_conversation_gets_a_fresh_pipelines_window(
    stages: list[Any],
) -> None:
    steps, history = _history(seed=31)
    conversation = Conversation(history)
    pipeline = PipelineStrategy(stages=stages)
    pipeline.select(conversation, 1_500)
    for step in steps:
        conversation.extend(step)
        window = pipeline.select(conversation, 1_500)
        _assert_as_afresh(window, stages, conversation.originals, 1_500)


@pytest.mark.parametrize("stages", STAGES)
def test_an_agents_run_from_one_instruction_carries_the_run_the_first_stage_grows(
    stages: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's run from one instruction: the clearing stage's decisions are one run
    of cleared outputs that grows each step, so none of them was the last visit's very
    decision, and the pipeline went over every cleared output again on every step
    (15 ms a step at 20,000 messages, 6.9 ms now). The run's part the last visit had is
    carried; each step's window and record are a fresh pipeline's."""
    import ctxwindow_pipeline.pipeline as module

    carried: list[int] = []
    take = module._Run._carried

    def counted(self: Any, *args: Any) -> Any:
        taken = take(self, *args)
        carried.append(taken[1])  # the input positions carried
        return taken

    monkeypatch.setattr(module._Run, "_carried", counted)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Audit every record and fix what is wrong."},
    ]

    def step(n: int) -> list[dict[str, Any]]:
        call = {"id": f"c{n}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        output = f"record R-{n}: status ok, owner u{n % 7} " * 8
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": output},
        ]

    for n in range(150):
        history += step(n)
    conversation = Conversation(history)
    pipeline = PipelineStrategy(stages=stages)
    pipeline.select(conversation, 1_500)
    for n in range(150, 170):
        conversation.extend(step(n))
        window = pipeline.select(conversation, 1_500)
        _assert_as_afresh(window, stages, conversation.originals, 1_500)
    if stages[0] == "clear_tool_outputs" or "keep_recent" in stages[0]:  # it clears
        assert min(carried[1:]) > 250, carried  # of about 300 input messages


#: Messages a history may hold that belong to no exchange (under ``orphans="drop"`` the
#: pipeline leaves them out of the first stage's input): a result whose call is nowhere,
#: and a call whose result never came (the user spoke next).
ORPHAN = {"role": "tool", "tool_call_id": "nowhere", "content": "a stray result " * 20}
UNANSWERED = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "lost", "type": "function", "function": {"name": "find"}}],
}


def _with_defects(history: list[Any]) -> list[Any]:
    """``history`` with an orphan result after its first exchange and an unanswered
    call before one of its user messages, far back."""
    after = next(at for at, message in enumerate(history) if message["role"] == "tool") + 1
    user = next(
        at for at in range(len(history) // 2, len(history)) if history[at]["role"] == "user"
    )
    return [*history[:after], ORPHAN, *history[after:user], UNANSWERED, *history[user:]]


@pytest.mark.parametrize("stages", STAGES)
def test_a_history_with_defective_messages_carries_its_first_stage_step_after_step(
    stages: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defective messages (an orphan result, an unanswered call), left out of the first
    stage's input under ``orphans="drop"``, cost a step its new messages: the pipeline
    carries its first stage's bookkeeping past them (it read its whole input again on
    every step: 156 ms a step at 20,000 messages, 7-9 now, as without them). Steps bring
    more: a result given twice, a call windowed while its result is pending. Each step's
    window and record are a fresh pipeline's."""
    import ctxwindow_pipeline.pipeline as module

    uncarried: list[int] = []
    take = module._Run._carried

    def counted(self: Any, *args: Any) -> Any:
        taken = take(self, *args)
        uncarried.append(len(self.items) - taken[1])  # the input positions gone over
        return taken

    monkeypatch.setattr(module._Run, "_carried", counted)
    steps, history = _history(seed=35)
    conversation = Conversation(_with_defects(history))
    pipeline = PipelineStrategy(stages=stages, orphans="drop")
    pipeline.select(conversation, 1_500)
    for number, step in enumerate(steps):
        if number % 5 == 2:  # the call first, its result pending
            conversation.extend(step[:-1])
            window = pipeline.select(conversation, 1_500)
            _assert_as_afresh(window, stages, conversation.originals, 1_500, orphans="drop")
        conversation.extend(step[-1:] if number % 5 == 2 else step)
        if number % 5 == 4:  # the step's result again
            conversation.append(dict(step[-1]))
        window = pipeline.select(conversation, 1_500)
        _assert_as_afresh(window, stages, conversation.originals, 1_500, orphans="drop")
        assert not {ORPHAN["content"], None} & {m.get("content") for m in window.messages[-1:]}
    if stages[0] == "clear_tool_outputs" or "keep_recent" in stages[0]:  # it clears
        assert len(uncarried) == len(steps) + 4
        assert max(uncarried) < 20, uncarried  # of about 300 input messages


def test_a_history_with_defective_messages_hands_the_first_stage_a_growing_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first stage's input without the defective messages is read into a
    Conversation the pipeline keeps and grows, and handed as its view: no list of it
    goes to the runner's list memory, where the next stage's list (the first stage's
    window) would be read as a branch of it every turn, their states lost (the
    parent handed the list: two lists a step there, one now)."""
    listed: list[int] = []
    view = rec.RECENT.view

    def counted(messages: Any, *args: Any, **kwargs: Any) -> Any:
        listed.append(len(messages))
        return view(messages, *args, **kwargs)

    monkeypatch.setattr(rec.RECENT, "view", counted)
    steps, history = _history(seed=37)
    conversation = Conversation(_with_defects(history))
    stages = ["clear_tool_outputs", "fixed"]
    pipeline = PipelineStrategy(stages=stages, orphans="drop")
    pipeline.select(conversation, 1_500)
    held = pipeline._origins.of(conversation).input
    for step in steps[:8]:
        listed.clear()
        conversation.extend(step)
        window = pipeline.select(conversation, 1_500)
        assert len(listed) == 1  # the second stage's
        assert pipeline._origins.of(conversation).input is held
        assert held is not None and len(held) == len(conversation) - 2  # the two defects
        _assert_as_afresh(window, stages, conversation.originals, 1_500, orphans="drop")


@pytest.mark.parametrize(
    "stages",
    [
        *STAGES,
        ["clear_tool_outputs", "summarize"],
        [
            {"strategy": "summarize", "budget_share": 0.9},
            {"strategy": "clear_tool_outputs", "when": "always", "keep_recent": 1},
            "fixed",
        ],
    ],
)
def test_defective_messages_dropped_leave_the_window_of_the_history_without_them(
    stages: list[Any],
) -> None:
    """What the stages see of a history with defective messages is the history without
    them: the window holds the same messages, and the record gives each unit (numbered
    alike: a defective message is in none) the same fate for the same reason."""
    steps, history = _history(seed=36)
    for step in steps[:6]:
        history += step
    with_defects = _with_defects(history)
    window = PipelineStrategy(stages=stages, orphans="drop").select(with_defects, 1_500)
    clean = PipelineStrategy(stages=stages).select(history, 1_500)

    def said(window: Any) -> tuple[Any, ...]:
        decisions = [(d.unit, d.action, d.reason) for d in window.record.decisions if d.unit >= 0]
        texts = [(m["role"], m.get("content")) for m in window.messages]
        return texts, decisions, window.tokens

    assert said(window) == said(clean)
    dropped = [d for d in window.record.decisions if d.unit < 0]
    cleared = [m for m in window.messages if "cleared_tool_output" in m.get("metadata", {})]
    for message in cleared:  # says where it is in your list, whichever stage cleared it
        position = message["metadata"]["cleared_tool_output"]["position"]
        assert with_defects[position]["tool_call_id"] == message["tool_call_id"]
    if "when" in str(stages):
        assert cleared
    defective = [with_defects.index(ORPHAN), with_defects.index(UNANSWERED)]
    assert sorted(p for d in dropped for p in d.positions) == defective


@pytest.mark.parametrize("stages", STAGES)
def test_lists_rebuilt_edited_or_taken_back_get_a_fresh_pipelines_window(
    stages: list[Any],
) -> None:
    """Each turn's list is a new one: of equal copies (not the objects the last turn
    read), with a recent message edited, or with the last step taken back."""
    steps, listed = _history(seed=32)
    rng = random.Random(3)
    pipeline = PipelineStrategy(stages=stages)
    pipeline.select(listed, 1_500)
    for number, step in enumerate(steps):
        listed = listed + step
        kind = number % 4
        if kind == 1:  # rebuilt, as from JSON: equal messages, other objects
            listed = copy.deepcopy(listed)
        elif kind == 2:  # a recent message edited: a new dict
            at = len(listed) - rng.randrange(1, 6)
            listed[at] = {**listed[at], "content": f"{listed[at].get('content')} (edited)"}
        elif kind == 3:  # the step taken back, then windowed again
            window = pipeline.select(listed[: -len(step)], 1_500)
            _assert_as_afresh(window, stages, listed[: -len(step)], 1_500)
        window = pipeline.select(listed, 1_500)
        _assert_as_afresh(window, stages, listed, 1_500)


def test_a_budget_changed_between_turns_gets_a_fresh_pipelines_window() -> None:
    """The first stage's carried bookkeeping holds for the budget it was made under."""
    steps, history = _history(seed=33)
    conversation = Conversation(history)
    stages = ["clear_tool_outputs", "sliding"]
    pipeline = PipelineStrategy(stages=stages)
    for number, step in enumerate(steps):
        conversation.extend(step)
        budget = 1_500 if number % 3 else 2_500
        window = pipeline.select(conversation, budget)
        _assert_as_afresh(window, stages, conversation.originals, budget)


class _Unequal:
    """A metadata value that cannot be compared (as a numpy array in a truth test)."""

    def __eq__(self, other: object) -> bool:
        raise ValueError("cannot be compared")

    __hash__ = object.__hash__


def test_messages_that_cannot_be_compared_are_compared_as_objects() -> None:
    """A turn whose messages are copies holding values whose ``==`` raises takes over
    only what it can tell is the same: its window is still a fresh pipeline's."""
    steps, history = _history(seed=34)
    history[1] = {**history[1], "metadata": {"blob": _Unequal()}}
    stages = ["clear_tool_outputs", "sliding"]
    pipeline = PipelineStrategy(stages=stages)
    listed = history
    for step in steps[:8]:
        listed = [
            {**item, "metadata": {"blob": _Unequal()}} if "metadata" in item else item
            for item in listed + step
        ]
        window = pipeline.select(listed, 1_500)
        _assert_as_afresh(window, stages, listed, 1_500)


def test_fates_a_run_takes_over_the_units_it_covers_and_a_unit_its_own_over_a_run() -> None:
    fates = _Fates()
    fates[4] = ("summarized", "by the first")
    fates[9] = ("dropped", "alone")
    fates.set_run(range(3, 8), ("dropped", "a run"))
    assert fates.get(4) == ("dropped", "a run")
    assert fates.get(9) == ("dropped", "alone")
    fates[5] = ("dropped", "its own")
    fates.set_run(range(0, 2), ("dropped", "older"))
    assert [fates.get(unit) for unit in range(0, 10)] == [
        ("dropped", "older"),
        ("dropped", "older"),
        None,
        ("dropped", "a run"),
        ("dropped", "a run"),
        ("dropped", "its own"),
        ("dropped", "a run"),
        ("dropped", "a run"),
        None,
        ("dropped", "alone"),
    ]


def test_a_run_is_split_around_the_units_apart() -> None:
    assert list(_around(range(2, 9), [0, 2, 5, 6, 12])) == [range(3, 5), range(7, 9)]
    assert list(_around(range(2, 9), [])) == [range(2, 9)]
    assert list(_around(range(2, 3), [2])) == []


def test_a_turn_writes_its_decisions_without_a_list_per_unit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pipeline gives its selection a stage's dropped run as one decision, and a
    unit its own only where it has a reason of its own: no list per unit is built."""
    from ctxwindow import Selection

    def spelled_out(self: Selection) -> None:
        raise AssertionError("the per-unit lists were built")

    steps, history = _history(seed=35)
    conversation = Conversation(history)
    pipeline = PipelineStrategy(stages=["clear_tool_outputs", "sliding"])
    monkeypatch.setattr(Selection, "_spell_out", spelled_out)
    for step in steps[:4]:
        conversation.extend(step)
        window = pipeline.select(conversation, 1_500)
        assert window.record.count("dropped") > 50


@pytest.mark.parametrize(
    "stages",
    [["sliding"], [{"strategy": "clear_tool_outputs", "keep_recent": 10_000}, "sliding"]],
)
def test_an_agents_turn_grows_each_stages_input_and_reads_no_branch_of_it(
    stages: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rest of the current turn is not pinned for the stages when they share the
    pipeline's budget (what each must keep is then the pipeline's): pinned, the
    exchange would be a copy on the turn it is current and the caller's own message
    on the next, and each stage would read a branch of its input on every turn."""
    branches: list[int] = []
    branch = Conversation.branch

    def counted(self: Conversation, position: int, **options: Any) -> Conversation:
        branches.append(position)
        return branch(self, position, **options)

    steps, history = _history(seed=36)
    conversation = Conversation(history)
    pipeline = PipelineStrategy(stages=stages)
    pipeline.select(conversation, 1_500)
    monkeypatch.setattr(Conversation, "branch", counted)
    for step in steps[:8]:
        conversation.extend(step)
        window = pipeline.select(conversation, 1_500)
        assert window.record.engaged and window.messages[-len(step) :] == step
    assert branches == []


def test_a_stage_that_lets_go_of_what_the_pipeline_must_keep_runs_again_pinned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unpinned, every output cleared makes the current turn fit the clear stage's view
    where it did not fit the pipeline's, and the fixed stage after it lets go of what
    the pipeline must keep: the pipeline sees it in the last window and runs the stages
    again pinned, whose window keeps it."""
    from ctxwindow.testing.conversations import agent_loop
    from ctxwindow_pipeline import pipeline as module

    runs: list[bool] = []
    run = module._Run.__init__

    def counted(self: Any, history: Any, read: Any, pins: bool) -> None:
        runs.append(pins)
        run(self, history, read, pins)

    monkeypatch.setattr(module._Run, "__init__", counted)
    aggressive = {"strategy": "clear_tool_outputs", "keep_recent": 0, "min_tokens": 0}
    messages = agent_loop(8, instructions=2, pending=False)
    window = PipelineStrategy(stages=[aggressive, "fixed"]).select(messages, 500)
    assert runs == [False, True]
    assert window.tokens <= 500
    history = Conversation(messages).view(get_counter(window.record.counter), 500)
    held = {id(item) for item in window.messages}
    assert len(history.must_keep) > 3  # the instructions, the task, the current turn
    for unit in history.must_keep:
        assert all(id(messages[p]) in held for p in history.span(unit))


def test_the_first_stage_windows_the_callers_messages_as_the_pipelines_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unpinned and uncut, the first stage's input is the pipeline's own view (its host
    reads no list, and the stage's per-conversation state is the caller's
    conversation's); pinned, a list holding the pinned copies; later stages, a list."""
    from ctxwindow import History, Windower
    from ctxwindow.testing.conversations import agent_loop

    given: list[tuple[str, str]] = []
    run = Windower._run

    def seen(self: Windower, messages: Any, *args: Any) -> Any:
        given.append((self.strategy.name, type(messages).__name__))
        return run(self, messages, *args)

    monkeypatch.setattr(Windower, "_run", seen)
    conversation = Conversation(agent_loop(8, instructions=2, pending=False))
    PipelineStrategy(stages=["clear_tool_outputs", "sliding"]).select(conversation, 900)
    assert given[1:] == [("clear_tool_outputs", History.__name__), ("sliding", "list")]
    given.clear()
    aggressive = {"strategy": "clear_tool_outputs", "keep_recent": 0, "min_tokens": 0}
    PipelineStrategy(stages=[aggressive, "fixed"]).select(conversation, 500)
    assert given[1:] == [
        ("clear_tool_outputs", History.__name__),  # unpinned: lets go of the current turn
        ("fixed", "list"),
        ("clear_tool_outputs", "list"),  # pinned
        ("fixed", "list"),
    ]
