"""Per-turn cost of the semantic window in a chat loop, against the embedding it cannot avoid.

A chat of ``size`` messages is windowed once (so everything is embedded and cached);
then each turn appends one new user message and selects again. The baseline is one
model call embedding a new text of the same length: the least any semantic strategy
pays per turn. Turns and baseline calls alternate, so both see the same machine load;
medians are reported. Run: ``python -m ctxwindow_semantic.bench`` (its histories come from
the evaluation kit: ``pip install 'ctxwindow-semantic[bench]'``).

``--cache FILE`` embeds the history through a persistent cache (a SQLite file), so a
large history is embedded once across runs; the turns still run on a memory cache, as
without it, so that sizes compare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from ctxwindow import Conversation
from ctxwindow_eval.bench import synthetic_history
from ctxwindow_semantic.cache import EmbeddingCache
from ctxwindow_semantic.strategy import SemanticWindow


def per_turn_cost(
    size: int = 1_000, turns: int = 40, budget: int = 2_000, cache: str | None = None
) -> dict[str, Any]:
    strategy = SemanticWindow(cache=cache or "memory")
    conversation = Conversation(synthetic_history(size))
    strategy.select(conversation, budget)
    if cache is not None:  # the turns on a memory cache, as without a file
        strategy.cache.close()
        strategy.cache = EmbeddingCache("memory")
    embedder = strategy.embedder
    embedder.embed(["warm the model up"])
    ours, baseline = [], []
    before = strategy.cache.embedded
    for turn in range(turns):
        text = f"turn {turn}: what did we decide about the hotel budget and the morning flight?"
        started = time.perf_counter()
        embedder.embed([text.replace("turn", "step")])  # a fresh text: never cached
        baseline.append(time.perf_counter() - started)
        started = time.perf_counter()
        conversation.append({"role": "user", "content": text})
        strategy.select(conversation, budget)
        ours.append(time.perf_counter() - started)
    ours_ms = statistics.median(ours) * 1000
    baseline_ms = statistics.median(baseline) * 1000
    return {
        "history": size,
        "turns": turns,
        "budget": budget,
        "embedded_per_turn": (strategy.cache.embedded - before) / turns,
        "per_turn_ms": round(ours_ms, 3),
        "embed_alone_ms": round(baseline_ms, 3),
        "ratio": round(ours_ms / baseline_ms, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument(
        "--cache", help="a SQLite file the history's embeddings persist in, across runs"
    )
    args = parser.parse_args()
    print(json.dumps(per_turn_cost(args.size, args.turns, cache=args.cache), indent=2))


if __name__ == "__main__":
    main()
