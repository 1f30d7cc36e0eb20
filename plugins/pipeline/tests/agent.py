"""A tool-heavy agent conversation: every turn searches, reads a long result, answers."""

from __future__ import annotations

import json
from typing import Any


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
