"""The figures the README's prose quotes from LoCoMo runs are read from docs/results, the
files its table of configurations is generated from, so text and table never drift."""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
RESULTS = HERE.parents[1] / "docs" / "results"
PROSE = " ".join((HERE / "README.md").read_text(encoding="utf-8").split())


def _recall(spec: str) -> dict[int, float]:
    """Recall by budget of ``spec``: the strategy table's run, or the ablation run's."""
    name = "recall" if ":" not in spec else "ablation-semantic"
    rows = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))["rows"]
    return {row["budget"]: row["recall"] for row in rows if row["strategy"] == spec}


def test_the_opening_percentages_are_the_strategy_tables() -> None:
    """The opening's 10% and 87% are fixed's and semantic's recall at 2,000 tokens."""
    fixed, semantic = _recall("fixed")[2000], _recall("semantic")[2000]
    phrase = (
        f"keeping the most recent turns recovers {round(100 * fixed)}% of the evidence at "
        f"2,000 tokens, and this strategy recovers {round(100 * semantic)}%"
    )
    assert phrase in PROSE, f"the README should say, as docs/results does: {phrase}"


def test_the_default_backend_keeps_torchs_recall_as_the_readme_says() -> None:
    """The default (int8, one text per call) is within the stated bound of torch at every budget."""
    stated = re.search(r"recall stays within (0\.\d+) of torch's", PROSE)
    assert stated is not None, "the README's sentence on the default backend has changed"
    defaults = _recall("semantic")
    torch = _recall("semantic:embedder=sentence-transformers:@torch")
    assert set(torch) == set(defaults)
    apart = max(abs(defaults[budget] - torch[budget]) for budget in defaults)
    assert apart <= float(stated.group(1)), apart
