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

``--backends torch,onnx,onnx-int8`` instead compares the embedding backends: the first
(cold) window of a ``size``-message history on a memory cache, and embedding one new
message, each backend in turn within every repeat so that all see the same load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from ctxwindow import Conversation, get_embedder
from ctxwindow_eval.bench import synthetic_history
from ctxwindow_semantic.cache import EmbeddingCache
from ctxwindow_semantic.embedder import BACKENDS
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


def backend_cost(
    size: int = 500,
    backends: Sequence[str] = BACKENDS[1:],
    repeats: int = 3,
    budget: int = 2_000,
) -> dict[str, Any]:
    """Median cold-window and one-message times per backend, and each one's speed-up
    over the first backend named."""
    history = synthetic_history(size)
    embedders = {name: get_embedder(f"sentence-transformers:@{name}") for name in backends}
    for embedder in embedders.values():
        embedder.embed(["load and warm the model up"])
    cold: dict[str, list[float]] = {name: [] for name in backends}
    one: dict[str, list[float]] = {name: [] for name in backends}
    for repeat in range(repeats):
        for name in backends:
            strategy = SemanticWindow(cache="memory", embedder=f"sentence-transformers:@{name}")
            started = time.perf_counter()
            strategy.select(history, budget)
            cold[name].append(time.perf_counter() - started)
            for turn in range(5):
                text = f"repeat {repeat} turn {turn}: did the hotel budget change for March?"
                started = time.perf_counter()
                embedders[name].embed([text])
                one[name].append(time.perf_counter() - started)
    first = backends[0]
    rows = {}
    for name in backends:
        cold_s = statistics.median(cold[name])
        one_ms = statistics.median(one[name]) * 1000
        rows[name] = {
            "cold_s": round(cold_s, 3),
            "one_text_ms": round(one_ms, 3),
            "cold_speedup": round(statistics.median(cold[first]) / cold_s, 3),
            "one_text_speedup": round(statistics.median(one[first]) * 1000 / one_ms, 3),
        }
    return {"history": size, "repeats": repeats, "budget": budget, "backends": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument(
        "--cache", help="a SQLite file the history's embeddings persist in, across runs"
    )
    parser.add_argument(
        "--backends",
        help="compare embedding backends instead, e.g. torch,onnx,onnx-int8 (first: baseline)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.backends:
        backends = args.backends.split(",")
        print(json.dumps(backend_cost(args.size, backends, args.repeats), indent=2))
        return
    print(json.dumps(per_turn_cost(args.size, args.turns, cache=args.cache), indent=2))


if __name__ == "__main__":
    main()
