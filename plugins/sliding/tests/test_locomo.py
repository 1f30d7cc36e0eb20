"""The bar on the shipped benchmark: evidence recall of the defaults, categories 1-4."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxwindow_eval import evaluate, load_locomo

LOCOMO = (
    Path(__file__).resolve().parents[3].parent / "shared" / "bench" / "locomo" / "locomo-dev.json"
)


@pytest.mark.slow
@pytest.mark.skipif(not LOCOMO.exists(), reason=f"benchmark not at {LOCOMO}")
def test_sliding_defaults_clear_the_bar_on_locomo() -> None:
    conversations, report = load_locomo(LOCOMO)
    budgets = [1000, 2000, 4000, 8000]
    result = evaluate(["sliding", "fixed"], conversations, budgets=budgets, load_report=report)
    sliding = {row.budget: row.recall for row in result.rows if row.strategy == "sliding"}
    fixed = {row.budget: row.recall for row in result.rows if row.strategy == "fixed"}
    assert sliding[1000] >= 0.78, sliding
    assert sliding[2000] >= 0.83, sliding
    assert all(sliding[b] > fixed[b] + 0.5 for b in budgets), (sliding, fixed)
