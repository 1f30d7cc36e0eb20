"""``keywords:time=...``: a question naming a day finds the turn that says "yesterday"
on the day after, in hand-written conversations dated by headers or timestamps."""

from __future__ import annotations

from typing import Any

import pytest

import ctxwindow
from ctxwindow import Conversation, InvalidOption, get_counter
from ctxwindow_sliding.keywords import KeywordScorer, Settings

FILLER = ("grey", "mild", "windy", "damp", "cold", "warm", "foggy", "bright")


def chat(dated_by: str) -> list[dict[str, Any]]:
    """Two sessions of small talk; the hike is told 'yesterday' in the first, on 8 May."""
    sessions = [
        ("2023-05-08", "1:56 pm on 8 May, 2023", "Yesterday we finally climbed the ridge."),
        ("2023-06-20", "9:10 am on 20 June, 2023", "The garden is doing well this month."),
    ]
    # an opening message of its own: sliding ranks the opening user message (the task) first
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Hi, good to talk again."}]
    for number, (stamp, header, told) in enumerate(sessions, 1):
        if dated_by == "headers":
            messages.append({"role": "user", "content": f"[Session {number}: {header}]"})
        turns = [told, *(f"Small talk about the {word} weather." for word in FILLER)]
        for i, text in enumerate(turns):
            message: dict[str, Any] = {"role": "user" if i % 2 == 0 else "assistant"}
            message["content"] = text
            if dated_by == "timestamps":
                message["metadata"] = {"timestamp": f"{stamp}T10:00:00Z"}
            messages.append(message)
    return messages


def scores(messages: list[Any], query: str, **settings: Any) -> list[float]:
    history = Conversation(messages).view(get_counter("approx"), 10_000, query)
    scored: list[float] = KeywordScorer(Settings(**settings)).score(history).tolist()
    return scored


@pytest.mark.parametrize("dated_by", ["headers", "timestamps"])
def test_a_turn_pointing_at_the_day_asked_about_scores(dated_by: str) -> None:
    messages = chat(dated_by)
    hike = next(i for i, m in enumerate(messages) if m["content"].startswith("Yesterday"))
    query = "What did they do on 7 May 2023?"
    if dated_by == "timestamps":  # no shared word, no header beside it: BM25 misses it
        assert scores(messages, query)[hike] == 0.0
    timed = scores(messages, query, time=0.5)
    turns = [i for i, m in enumerate(messages) if not m["content"].startswith("[Session")]
    assert timed[hike] == max(timed[i] for i in turns) > 0
    assert timed[hike] > scores(messages, query)[hike]
    if dated_by == "timestamps":  # the rest was said on 8 May, not on the 7th: nothing
        assert all(timed[i] == 0 for i in turns if i != hike)


def test_a_turn_said_in_the_month_asked_about_scores_half_as_much() -> None:
    messages = chat("timestamps")
    timed = scores(messages, "What happened in June 2023?", time=1.0)
    said_in_june = [i for i, m in enumerate(messages) if "2023-06" in str(m.get("metadata"))]
    garden = said_in_june[0]  # "this month" said in June: it mentions June
    assert timed[garden] == 0.5
    assert {timed[i] for i in said_in_june[1:]} == {0.25}
    assert not any(timed[: said_in_june[0]])


def test_time_is_off_by_default_and_a_question_without_days_changes_nothing() -> None:
    messages = chat("headers")
    assert Settings().time == 0.0
    query = "Who climbed the ridge?"
    assert scores(messages, query) == scores(messages, query, time=0.5)


def test_the_option_is_checked_and_reaches_the_strategy() -> None:
    with pytest.raises(InvalidOption):
        Settings.parse("time=-1")
    windower = ctxwindow.from_config(
        {"strategy": "sliding", "budget": 60, "scorer": "keywords:time=0.5"}
    )
    messages = chat("timestamps")
    window = windower.select(messages, query="What did they do on 7 May 2023?")
    assert any(m.get("content", "").startswith("Yesterday") for m in window.messages)
    plain = ctxwindow.from_config({"strategy": "sliding", "budget": 60})
    kept = plain.select(messages, query="What did they do on 7 May 2023?").messages
    assert not any(m.get("content", "").startswith("Yesterday") for m in kept)


def test_time_is_not_weighed_in_an_agent_history() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{}"}}
    messages = [
        *chat("timestamps"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "booked"},
        {"role": "user", "content": "Change it to the flight on 7 May 2023."},
    ]
    history = Conversation(messages).view(get_counter("approx"), 10_000)
    assert history.agent
    plain = KeywordScorer(Settings()).score(history).tolist()
    assert KeywordScorer(Settings(time=1.0)).score(history).tolist() == plain
