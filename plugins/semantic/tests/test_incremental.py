"""What a chat loop keeps between turns (vectors, BM25 statistics, per-unit figures) and
how it ranks gives exactly what a from-scratch visit gives; a warm turn reads only the
new units and the few older ones that can make the window. A cheap embedder stands in
for the model: these tests are about the index, not the embeddings."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from ctxwindow import Conversation, History, get_embedder
from ctxwindow._tokens import ApproxCounter
from ctxwindow.kit import Coverage, terms
from ctxwindow_semantic import SemanticWindow
from ctxwindow_semantic.index import UnitIndex
from ctxwindow_semantic.lexical import K1, B, BM25Index

WORDS = "hotel flight budget morning city price plan trip data call result museum".split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))


def agent_chat(turns: int, seed: int = 3) -> Iterator[dict[str, Any]]:
    """A user, an assistant and now and then a tool call whose result holds ids."""
    rng = random.Random(seed)
    yield {"role": "system", "content": "You are a travel agent."}
    for turn in range(turns):
        yield {"role": "user", "content": sentence(rng)}
        if turn % 4 == 2:
            call = {"id": f"c{turn}", "type": "function", "function": {"name": "find"}}
            call["function"]["arguments"] = f'{{"q": "{rng.choice(WORDS)}"}}'
            yield {"role": "assistant", "content": None, "tool_calls": [call]}
            ids = " ".join(f"ID{rng.randint(0, 4_000)}" for _ in range(rng.randint(0, 5)))
            yield {"role": "tool", "tool_call_id": f"c{turn}", "content": f"{sentence(rng)} {ids}"}
        yield {"role": "assistant", "content": sentence(rng)}


def test_index_grown_a_unit_a_turn_equals_one_built_at_once(hashing: str) -> None:
    embedder = get_embedder(hashing)
    messages = list(agent_chat(40))
    grown = UnitIndex()
    conversation = Conversation()
    for message in messages:
        conversation.append(message)
        history = conversation.view(ApproxCounter(), 1_000)
        grown.update(history, embedder.embed, len(history.units))
    history = Conversation(messages).view(ApproxCounter(), 1_000)
    whole = UnitIndex()
    whole.update(history, embedder.embed, len(history.units))
    assert np.array_equal(grown.vectors.view, whole.vectors.view)
    query = embedder.embed(["hotel budget"])[0]
    assert np.allclose(grown.similarity(query, 30), whole.vectors.view[:30] @ query, atol=1e-6)
    grown_tokens = grown.figures.unit_tokens(history, 30)
    assert np.array_equal(grown_tokens, whole.figures.unit_tokens(history, 30))
    assert grown_tokens.tolist() == [history.unit_tokens(u) for u in range(30)]
    ids = [len(Coverage(history).of(u)) for u in range(len(history.units))]
    assert grown.figures.identifier_counts(history, len(history.units)).tolist() == ids


def bm25_from_scratch(texts: list[str], query: str) -> list[float]:
    """The textbook formula, over exactly ``texts``."""
    counts = [Counter(terms(text)) for text in texts]
    average = max(sum(sum(c.values()) for c in counts) / len(texts), 1.0)
    out = [0.0] * len(texts)
    for term in set(terms(query)):
        holding = [row for row, c in enumerate(counts) if term in c]
        idf = math.log(1 + (len(texts) - len(holding) + 0.5) / (len(holding) + 0.5))
        for row in holding:
            found, length = counts[row][term], sum(counts[row].values())
            out[row] += idf * found * (K1 + 1) / (found + K1 * (1 - B + B * length / average))
    return out


def test_bm25_grown_in_batches_scores_as_a_from_scratch_computation() -> None:
    rng = random.Random(5)
    texts = [sentence(rng) for _ in range(300)] + ["", "the of and"]  # empty, stopwords only
    rng.shuffle(texts)
    index = BM25Index()
    start = 0
    while start < len(texts):
        step = rng.choice([1, 1, 2, 7, 40])
        index.extend(texts[start : start + step])
        start += step
    extra = [sentence(rng), "museum museum trip"]
    for query in ["hotel budget", "museum trip trip", "nothing matches", "the", sentence(rng)]:
        for size in (0, 1, 150, len(texts)):
            for more in ([], extra):
                got = index.scores(query, size, more)
                want = bm25_from_scratch(texts[:size] + more, query) if size + len(more) else []
                assert got.dtype == np.float32 and len(got) == size + len(more)
                assert np.allclose(got, want, rtol=1e-5, atol=1e-6), (query, size, more)


# -- the strategy -----------------------------------------------------------------------
def window_of(strategy: SemanticWindow, conversation: Any, budget: int, counter: Any) -> Any:
    window = strategy.select(conversation, budget, counter)
    decisions = window.record.decisions
    return window.messages, [d.reason for d in decisions], [d.score for d in decisions]


@pytest.mark.parametrize("options", [{}, {"identifier_weight": 3.0, "recent_share": 0.2}])
def test_a_chat_loop_chooses_as_a_fresh_strategy_does_every_turn(
    hashing: str, options: dict[str, Any]
) -> None:
    looping = SemanticWindow(embedder=hashing, cache="memory", oversize="truncate", **options)
    conversation = Conversation(agent_chat(30))
    for turn in range(12):
        text = "what about the hotel budget and ID7?" * (60 if turn % 4 == 1 else 1)
        conversation.append({"role": "user", "content": text})  # now and then, cut
        budget = (300, 700, 1_200)[turn % 3]
        counter = ApproxCounter(3.0) if turn % 5 == 4 else "approx"  # another: sizes anew
        fresh = SemanticWindow(embedder=hashing, cache="memory", oversize="truncate", **options)
        got = window_of(looping, conversation, budget, counter)
        want = window_of(fresh, list(conversation.originals), budget, counter)
        assert got[0] == want[0] and got[1] == want[1], turn
        assert np.allclose(got[2], want[2], atol=1e-6), turn
        if turn % 3 == 2:
            conversation.extend(agent_chat(2, seed=turn))


def calls_to(monkeypatch: pytest.MonkeyPatch, owner: type, method: str) -> list[int]:
    """The unit (first argument) of every call to ``owner.method`` from now on."""
    calls: list[int] = []
    original = getattr(owner, method)

    def counted(self: Any, unit: int) -> Any:
        calls.append(unit)
        return original(self, unit)

    monkeypatch.setattr(owner, method, counted)
    return calls


def test_a_warm_turn_values_only_the_units_that_can_make_the_window(
    hashing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # excerpts off (with them: test_excerpt_ranking.py)
    strategy = SemanticWindow(embedder=hashing, cache="memory", excerpts=False)
    conversation = Conversation(agent_chat(1_500))
    strategy.select(conversation, 1_000)
    valued = calls_to(monkeypatch, Coverage, "novelty")
    conversation.append({"role": "user", "content": "which hotel had ID12 again?"})
    window = strategy.select(conversation, 1_000)
    assert window.record.engaged and len(window.record.decisions) > 3_000
    # the kit's order values every older unit (3,000); this one those that could be
    # taken, or popped while looking for one that fits the last tokens of room
    assert 0 < len(set(valued)) < 1_000


def test_a_warm_turn_reads_no_older_units_size(
    hashing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    strategy = SemanticWindow(embedder=hashing, cache="memory")
    rng = random.Random(8)
    conversation = Conversation({"role": "user", "content": sentence(rng)} for _ in range(3_000))
    strategy.select(conversation, 1_000)
    read = calls_to(monkeypatch, History, "unit_tokens")
    conversation.append({"role": "user", "content": "the museum trip and its price?"})
    window = strategy.select(conversation, 1_000)
    assert window.record.engaged
    assert len(read) < 300  # the recent tail, the must-keep units: not all 3,000


def test_a_list_edited_near_its_end_chooses_as_a_fresh_strategy_does(
    hashing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each visit's list parts from the last near its end (a reply taken back, a result
    cleared): it is read as a branch, whose index starts from the last conversation's,
    reading only the units the two do not share."""
    rng = random.Random(11)
    looping = SemanticWindow(embedder=hashing, cache="memory")
    history = list(agent_chat(150))
    looping.select(history, 800)
    read: list[int] = []
    extend = BM25Index.extend

    def counted(self: BM25Index, texts: Any) -> None:
        read.append(len(texts))
        extend(self, texts)

    monkeypatch.setattr(BM25Index, "extend", counted)
    for turn in range(15):
        history = history[: -rng.randint(1, 4)] if turn % 3 else list(history)
        if turn % 3 == 1:
            where = max(i for i in range(len(history)) if history[i]["role"] == "tool")
            history[where] = {**history[where], "content": f"[cleared {turn}]"}
        history.extend(agent_chat(1, seed=100 + turn))
        history.append({"role": "user", "content": f"the hotel budget for ID{turn}?"})
        read.clear()
        got = window_of(looping, history, 800, "approx")
        assert 0 < sum(read) <= 40, turn  # from where the lists part, not the history (450)
        fresh = SemanticWindow(embedder=hashing, cache="memory")
        want = window_of(fresh, Conversation(history), 800, "approx")
        assert got[0] == want[0] and got[1] == want[1], turn
        assert np.allclose(got[2], want[2], atol=1e-6), turn


@pytest.mark.parametrize("back", [0, 3, 60, 1_500])
def test_bm25_of_a_branch_and_its_parent_score_as_from_scratch(back: int) -> None:
    rng = random.Random(back)
    texts = [sentence(rng) for _ in range(1_400)]
    parent = BM25Index()
    parent.extend(texts)
    kept = max(0, len(texts) - back)
    child = parent.branch(kept)
    mine, theirs = texts[:kept], list(texts)
    for step in range(6):
        grown = [sentence(rng) for _ in range(step + 1)]
        child.extend(grown)
        mine += grown
        other = [sentence(rng) for _ in range(2)]
        parent.extend(other)
        theirs += other
        for index, every in ((child, mine), (parent, theirs)):
            for query in ["hotel budget", "museum trip trip", sentence(rng)]:
                got = index.scores(query, len(every))
                assert np.allclose(got, bm25_from_scratch(every, query), rtol=1e-5, atol=1e-6)
