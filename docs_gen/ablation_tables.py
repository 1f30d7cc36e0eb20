"""Write the plugin READMEs' tables of measured configurations from docs/results (run by
``nox -s eval``).

Each row is read from ``docs/results/recall.json`` (the defaults, as the README's
strategy table shows them) or from the plugin's ``docs/results/ablation-<plugin>.json``
(``ctxwindow eval`` of each configuration), never typed by hand; ``tests/test_readme.py``
fails when a README and the results disagree.

Usage: ``python docs_gen/ablation_tables.py [--eval LOCOMO.json]``: with ``--eval``,
first measure every configuration the tables show on that LoCoMo file (minutes: the
``semantic`` ones embed the conversations) into the ablation result files.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import reference  # noqa: E402  (docs_gen is a folder of scripts, not a package)


def measure(locomo: str) -> None:
    """``ctxwindow eval`` of each ablation results file's configurations."""
    files = sorted({found for rows in reference.ABLATIONS.values() for _, found, _ in rows})
    budgets = ",".join(map(str, reference.ABLATION_BUDGETS))
    for results in (name for name in files if name != "recall"):
        specs = [arg for spec in reference.ablation_specs(results) for arg in ("-s", spec)]
        target = reference.DOCS / "results" / f"{results}.json"
        command = [sys.executable, "-m", "ctxwindow", "eval", locomo, *specs]
        subprocess.run([*command, "--budgets", budgets, "--json", str(target)], check=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", metavar="LOCOMO", help="measure first, on this LoCoMo file")
    args = parser.parse_args()
    if args.eval:
        measure(args.eval)
    for readme in reference.ABLATIONS:
        path = HERE.parent / readme
        table = reference.ablation_table(readme)
        reference.write_between(path, reference.ABLATION_START, reference.ABLATION_END, table)
        print(f"wrote the table of measured configurations of {readme}")
