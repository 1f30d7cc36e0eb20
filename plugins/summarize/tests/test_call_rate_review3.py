"""How often the summarizer is called (every call an LLM's, a user's money), counted with
registered fake summarizers: a growing agent turn calls once per stretch it summarizes,
not per round, even with a dead LLM; the boundary does not step back within a turn; a
fallback's summary never takes the place of the LLM's (a late or a replica's reply is
used); a few percent of jitter in the budget or the system prompt moves no checkpoint;
every request keeps within the summarizer's input limit; and the record says which model
spent what, and when a summary was cut to fit."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ctxwindow
from ctxwindow import Conversation, LLMUsage, SummaryRequest, SummaryResult
from ctxwindow_summarize import SummarizerFailed

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()


class Fake:
    """A registered LLM-like summarizer: writes about ``fill`` of its target (``reply``
    may say otherwise) and remembers each request."""

    requires_llm = True

    def __init__(
        self,
        name: str,
        model: str = "fake-model",
        reply: Callable[[SummaryRequest], SummaryResult] | None = None,
        max_input_tokens: int = 100_000,
    ) -> None:
        self.name, self.provider, self.model = name, "fake", model
        self.max_input_tokens = max_input_tokens
        self.reply = reply
        self.requests: list[SummaryRequest] = []

    @property
    def calls(self) -> int:
        return len(self.requests)

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        if self.reply is not None:
            return self.reply(request)
        ids = " ".join(
            word for text in request.texts for word in text.split() if word[:3] in {"ORD", "HAT"}
        )
        text = f"Covers {len(request.texts)} messages. Facts: {ids} " + "detail " * 2_000
        words = text.split()
        while request.counter.count_text(" ".join(words)) > request.target_tokens * 0.9:
            words = words[: len(words) * 9 // 10]
        usage = LLMUsage(self.provider, self.model, 1, 100, 20)
        return SummaryResult(" ".join(words) + ".", usage)

    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize(request)


def chat_turn(index: int, rng: random.Random) -> list[dict[str, Any]]:
    said = " ".join(rng.choice(WORDS) for _ in range(12))
    return [
        {"role": "user", "content": f"Turn {index}: note order ORD{index:05d} {said}?"},
        {"role": "assistant", "content": f"Noted ORD{index:05d}. {said} {said}."},
    ]


def tool_round(index: int, padding: int = 8) -> list[dict[str, Any]]:
    call = {
        "id": f"call{index}",
        "type": "function",
        "function": {"name": "search_flights", "arguments": json.dumps({"page": index})},
    }
    result = {"flights": [{"flight": f"HAT{index:03d}", "price": 300 + index}]}
    result["notes"] = "lorem ipsum " * padding  # type: ignore[assignment]
    return [
        {"role": "assistant", "content": None, "tool_calls": [call], "id": f"c{index}"},
        {"role": "tool", "tool_call_id": f"call{index}", "content": json.dumps(result)},
    ]


def summaries(window: Any) -> list[dict[str, Any]]:
    return [m for m in window.messages if (m.get("metadata") or {}).get("synthetic")]


def growing_turn(
    summarizer: str, rounds: int = 26, budget: int = 1500, **options: Any
) -> Iterator[tuple[int, Any]]:
    """An agent's turn after a 10-turn chat growing round by round into the summary's
    room (the reviews' r4): each round's window."""
    rng = random.Random(7)
    conversation = Conversation([{"role": "system", "content": "You are an airline agent."}])
    for index in range(10):
        conversation.extend(chat_turn(index, rng))
    conversation.append({"role": "user", "content": "TASK: find flights for ZFA04Y."})
    windower = ctxwindow.from_config(
        {"strategy": "summarize", "budget": budget, "summarizer": summarizer, **options}
    )
    for index in range(rounds):
        yield index, windower.select(conversation)
        conversation.extend(tool_round(index))


def test_a_growing_turn_summarizes_each_stretch_once(registered: Any) -> None:
    """Before: once the turn took more than (1 - summary_share) of the budget, the
    target shrank each round and was part of the cache key: a call per round for the
    same 19 messages (rounds 20-25)."""
    llm = registered(Fake("review3-llm"))
    called: dict[tuple[str, ...], int] = {}
    cut = False
    seen = 0
    for _, window in growing_turn("review3-llm"):
        assert window.tokens <= 1500
        cut = cut or any("cut down extractively" in note for note in window.record.notes)
        if llm.calls > seen:
            covers = tuple(summaries(window)[0]["metadata"]["covers"])
            called[covers] = called.get(covers, 0) + llm.calls - seen
        seen = llm.calls
    assert all(calls == 1 for calls in called.values()), called
    assert llm.calls <= 4, llm.calls
    assert cut  # the held summary was cut to the room the turn left, and the record says so


def test_a_dead_llm_costs_one_attempt_per_stretch_in_a_growing_turn(registered: Any) -> None:
    """Before: a timeout on every round (the failure memo was keyed by the size)."""

    def dead(request: SummaryRequest) -> SummaryResult:
        raise TimeoutError("read timed out")

    llm = registered(Fake("review3-dead", reply=dead))
    attempts: dict[tuple[str, ...], int] = {}
    seen = 0
    for _, window in growing_turn("review3-dead"):
        assert window.tokens <= 1500
        if llm.calls > seen:
            covers = tuple(summaries(window)[0]["metadata"]["covers"])
            attempts[covers] = attempts.get(covers, 0) + llm.calls - seen
        seen = llm.calls
    assert all(count == 1 for count in attempts.values()), attempts
    assert llm.calls <= 4, llm.calls


def test_the_boundary_does_not_step_back_within_a_turn(registered: Any) -> None:
    """Before (the reviews' r1): the step halved as the turn grew, and the first
    checkpoint on the finer grid sat before the one held: round 6 of turn 4 called the
    LLM for a summary covering less, used once, and round 7 went back."""
    llm = registered(Fake("review3-r1"))
    conversation = Conversation(
        [
            {"role": "system", "content": "You are an airline agent.", "id": "sys"},
            {
                "role": "user",
                "content": "TASK: rebook passenger Jane Roe, reservation ZFA04Y.",
                "id": "task",
            },
        ]
    )
    windower = ctxwindow.from_config(
        {"strategy": "summarize", "budget": 2000, "summarizer": "review3-r1"}
    )
    order: dict[str, int] = {}
    count = 0
    for step in range(5):
        said = f"Next step {step}: check reservation R{step:04d} please."
        conversation.append({"role": "user", "content": said, "id": f"u{step}"})
        reached = -1
        for round_ in range(8):
            count += 1
            window = windower.select(conversation)
            for message in conversation.originals:
                order.setdefault(message["id"], len(order))
            sent = summaries(window)
            last = order[sent[0]["metadata"]["covers"][-1]] if sent else -1
            assert last >= reached, (step, round_, last, reached)
            reached = last
            arguments = json.dumps({"reservation_id": f"R{step:04d}", "round": round_})
            call = {"id": f"call{count}", "type": "function"}
            call["function"] = {"name": "get_reservation_details", "arguments": arguments}  # type: ignore[assignment]
            result = {
                "reservation_id": f"R{step:04d}",
                "flights": [{"flight": f"HAT{count:03d}", "price": 100 + round_}],
                "notes": "lorem ipsum " * 10,
            }
            conversation.append(
                {"role": "assistant", "content": None, "id": f"c{count}", "tool_calls": [call]}
            )
            conversation.append(
                {
                    "role": "tool",
                    "tool_call_id": f"call{count}",
                    "id": f"r{count}",
                    "content": json.dumps(result),
                }
            )
        conversation.append(
            {"role": "assistant", "content": f"Done step {step}.", "id": f"d{step}"}
        )
    assert llm.calls <= 2, llm.calls


def chat(turns: int) -> list[dict[str, Any]]:
    rng = random.Random(5)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for index in range(turns):
        messages.extend(chat_turn(index, rng))
    return messages


def test_a_fallbacks_summary_never_replaces_the_llms_in_a_shared_cache(
    registered: Any, tmp_path: Path
) -> None:
    """Before (the reviews' r2, r3): the fallback's summary was stored under the LLM's
    key, and the first value written wins: one LLM error made the extractive summary the
    one every replica and later process served, and a late (or a replica's) LLM summary
    was thrown away."""
    failing = True

    def flaky(request: SummaryRequest) -> SummaryResult:
        if failing:
            raise SummarizerFailed("review3-flaky", "HTTP 500")
        return SummaryResult("The orders ORD00001 and ORD00002 were noted.")

    llm = registered(Fake("review3-flaky", reply=flaky))
    where = str(tmp_path / "summaries.sqlite3")
    messages = chat(40)
    options = {"strategy": "summarize", "budget": 800, "summarizer": "review3-flaky"}
    first = ctxwindow.from_config({**options, "cache": where})
    window = first.select(messages)
    assert summaries(window)[0]["metadata"]["summarizer"] == "extractive"
    assert llm.calls == 1
    first.select(messages)  # not retried at this boundary by this process
    assert llm.calls == 1
    failing = False
    replica = ctxwindow.from_config({**options, "cache": where})
    window = replica.select(messages)  # a replica (or a later process) asks the LLM again
    assert llm.calls == 2
    assert summaries(window)[0]["metadata"]["summarizer"] == "review3-flaky"
    window = first.select(messages)  # and the first process now sends the LLM's summary
    assert llm.calls == 2
    assert summaries(window)[0]["metadata"]["summarizer"] == "review3-flaky"


def loop_calls(
    summarizer: Fake, budgets: Callable[[int], int], system: Callable[[int], str]
) -> int:
    """A 120-turn chat loop, the budget and system prompt of each turn given: the calls."""
    windower = ctxwindow.from_config(
        {"strategy": "summarize", "budget": 2000, "summarizer": summarizer.name}
    )
    rng = random.Random(7)
    history: list[dict[str, Any]] = []
    before = summarizer.calls
    for index in range(120):
        user, assistant = chat_turn(index, rng)
        history.append(user)
        messages = [{"role": "system", "content": system(index)}, *history]
        windower.select(messages, budget=budgets(index))
        history.append(assistant)
    return summarizer.calls - before


def test_a_few_percent_of_budget_jitter_moves_no_checkpoint(registered: Any) -> None:
    """Before (the reviews' r9): budget 2000 less up to 20 tokens, 44 calls against 7."""
    llm = registered(Fake("review3-jitter"))
    rng = random.Random(3)
    steady = loop_calls(llm, lambda index: 2000, lambda index: "You are helpful.")
    jittery = loop_calls(
        llm, lambda index: 2000 - rng.randint(0, 20), lambda index: "You are helpful."
    )
    assert jittery <= steady + 2, (jittery, steady)


def test_a_system_prompt_varying_a_little_moves_no_checkpoint(registered: Any) -> None:
    """Before (the reviews' r7, milder): a system prompt of 60 to 70 words, 19 calls
    against 7 for a fixed one."""
    llm = registered(Fake("review3-system"))
    rng = random.Random(1)

    def prompt(words: int) -> str:
        return "You are a shop assistant. Context: " + " ".join(
            WORDS[index % len(WORDS)] for index in range(words)
        )

    steady = loop_calls(llm, lambda index: 2000, lambda index: prompt(65))
    varying = loop_calls(llm, lambda index: 2000, lambda index: prompt(rng.randint(60, 70)))
    assert varying <= steady + 2, (varying, steady)


class Framed(Fake):
    """A summarizer whose own instructions take ``prompt_overhead`` tokens per request."""

    prompt_overhead = 120


def test_no_request_exceeds_the_input_limit_framing_and_one_huge_text_included(
    registered: Any,
) -> None:
    """Before (the reviews' r6, r8): the framing was not counted, and a single text over
    the limit (a file an agent read) was sent whole: 22,000 tokens for a 2,000 limit."""
    llm = registered(Framed("review3-framed", max_input_tokens=600))
    counter = ctxwindow.get_counter("approx")
    listing = "\n".join(f"line {i}: x_{i} = compute({i}, 'value {i}')" for i in range(1500))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug in app.py"},
        {"role": "assistant", "content": f"Here is app.py:\n{listing}"},
        *chat(30)[1:],
    ]
    window = ctxwindow.select(messages, budget=1500, strategy="summarize", summarizer=llm.name)
    assert summaries(window)[0]["metadata"]["summarizer"] == llm.name
    assert llm.calls >= 2  # summarized in stages
    for request in llm.requests:
        sent = counter.count_text(request.previous or "") + sum(
            counter.count_text(text) + 1 for text in request.texts
        )
        assert sent + Framed.prompt_overhead <= 600, sent
    assert any("tokens cut here" in text for request in llm.requests for text in request.texts)


class Counted(Fake):
    """A summarizer that counts its framing (480 characters of instructions) with the
    counter it is asked with."""

    prompt_overhead = 0
    asked = 0

    def count_overhead(self, counter: Any) -> int:
        Counted.asked += 1
        return int(counter.count_text("x" * 480))


class Doubled(ctxwindow.ApproxCounter):
    """approx's counts of a text, twice over (a tokenizer with short tokens)."""

    def count_text(self, text: str) -> int:
        return 2 * super().count_text(text)


def test_a_summarizers_framing_is_counted_with_the_windows_counter(registered: Any) -> None:
    """``count_overhead(counter)`` is asked with the visit's counter, and what it says
    is kept free under the summarizer's limit: 240 tokens here (120 under approx)."""
    llm = registered(Counted("review3-counted", max_input_tokens=600))
    counter = Doubled()
    listing = "\n".join(f"line {i}: x_{i} = compute({i}, 'value {i}')" for i in range(1500))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug in app.py"},
        {"role": "assistant", "content": f"Here is app.py:\n{listing}"},
        *chat(30)[1:],
    ]
    Counted.asked = 0
    window = ctxwindow.select(
        messages, budget=3000, strategy="summarize", summarizer=llm.name, counter=counter
    )
    assert summaries(window) and Counted.asked
    assert llm.requests
    for request in llm.requests:
        sent = counter.count_text(request.previous or "") + sum(
            counter.count_text(text) + 1 for text in request.texts
        )
        assert sent + counter.count_text("x" * 480) <= 600, sent


def test_two_models_spend_is_not_put_under_one(registered: Any) -> None:
    """Before (the reviews' r11): the primary's refused call was billed to the backup
    model: model='backup', calls=2."""

    def refuses(request: SummaryRequest) -> SummaryResult:
        return SummaryResult(
            "I'm sorry, but I can't help with that.", LLMUsage("fake", "primary", 1, 111, 11)
        )

    registered(Fake("review3-primary", model="primary", reply=refuses))
    registered(Fake("review3-backup", model="backup"))
    window = ctxwindow.select(
        chat(40),
        budget=800,
        strategy="summarize",
        summarizer="review3-primary",
        fallback=["review3-backup", "extractive", "drop"],
    )
    usage = window.record.llm
    assert usage is not None and usage.model == "primary+backup" and usage.calls == 2
    assert (usage.prompt_tokens, usage.completion_tokens) == (211, 31)
    each = [note for note in window.record.notes if note.startswith("LLM usage by model")]
    assert each and "primary (fake): 1 call, 111 prompt" in each[0]
    assert "backup (fake): 1 call, 100 prompt" in each[0]


def test_a_reply_too_long_for_its_room_is_cut_and_the_record_says_so(registered: Any) -> None:
    """Before (pipeline3): cut down extractively, silently."""
    long = " ".join(f"Order ORD{i:05d} shipped on day {i}." for i in range(400))
    registered(Fake("review3-long", reply=lambda request: SummaryResult(long)))
    window = ctxwindow.select(chat(40), budget=800, strategy="summarize", summarizer="review3-long")
    assert window.tokens <= 800
    assert any("cut down extractively to fit" in note for note in window.record.notes)
