"""A chat loop's warm turn takes shortcuts: a handful of candidates ranked by the kit's
keep_best, and the recent run found by bisection and kept a stretch a call. Each gives
the windows and records the long way gives, and each test here fails when its shortcut
goes wrong."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Conversation, get_counter
from ctxwindow.kit import Coverage, ranking, recent_units
from ctxwindow.kit.ranking import UnitFigures
from ctxwindow_sliding import SlidingWindow
from ctxwindow_sliding import strategy as sliding

WORDS = "the plan trip hotel flight price city budget call result data".split()


def long_history(count: int, seed: int, task_words: int = 0) -> list[dict[str, Any]]:
    """An agent's history of ``count`` blocks (over the length at which the numpy
    ranking starts), its words shared by every unit and a few results carrying ids;
    with ``task_words``, a task statement that long (too long to be kept outright)."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    if task_words:
        messages.append({"role": "user", "content": " ".join(rng.choices(WORDS, k=task_words))})
    for index in range(count):
        text = " ".join(rng.choices(WORDS, k=rng.randint(4, 40)))
        if rng.random() < 0.15:
            code = f" RES{rng.randint(0, 30):03d}" if rng.random() < 0.3 else ""
            function = {"name": "find", "arguments": f'{{"q": "{text[:16]}"}}'}
            call = {"id": f"c{index}", "type": "function", "function": function}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"c{index}", "content": text + code})
        else:
            messages.append({"role": rng.choice(["user", "assistant"]), "content": text})
    return messages


def turns(seed: int) -> Iterator[dict[str, Any]]:
    """A chat loop's new messages: questions matching older ones, ids, an importance
    mark (a number, or not), a pin, a rare word."""
    rng = random.Random(seed)
    for number in range(10**6):
        kind = rng.random()
        message: dict[str, Any] = {"role": "user", "content": f"one more question, {number}?"}
        if kind < 0.15:
            message["content"] = f"what about zebra {number} and RES{number % 30:03d}?"
        elif kind < 0.25:
            mark = rng.choice([3, 0.5, -2, "high"])
            message = {**message, "metadata": {"importance": mark}}
        elif kind < 0.32:
            message = {**message, "metadata": {"pinned": True}}
        elif kind < 0.45:
            message = {"role": "assistant", "content": f"noted file /tmp/q{number}.txt question"}
        yield message


def shown(window: ctxwindow.Window[Any]) -> Any:
    """A window's messages and the whole of its record that a strategy decides."""
    decisions = [(d.unit, d.action, d.reason, d.tokens, d.score) for d in window.record.decisions]
    return window.messages, decisions, window.record.notes


def every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make keep_ranked value every older unit and excerpt (the kit's own best_first)."""
    from ctxwindow.kit import keep_best

    def valued_all(history: Any, selection: Any, _: Any, room: int, *args: Any, **kw: Any) -> int:
        kw.pop("order", None)
        older = [u for u in range(len(history.units)) if u not in history.must_keep]
        older = sorted((u for u in older if u not in selection.kept), reverse=True)
        return keep_best(history, selection, older, room, *args, **kw)

    monkeypatch.setattr(ranking, "keep_best", valued_all)


@pytest.mark.parametrize("seed", range(3))
def test_a_chat_loop_ranks_its_few_candidates_as_the_numpy_ranking_does(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Turn by turn (new messages matching old units, importance marks, pins, ids, a
    branch for an edited list), the few candidates ranked by keep_best give what the
    numpy bounds give and what valuing every key gives, with the same record."""
    few = ranking._few_worth_ranking
    taken: list[int] = []

    def counted(*args: Any) -> Any:
        found = few(*args)
        if found is not None:
            taken.append(len(found))
        return found

    history = long_history(420, seed, task_words=(0, 300, 900)[seed])
    asked = turns(seed)
    ours_strategy = SlidingWindow()
    numpy_strategy = SlidingWindow()
    conversation = Conversation(history)
    twin = Conversation(history)
    messages = list(history)
    task_first = 0
    for step in range(40):
        message = next(asked)
        conversation.append(message)
        twin.append(message)
        messages.append(message)
        budget = (600, 1_500, 3_000)[step % 3]
        given: Any = conversation
        if step % 7 == 6:  # a list edited near its end: the runner reads it into a branch
            given = [*messages[:-2], {"role": "user", "content": f"edited zebra {step}?"}]
        with monkeypatch.context() as patched:
            patched.setattr(ranking, "_few_worth_ranking", counted)
            ours = ours_strategy.select(given, budget)
        with monkeypatch.context() as patched:
            patched.setattr(ranking, "FEW_CANDIDATES", -1)  # the numpy bounds, always
            theirs = numpy_strategy.select(twin if given is conversation else given, budget)
        with monkeypatch.context() as patched:
            every_key(patched)
            patched.setattr(ranking, "FEW_CANDIDATES", -1)
            valued = SlidingWindow().select(messages if given is conversation else given, budget)
        assert shown(ours) == shown(theirs) == shown(valued), step
        task_first += sliding.TASK_FIRST in str(shown(ours))
    assert taken and max(taken) > 1  # the shortcut ranked several candidates
    assert task_first or not seed  # a task statement too big to keep outright came first


def test_the_few_candidates_are_those_the_numpy_ranking_reads() -> None:
    """Whatever the candidates' number, the shortcut names exactly the units _Keys
    would rank (the matches, the units holding ids, the task statement), or none; read
    from the keyword match's support, or from every unit's relevance without one."""
    strategy = SlidingWindow()
    messages = long_history(400, 5)
    asked = turns(5)
    conversation = Conversation(messages)
    counter = get_counter("approx")
    checked = 0
    for _ in range(25):
        conversation.append(next(asked))
        history = conversation.view(counter, 2_000)
        scores, support = strategy._importance(history)
        figures = UnitFigures()
        selection = history.selection()
        coverage = Coverage(history, selection.kept, spoken_weight=1.0)
        stop = len(history.units) - 1
        task = history.task_unit
        assert support is not None
        other = next(unit for unit in range(2, stop) if unit not in history.must_keep)
        cases = ((scores, task), (scores * 0, other), (-scores, None))
        for (relevance, first), given in itertools.product(cases, (support, None)):
            found = ranking._few_worth_ranking(
                history, figures, relevance, stop, coverage, first, 0.0, given
            )
            keys = ranking._Keys(
                history, figures, relevance, stop, coverage, first, False, 0.0, given
            )
            if found is not None:
                assert found == keys.units.tolist()
                checked += 1
    assert checked


def test_more_candidates_than_few_go_to_the_numpy_ranking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the limit, the shortcut steps aside (and the windows stay the same)."""
    messages = [*long_history(400, 2), {"role": "user", "content": "zebra RES004?"}]
    calls: list[Any] = []
    keys = ranking._Keys.__init__

    def counted(self: Any, *args: Any, **kw: Any) -> None:
        calls.append(1)
        keys(self, *args, **kw)

    monkeypatch.setattr(ranking._Keys, "__init__", counted)
    monkeypatch.setattr(ranking, "FEW_CANDIDATES", 1)
    limited = SlidingWindow().select(messages, 2_000)
    assert calls
    monkeypatch.setattr(ranking, "FEW_CANDIDATES", 10**6)
    calls.clear()
    unlimited = SlidingWindow().select(messages, 2_000)
    assert not calls
    assert shown(limited) == shown(unlimited)


def reference_recent(
    history: Any, selection: Any, room: int, before: int
) -> tuple[list[int], int, int]:
    """What the recent run keeps, a unit at a time (recent_units), with its cost and
    oldest unit."""
    kept, used, oldest = [], 0, before
    for unit in recent_units(history, room, before=before, skip=selection.kept):
        kept.append(unit)
        used += history.unit_tokens(unit)
        oldest = unit
    return kept, used, oldest


@pytest.mark.parametrize("seed", range(4))
def test_the_recent_run_found_by_bisection_is_the_one_found_unit_by_unit(seed: int) -> None:
    """Kept units scattered below ``before`` (side by side, apart, at the ends), must-keep
    ones among them, few (found by bisection) or many (walked), rooms from none to all:
    the same units, cost and oldest unit."""
    rng = random.Random(seed)
    messages = long_history(120, seed)
    messages[5] = {**messages[5], "metadata": {"pinned": True}} if messages[5]["content"] else {}
    messages = [m for m in messages if m]
    messages.append({"role": "user", "content": "the plan?"})
    history = Conversation(messages).view(get_counter("approx"), 3_000)
    size = len(history.units)
    for _ in range(300):
        ours, theirs = history.selection(), history.selection()
        for unit in rng.sample(range(size), min(size, rng.choice([0, 3, 20, 60, 100]))):
            ours.keep(unit, "earlier")
            theirs.keep(unit, "earlier")
        for start in rng.sample(range(size), 2):  # runs of kept units, side by side
            for unit in range(start, min(start + rng.randint(1, 6), size)):
                ours.keep(unit, "earlier")
                theirs.keep(unit, "earlier")
        before = rng.choice([size, rng.randrange(size + 1)])
        room = rng.choice([0, 5, 200, 1_500, 10**6])
        expected, used, oldest = reference_recent(history, theirs, room, before)
        for unit in expected:
            theirs.keep(unit, sliding.RECENT)
        assert sliding._keep_recent(history, ours, room, before) == (used, oldest)
        assert ours.kept == theirs.kept
        assert ours.actions == theirs.actions
