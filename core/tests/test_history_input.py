"""A History handed to a Windower (a strategy windowing its history through another
strategy, as a pipeline's first stage does) is seen again, not read again: the same
snapshot of the same conversation, counted and budgeted for the visit that takes it,
with the host's cuts sent as they were."""

from __future__ import annotations

from typing import Any

import pytest

from ctxwindow import BaseStrategy, Conversation, History, Selection, Windower
from ctxwindow.kit import keep_run, recent_run
from ctxwindow.testing import assistant, user

HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    user("the task: " + "plan the trip " * 10),
    *[m for turn in range(30) for m in (user(f"q{turn} " * 15), assistant(f"a{turn} " * 25))],
    user("and now?"),
]


class _Recent(BaseStrategy):
    """Keeps the newest units that fit, and notes what it was shown."""

    name = "recent-seen"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.seen: list[History] = []

    def choose(self, history: History) -> Selection:
        self.seen.append(history)
        selection = history.selection()
        keep_run(
            selection, recent_run(history, history.budget - history.must_keep_tokens), "newest"
        )
        return selection


class _Through(BaseStrategy):
    """Windows its history through an inner strategy's Windower, handing it the view
    (``as_list``: the view's messages as a list instead), and keeps what it kept."""

    name = "through"

    def __init__(
        self, inner: Windower, as_list: bool = False, grow: Any = None, **options: Any
    ) -> None:
        super().__init__(**options)
        self.inner, self.as_list, self.grow = inner, as_list, grow
        self.windows: list[Any] = []

    def choose(self, history: History) -> Selection:
        if self.grow is not None:  # the caller's conversation grows during the visit
            self.grow.append(user("a message appended while the visit runs"))
        given: Any = history.originals if self.as_list else history
        window = self.inner.select(given, query=history.query)
        self.windows.append(window)
        selection = history.selection()
        for decision in window.record.decision_runs:
            if decision.action == "kept":
                selection.keep(decision.units, "kept by the inner strategy")
        return selection


def _through(
    inner_budget: int, outer: dict[str, Any] | None = None, **inner_options: Any
) -> tuple[_Through, _Recent]:
    recent = _Recent(**inner_options)
    return _Through(Windower(recent, inner_budget, "approx"), **(outer or {})), recent


@pytest.mark.parametrize("given", ["conversation", "list"])
def test_the_inner_visit_sees_the_outer_views_conversation_and_windows_alike(given: str) -> None:
    outer, recent = _through(300)
    messages: Any = Conversation(HISTORY) if given == "conversation" else list(HISTORY)
    Windower(outer, 400, "approx").select(messages)
    alike, alike_recent = _through(300)
    alike.as_list = True
    Windower(alike, 400, "approx").select(list(HISTORY))
    (seen,), (listed,) = recent.seen, alike_recent.seen
    if given == "conversation":
        assert seen.conversation is messages  # its per-conversation state is the caller's
    assert seen.budget == 300 and len(seen) == len(HISTORY)
    assert seen.must_keep == listed.must_keep and seen.total_tokens == listed.total_tokens
    (window,), (expected,) = outer.windows, alike.windows
    assert window.messages == expected.messages
    assert {id(m) for m in window.messages} <= {id(m) for m in HISTORY}  # the caller's own
    assert window.record.decision_runs == expected.record.decision_runs


def test_the_inner_visit_counts_with_its_own_counter() -> None:
    recent = _Recent()

    class _Doubled:  # counts every message as twice its approx count
        name = "doubled"

        def __init__(self) -> None:
            self.approx = Windower(recent, 100, "approx").counter

        def count_message(self, message: Any) -> int:
            return 2 * int(self.approx.count_message(message))

        def count_text(self, text: str) -> int:
            return 2 * int(self.approx.count_text(text))

    outer = _Through(Windower(recent, 800, _Doubled()))
    Windower(outer, 400, "approx").select(Conversation(HISTORY))
    approx = Windower(_Recent(), 400, "approx").select(HISTORY).record.tokens_before
    (seen,) = recent.seen
    assert seen.total_tokens == 2 * approx
    assert outer.windows[0].record.tokens_before == 2 * approx


@pytest.mark.parametrize("task_statement", [True, False])
def test_the_inner_visit_weighs_the_task_statement_by_its_own_option(task_statement: bool) -> None:
    outer, recent = _through(
        300, {"task_statement": not task_statement}, task_statement=task_statement
    )
    Windower(outer, 400, "approx").select(Conversation(HISTORY))
    (seen,) = recent.seen
    assert (seen.task_unit is not None) is task_statement
    assert (seen.task_unit in seen.must_keep) is task_statement


def test_the_inner_visit_is_the_outer_snapshot_while_the_conversation_grows() -> None:
    conversation = Conversation(HISTORY)
    outer, recent = _through(300)
    outer.grow = conversation
    Windower(outer, 400, "approx").select(conversation)
    (seen,) = recent.seen
    assert len(conversation) == len(HISTORY) + 1
    units = len(Conversation(HISTORY).view(seen.counter, 300).units)
    assert len(seen) == len(HISTORY) and len(seen.units) == units
    assert seen.newest_user == len(HISTORY) - 1  # not the message appended since
    assert outer.windows[0].messages[-1] is HISTORY[-1]


def test_the_inner_visit_sees_the_hosts_cut_as_it_was_sent() -> None:
    long_question = user("why " * 2_000)
    history = [*HISTORY[:-1], long_question]
    outer, recent = _through(400, {"oversize": "truncate"})
    window = Windower(outer, 400, "approx").select(Conversation(history))
    (seen,) = recent.seen
    (inner,) = outer.windows
    assert not seen.replacements  # read from the messages as sent: the cut one among them
    sent = inner.messages[-1]
    assert sent is not long_question and len(str(sent)) < len(str(long_question))
    assert window.record.engaged and window.tokens <= 400
