"""Speed and memory of every installed strategy on synthetic histories.

Cold: nothing counted yet, a plain list in. Warm: a Conversation already read and
counted, one message appended, re-selected: a chat loop. Beside them, the token
counter's own cost and LangChain's ``trim_messages`` (strategy "last", the same
characters/4 + 3 per message counting) on the same history, as ratios. Medians of
repeated runs: the machine is shared, single timings mean little.
"""

from __future__ import annotations

import json
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ctxwindow import (
    ApproxCounter,
    CachedCounter,
    Conversation,
    Message,
    describe_strategies,
    get_strategy,
)
from ctxwindow_eval.runner import StrategySpec

SIZES = (1_000, 10_000, 100_000)
BUDGET = 4_000


def synthetic_history(size: int, seed: int = 7) -> list[dict[str, Any]]:
    """A chat of ``size`` messages: a system prompt, user and assistant turns of varied
    length, a parallel tool call every tenth turn, and an occasional pinned message."""
    rng = random.Random(seed)
    words = "the of plan trip hotel flight price city morning budget call result data".split()
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent."}]
    call = 0
    while len(history) < size:
        turn = len(history)
        text = " ".join(rng.choice(words) for _ in range(rng.randint(8, 120)))
        if turn % 10 == 5 and size - len(history) >= 3:
            ids = [f"call_{call}", f"call_{call + 1}"]
            call += 2
            history.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {"name": "lookup", "arguments": f'{{"q": "{text[:30]}"}}'},
                        }
                        for i in ids
                    ],
                }
            )
            history.extend({"role": "tool", "tool_call_id": i, "content": text} for i in ids)
            continue
        message: dict[str, Any] = {"role": "user" if turn % 2 else "assistant", "content": text}
        if turn == 3:  # one pinned message: the task statement
            message["metadata"] = {"pinned": True}
        history.append(message)
    return history


@dataclass
class BenchRow:
    strategy: str
    messages: int
    count_ms: float
    cold_ms: float
    warm_ms: float
    trim_ms: float | None
    peak_mib: float

    @property
    def cold_over_count(self) -> float:
        return self.cold_ms / self.count_ms

    @property
    def trim_over_warm(self) -> float | None:
        return None if self.trim_ms is None else self.trim_ms / self.warm_ms

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["cold_over_count"] = round(self.cold_over_count, 3)
        ratio = self.trim_over_warm
        out["trim_over_warm"] = None if ratio is None else round(ratio, 1)
        return out


def median_ms(
    work: Callable[..., Any], repeats: int, setup: Callable[[], Any] | None = None
) -> float:
    """Median wall time of ``work()``, or of ``work(setup())`` with setup left untimed."""
    times = []
    for _ in range(repeats):
        arguments = (setup(),) if setup else ()
        started = time.perf_counter()
        work(*arguments)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _repeats(size: int) -> int:
    return max(3, min(25, 200_000 // size // 8))


def _trim(history: list[dict[str, Any]], budget: int) -> Callable[[], Any] | None:
    try:
        from langchain_core.messages import trim_messages
        from langchain_core.messages.utils import count_tokens_approximately
    except ImportError:
        return None
    return lambda: trim_messages(
        history, max_tokens=budget, strategy="last", token_counter=count_tokens_approximately
    )


def bench_strategy(
    name: str, size: int, budget: int = BUDGET, repeats: int | None = None
) -> BenchRow:
    """``name`` is a strategy spec: ``NAME`` or ``NAME:key=value,...``."""
    spec = StrategySpec.parse(name)
    strategy = get_strategy(spec.name, **spec.options)
    history = synthetic_history(size)
    repeats = repeats or _repeats(size)

    def fresh() -> CachedCounter:
        return CachedCounter(ApproxCounter())  # a new, empty cache for each run

    def count(counter: CachedCounter) -> None:
        for position, message in enumerate(history):
            counter.count_message(Message.from_dict(message, position))

    count_ms = median_ms(count, repeats, fresh)

    def cold(counter: CachedCounter) -> None:
        strategy.select(history, budget, counter)

    cold_ms = median_ms(cold, repeats, fresh)

    counter = fresh()
    conversation = Conversation(history)
    strategy.select(conversation, budget, counter)
    extra = iter(range(10**9))

    def warm() -> None:
        conversation.append({"role": "user", "content": f"and one more question {next(extra)}"})
        strategy.select(conversation, budget, counter)

    warm_ms = median_ms(warm, repeats * 4)
    trim = _trim(history, budget)
    trim_ms = median_ms(trim, max(3, repeats // 2)) if trim else None

    tracemalloc.start()
    strategy.select(history, budget, fresh())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return BenchRow(name, size, count_ms, cold_ms, warm_ms, trim_ms, peak / 2**20)


def run(
    strategies: Sequence[str] | None = None,
    sizes: Sequence[int] = SIZES,
    progress: Callable[[str], None] | None = None,
    repeats: int | None = None,
) -> list[BenchRow]:
    names = strategies or [s["name"] for s in describe_strategies() if not s["requires_llm"]]
    rows = []
    for name in names:
        for size in sizes:
            if progress:
                progress(f"{name} at {size:,} messages")
            rows.append(bench_strategy(name, size, repeats=repeats))
    return rows


def to_json(rows: Sequence[BenchRow]) -> str:
    return json.dumps([row.to_dict() for row in rows], indent=2)
