"""A stage of a pipeline sees the caller's growing history as one growing conversation:
its strategy's per-conversation state (an index, a memo) carries over from one visit to
the next, as it does outside a pipeline, instead of being built anew on every visit."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from agent import WORDS, agent_steps
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxwindow._recent as rec
from ctxwindow import BaseStrategy, Conversation, History, Selection
from ctxwindow.errors import BudgetTooSmall
from ctxwindow.kit import recent_units
from ctxwindow.testing.conversations import agent_histories
from ctxwindow_pipeline import PipelineStrategy


class _Watcher(BaseStrategy):
    """The newest units that fit; notes which conversation each visit's view is of, and
    how long it was when the visit began."""

    name = "watcher"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.seen: list[tuple[int, int]] = []

    def choose(self, history: History) -> Selection:
        self.seen.append((id(history.conversation), len(history)))
        selection = history.selection()
        room = history.budget - history.must_keep_tokens
        for unit in recent_units(history, room):
            selection.keep(unit, "recent")
        return selection


def chat(size: int, rng: random.Random) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "Plan the trip."}]
    for turn in range(size):
        role = "user" if turn % 2 == 0 else "assistant"
        history.append({"role": role, "content": " ".join(rng.choices(WORDS, k=30))})
    return history


def test_a_stage_sees_one_conversation_grow_across_visits() -> None:
    rng = random.Random(5)
    watcher = _Watcher()
    pipeline = PipelineStrategy(stages=["clear_tool_outputs", watcher])
    conversation = Conversation(chat(300, rng))
    for _ in range(4):
        conversation.append({"role": "user", "content": " ".join(rng.choices(WORDS, k=12))})
        window = pipeline.select(conversation, 2_000)
        assert window.record.engaged
    assert len(watcher.seen) == 4
    # every visit's view is of one conversation, the one the first visit read
    assert len({conversation for conversation, _ in watcher.seen}) == 1
    assert [size for _, size in watcher.seen] == [302, 303, 304, 305]


def test_a_stage_still_keeps_the_current_turn_and_the_task_statement() -> None:
    rng = random.Random(6)
    pipeline = PipelineStrategy(stages=[_Watcher()])
    history = chat(200, rng)
    history.append({"role": "user", "content": "and the hotel price?"})
    window = pipeline.select(history, 600)
    kept = {d.unit for d in window.record.decisions if d.action == "kept"}
    assert {0, 1, len(history) - 1} <= kept  # system, the task statement, the newest user


def agent_read(rounds: int, seed: int) -> tuple[list[list[dict[str, Any]]], Conversation]:
    """An agent's rounds, the first 300 read into a Conversation after a system prompt."""
    steps = agent_steps(rounds, random.Random(seed))
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for step in steps[:300]:
        history.extend(step)
    return steps, Conversation(history)


def assert_as_read_afresh(window: Any, stages: list[Any], messages: list[Any], budget: int) -> None:
    """``window`` holds what a new pipeline of ``stages`` gives for ``messages`` with
    nothing remembered (every stage reads its input whole), and records the same."""
    keep = rec.REMEMBER_FROM
    rec.REMEMBER_FROM = 10**9
    try:
        fresh = PipelineStrategy(stages=stages).select(list(messages), budget)
    finally:
        rec.REMEMBER_FROM = keep
    assert window.messages == fresh.messages
    assert window.record.to_dict()["decisions"] == fresh.record.to_dict()["decisions"]


@pytest.mark.parametrize("last", ["sliding", "fixed"])
def test_a_stage_whose_input_parts_near_its_end_starts_from_its_last_state(last: str) -> None:
    """After clearing, a stage's input parts from the last turn's near its end (a result
    just cleared, the last turn's pins let go): it is read as a branch of the last
    input's conversation, and the stage's state starts from that one's. The windows are
    those a pipeline reading everything afresh gives."""
    rng = random.Random(9)
    steps = agent_steps(260, rng)
    history = [{"role": "system", "content": "You are an agent."}]
    for step in steps[:200]:
        history.extend(step)
    stages = ["clear_tool_outputs", last]
    pipeline = PipelineStrategy(stages=stages)
    visited: list[Conversation] = []
    strategy = pipeline.stages[-1].strategy
    choose = strategy.choose

    def watched(history: History) -> Selection:
        visited.append(history.conversation)
        return choose(history)

    strategy.choose = watched  # type: ignore[method-assign]
    conversation = Conversation(history)
    pipeline.select(conversation, 1_500)
    seen: list[Conversation] = []
    branched = 0
    for step in steps[200:]:
        conversation.extend(step)
        window = pipeline.select(conversation, 1_500)
        assert_as_read_afresh(window, stages, conversation.originals, 1_500)
        stage = visited[-1]
        if seen and stage is not seen[-1]:  # else the input only grew
            assert stage.branched_from is not None and stage.branched_from.parent is seen[-1]
            assert stage.branched_from.messages >= len(seen[-1]) - 12
            branched += 1
        seen.append(stage)
    assert branched >= 20  # a result cleared, or pins let go: most turns


def test_a_visit_reads_where_the_new_messages_come_from_and_gives_back_this_calls_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where each message of the first stage's input comes from is read once per unit
    of a conversation (the newest again), not on every visit; the input itself is the
    caller's list of this call, so a list rebuilt from equal dicts gets its own dicts
    back. Windows and records are those of a pipeline reading everything afresh."""
    import ctxwindow_pipeline.pipeline as module

    made = 0
    real = module._Origin

    def counted(*args: Any) -> Any:
        nonlocal made
        made += 1
        return real(*args)

    rng = random.Random(12)
    steps = agent_steps(700, rng)  # 600 read, 20 visited, some of the rest instead
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for step in steps[:600]:
        history.extend(step)
    stages = ["clear_tool_outputs", "sliding"]
    pipeline = PipelineStrategy(stages=stages)
    pipeline.select(history, 1_500)
    monkeypatch.setattr(module, "_Origin", counted)
    for number, step in enumerate(steps[600:620]):
        history = history + step  # a new list each turn, as an app's request body is
        if number % 5 == 4:  # rebuilt from equal dicts: recognised, its own dicts given back
            history = [dict(message) for message in history]
        if number % 7 == 6:  # the last step taken back and made again: a branch
            pipeline.select(history, 1_500)
            history = history[: -len(step)] + steps[620 + number]
        made = 0
        window = pipeline.select(history, 1_500)
        assert made < 20, f"{made} origins made for {len(step)} new messages"
        ours = {id(message) for message in history}
        assert all(id(item) in ours for item in window.messages if "metadata" not in item), (
            "a window item is not one of this call's dicts"
        )
        assert_as_read_afresh(window, stages, history, 1_500)


def test_a_turn_starts_from_the_last_turns_first_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first stage's decisions about the settled exchanges are the last turn's very
    ones (clear_tool_outputs carries them): the pipeline takes over what it made of
    them too (where each message came from, why each unit was kept or cleared), and
    goes over the new decisions only. Windows and records are a fresh pipeline's, for
    a growing conversation and for lists rebuilt or taken back."""
    import ctxwindow_pipeline.pipeline as module

    went_over: list[int] = []
    carried = module._Run._carried

    def counted(run: Any, last: Any, decisions: Any, messages: Any) -> Any:
        found = carried(run, last, decisions, messages)
        went_over.append(len(decisions) - found[0])
        return found

    monkeypatch.setattr(module._Run, "_carried", counted)
    steps, conversation = agent_read(330, seed=14)
    stages = ["clear_tool_outputs", "sliding"]
    pipeline = PipelineStrategy(stages=stages)
    pipeline.select(conversation, 1_500)
    for step in steps[300:315]:
        conversation.extend(step)
        window = pipeline.select(conversation, 1_500)
        assert_as_read_afresh(window, stages, conversation.originals, 1_500)
    assert len(went_over) >= 14
    assert sorted(went_over)[len(went_over) // 2] <= 8  # of about 150 decision runs
    listed = conversation.originals
    for number, step in enumerate(steps[315:]):
        listed = listed + step
        if number % 5 == 4:  # a turn taken back: this list's newest results are not the last's
            pipeline.select(listed + steps[315 + number - 1], 1_500)
        window = pipeline.select(listed, 1_500)
        assert_as_read_afresh(window, stages, listed, 1_500)


def _fates_one_by_one(run: Any, label: str, decision: Any) -> list[int]:
    """What _Run._gone does, message by message, as the general path does it."""
    carried = [run.origins[p] for p in decision.positions]
    run._removed(label, decision.action, decision.reason, carried)
    return sorted(frozenset().union(*(origin.covers for origin in carried)))


def _summary_fates_one_by_one(fates: Any, summaries: Any) -> dict[int, Any]:
    """What _summary_fates gives, read unit by unit (each unit's fate looked up and
    given again, as the selection already has it from its run or not)."""
    from ctxwindow_pipeline.pipeline import _in_summary

    made_by = {unit: maker for covers, maker in summaries for unit in covers}
    out = {}
    for unit, maker in made_by.items():
        fate = _in_summary(fates.get(unit), maker)
        if fate is not None:
            out[unit] = fate
    return out


@settings(max_examples=60, deadline=None)
@given(
    history=agent_histories(max_rounds=30),
    budget=st.integers(200, 5_000),
    last=st.sampled_from(["sliding", "fixed", "summarize"]),
    cleared_first=st.booleans(),
)
def test_a_run_of_the_callers_messages_dropped_at_once_reads_as_one_by_one(
    history: list[dict[str, Any]], budget: int, last: str, cleared_first: bool
) -> None:
    """A stage's run of dropped or summarized messages, when the stage's input is the
    caller's list in its places, is given its fates a run of units at a time, and a
    summary's units keep their run's fate: the record says what it says when every
    message is read one by one."""
    import ctxwindow_pipeline.pipeline as module

    clearing = {"strategy": "clear_tool_outputs", "keep_recent": 1, "min_tokens": 20}
    stages = [clearing, last] if cleared_first else [last]
    try:
        fast = PipelineStrategy(stages=stages).select(history, budget)
    except BudgetTooSmall:
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module._Run, "_gone", _fates_one_by_one)
        patch.setattr(module, "_summary_fates", _summary_fates_one_by_one)
        slow = PipelineStrategy(stages=stages).select(history, budget)
    assert fast.messages == slow.messages
    assert fast.record.to_dict()["decisions"] == slow.record.to_dict()["decisions"]


def _covers_read_anew(patch: pytest.MonkeyPatch) -> None:
    """A pipeline patched to read its stages' summaries' covers anew on every turn."""
    import ctxwindow_pipeline.pipeline as module

    patch.setattr(module._MadeCovers, "units", lambda *_: None)
    patch.setattr(module._MadeCovers, "callers", lambda *_: None)


def _named_again(
    stages: list[Any],
    messages: list[dict[str, Any]],
    start: int,
    stop: int,
    budget: int,
    read_anew: Callable[[pytest.MonkeyPatch], None],
    many: int,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[set[int], int]:
    """Window ``messages[:start]``, then two more a turn up to ``stop``, through a
    pipeline and through a twin patched by ``read_anew`` to read its summaries' covers
    anew; each turn's windows and records must be the same. The counts of summarized
    units seen, and how many turns named more than ``many`` covered messages again."""
    fast, slow = PipelineStrategy(stages=stages), PipelineStrategy(stages=stages)
    conversation, twin = Conversation(messages[:start]), Conversation(messages[:start])
    fast.select(conversation, budget)
    with pytest.MonkeyPatch.context() as patch:
        read_anew(patch)
        slow.select(twin, budget)
    named = 0
    covers_ref = History.covers_ref

    def counted(history: History, position: int) -> str:
        nonlocal named
        named += 1
        return covers_ref(history, position)

    monkeypatch.setattr(History, "covers_ref", counted)
    summarized, named_again = set(), 0
    for turn in range(start, stop, 2):
        conversation.extend(messages[turn : turn + 2])
        twin.extend(messages[turn : turn + 2])
        named = 0
        window = fast.select(conversation, budget)
        named_again += named > many
        summarized.add(window.record.count("summarized"))
        with pytest.MonkeyPatch.context() as patch:
            read_anew(patch)
            expected = slow.select(twin, budget)
        assert window.messages == expected.messages
        assert window.record.to_dict()["decisions"] == expected.record.to_dict()["decisions"]
    return summarized, named_again


@pytest.mark.slow  # about 10 s each: the twin reads thousands of units one by one a turn
@pytest.mark.parametrize(
    "stages", [["summarize", "fixed"], ["clear_tool_outputs", "summarize"], ["summarize"]]
)
def test_a_summary_of_thousands_of_messages_costs_a_turn_its_new_messages(
    stages: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A summarize stage's summary stands for thousands of the caller's messages, turn
    after turn. The pipeline gave every one of them its fate, read every reference of
    the summary's covers and named each covered message again on every turn (160 ms a
    turn at 8,000 messages, against 0.2 ms for summarize alone). Now the covers are read
    once per summary: few messages are named on a turn that adds two, and windows and
    records are those of a pipeline that reads everything one by one, turn after turn
    (a rolling summary is not a fresh visit's), as the summary moves on too."""
    import ctxwindow_pipeline.pipeline as module

    messages: list[dict[str, Any]] = [{"role": "system", "content": "You help with orders."}]
    for n in range(1_100):
        messages.append({"role": "user", "content": f"Order ORD{n:05d} ships to city{n % 40}."})
        messages.append({"role": "assistant", "content": f"Noted ORD{n:05d}; anything else?"})

    def one_by_one(patch: pytest.MonkeyPatch) -> None:
        patch.setattr(module._Run, "_gone", _fates_one_by_one)
        patch.setattr(module, "_summary_fates", _summary_fates_one_by_one)
        _covers_read_anew(patch)

    summarized, named_again = _named_again(
        stages, messages, 2_001, 2_161, 800, one_by_one, 50, monkeypatch
    )
    assert min(summarized) > 1_500 and len(summarized) > 1  # the summary moved on
    assert named_again <= 8, f"{named_again} of 80 turns named the covered messages again"


@pytest.mark.parametrize("stages", [["summarize"], ["clear_tool_outputs", "summarize"]])
def test_an_agents_run_from_one_instruction_names_its_summarys_messages_once(
    stages: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's run from one instruction: the rounds summarize summarizes lie in the
    current turn, and it hands on an equal ``covers`` tuple made anew on each visit,
    not the same one. The pipeline knew a summary's covers only by the tuple's
    identity, so it read every reference and named every covered message again on
    each step (74 ms a step at 20,000 messages, against 1.3 ms for summarize alone).
    An equal tuple is known again now; windows and records are a pipeline's that reads
    the covers anew each step."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Audit every record and fix what is wrong."},
    ]
    for n in range(700):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"R-{n} ok " * 9})
    start = 1_202
    summarized, named_again = _named_again(
        stages, messages, start, len(messages), 1_500, _covers_read_anew, 200, monkeypatch
    )
    assert min(summarized) > 500 and len(summarized) > 1  # the summary moved on
    steps = (len(messages) - start) // 2
    assert named_again <= 10, f"{named_again} of {steps} steps named the covered messages again"


def test_threads_windowing_one_conversation_at_once_each_get_a_fresh_pipelines_window() -> None:
    """What a turn takes over from the last (the first stage's carried decisions, the
    pipeline's bookkeeping of them) is checked against the turn's own input, so threads
    windowing one growing conversation at once, each from a list of its own moment,
    get what a pipeline reading everything afresh gives."""
    import threading

    steps, conversation = agent_read(340, seed=21)
    stages = ["clear_tool_outputs", "sliding"]
    pipeline = PipelineStrategy(stages=stages)
    lock = threading.Lock()
    failures: list[BaseException] = []
    windowed: list[tuple[list[Any], Any]] = []

    def window_now() -> None:
        for _ in range(8):
            with lock:
                listed = conversation.originals
            try:
                windowed.append((listed, pipeline.select(listed, 1_500)))
            except BaseException as error:  # reported in the main thread
                failures.append(error)

    threads = [threading.Thread(target=window_now) for _ in range(3)]
    for thread in threads:
        thread.start()
    for step in steps[300:]:
        with lock:
            conversation.extend(step)
    for thread in threads:
        thread.join()
    assert not failures, failures[0]
    assert len(windowed) == 24
    for listed, window in windowed:  # afresh here: that reading sets a process-wide bound
        assert_as_read_afresh(window, stages, listed, 1_500)


def test_turn_after_turn_the_stages_conversations_do_not_pile_up() -> None:
    """Each turn reads the first stage's input as a branch of the last turn's, and
    clear_tool_outputs keeps its last selection (a view of that branch) to carry from:
    the branches of turns gone are freed all the same, as the app's own are."""
    import gc

    def conversations() -> int:
        gc.collect()
        return sum(1 for thing in gc.get_objects() if type(thing) is Conversation)

    steps, conversation = agent_read(330, seed=23)
    pipeline = PipelineStrategy(stages=["clear_tool_outputs", "sliding"])
    for step in steps[300:305]:
        conversation.extend(step)
        pipeline.select(conversation, 1_500)
    after_five = conversations()
    for step in steps[305:]:
        conversation.extend(step)
        pipeline.select(conversation, 1_500)
    assert conversations() <= after_five


_FATES = st.sampled_from(
    [("dropped", "cap: over"), ("summarized", "sum: older"), ("kept", "fixed: recent")]
)


@settings(max_examples=300, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 12), _FATES), max_size=5),
    own=st.dictionaries(st.integers(0, 50), _FATES, max_size=8),
    spans=st.lists(
        st.tuples(st.integers(0, 40), st.integers(1, 15), st.sampled_from(["sum", None])),
        min_size=1,
        max_size=3,
    ),
)
def test_the_fates_of_summaries_of_runs_are_those_read_unit_by_unit(
    runs: list[tuple[int, int, Any]], own: dict[int, Any], spans: list[tuple[int, int, Any]]
) -> None:
    """A summary known to cover a run of units (a _Stretch) gets its fates from the
    run's ends: the very fates the general path reads from each of its units."""
    import ctxwindow_pipeline.pipeline as module

    fates = module._Fates()
    for start, length, fate in runs:
        fates.set_run(range(start, start + length), fate)
    for unit in sorted(own):
        fates[unit] = own[unit]
    stretches = [
        (module._as_stretch(frozenset(range(start, start + length))), maker)
        for start, length, maker in spans
    ]
    assert all(isinstance(covers, module._Stretch) for covers, _ in stretches)
    plain = [(frozenset(covers), maker) for covers, maker in stretches]
    assert module._summary_fates(fates, stretches) == module._summary_fates(fates, plain)


def _long_turn(rounds: int) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """An agent's history, then one user message and ``rounds`` rounds of a call and
    its result: a long autonomous turn, whose older rounds summarize writes a summary
    of their own (beside the history's) once the turn outgrows its room."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Task: process the orders of user U-1."},
    ]

    def step(number: int) -> list[dict[str, Any]]:
        call = {"id": f"c{number}", "type": "function"}
        call["function"] = {"name": "find", "arguments": f'{{"q": "ORD{number:03d}"}}'}
        words = " ".join(["plan", "trip", "hotel", "flight", "price"][number % 5 :] * 12)
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{number}", "content": f"{words} ORD{number:03d}"},
        ]

    for number in range(60):
        if number % 3 == 0:
            history.append({"role": "user", "content": f"next step {number}: go on"})
        history += step(number)
    history.append({"role": "user", "content": "Now process every remaining order."})
    return history, [step(number) for number in range(60, 60 + rounds)]


def test_a_long_turns_two_summaries_are_traced_by_runs_as_unit_by_unit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two summaries apart (the history's, and the long turn's older rounds') each follow
    runs of their own: every round of the turn read the stage's decisions one per unit
    (the history's worth of Python calls a round). The windows and records are those of
    reading them unit by unit, which made messages side by side still need."""
    import ctxwindow_pipeline.pipeline as module

    history, rounds = _long_turn(40)
    stages = ["summarize", "sliding"]
    fast, slow = PipelineStrategy(stages=stages), PipelineStrategy(stages=stages)
    removed = 0
    real_removed, apart = module._Run._removed, module._several_at_one_place

    def counted(self: Any, *args: Any) -> None:
        nonlocal removed
        removed += 1
        real_removed(self, *args)

    two_summaries = 0
    for step in rounds:
        history += step
        monkeypatch.setattr(module._Run, "_removed", counted)
        monkeypatch.setattr(module, "_several_at_one_place", apart)
        window = fast.select(list(history), 1_200)
        monkeypatch.setattr(module, "_several_at_one_place", lambda made: len(made) > 1)
        monkeypatch.setattr(module._Run, "_removed", real_removed)
        general = slow.select(list(history), 1_200)
        assert window.messages == general.messages
        assert window.record.decisions == general.record.decisions
        assert window.record.notes == general.record.notes
        made = [m for m in window.messages if (m.get("metadata") or {}).get("synthetic")]
        two_summaries += len(made) == 2
    assert two_summaries >= 5, "the turn never had two summaries: the test tests nothing"
    assert removed <= len(rounds)  # not a call per unit of the history each round
