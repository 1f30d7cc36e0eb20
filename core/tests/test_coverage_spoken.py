"""What an identifier is worth counts it as spoken only when a message of the visit's
own history wrote it: not when a visit of a longer history (the conversation grown
since this snapshot) has read further, nor when only a host's stand-in writes it."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ctxwindow import ApproxCounter, Conversation, History
from ctxwindow.kit import Coverage, identifiers

COUNTER = ApproxCounter()


def agent(turns: int, seed: int) -> list[dict[str, Any]]:
    """Tools returning ids, users and assistants naming some of them later."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for turn in range(turns):
        ids = " ".join(f"ORD{rng.randint(0, 40):03d}" for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.5:
            call = {"id": f"c{turn}", "type": "function"}
            call["function"] = {"name": "find", "arguments": "{}"}
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            out.append({"role": "tool", "tool_call_id": f"c{turn}", "content": f"found {ids}"})
        else:
            out.append({"role": rng.choice(["user", "assistant"]), "content": f"about {ids}"})
    out.append({"role": "user", "content": "what next?"})
    return out


def worths(history: History) -> list[float]:
    coverage = Coverage(history, spoken_weight=2.0)
    return [coverage.worth(coverage.of(unit)) for unit in range(len(history.units))]


def spoken_by_hand(history: History) -> list[float]:
    """Each unit's identifiers, 1 each and 2 more for those a user or assistant wrote in
    this history's own messages, counted one identifier at a time."""
    coverage = Coverage(history, spoken_weight=2.0)
    written: set[str] = set()
    for message in history.messages:
        if message.role in ("user", "assistant"):
            texts = [message.text, *(call.arguments for call in message.tool_calls)]
            written |= identifiers(" ".join(texts))
    out = []
    for unit in range(len(history.units)):
        found = coverage.of(unit)
        out.append(len(found) + 2.0 * len(found & written))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_an_older_snapshot_counts_only_its_own_messages_as_spoken(seed: int) -> None:
    messages = agent(80, seed)
    cut = len(messages) // 2
    while messages[cut - 1].get("tool_calls") or messages[cut - 1]["role"] != "user":
        cut += 1
    conversation = Conversation(messages[:cut])
    older = conversation.view(COUNTER, 10_000)
    conversation.extend(messages[cut:])
    worths(conversation.view(COUNTER, 10_000))  # reads what the later messages write
    assert worths(older) == spoken_by_hand(older)
    assert worths(older) == worths(Conversation(messages[:cut]).view(COUNTER, 10_000))


@pytest.mark.parametrize("seed", range(5))
def test_a_fresh_visit_counts_what_its_messages_write(seed: int) -> None:
    history = Conversation(agent(80, seed)).view(COUNTER, 10_000)
    assert worths(history) == spoken_by_hand(history)
