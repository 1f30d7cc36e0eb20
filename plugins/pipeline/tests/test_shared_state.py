"""A stage of a pipeline sees the caller's growing history as one growing conversation:
its strategy's per-conversation state (an index, a memo) carries over from one visit to
the next, as it does outside a pipeline, instead of being built anew on every visit."""

from __future__ import annotations

import random
from typing import Any

from ctxwindow import BaseStrategy, Conversation, History, Selection
from ctxwindow.kit import recent_units
from ctxwindow_pipeline import PipelineStrategy

WORDS = "plan trip hotel flight price city morning budget call result data".split()


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
