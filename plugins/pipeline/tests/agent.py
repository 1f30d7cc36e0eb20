"""A tool-heavy agent conversation: every turn searches, reads a long result, answers."""

from __future__ import annotations

import json
import random
from typing import Any

WORDS = "plan trip hotel flight price city morning budget call result data".split()


def call(call_id: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": tool, "arguments": json.dumps(arguments)},
            }
        ],
    }


def output(call_id: str, words: int, topic: str) -> dict[str, Any]:
    text = " ".join(f"{topic}-{i}" for i in range(words))
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def agent(turns: int, words: int = 200) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a research agent."}]
    for turn in range(turns):
        topic = f"topic{turn}"
        out.append({"role": "user", "content": f"Tell me about {topic}, please."})
        out.append(call(f"call_{turn}", "search", query=topic))
        out.append(output(f"call_{turn}", words, topic))
        out.append({"role": "assistant", "content": f"{topic} is covered; here is the gist."})
    return out


def agent_steps(
    rounds: int, rng: random.Random, *, named: bool = False
) -> list[list[dict[str, Any]]]:
    """An agent's rounds: a request every fourth (``named``: naming an order a later
    request may ask for again), then a call whose result is long enough to clear."""
    steps = []
    for turn in range(rounds):
        step: list[dict[str, Any]] = []
        if turn % 4 == 0:
            words = " ".join(rng.choices(WORDS, k=8))
            order = f" ORD{rng.randrange(turn + 1):03d}" if named else ""
            step.append({"role": "user", "content": f"next: {words}{order}"})
        call = {"id": f"c{turn}", "type": "function", "function": {"name": "find"}}
        call["function"]["arguments"] = f'{{"q": "{rng.choice(WORDS)} ORD{turn % 50:03d}"}}'
        step.append({"role": "assistant", "content": None, "tool_calls": [call]})
        words = " ".join(rng.choices(WORDS, k=rng.randint(40, 160)))
        step.append(
            {"role": "tool", "tool_call_id": f"c{turn}", "content": f"{words} ORD{turn:03d}"}
        )
        steps.append(step)
    return steps
