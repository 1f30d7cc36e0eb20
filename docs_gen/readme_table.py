"""Write the README's strategy table from docs/results (run by ``nox -s eval``).

The figures are read from ``docs/results/recall.json`` and ``docs/results/agent.json``,
never typed by hand; ``tests/test_readme.py`` fails when the README and the results
disagree. Usage: ``python docs_gen/readme_table.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import reference  # noqa: E402  (docs_gen is a folder of scripts, not a package)

if __name__ == "__main__":
    README = HERE.parent / "README.md"
    table = reference.readme_table()
    reference.write_between(README, reference.README_TABLE_START, reference.README_TABLE_END, table)
    print(f"wrote the strategy table of {README}")
