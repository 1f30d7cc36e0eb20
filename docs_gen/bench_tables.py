"""Write the speed tables of docs/evaluation.md and docs/serve.md, and the memory table
of docs/reliability.md, from docs/results (run by ``nox -s bench``).

The figures are read from ``docs/results/bench.json``, ``bench-semantic.json``,
``bench-agent-steps.json``, ``bench-agent-task.json``, ``serve-bench.json`` and
``memory.json``, never typed by hand; ``tests/test_readme.py``
fails when the pages and the results disagree.
Usage: ``python docs_gen/bench_tables.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import reference  # noqa: E402  (docs_gen is a folder of scripts, not a package)

if __name__ == "__main__":
    PAGE = HERE.parent / "docs" / "evaluation.md"
    reference.write_between(
        PAGE, reference.BENCH_START, reference.BENCH_END, reference.bench_tables()
    )
    print(f"wrote the speed tables of {PAGE}")
    RELIABILITY = HERE.parent / "docs" / "reliability.md"
    reference.write_between(
        RELIABILITY, reference.MEMORY_START, reference.MEMORY_END, reference.memory_table()
    )
    print(f"wrote the memory table of {RELIABILITY}")
    SERVE = HERE.parent / "docs" / "serve.md"
    reference.write_between(
        SERVE, reference.SERVE_START, reference.SERVE_END, reference.serve_table()
    )
    print(f"wrote the proxy's table of {SERVE}")
