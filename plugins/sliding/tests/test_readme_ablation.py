"""The README's time-as-a-signal table is read from the results files beside it
(``ablation/time-<rendering>.json``, written by ``ctxwindow eval --json``): every row it
shows is checked here, so the figures are never typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
README = (HERE / "README.md").read_text(encoding="utf-8")
BUDGETS = (1000, 2000, 4000, 8000)
#: LoCoMo's categories shown at 2,000 tokens: multi-hop, temporal.
SHOWN = ("1", "2")


@pytest.mark.parametrize("rendering", ["headers", "timestamps", "inline"])
def test_every_row_of_the_time_table_is_the_results_file(rendering: str) -> None:
    results = json.loads((HERE / "ablation" / f"time-{rendering}.json").read_text())
    by_label: dict[str, dict[int, dict]] = {}
    for row in results["rows"]:
        by_label.setdefault(row["strategy"], {})[row["budget"]] = row
    assert len(by_label) == 5
    for label, rows in by_label.items():
        _, _, value = label.partition("time=")
        configuration = f"`time={value}`" if value else "defaults (`time=0`)"
        cells = [f"{rows[b]['recall']:.3f}" for b in BUDGETS]
        cells += [f"{rows[2000]['by_category'][c]:.3f}" for c in SHOWN]
        line = f"| {rendering} | {configuration} | " + " | ".join(cells) + " |"
        assert line in README, f"README row differs from the results file: {line}"
