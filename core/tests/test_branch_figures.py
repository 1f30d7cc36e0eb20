"""The ranking figures a branch of a conversation starts from (its parent's, for the
units the two share) are those a fresh read of its messages gives, and the parent's
stay its own as both grow apart."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ctxwindow import ApproxCounter, Conversation, History
from ctxwindow.kit import Coverage, ranking
from ctxwindow.kit._coverage import _MEMO as written
from ctxwindow.kit.ranking import UnitFigures, stable_units

COUNTER = ApproxCounter()


def agent(turns: int, seed: int) -> list[dict[str, Any]]:
    """Users and assistants naming ids, tools returning them: ids spoken and not."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for turn in range(turns):
        ids = [f"ORD{rng.randint(0, 60):03d}" for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.5:
            call = {"id": f"c{turn}", "type": "function"}
            call["function"] = {"name": "find", "arguments": f'{{"order": "{" ".join(ids)}"}}'}
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            found = " ".join(f"ITEM{rng.randint(0, 90):03d}" for _ in range(rng.randint(0, 4)))
            out.append({"role": "tool", "tool_call_id": f"c{turn}", "content": f"found {found}"})
        else:
            role = rng.choice(["user", "assistant"])
            out.append({"role": role, "content": f"about {' '.join(ids)} please"})
    return out


LOOKUP = {"id": "zed", "type": "function", "function": {"name": "find", "arguments": "{}"}}


def figures_of(figures: UnitFigures, conversation: Conversation) -> Any:
    history: History = conversation.view(COUNTER, 10_000)
    stop = len(history.units)
    coverage = Coverage(history, spoken_weight=2.0)
    counts = figures.identifier_counts(history, stop, coverage.of).tolist()
    spoken = figures.spoken_counts(history, stop, coverage).tolist()
    held = sorted(set().union(*(coverage.of(unit) for unit in range(stop))))
    holding = {found: figures.holding(found, stop, coverage) for found in held}
    tokens = figures.unit_tokens(history, stop).tolist()
    excerpts = figures.excerpt_figures(history, stop).tolist()
    return counts, spoken, holding, tokens, excerpts


def fresh(conversation: Conversation) -> Any:
    return figures_of(UnitFigures(), Conversation(conversation.originals))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("parent_first", [True, False])
@pytest.mark.parametrize("forgotten", [False, True])
@pytest.mark.parametrize("recent", [ranking.RECENT_UNITS, 4])
def test_a_branch_and_its_parent_keep_the_figures_a_fresh_read_gives(
    seed: int, parent_first: bool, forgotten: bool, recent: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``forgotten``: the identifiers the parent's messages wrote are read afresh (its
    coverage state gone) after the figures were read: the figures count them again.
    ``recent``: how many of the newest units' identifiers the figures hold, to find
    those a branch no longer shares (a branch parting further back looks at all)."""
    monkeypatch.setattr(ranking, "RECENT_UNITS", recent)
    history = agent(120, seed)
    # a tool's output holds an id that only the parent's newest message speaks: the
    # branch, which does not share that message, counts it as not spoken
    history[12:12] = [
        {"role": "assistant", "content": None, "tool_calls": [LOOKUP]},
        {"role": "tool", "tool_call_id": "zed", "content": "held ZED001 and ZED002"},
    ]
    history.append({"role": "user", "content": "what of ZED001?"})
    more = agent(140, seed + 100)[120:]
    parent = Conversation(history)
    figures = UnitFigures()
    figures_of(figures, parent)
    if forgotten:
        parent._states.pop(written)  # the state it held for these figures, gone
    child = parent.branch(len(history) - 1 - seed * 3)
    child.extend(agent(130, seed + 200)[len(child) :])
    if parent_first:  # the parent grows, and is read, before the branch's first visit
        parent.extend(more[:10])
        assert figures_of(figures, parent) == fresh(parent)
    assert child.branched_from is not None
    mine = figures.branch(child, child.branched_from)
    assert figures_of(mine, child) == fresh(child)
    for step in range(0, len(more), 5):
        parent.extend(more[step : step + 5])
        child.extend(agent(140 + step, seed + 300)[-5:])
        assert figures_of(figures, parent) == fresh(parent)
        assert figures_of(mine, child) == fresh(child)


@pytest.mark.parametrize("seed", range(3))
def test_the_figures_follow_the_counter_of_each_visit(seed: int) -> None:
    """Tokens read under one counter are not given for a visit under another, and
    are read again when the first comes back (a cache's counts are its counter's)."""
    from ctxwindow import CachedCounter

    other = ApproxCounter(chars_per_token=2.0)
    conversation = Conversation(agent(60, seed))
    figures = UnitFigures()
    for counter in (COUNTER, other, CachedCounter(other), COUNTER):
        history = conversation.view(counter, 10_000)
        stop = len(history.units)
        expected = [history.unit_tokens(unit) for unit in range(stop)]
        assert figures.unit_tokens(history, stop).tolist() == expected
        assert figures.unit_tokens(history, stop // 2).tolist() == expected[: stop // 2]
        conversation.extend(agent(64, seed)[len(conversation) :][:4])


def test_a_legacy_function_call_alone_is_not_a_stable_unit_until_its_result_joins_it() -> None:
    """A legacy function call, the history's last message, is a unit its result joins
    when it comes next: what a strategy keeps per unit (figures, an index) is not kept
    for it from a visit that read the call alone (``stable_units`` stops before it)."""
    conversation = Conversation(agent(60, 3))

    def stable() -> tuple[int, int]:
        history = conversation.view(COUNTER, 10_000)
        return stable_units(history), len(history.units)

    assert stable() == (61, 61)
    call = {"name": "find", "arguments": '{"order": "ORD007"}'}
    conversation.append({"role": "assistant", "content": None, "function_call": call})
    assert stable() == (61, 62)  # the call's unit may still grow
    conversation.append({"role": "function", "name": "find", "content": "found ITEM001"})
    assert stable() == (62, 62)  # the result joined the call's unit
    conversation.append({"role": "assistant", "content": None, "function_call": call})
    conversation.append({"role": "user", "content": "never mind"})
    assert stable() == (64, 64)  # no result came: the call is a unit of its own


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("recent", [ranking.RECENT_UNITS, 4])
def test_a_branch_of_a_branch_keeps_the_figures_a_fresh_read_gives(
    seed: int, recent: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newest units' identifiers a branch takes from its parent are those of the
    units it shares, so that its own branch finds what it no longer shares among its
    own units, not the parent's (an identifier only the parent's newest message holds
    is none of the branch's)."""
    monkeypatch.setattr(ranking, "RECENT_UNITS", recent)
    history = agent(80, seed)
    history.append({"role": "user", "content": "and ONLY777 of the parent?"})
    parent = Conversation(history)
    figures = UnitFigures()
    figures_of(figures, parent)
    child = parent.branch(len(history) - 1)
    child.extend(agent(90, seed + 10)[len(child) : len(child) + 2])
    assert child.branched_from is not None
    mine = figures.branch(child, child.branched_from)
    assert figures_of(mine, child) == fresh(child)
    grandchild = child.branch(len(child) - 3)
    grandchild.extend(agent(95, seed + 20)[len(grandchild) : len(grandchild) + 3])
    assert grandchild.branched_from is not None
    theirs = mine.branch(grandchild, grandchild.branched_from)
    assert figures_of(theirs, grandchild) == fresh(grandchild)
    assert figures_of(mine, child) == fresh(child)
