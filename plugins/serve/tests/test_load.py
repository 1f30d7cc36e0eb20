"""A bounded load on loopback: 50 concurrent openai clients, each a chat growing turn by
turn from 200 messages; no request lost, every body that reaches the upstream a valid
window. Slow (a few hundred requests): `nox -s tests` runs it."""

from __future__ import annotations

import asyncio

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from ctxwindow_serve import ModelEntry

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])
CLIENTS = 50
TURNS = 6


@pytest.mark.slow
def test_fifty_concurrent_chats_lose_nothing(start_proxy, upstream, make_history, validate):
    proxy = start_proxy(models=(ModelEntry("small", context=2000, output=50, reserve=0.0),))

    async def chat(number: int, client: openai.AsyncOpenAI) -> int:
        messages = make_history(100)
        messages[0] = {"role": "system", "content": f"You are client {number}."}
        for turn in range(TURNS):
            answer = await client.chat.completions.create(
                model="small", messages=messages, max_tokens=50
            )
            messages.append({"role": "assistant", "content": answer.choices[0].message.content})
            messages.append({"role": "user", "content": f"client {number} turn {turn}"})
        return TURNS

    async def main() -> list[int]:
        async with openai.AsyncOpenAI(
            base_url=f"{proxy.url}/v1", api_key="sk-x", max_retries=0, timeout=120
        ) as client:
            return await asyncio.gather(*(chat(number, client) for number in range(CLIENTS)))

    assert sum(asyncio.run(main())) == CLIENTS * TURNS
    assert len(upstream.seen) == CLIENTS * TURNS
    for seen in upstream.seen:
        sent = validate(MESSAGES, seen.json()["messages"])
        assert sent[0]["content"].startswith("You are client")  # the system prompt is kept
        assert sent[-1]["role"] == "user"
        assert sum(len(str(message["content"])) for message in sent) < 2000 * 4
