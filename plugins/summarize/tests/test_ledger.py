"""What summarize keeps per conversation: a chat loop gets the windows a fresh strategy
gives, a turn reads its new units only, and the state is weak and bounded."""

from __future__ import annotations

import gc
import hashlib
import random
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Conversation, get_counter
from ctxwindow_summarize import SummarizeWindow, ledger
from ctxwindow_summarize.rolling import boundary, checkpoints
from ctxwindow_summarize.strategy import FIRST_LOOKUPS

TOPICS = ["the lease", "a trip to Porto", "the kitchen budget", "Alma's move", "the car"]


def message(index: int) -> dict[str, Any]:
    text = f"About {TOPICS[index % 5]}: point {index}, worth {index * 37} euros."
    out: dict[str, Any] = {"role": ("user", "assistant")[index % 2], "content": text}
    if index % 3:
        out["id"] = f"m{index}"
    if index == 7:
        out["metadata"] = {"pinned": True}
    return out


def chat(size: int) -> list[dict[str, Any]]:
    task = {"role": "user", "content": "Plan the move to Porto for under 9000 euros. " * 6}
    return [{"role": "system", "content": "You are a planner."}, task] + [
        message(index) for index in range(size)
    ]


def outcome(window: ctxwindow.Window[Any], messages: list[Any]) -> Any:
    where = {id(m): i for i, m in enumerate(messages)}
    kept = [where.get(id(m), m) for m in window.messages]
    return kept, [d.to_dict() for d in window.record.decisions], window.record.notes


def fresh(strategy: SummarizeWindow) -> SummarizeWindow:
    """A strategy that has seen no conversation, reading the summaries ``strategy``
    wrote (a rolling summary depends on the summaries before it, by design)."""
    new = SummarizeWindow()
    new.cache = strategy.cache
    return new


def test_a_chat_loop_gets_the_windows_a_fresh_strategy_gives(counted: Any) -> None:
    """Several summaries written along the way, a budget that changes which older units
    must stay (the task statement fits a quarter of 1,200 tokens, not of 300), and
    a view taken before the conversation grew."""
    messages = chat(240)
    strategy = SummarizeWindow()
    conversation = Conversation(messages[:60])
    for size in range(60, len(messages), 9):
        conversation.extend(messages[len(conversation) : size])
        for budget in (300, 1_200):
            window = strategy.select(conversation, budget)
            again = fresh(strategy)
            calls = counted(again)
            other = again.select(Conversation(conversation.originals), budget)
            assert outcome(window, conversation.originals) == outcome(other, conversation.originals)
            assert calls[0] == 0  # it found the same boundary, under the same key
    assert any(d.action == "summarized" for d in window.record.decisions)
    old = Conversation(messages[:100])
    view = old.view(get_counter("approx"), 300)
    old.extend(messages[100:])
    strategy.select(old, 300)  # its ledger now reaches past the view
    chosen = strategy.choose(view)  # type: ignore[attr-defined]
    history = Conversation(messages[:100]).view(get_counter("approx"), 300)
    again = fresh(strategy).choose(history)  # type: ignore[attr-defined]
    assert (chosen.actions, chosen.reasons) == (again.actions, again.reasons)
    assert [m.to_dict() for _, m in chosen.synthetic] == [m.to_dict() for _, m in again.synthetic]


def test_a_turn_reads_its_new_units_and_asks_for_few_summaries(
    monkeypatch: pytest.MonkeyPatch, counted: Any
) -> None:
    strategy = SummarizeWindow()
    calls = counted(strategy)
    conversation = Conversation(chat(1_500))
    strategy.select(conversation, 600)
    read: list[int] = []
    unit_text = ledger.unit_text

    def reading(history: Any, unit: int, **options: Any) -> str:
        read.append(unit)
        return unit_text(history, unit, **options)

    asked: list[int] = []
    get_many = strategy.cache.get_many

    def lookups(summarizer: str, target: int, keys: Any) -> Any:
        asked.append(len(keys))
        return get_many(summarizer, target, keys)

    monkeypatch.setattr(ledger, "unit_text", reading)
    monkeypatch.setattr(strategy.cache, "get_many", lookups)
    quiet = 0
    for index in range(1_500, 1_520):
        conversation.append(message(index))
        read.clear()
        asked.clear()
        before = calls[0]
        window = strategy.select(conversation, 600)
        assert any(d.action == "summarized" for d in window.record.decisions)
        if calls[0] == before:  # no summary written: what the turn itself costs
            quiet += 1
            # no unit's text: the keys asked for are the boundary's and the checkpoints'
            # before it, hashed already (the new units wait until the boundary passes)
            assert read == [], read
            assert len(asked) == 1 and asked[0] <= FIRST_LOOKUPS  # all checkpoints before
    assert quiet >= 10


def test_a_ledger_another_thread_read_past_this_visit_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race the concurrency test met once in CI: a visit chooses a ledger, and
    before it reads, another visit (a longer view of the same conversation) reads that
    ledger past this visit's current turn. The visit then reads a ledger of its own and
    gets the candidates a fresh strategy gets."""
    counter = get_counter("approx")
    messages = chat(200)
    conversation = Conversation(messages[:60])
    first = conversation.view(counter, 300)
    conversation.extend(messages[60:100])
    middle = conversation.view(counter, 300)
    conversation.extend(messages[100:])
    last = conversation.view(counter, 300)
    ledgers = ledger.Ledgers()
    ledgers.candidates(first)  # the ledger both later visits choose
    extend = ledger.Ledger.extend
    overtaken: list[bool] = []

    def overtaking(self: ledger.Ledger, history: Any, must_keep: Any, frontier: int) -> Any:
        if history is middle and not overtaken:
            overtaken.append(True)
            ledgers.candidates(last)  # "another thread", between choosing and reading
        return extend(self, history, must_keep, frontier)

    monkeypatch.setattr(ledger.Ledger, "extend", overtaking)
    raced = ledgers.candidates(middle)
    monkeypatch.setattr(ledger.Ledger, "extend", extend)
    assert overtaken
    alone = ledger.Ledgers().candidates(Conversation(messages[:100]).view(counter, 300))
    assert len(raced) == len(alone)
    assert list(map(raced.unit, range(len(raced)))) == list(map(alone.unit, range(len(alone))))
    assert [raced.key(i) for i in range(len(raced) + 1)] == [
        alone.key(i) for i in range(len(alone) + 1)
    ]
    assert [raced.tokens(i) for i in range(len(raced) + 1)] == [
        alone.tokens(i) for i in range(len(alone) + 1)
    ]
    assert raced.refs(len(raced)) == alone.refs(len(alone))


def test_prefix_keys_are_those_caches_already_hold() -> None:
    """The key of a prefix hashes each unit's text, then the chain of those hashes: the
    same key a cache (a SQLite file, Redis) was written under by earlier versions."""
    history = Conversation(chat(30)).view(get_counter("approx"), 200)
    candidates = ledger.Ledgers().candidates(history)
    running = hashlib.sha256()
    for index in range(len(candidates)):
        text = candidates.text(index).encode("utf-8", "surrogatepass")
        running.update(hashlib.sha256(text).digest())
        assert candidates.key(index + 1) == running.hexdigest()
    assert candidates.key(0) == ""


def test_prefix_keys_hashed_when_asked_are_the_same_in_any_order() -> None:
    """A ledger hashes a prefix's units when its key is first asked for: keys asked
    newest first, or of a branch whose ledger hashed only part of what it shares, are
    those a ledger that hashed everything in order gives."""
    messages = chat(300)
    counter = get_counter("approx")
    whole = ledger.Ledgers().candidates(Conversation(messages).view(counter, 400))
    expected = [whole.key(index) for index in range(len(whole) + 1)]
    backwards = ledger.Ledgers().candidates(Conversation(messages).view(counter, 400))
    assert [backwards.key(i) for i in reversed(range(len(expected)))] == expected[::-1]
    ledgers = ledger.Ledgers()
    trunk = Conversation(messages[:200])
    first = ledgers.candidates(trunk.view(counter, 400))
    first.key(len(first))  # hashed past where the branch parts: from a snapshot
    assert first.ledger.hashed > 150 > ledger.SNAPSHOT_EVERY * 2
    twig = trunk.branch(150)
    twig.extend(messages[150:])
    branched = ledgers.candidates(twig.view(counter, 400))
    assert [branched.key(i) for i in range(len(branched) + 1)] == expected


def test_the_ledgers_are_weak_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    strategy = SummarizeWindow()
    conversations = [Conversation(chat(40)) for _ in range(3)]
    for conversation in conversations:
        strategy.select(conversation, 300)
    assert len(strategy._ledgers) == 3
    for _ in range(ledger.LEDGERS_KEPT + 3):  # a new counter each time
        strategy.select(conversations[0], 300, counter=ctxwindow.ApproxCounter())
    assert len(strategy._ledgers._ledgers[conversations[0]]) == ledger.LEDGERS_KEPT
    monkeypatch.setattr(ledger, "CONVERSATIONS_KEPT", 2)
    strategy.select(Conversation(chat(40)), 300)
    assert len(strategy._ledgers) == 2
    del conversations
    gc.collect()
    assert len(strategy._ledgers) == 0


class Tokens:
    """Stands in for a visit's candidates where only their sizes matter."""

    def __init__(self, sizes: list[int]) -> None:
        self.sums = [0]
        for size in sizes:
            self.sums.append(self.sums[-1] + size)

    def __len__(self) -> int:
        return len(self.sums) - 1

    def tokens(self, index: int) -> int:
        return self.sums[index]

    def first_reaching(self, tokens: int) -> int:
        return next(index for index, total in enumerate(self.sums) if total >= tokens)


def scanned(sizes: list[int], room: int, step: int) -> tuple[int, list[int]]:
    """The boundary and its checkpoints by a pass over every unit, as summarize found
    them before it kept a ledger."""
    before = [0]
    for size in sizes:
        before.append(before[-1] + size)
    total = before[-1]
    if total <= room:
        return 0, []
    marks, next_mark = [], step
    for index in range(1, len(sizes) + 1):
        if before[index] >= next_mark:
            marks.append(index)
            next_mark = (before[index] // step + 1) * step
    chosen = next((c for c in marks if total - before[c] <= room), len(sizes))
    return chosen, [c for c in marks if c < chosen]


def test_the_boundary_and_checkpoints_are_those_a_full_pass_finds() -> None:
    rng = random.Random(3)
    for _ in range(3_000):
        sizes = [rng.choice([0, 1, 5, 13, 40, 400]) for _ in range(rng.randint(0, 40))]
        room, step = rng.randint(0, 300), rng.randint(1, 200)
        candidates: Any = Tokens(sizes)
        start = boundary(candidates, room, step)
        assert (start, list(checkpoints(candidates, start, step))[::-1]) == scanned(
            sizes, room, step
        )


def test_a_summary_s_covers_are_made_once_per_boundary(sent_covers: Any) -> None:
    """A summary covering a prefix sent before (the boundary's, a recent checkpoint's)
    sends the very covers sent then, not a copy made again from the whole history;
    they are what a fresh strategy lists."""
    strategy = SummarizeWindow()
    conversation = Conversation(chat(1_500))
    strategy.select(conversation, 600)
    for index in range(1_500, 1_530):
        conversation.append(message(index))
        covers = sent_covers.of(strategy.select(conversation, 600))
        alone = fresh(strategy).select(Conversation(list(conversation)), 600)
        assert list(covers) == list(sent_covers.read(alone))
    assert sent_covers.reused >= 10


def _units_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The units the ledger reads the text of from now on, in order, as it reads them."""
    read: list[int] = []
    unit_text = ledger.unit_text

    def reading(history: Any, unit: int, **options: Any) -> str:
        read.append(unit)
        return unit_text(history, unit, **options)

    monkeypatch.setattr(ledger, "unit_text", reading)
    return read


def test_a_list_edited_near_its_end_reads_from_the_last_snapshot(
    monkeypatch: pytest.MonkeyPatch, counted: Any
) -> None:
    """Each visit's list parts from the last near its end (a reply taken back, a message
    edited): it is read as a branch, whose ledger starts from the last conversation's
    newest snapshot before the two part, and the windows are a fresh strategy's."""
    rng = random.Random(4)
    messages = chat(900)
    strategy = SummarizeWindow()
    calls = counted(strategy)
    strategy.select(messages, 600)
    read = _units_read(monkeypatch)
    quiet = 0
    for step in range(12):
        messages = messages[: -rng.randint(1, 3)] if step % 2 else list(messages)
        if step % 3 == 0:
            messages[-2] = {**messages[-2], "content": f"edited {step}"}
        messages += [message(900 + step * 3 + i) for i in range(3)]
        read.clear()
        before = calls[0]
        window = strategy.select(messages, 600)
        if calls[0] == before:  # no summary written: what the turn itself costs
            quiet += 1
            assert len(read) <= ledger.SNAPSHOT_EVERY + 8, step  # not the 900 before
        other = fresh(strategy).select(Conversation(messages), 600)
        assert outcome(window, messages) == outcome(other, messages)
    assert quiet >= 6


def test_a_branch_of_a_branch_made_before_its_visit_starts_from_the_grandparents_ledger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A branch branched again (another caller's edit) before its own first visit has
    no ledger: its branch's ledgers start from the grandparent's, as the core's
    per-conversation states do (``Conversation.origins``), not from a read of every
    unit again (900 here), and the window is a fresh strategy's."""
    strategy = SummarizeWindow()
    first = Conversation(chat(900))
    strategy.select(first, 600)
    second = first.branch(-1)
    third = second.branch(-1)  # before the second's first visit
    third.extend([message(900), message(901)])
    read = _units_read(monkeypatch)
    window = strategy.select(third, 600)
    assert len(read) <= ledger.SNAPSHOT_EVERY + 8, f"{len(read)} units read again"
    messages = third.originals
    other = fresh(strategy).select(Conversation(messages), 600)
    assert outcome(window, messages) == outcome(other, messages)
