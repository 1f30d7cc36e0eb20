"""What a turn costs through each adapter that remembers its reads (OpenAI Responses,
Anthropic, pydantic-ai, LangChain), beside the same history as dicts through a reused
Windower and Conversation.

For each adapter and size: ``cold_ms``, a history never seen before; ``warm_ms``, the
same list grown by one item (what an agent loop does each turn); ``conversation_ms``,
the equivalent OpenAI dicts (the adapter's own Messages, as dicts) through a reused
``Windower`` + ``Conversation``, one dict appended. Medians of one run; the machine's
load moves every figure, so compare the ratios printed, not single timings.

    python plugins/adapters/bench/bench_adapters.py --sizes 1000,10000 [--json FILE]

Needs the adapters' test extra (openai, anthropic, langchain-core, pydantic-ai-slim) and
ctxwindow-eval (its timing).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from typing import Any

import ctxwindow
from ctxwindow import Conversation
from ctxwindow_eval.bench import median_ms, warm_median_ms

BUDGET = 4_000


# -- histories: an agent's turns in each framework's shape ----------------------------
def _words(seed: int, turn: int, count: int) -> str:
    """Text from a vocabulary of 500 words, the seed's and turn's mark first: a history
    no other seed's starts like."""
    return f"s{seed} t{turn} " + " ".join(f"word{(turn * 31 + n * 7) % 500}" for n in range(count))


def responses_history(size: int, seed: int) -> list[Any]:
    items: list[Any] = [{"type": "message", "role": "developer", "content": "Be brief."}]
    turn = 0
    while len(items) < size:
        call = f"c{seed}_{turn}"
        items += [
            {"role": "user", "content": f"question {turn}: " + _words(seed, turn, 12)},
            {"type": "function_call", "call_id": call, "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": call, "output": _words(seed, turn, 60)},
            {"type": "message", "role": "assistant", "content": _words(seed, turn, 20)},
        ]
        turn += 1
    return items[:size]


def anthropic_history(size: int, seed: int) -> list[Any]:
    items: list[Any] = []
    turn = 0
    while len(items) < size:
        call = f"t{seed}_{turn}"
        items += [
            {"role": "user", "content": f"question {turn}: " + _words(seed, turn, 12)},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": call, "name": "lookup", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call, "content": _words(seed, turn, 60)}]},
            {"role": "assistant", "content": _words(seed, turn, 20)},
        ]  # fmt: skip
        turn += 1
    return items[:size]


def pydantic_history(size: int, seed: int) -> list[Any]:
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    items: list[Any] = []
    turn = 0
    while len(items) < size:
        call = f"p{seed}_{turn}"
        items += [
            ModelRequest(parts=[UserPromptPart(f"question {turn}: " + _words(seed, turn, 12))]),
            ModelResponse(parts=[ToolCallPart("lookup", {}, tool_call_id=call)]),
            ModelRequest(
                parts=[ToolReturnPart("lookup", _words(seed, turn, 60), tool_call_id=call)]),
            ModelResponse(parts=[TextPart(_words(seed, turn, 20))]),
        ]  # fmt: skip
        turn += 1
    return items[:size]


def langchain_history(size: int, seed: int) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    items: list[Any] = []
    turn = 0
    while len(items) < size:
        call = f"l{seed}_{turn}"
        items += [
            HumanMessage(f"question {turn}: " + _words(seed, turn, 12)),
            AIMessage("", tool_calls=[{"id": call, "name": "lookup", "args": {}}]),
            ToolMessage(_words(seed, turn, 60), tool_call_id=call),
            AIMessage(_words(seed, turn, 20)),
        ]
        turn += 1
    return items[:size]


def _new_items(kind: str) -> Iterator[Any]:
    """One item per turn, each unlike any before."""
    number = 0
    while True:
        number += 1
        text = f"and one more question, number {number}?"
        if kind == "pydantic-ai":
            from pydantic_ai.messages import ModelRequest, UserPromptPart

            yield ModelRequest(parts=[UserPromptPart(text)])
        elif kind == "langchain":
            from langchain_core.messages import HumanMessage

            yield HumanMessage(text)
        else:
            yield {"role": "user", "content": text}


def _adapters() -> dict[str, tuple[Callable[[int, int], list[Any]], Any, Callable[..., Any]]]:
    from ctxwindow_adapters import anthropic, langchain, openai_responses, pydantic_ai

    responses = openai_responses
    return {
        "openai-responses": (responses_history, responses.select, responses.read_items),
        "anthropic": (anthropic_history, anthropic.select, anthropic.read_messages),
        "pydantic-ai": (pydantic_history, pydantic_ai.select, pydantic_ai.read_messages),
        "langchain": (langchain_history, langchain.select, langchain.read_messages),
    }  # fmt: skip


def bench(
    kind: str, strategy: str, size: int, repeats: int, seeds: Iterator[int]
) -> dict[str, Any]:
    history, select, read = _adapters()[kind]
    options = {"counter": "approx"}

    unseen = [history(size, next(seeds)) for _ in range(repeats)]
    cold_ms = median_ms(lambda: select(unseen.pop(), BUDGET, strategy, **options), repeats)

    items = history(size, next(seeds))
    select(items, BUDGET, strategy, **options)
    new = _new_items(kind)

    def grow_items() -> None:
        items.append(next(new))
        select(items, BUDGET, strategy, **options)

    warm_ms = warm_median_ms(grow_items, repeats * 3)

    dicts = [m.to_dict() for m in read(history(size, next(seeds))).messages]
    windower = ctxwindow.from_config({"strategy": strategy, "budget": BUDGET, **options})
    conversation = Conversation(dicts)
    windower.select(conversation)
    new_dicts = _new_items("dicts")

    def grow_conversation() -> None:
        conversation.append(next(new_dicts))
        windower.select(conversation)

    conversation_ms = warm_median_ms(grow_conversation, repeats * 3)
    return {
        "adapter": kind,
        "strategy": strategy,
        "size": size,
        "cold_ms": round(cold_ms, 3),
        "warm_ms": round(warm_ms, 3),
        "conversation_ms": round(conversation_ms, 3),
        "cold_over_warm": round(cold_ms / warm_ms, 1),
        "warm_over_conversation": round(warm_ms / conversation_ms, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--adapters", default=",".join(_adapters()))
    parser.add_argument("--strategies", default="fixed,sliding")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", dest="json_file")
    args = parser.parse_args()
    seeds = iter(range(1, 1_000_000))
    rows = []
    header = f"{'adapter':<17}{'strategy':<9}{'size':>7}{'cold_ms':>10}{'warm_ms':>9}{'conv_ms':>9}"
    print(header + f"{'cold/warm':>11}{'warm/conv':>11}")
    runs = [
        (kind, strategy, size)
        for kind in args.adapters.split(",")
        for strategy in args.strategies.split(",")
        for size in map(int, args.sizes.split(","))
    ]
    for kind, strategy, size in runs:
        row = bench(kind, strategy, size, args.repeats, seeds)
        rows.append(row)
        print(
            f"{kind:<17}{strategy:<9}{size:>7}{row['cold_ms']:>10.1f}{row['warm_ms']:>9.2f}"
            f"{row['conversation_ms']:>9.2f}{row['cold_over_warm']:>11.1f}"
            f"{row['warm_over_conversation']:>11.2f}",
            flush=True,
        )
    if args.json_file:
        with open(args.json_file, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=2)


if __name__ == "__main__":
    main()
