"""A long agent run after one instruction: every round is the current turn's, and a
warm visit reads (and hashes) only the rounds new since the last, with the windows,
keys and covers of a strategy that read everything afresh."""

from __future__ import annotations

import random
import threading
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


@pytest.mark.parametrize("over", [False, True], ids=["visits-running", "visits-over"])
def test_what_the_last_visit_read_of_the_turn_is_used_only_where_it_holds(over: bool) -> None:
    """A unit of the turn that must stay on one visit and not the next (a budget
    change), the turn's last unit growing (a function result joining its call), views
    taken before the turn grew, and a stand-in for one visit: each visit's keys, tokens
    and covers are those of candidates read afresh; whether the visit before is still
    running (its lists are copied) or over (the next takes them where they all hold)."""
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
    conversation.extend(tool_round(43, rng))
    newest = conversation.view(counter, 900)
    visits += [(latest, older(latest)), (newest, older(newest)), (newest, newest.must_keep)]
    first = ledger.Ledgers().candidates(history)
    last, taken = first, 0
    for view, must_keep in visits:
        if over:
            last.close()
        again = ledger.Candidates(view, first.ledger, first.settled, dict(must_keep), frontier)
        taken += again.tail is last.tail
        assert read(again) == read(candidates_of(view, dict(must_keep)))
        last = again
    assert taken == (2 if over else 0)  # the two visits where the turn only grew


def test_lists_handed_over_still_read_as_they_did_for_a_visit_that_raced_for_them() -> None:
    """The visit after one that is over takes its lists and appends to them; another
    that read the ledger's tail before the taker replaced it copies what that tail
    holds of them, and reads what candidates read afresh do."""
    rng = random.Random(4)
    conversation = Conversation(list(agent_run(40, rng)))
    counter = get_counter("approx")
    history = conversation.view(counter, 900)
    first = ledger.Ledgers().candidates(history)
    read(first)
    first.close()
    handed = first.ledger.tail
    conversation.extend(tool_round(40, rng) + tool_round(41, rng))
    latest = conversation.view(counter, 900)
    frontier = ledger.settled_frontier(latest)
    must_keep = dict(latest.must_keep)
    taker = ledger.Candidates(latest, first.ledger, first.settled, must_keep, frontier)
    assert taker.tail is first.tail and taker.tail_refs is first.tail_refs
    expected = read(candidates_of(latest, must_keep))
    assert read(taker) == expected  # it appended its units, keys and messages
    first.ledger.tail = handed
    racer = ledger.Candidates(latest, first.ledger, first.settled, must_keep, frontier)
    assert racer.tail is not taker.tail and racer.keys is not taker.keys
    assert read(racer) == expected
    assert read(taker) == expected  # and the racer's reading changed nothing of the taker's


def test_covers_of_a_run_whose_units_read_otherwise_now_are_made_again() -> None:
    """A run's covers go on to the next visit only while its units read the same: with
    a unit of the turn that must stay now (a budget change), which no summary may
    stand for, the run of as many candidates names other messages."""
    rng = random.Random(9)
    conversation = Conversation(list(agent_run(40, rng)))
    history = conversation.view(get_counter("approx"), 900)
    frontier = ledger.settled_frontier(history)
    must_keep = {**history.must_keep, frontier + 21: "x"}
    changed = ledger.Ledgers().candidates(history).before(frontier + 21)
    for stop in (changed - 1, changed, changed + 1, changed + 9):
        first = ledger.Ledgers().candidates(history)
        before = first.refs_of(range(stop))
        first.close()
        again = ledger.Candidates(history, first.ledger, first.settled, must_keep, frontier)
        expected = candidates_of(history, must_keep).refs_of(range(stop))
        assert (expected == before) is (stop <= changed)
        assert again.refs_of(range(stop)) == expected


def test_one_visit_takes_the_lists_of_the_one_before_once_that_is_over() -> None:
    """Not while the visit that read them may append more, and to one visit only."""
    conversation = Conversation(list(agent_run(20, random.Random(2))))
    candidates = ledger.Ledgers().candidates(conversation.view(get_counter("approx"), 900))
    read(candidates)
    tail = candidates.ledger.tail
    assert tail is not None and tail.count == len(candidates.tail)
    assert not tail.lease.hand_over(tail, tail.count)  # its visit is running
    candidates.close()
    assert not tail.lease.hand_over(tail, tail.count - 1)  # not all of them hold
    assert tail.lease.hand_over(tail, tail.count)
    assert not tail.lease.hand_over(tail, tail.count)  # taken


def test_a_long_turn_s_summary_hands_over_the_same_covers_while_they_hold(
    sent_covers: Any,
) -> None:
    """A summary of the turn's older rounds stands for the same rounds for a few visits
    (until the next checkpoint): each of those visits sends the very tuple the first
    sent, which the checker and the summary's message then need not make again; it
    lists what a strategy reading afresh lists."""
    rng = random.Random(6)
    conversation = Conversation(list(agent_run(300, rng)))
    strategy = SummarizeWindow(summarizer="extractive")
    strategy.select(conversation, 3_000)
    for index in range(300, 330):
        conversation.extend(tool_round(index, rng))
        covers = sent_covers.of(strategy.select(conversation, 3_000))
        fresh = SummarizeWindow(summarizer="extractive")
        fresh.cache = strategy.cache
        alone = fresh.select(Conversation(conversation.originals), 3_000)
        assert list(covers) == list(sent_covers.read(alone))
    assert sent_covers.reused >= 15
    # bounded: each carried tuple is nearly as long as the turn
    (kept,) = strategy._ledgers._ledgers[conversation]
    assert kept.tail is not None and len(kept.tail.covers) <= ledger.TAIL_COVERS_KEPT


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


def test_visits_from_threads_while_the_turn_grows_read_what_a_fresh_read_gives() -> None:
    """Threads visit one conversation's ledgers while another appends rounds: whichever
    visit takes the lists of the one before, copies them or reads afresh, each reads
    the keys, tokens and covers candidates read afresh give for its view."""
    rng = random.Random(8)
    conversation = Conversation(list(agent_run(30, rng)))
    rounds = [tool_round(index, rng) for index in range(30, 90)]
    counter = get_counter("approx")
    ledgers = ledger.Ledgers()
    start = threading.Barrier(5)
    failures: list[BaseException] = []
    seen: list[tuple[Any, dict[int, str], tuple[list[Any], ...]]] = []

    def visiting() -> None:
        start.wait(30)
        for _ in range(30):
            view = conversation.view(counter, 900)
            candidates = ledgers.candidates(view)
            try:
                seen.append((view, dict(view.must_keep), read(candidates)))
            finally:
                candidates.close()

    def writing() -> None:
        start.wait(30)
        for round_ in rounds:
            conversation.extend(round_)

    def guarded(work: Any) -> Any:
        def run() -> None:
            try:
                work()
            except BaseException as error:  # the test fails on it below
                failures.append(error)

        return run

    threads = [threading.Thread(target=guarded(visiting), daemon=True) for _ in range(4)]
    threads.append(threading.Thread(target=guarded(writing), daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive(), "a visit did not finish: deadlock"
    assert not failures, failures[0]
    assert len(seen) == 120
    for view, must_keep, got in seen:
        assert got == read(candidates_of(view, must_keep))
