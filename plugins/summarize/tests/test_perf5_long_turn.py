"""A long agent run after one instruction: every round is the current turn's, and a
warm visit reads (and hashes) only the rounds new since the last, with the windows,
keys and covers of a strategy that read everything afresh."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Conversation, Message, get_counter
from ctxwindow.kit import unit_text
from ctxwindow_summarize import SummarizeWindow, ledger

WORDS = "flight fare seat route gate delay refund hotel night city price window".split()


def tool_round(index: int, rng: random.Random) -> list[dict[str, Any]]:
    """An assistant's tool call and its result (about 60 words)."""
    call = {"id": f"c{index}", "type": "function", "function": {"name": "s", "arguments": "{}"}}
    result = " ".join(rng.choice(WORDS) for _ in range(60))
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{index}", "content": f"{index}: {result}"},
    ]


def agent_run(rounds: int, rng: random.Random) -> Iterator[dict[str, Any]]:
    yield {"role": "system", "content": "You are a travel agent."}
    yield {"role": "user", "content": "TASK: find the cheapest flight to Porto in May."}
    for index in range(rounds):
        yield from tool_round(index, rng)


def warm_reads(monkeypatch: pytest.MonkeyPatch, rounds: int) -> tuple[int, int]:
    """The unit texts read and hashed by a visit one round after one at ``rounds``."""
    rng = random.Random(5)
    conversation = Conversation(list(agent_run(rounds, rng)))
    strategy = SummarizeWindow(summarizer="extractive")
    strategy.select(conversation, 3_000)
    conversation.extend(tool_round(rounds, rng))
    read, hashed = [0], [0]
    text_digest = ledger.text_digest

    def reading(*args: Any, **kwargs: Any) -> str:
        read[0] += 1
        return unit_text(*args, **kwargs)

    def hashing(text: str) -> bytes:
        hashed[0] += 1
        return text_digest(text)

    with monkeypatch.context() as patch:
        patch.setattr(ledger, "unit_text", reading)
        patch.setattr(ledger, "text_digest", hashing)
        window = strategy.select(conversation, 3_000)
    fresh = SummarizeWindow(summarizer="extractive")
    fresh.cache = strategy.cache
    again = fresh.select(Conversation(conversation.originals), 3_000)
    assert list(window.messages) == list(again.messages)
    assert [d.to_dict() for d in window.record.decisions] == [
        d.to_dict() for d in again.record.decisions
    ]
    assert any(d.action == "summarized" for d in window.record.decisions)
    return read[0], hashed[0]


def test_a_warm_visit_in_a_long_turn_reads_what_is_new(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: each visit hashed the text of every unit of the current turn again once
    a summary reached into it (about 1,000 and 3,000 here): 40 of 54 seconds of a
    2,000-round run. Now what it reads is the same at 1,000 rounds as at 3,000."""
    short = warm_reads(monkeypatch, 1_000)
    long = warm_reads(monkeypatch, 3_000)
    assert short == long
    assert max(long) <= 8


def candidates_of(history: Any, must_keep: dict[int, str]) -> ledger.Candidates:
    """A visit's candidates read afresh, with ``must_keep`` for the history's."""
    frontier = ledger.settled_frontier(history)
    fresh = ledger.Ledger(ledger.exact_counter(history))
    settled = fresh.extend(history, must_keep, frontier)
    assert settled is not None
    return ledger.Candidates(history, fresh, settled, must_keep, frontier)


def read(candidates: ledger.Candidates) -> tuple[list[Any], ...]:
    """Everything a visit asks of its candidates, newest key first."""
    every = range(len(candidates) + 1)
    settled = candidates.settled
    return (
        [candidates.key(index) for index in reversed(every)],
        [candidates.tokens(index) for index in every],
        [candidates.refs(index) for index in every],
        [candidates.refs_of(range(settled, stop)) for stop in every[settled + 1 :]],
        [candidates.unit(index) for index in every[:-1]],
    )


def test_what_the_last_visit_read_of_the_turn_is_used_only_where_it_holds() -> None:
    """A unit of the turn that must stay on one visit and not the next (a budget
    change), the turn's last unit growing (a function result joining its call), views
    taken before the turn grew, and a stand-in for one visit: each visit's keys, tokens
    and covers are those of candidates read afresh."""
    rng = random.Random(9)
    messages = list(agent_run(40, rng))
    messages.append({"role": "assistant", "content": None, "function_call": {"name": "f"}})
    conversation = Conversation(messages)
    counter = get_counter("approx")
    before = conversation.view(counter, 900)
    conversation.append({"role": "function", "name": "f", "content": "the fare is 120 euros"})
    history = conversation.view(counter, 900)
    conversation.extend(tool_round(41, rng) + tool_round(42, rng))
    latest = conversation.view(counter, 900)
    cut = conversation.view(counter, 900)
    cut._replace(31, Message.from_dict({"role": "tool", "tool_call_id": "c14", "content": "cut"}))
    frontier = ledger.settled_frontier(history)
    middle = frontier + 21
    assert middle not in history.must_keep and ledger.settled_frontier(cut) == frontier

    def older(view: Any) -> dict[int, str]:  # none of the turn's units must stay
        return {unit: why for unit, why in view.must_keep.items() if unit < frontier}

    visits = [(before, older(before)), (history, older(history)), (history, history.must_keep)]
    visits += [(history, {**history.must_keep, middle: "x"}), (history, history.must_keep)]
    visits += [(latest, older(latest)), (history, older(history)), (before, before.must_keep)]
    visits += [(cut, older(cut)), (latest, older(latest))]
    first = ledger.Ledgers().candidates(history)
    for view, must_keep in visits:
        again = ledger.Candidates(view, first.ledger, first.settled, dict(must_keep), frontier)
        assert read(again) == read(candidates_of(view, dict(must_keep)))


def test_a_stand_in_is_not_kept_for_the_next_visit() -> None:
    """A tool result the host cut for this visit reads otherwise on the next: the
    windows of a run with cuts are those of a strategy that read everything afresh."""
    rng = random.Random(3)
    messages = list(agent_run(30, rng))
    options = {"strategy": "summarize", "budget": 1_500, "summarizer": "extractive"}
    windower = ctxwindow.from_config(options)
    cut = False
    for index in range(30, 60):
        round_ = tool_round(index, rng)
        if index % 7 == 0:
            round_[1]["content"] = " ".join(rng.choice(WORDS) for _ in range(3_000))
        messages += round_
        window = windower.select(messages)
        fresh = ctxwindow.from_config(options)
        fresh.strategy.cache = windower.strategy.cache  # type: ignore[attr-defined]
        again = fresh.select(list(messages))
        assert list(window.messages) == list(again.messages)
        cut = cut or any(m not in messages for m in window.messages if m.get("role") == "tool")
    assert cut  # the host stood in for a tool result
