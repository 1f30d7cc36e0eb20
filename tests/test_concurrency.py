"""One strategy instance, its caches included, used from many threads and asyncio tasks.

For each strategy (fixed, sliding, semantic with its embedding cache in SQLite,
summarize with its summary cache, recency-decay) the same 200 visits (varied histories,
budgets and queries) run three ways on one instance: in order, from 8 threads at once,
and as 200 asyncio tasks gathered at once. Every window, record decision and note must
be the same each way. A strategy that caches what it computed (semantic's vectors,
summarize's summaries) is compared once its cache holds what the visits need; before
that, a summary legitimately depends on which earlier summaries the cache already had,
so the cold concurrent run is checked for lost writes instead: afterwards, nothing has
to be computed again, and a new instance on the same SQLite file finds it all too.

Threads here are daemons and every wait has a timeout: a deadlock fails the test (it
cannot hang the run, nor the interpreter's exit). No assertion is about speed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import queue
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import Conversation, Windower
from ctxwindow.testing import assistant, calls, result, user
from ctxwindow_summarize import ExtractiveSummarizer

WORKERS = 8
CALLS = 200
GUARD = 300.0  # seconds before a run counts as deadlocked; never reached when healthy
TOPICS = [
    "the Lisbon trip in May",
    "invoice INV-2291 and its refund",
    "Grandma's 80th birthday on 14 June",
    "the flaky CI job on the payments service",
    "a vegetarian menu for twelve guests",
    "the apartment lease renewal",
]
QUERIES = [None, "When is the birthday?", "What happened with the refund?", "menu ideas"]
BUDGETS = [40, 90, 160, 300, 700, 5000]


def base_conversation(seed: int = 7) -> list[dict[str, Any]]:
    """System prompt, a pinned note, 40 turns on six topics, parallel tool calls."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful planning assistant."},
        user("Remember: I am allergic to peanuts.", metadata={"pinned": True}),
        assistant("Noted: no peanuts."),
    ]
    for turn in range(40):
        topic = rng.choice(TOPICS)
        words = " ".join(rng.choice(["really", "maybe", "also", "then", "soon"]) for _ in range(8))
        out.append(user(f"Turn {turn}: about {topic}, {words}?" + " details" * rng.randint(0, 30)))
        if turn % 7 == 3:
            first, second = f"t{turn}a", f"t{turn}b"
            out.append(calls(first, second))
            out.append(result(second, f"lookup {second}: {topic}"))
            out.append(result(first, f"lookup {first}: {topic}"))
        out.append(assistant(f"On {topic}: noted for turn {turn}. {words}."))
    return out


def cases() -> list[tuple[int, int, str | None]]:
    """(prefix length, budget, query): prefixes end on a user message, so none is
    defective; 200 of them, fixed by a seed."""
    history = base_conversation()
    ends = [i + 1 for i, m in enumerate(history) if m["role"] == "user" and i > 5]
    rng = random.Random(11)
    return [(rng.choice(ends), rng.choice(BUDGETS), rng.choice(QUERIES)) for _ in range(CALLS)]


class _Score(float):
    """A score equal to another within float32 noise (see :func:`outcome`)."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, float):
            return NotImplemented
        return math.isclose(self, other, rel_tol=1e-5, abs_tol=1e-6)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = float.__hash__


def _rounded(decision: dict[str, Any]) -> dict[str, Any]:
    score = decision.get("score")
    return {**decision, "score": None if score is None else _Score(score)}


def outcome(window_or_error: Any, messages: Sequence[Any]) -> Any:
    """What must be equal between runs: the window by position (a made message by its
    content), the decisions and notes; an error by type and text. Scores equal within float32 noise:
    a text embedded in another batch (two threads missing the cache at once) gets
    vectors that differ in the last bits of a float32, and a remembered history keeps
    the vectors of the visit that indexed it."""
    if isinstance(window_or_error, BaseException):
        return ("error", type(window_or_error).__name__, str(window_or_error))
    where = {id(m): i for i, m in enumerate(messages)}
    record = window_or_error.record
    return (
        [where.get(id(m), m if isinstance(m, dict) else repr(m)) for m in window_or_error],
        [_rounded(d.to_dict()) for d in record.decisions],
        record.notes,
        record.tokens_after,
        record.engaged,
    )


def visit(windower: Windower, case: tuple[int, int, str | None], history: list[Any]) -> Any:
    size, budget, query = case
    messages = history[:size]
    try:
        return outcome(windower.select(messages, budget=budget, query=query), messages)
    except ctxwindow.CtxWindowError as error:
        return outcome(error, messages)


async def avisit(windower: Windower, case: tuple[int, int, str | None], history: list[Any]) -> Any:
    size, budget, query = case
    messages = history[:size]
    try:
        window = await windower.aselect(messages, budget=budget, query=query)
    except ctxwindow.CtxWindowError as error:
        return outcome(error, messages)
    return outcome(window, messages)


def in_threads(calls: Sequence[Callable[[], Any]], workers: int = WORKERS) -> list[Any]:
    """Run ``calls`` on ``workers`` daemon threads at once; results in the calls' order.
    A worker that does not finish within GUARD fails the test."""
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for index in range(len(calls)):
        todo.put(index)
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []
    start = threading.Barrier(workers)

    def work() -> None:
        start.wait()  # all at once, to make the overlap as large as possible
        while True:
            try:
                index = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[index] = calls[index]()
            except BaseException as error:
                errors.append(error)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GUARD)
        if thread.is_alive():
            pytest.fail(f"a worker did not finish within {GUARD} s: deadlock")
    if errors:
        raise errors[0]
    return results


def in_tasks(windower: Windower, all_cases: Sequence[Any], history: list[Any]) -> list[Any]:
    async def gathered() -> list[Any]:
        return await asyncio.wait_for(
            asyncio.gather(*(avisit(windower, case, history) for case in all_cases)), GUARD
        )

    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(gathered())
        except BaseException as error:
            box["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD + 10)
    if thread.is_alive():
        pytest.fail("the gathered tasks did not finish: deadlock")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


class CountingSummarizer(ExtractiveSummarizer):
    """The real extractive summarizer, counting its calls (registered as a plugin)."""

    name = "counting-extractive"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self._lock = threading.Lock()

    def summarize(self, request: Any) -> Any:
        with self._lock:
            self.calls += 1
        return super().summarize(request)


COUNTING = CountingSummarizer()


class _SummarizerPlugin:
    @ctxwindow.hookimpl
    def register_summarizers(self, register: Any) -> None:
        register("counting-extractive", lambda argument: COUNTING)


@pytest.fixture(scope="module")
def counting_summarizer() -> Iterator[CountingSummarizer]:
    ctxwindow.register_plugin(_SummarizerPlugin(), "counting", distribution="tests")
    try:
        yield COUNTING
    finally:
        ctxwindow.unregister_plugin("counting")


def windower(name: str, tmp: Path, **options: Any) -> Windower:
    if name == "semantic":
        options["cache"] = str(tmp / "embeddings.sqlite3")
    if name == "summarize":
        options["summarizer"] = "counting-extractive"
        options["cache"] = str(tmp / "summaries.sqlite3")
    return ctxwindow.from_config({"strategy": name, "budget": 100, **options})


STATELESS = ["fixed", "sliding", "recency-decay"]
#: Each above what the system, pinned and newest user messages need (under 90 tokens).
READER_BUDGETS = (120, 150, 250, 400, 900, 2000, 600)
#: semantic runs a real model: 60 of the visits by default, all 200 under `-m slow`.
CACHING = [
    pytest.param("summarize", CALLS, id="summarize"),
    pytest.param("semantic", 60, id="semantic"),
    pytest.param("semantic", CALLS, id="semantic-all", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("name", STATELESS)
def test_threads_and_tasks_give_the_sequential_windows(name: str, tmp_path: Path) -> None:
    history = base_conversation()
    all_cases = cases()
    shared = windower(name, tmp_path)
    expected = [visit(shared, case, history) for case in all_cases]
    threaded = in_threads([functools.partial(visit, shared, case, history) for case in all_cases])
    tasked = in_tasks(shared, all_cases, history)
    assert sum(1 for e in expected if e[0] != "error") >= CALLS // 2, "mostly real windows"
    assert threaded == expected
    assert tasked == expected


@pytest.mark.usefixtures("counting_summarizer")
@pytest.mark.parametrize(("name", "calls"), CACHING)
def test_caching_strategies_lose_no_writes_and_agree_once_warm(
    name: str, calls: int, tmp_path: Path
) -> None:
    history = base_conversation()
    all_cases = cases()[:calls]
    shared = windower(name, tmp_path)

    def work_done() -> int:
        if name == "semantic":
            return int(shared.strategy.cache.embedded)  # type: ignore[attr-defined]
        return COUNTING.calls

    # cold: 8 threads fill the caches at once
    before = work_done()
    cold = in_threads([functools.partial(visit, shared, case, history) for case in all_cases])
    assert work_done() > before, "the cold run did compute"
    assert all(c[0] != "error" or c[1] == "BudgetTooSmall" for c in cold), cold

    # nothing written concurrently was lost: in order, the same visits compute nothing
    settled = work_done()
    expected = [visit(shared, case, history) for case in all_cases]
    assert work_done() == settled, "a value computed in the concurrent run was not cached"
    # ... and the SQLite file has it all: a new instance computes nothing either
    fresh = windower(name, tmp_path)
    if name == "semantic":
        assert [visit(fresh, case, history) for case in all_cases] == expected
        assert fresh.strategy.cache.embedded == 0  # type: ignore[attr-defined]
    else:
        # a summarizer failure is remembered by the instance (not retried at that
        # boundary) but never stored: the new instance tries those again, only those
        failed = [
            case
            for case, found in zip(all_cases, expected, strict=True)
            if "failed" in repr(found[2])
        ]
        assert forget_retries([visit(fresh, case, history) for case in all_cases]) == (
            forget_retries(expected)
        )
        assert COUNTING.calls - settled <= len(failed)
        settled = COUNTING.calls

    # warm: threads and tasks agree with the in-order visits exactly
    threaded = in_threads([functools.partial(visit, shared, case, history) for case in all_cases])
    tasked = in_tasks(shared, all_cases, history)
    assert threaded == expected
    assert tasked == expected
    assert work_done() == settled
    if name == "semantic":
        # the cold run's windows and decisions are those of the stored vectors (none
        # torn or mixed up); scores may differ in the 7th digit, as a model's vectors do
        # with the batch a text was embedded in, in order too
        cold_bare, cold_scores = without_scores(cold)
        bare, scores = without_scores(expected)
        assert cold_bare == bare
        assert cold_scores == pytest.approx(scores, abs=1e-5)


def forget_retries(outcomes: list[Any]) -> Any:
    """Outcomes without the instance's note that it did not retry a failed summarizer."""
    return json.loads(json.dumps(outcomes).replace(" (not retried at this boundary)", ""))


def without_scores(outcomes: list[Any]) -> tuple[list[Any], list[float]]:
    """Outcomes with their scores taken out, and the scores in order."""
    bare, scores = [], []
    for found in outcomes:
        if found[0] == "error":
            bare.append(found)
            continue
        decisions = []
        for decision in found[1]:
            scores.append(-1.0 if decision["score"] is None else decision["score"])
            decisions.append({**decision, "score": None})
        bare.append((found[0], decisions, *found[2:]))
    return bare, scores


@pytest.mark.parametrize("name", ["fixed", "sliding", "semantic"])
def test_a_conversation_appended_by_one_thread_while_others_window_it(
    name: str, tmp_path: Path
) -> None:
    """Readers window the shared Conversation while a writer appends to it; each window
    is the one the same prefix gives afterwards, in order."""
    history = base_conversation()
    # a call whose results are not appended yet is dropped, not an error
    shared = windower(name, tmp_path, orphans="drop")
    conversation = Conversation(history[:6])
    rest = history[6:]
    seen: list[tuple[int, int, Any]] = []
    lock = threading.Lock()
    writing = threading.Event()

    def writer() -> None:
        writing.set()
        for message in rest:
            conversation.append(message)

    def reader(budget: int) -> Callable[[], None]:
        def read() -> None:
            writing.wait(GUARD)
            for _ in range(25):
                window = shared.select(conversation, budget=budget)
                size = window.record.messages_before
                with lock:
                    seen.append((size, budget, outcome(window, conversation.originals)))

        return read

    in_threads([writer, *(reader(b) for b in READER_BUDGETS)])
    assert len(seen) == 7 * 25
    assert len(conversation) == len(history)
    for size, budget, got in seen:
        messages = history[:size]
        again = outcome(shared.select(messages, budget=budget), messages)
        assert got == again, (size, budget)


# -- state a strategy keeps per conversation ----------------------------------------------
SEMANTIC_LEXICAL_BUG = (
    "semantic's BM25 (ctxwindow_semantic/lexical.py) takes its average length, document "
    "count and postings over every unit indexed for the conversation so far, not the "
    "first `size` units of the view it scores"
)
SLIDING_TAIL_BUG = (
    "sliding's KeywordScorer.score reads units from min(len(index), size) on afresh, so a "
    "newest message an earlier visit indexed whole is scored whole when this visit cut it"
)


@pytest.mark.parametrize(
    "name",
    [
        "sliding",
        "semantic",
    ],
)
def test_a_cut_newest_message_is_scored_as_cut_whatever_came_before(
    name: str, tmp_path: Path
) -> None:
    """The same Conversation windowed with a budget that keeps its newest message whole,
    then with one that cuts it: the second window is the one a new list gives."""
    history = base_conversation()
    shared = windower(name, tmp_path, oversize="truncate")
    conversation = Conversation(history)
    assert shared.select(conversation, budget=1000).record.engaged
    again = outcome(shared.select(conversation, budget=60), conversation.originals)
    assert any("truncated message" in note for note in again[2])
    assert again == outcome(shared.select(history, budget=60), history)


@pytest.mark.parametrize(
    "name",
    [
        "sliding",
        "semantic",
    ],
)
def test_a_view_is_scored_on_its_own_messages_after_the_conversation_grew(
    name: str, tmp_path: Path
) -> None:
    """A view taken before another thread appended (and windowed the longer
    conversation) is scored exactly as a view of a new conversation of those messages."""
    history = base_conversation()
    strategy = windower(name, tmp_path).strategy
    counter = ctxwindow.get_counter("approx")
    conversation = Conversation(history[:50])
    old = conversation.view(counter, 150)
    conversation.extend(history[50:])
    strategy.select(conversation, 150)  # the conversation's index now holds more units
    chosen = strategy.choose(old)  # type: ignore[attr-defined]
    fresh = strategy.choose(Conversation(history[:50]).view(counter, 150))  # type: ignore[attr-defined]
    assert chosen.actions == fresh.actions
    assert chosen.scores == fresh.scores
