"""A conversation branched again before its own first visit made its state: neither it
nor its branch starts its state afresh (reading the whole history again), and no chain
of conversations is kept alive."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Branch, Conversation, History, Selection
from ctxwindow._recent import RECENT
from ctxwindow.kit import PerConversation
from ctxwindow.kit._prefixes import RecentLists

COUNTER = ctxwindow.ApproxCounter()


@pytest.fixture(autouse=True)
def _forget() -> None:
    RECENT.clear()


def chat(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for turn in range(turns):
        out.append({"role": "user", "content": f"question {turn} " + "word " * 8})
        out.append({"role": "assistant", "content": f"answer {turn} " + "reply " * 8})
    return out


class Index:
    """A per-conversation state that records where it came from (weakly: a state
    holding its parent would keep every conversation alive) and what it read."""

    def __init__(self, read: int = 0, origin: Branch | None = None) -> None:
        self.read = read
        self.parent = None if origin is None else weakref.ref(origin.parent)
        self.shared = 0 if origin is None else origin.messages
        self.units_read = 0

    def branch(self, conversation: Conversation, origin: Branch) -> Index:
        return Index(min(self.read, origin.units), origin)

    def catch_up(self, units: int) -> None:
        self.units_read += units - self.read
        self.read = units


def _visit(states: PerConversation[Index], conversation: Conversation) -> Index:
    index = states.of(conversation)
    index.catch_up(len(conversation.view(COUNTER, 400).units))
    return index


def test_a_branch_of_a_branch_made_before_its_visit_starts_from_the_grandparent() -> None:
    states: PerConversation[Index] = PerConversation(Index, Index.branch)
    first = Conversation(chat(30))
    _visit(states, first)
    second = first.branch(-1)
    third = second.branch(-1)  # before the second's first visit
    late = _visit(states, third)
    assert late.parent is not None and late.parent() is first
    assert late.shared == len(third) and late.units_read == 0
    # the second's own visit, later, still starts from the first's state
    own = _visit(states, second)
    assert own.parent is not None and own.parent() is first
    assert own.units_read == 0
    assert second.branched_from is not None and second.branched_from.parent is first
    assert third.branched_from is not None and third.branched_from.parent is second


def test_each_branch_made_before_its_parent_visit_keeps_at_most_two_back() -> None:
    states: PerConversation[Index] = PerConversation(Index, Index.branch)
    newest = Conversation(chat(30))
    assert _visit(states, newest).units_read == 61
    refs = [weakref.ref(newest)]
    for turn in range(6):  # each branched again before its own visit, every time
        parent, newest = newest, newest.branch(-1)
        refs.append(weakref.ref(newest))
        if turn:
            assert _visit(states, parent).units_read == 0  # from its parent's state
    del parent
    gc.collect()
    assert [ref() is not None for ref in refs] == [False] * 4 + [True] * 3


def test_a_branch_chain_made_before_any_visit_keeps_one_back() -> None:
    newest = Conversation(chat(30))
    refs = [weakref.ref(newest)]
    for _ in range(4):  # no state anywhere: nothing to wait for
        newest = newest.branch(-1)
        refs.append(weakref.ref(newest))
    gc.collect()
    assert [ref() is not None for ref in refs] == [False] * 3 + [True] * 2


class Indexing:
    """A strategy keeping a per-conversation index: keeps what must stay."""

    name = "indexing-test"

    def __init__(self) -> None:
        self.states: PerConversation[Index] = PerConversation(Index, Index.branch)
        self.read: list[int] = []

    def choose(self, history: History) -> Selection:
        index = self.states.of(history.conversation)
        before = index.units_read
        index.catch_up(len(history.units))
        self.read.append(index.units_read - before)
        return history.selection()


def test_an_edit_selected_while_the_previous_edit_is_being_published_reads_little(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    strategy = Indexing()
    windower = ctxwindow.Windower(strategy, 300, COUNTER)
    first = chat(200)
    windower.select(first)
    once = [*first[:-2], {"role": "assistant", "content": "edited once"}, first[-1]]
    twice = [*once[:-2], {"role": "assistant", "content": "edited twice"}, first[-1]]
    replace = RecentLists.replace

    def interleaved(self: Any, old: Any, new: Any) -> None:
        replace(self, old, new)
        if not strategy.read[1:]:  # another caller, right after the first edit is published
            monkeypatch.setattr(RecentLists, "replace", replace)
            windower.select(twice)

    monkeypatch.setattr(RecentLists, "replace", interleaved)
    windower.select(once)
    assert strategy.read[0] == len(first)  # the whole history, once
    assert strategy.read[1:] == [2, 2]  # each edit: what it does not share
