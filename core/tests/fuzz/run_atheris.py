"""Coverage-guided fuzzing of the loaders with atheris (libFuzzer), for a bounded time.

    python core/tests/fuzz/run_atheris.py messages --seconds 300 [--corpus DIR] [--report FILE]
    python core/tests/fuzz/run_atheris.py config --seconds 300

ctxwindow and tomllib are instrumented so that libFuzzer sees which branches an input
reaches. A finding (any exception but a ctxwindow error) stops the run, leaves the
input as ``crash-*`` in the artifact folder and exits non-zero; an input slower than
``--timeout`` seconds is a hang and does the same. The report (JSON, rewritten every
second, since libFuzzer ends the process without running exit handlers) gives the
inputs run, the time and the outcomes; libFuzzer's own last line, ``Done N runs in S
second(s)``, gives the final count.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

with atheris.instrument_imports(include=["ctxwindow", "tomllib", "json"]):
    import loaders

    import ctxwindow._config
    import ctxwindow._files
    import ctxwindow._messages  # noqa: F401  (instrumented with the rest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", choices=sorted(loaders.TARGETS))
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--timeout", type=int, default=20, help="seconds per input: a hang")
    parser.add_argument("--corpus", help="folder to keep the growing corpus in")
    parser.add_argument("--artifacts", default=".", help="where a crashing input is written")
    parser.add_argument("--report", help="write a JSON summary here at the end")
    parser.add_argument("--runs", type=int, help="stop after this many inputs instead")
    args = parser.parse_args()

    target = loaders.TARGETS[args.target]
    loaders.register_newest()
    outcomes: Counter[str] = Counter()
    started = last = time.monotonic()

    def report() -> None:
        if not args.report:
            return
        summary = {
            "target": args.target,
            "inputs": sum(outcomes.values()),
            "seconds": round(time.monotonic() - started, 1),
            "outcomes": dict(outcomes.most_common()),
        }
        Path(args.report).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")

    def one_input(data: bytes) -> None:
        nonlocal last
        outcomes[target(data)] += 1
        if time.monotonic() - last > 1:  # libFuzzer ends the process without atexit
            last = time.monotonic()
            report()

    corpus = Path(args.corpus or tempfile.mkdtemp(prefix=f"ctxwindow-fuzz-{args.target}-"))
    corpus.mkdir(parents=True, exist_ok=True)
    for number, seed in enumerate(loaders.seeds(args.target)):
        (corpus / f"seed-{number}").write_bytes(seed)
    dictionary = loaders.write_dictionary(corpus.parent / f"{corpus.name}.dict")
    limits = [f"-max_total_time={args.seconds}"] if args.runs is None else [f"-runs={args.runs}"]
    argv = [
        sys.argv[0],
        *limits,
        f"-timeout={args.timeout}",
        f"-dict={dictionary}",
        f"-artifact_prefix={Path(args.artifacts).resolve()}/",
        "-max_len=65536",
        "-rss_limit_mb=4096",
        "-print_final_stats=1",
        str(corpus),
    ]
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
