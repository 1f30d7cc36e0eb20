"""Write the README's strategy table from docs/results (run by ``nox -s eval``).

The figures are read from ``docs/results/recall.json`` and ``docs/results/agent.json``,
never typed by hand; ``tests/test_readme.py`` fails when the README and the results
disagree. Usage: ``python docs_gen/readme_table.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
README = HERE.parent / "README.md"
sys.path.insert(0, str(HERE))

import reference  # noqa: E402  (docs_gen is a folder of scripts, not a package)


def main() -> int:
    text = README.read_text(encoding="utf-8")
    start = text.index(reference.README_TABLE_START)
    end = text.index(reference.README_TABLE_END) + len(reference.README_TABLE_END)
    README.write_text(text[:start] + reference.readme_table() + text[end:], encoding="utf-8")
    print(f"wrote the strategy table of {README}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
