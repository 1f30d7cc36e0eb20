"""The bar on the shipped benchmark: evidence recall of the defaults, categories 1-4."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxwindow_eval import StrategySpec, evaluate, load_locomo

LOCOMO = (
    Path(__file__).resolve().parents[3].parent / "shared" / "bench" / "locomo" / "locomo-dev.json"
)


@pytest.mark.slow
@pytest.mark.skipif(not LOCOMO.exists(), reason=f"benchmark not at {LOCOMO}")
def test_semantic_defaults_clear_the_bar_on_locomo(tmp_path: Path) -> None:
    conversations, report = load_locomo(LOCOMO)
    spec = StrategySpec("semantic", {"cache": str(tmp_path / "emb.sqlite3")})
    result = evaluate([spec], conversations, budgets=[1000, 2000], load_report=report)
    recall = {row.budget: row.recall for row in result.rows}
    assert recall[1000] >= 0.78, recall
    assert recall[2000] >= 0.85, recall
    fixed = evaluate(["fixed"], conversations, budgets=[2000]).rows[0].recall
    assert recall[2000] > fixed + 0.6  # relevance, not recency, is what recovers the evidence
