"""Memory of one cold visit on a long history, for every installed strategy that needs no LLM.

Each strategy runs in a process of its own, so one strategy's caches, model or heap
cannot inflate another's figure. The process builds the strategy and the synthetic
history first (and, for a strategy with a model, warms it on one text); only then is
the visit measured: ``rss_growth_mib`` is how much the process's peak resident size
grew during the visit (``ru_maxrss``), which sees everything the visit held at its worst,
Python objects, NumPy arrays and native memory (a model's activations, tokenizers)
alike. (Tracing with ``tracemalloc`` would cost memory and time itself, so it is not
switched on.)

Run: ``python -m ctxwindow_eval.memory --json docs/results/memory.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ctxwindow import (
    ApproxCounter,
    CachedCounter,
    Windower,
    get_strategy,
    strategy_class,
)
from ctxwindow.errors import CtxWindowError
from ctxwindow_eval.bench import no_llm_strategies, synthetic_history
from ctxwindow_eval.runner import StrategySpec, takes_cache

SIZE = 100_000
BUDGET = 4_000
#: Peak resident growth allowed for one visit of SIZE messages, MiB, per strategy that
#: loads no model: about twice what was measured, so allocator noise passes and a real
#: regression does not. ``tests/test_memory.py`` holds the strategies to them, and
#: docs/reliability.md shows them beside the measured figures.
CEILINGS_MIB = {
    "fixed": 60,
    "clear_tool_outputs": 60,
    "recency-decay": 110,
    "summarize": 160,
    "sliding": 230,
    "pipeline": 380,
}


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS


def _warm(strategy: Any) -> None:
    """Load a strategy's model before measuring, so the figure is the visit's, not the
    model's (whose size is the model card's business)."""
    embedder = getattr(strategy, "embedder", None)
    if embedder is not None and hasattr(embedder, "embed"):
        embedder.embed(["warm the model up"])


def measure_one(
    spec: str, size: int = SIZE, budget: int = BUDGET, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Measure ``spec`` (``NAME`` or ``NAME:key=value,...``, plus ``options``) here."""
    parsed = StrategySpec.parse(spec)
    options = {**parsed.options, **(options or {})}
    with tempfile.TemporaryDirectory(prefix="ctxwindow-memory-") as folder:
        made = dict(options)
        if "cache" not in options and takes_cache(parsed.name):
            # a SQLite cache of its own, empty: the visit embeds everything, as a first
            # visit does, rather than reading what an earlier run stored
            made["cache"] = str(Path(folder) / "cache.sqlite3")
        strategy = get_strategy(parsed.name, **made)
        _warm(strategy)
        history = synthetic_history(size)
        counter = CachedCounter(ApproxCounter())
        rss_before = _peak_rss_mib()
        started = time.perf_counter()
        window = Windower(strategy, budget, counter).select(history)
        seconds = time.perf_counter() - started
    return {
        "strategy": spec,
        "options": options,
        "messages": size,
        "budget": budget,
        "kept": len(window.messages),
        "seconds": round(seconds, 2),
        "rss_growth_mib": round(_peak_rss_mib() - rss_before, 1),
        "peak_rss_mib": round(_peak_rss_mib(), 1),
    }


def measure(
    strategies: Sequence[str] | None = None,
    size: int = SIZE,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Every named strategy (default: every installed one that needs no LLM), each in a
    fresh interpreter."""
    names = strategies or no_llm_strategies()  # a pipeline with its example stages
    rows = []
    for name in names:
        if progress:
            progress(f"{name} at {size:,} messages")
        child = [sys.executable, "-m", "ctxwindow_eval.memory", "--one", name]
        options = json.dumps(_example_options(name))
        done = subprocess.run(
            [*child, "--size", str(size), "--options", options],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
            rows.append({"strategy": name, "messages": size, "error": tail[0]})
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return rows


def _example_options(spec: str) -> dict[str, Any]:
    """The first ``example_options`` a strategy declares (a pipeline needs stages to
    run at all), else none."""
    try:
        factory = strategy_class(StrategySpec.parse(spec).name)
    except CtxWindowError:  # not installed: the child process reports it, as for any spec
        return {}
    examples = getattr(factory, "example_options", None)
    return dict(examples[0]) if examples else {}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-s", "--strategy", action="append", help="strategy spec (repeatable)")
    parser.add_argument("--size", type=int, default=SIZE, help="history length in messages")
    parser.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    parser.add_argument("--one", metavar="SPEC", help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)  # its options
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one, args.size, options=json.loads(args.options))))
        return 0
    rows = measure(args.strategy, args.size, progress=lambda s: print(s, file=sys.stderr))
    text = json.dumps(rows, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    return 1 if any("error" in row for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
