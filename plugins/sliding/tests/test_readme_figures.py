"""The figures the README's prose quotes from LoCoMo runs are read from docs/results, the
files its table of configurations is generated from, so text and table never drift."""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
RESULTS = HERE.parents[1] / "docs" / "results"
PROSE = " ".join((HERE / "README.md").read_text(encoding="utf-8").split())
#: The defaults and the reference strategies are the strategy table's run (recall.json);
#: the changed configurations are the ablation run's.
ABLATION = "sliding:scorer=keywords:"


def _recall(spec: str) -> dict[int, float]:
    """Recall by budget of ``spec``, from the file the README's table reads it from."""
    name = "recall" if ":" not in spec else "ablation-sliding"
    rows = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))["rows"]
    return {row["budget"]: row["recall"] for row in rows if row["strategy"] == spec}


def _temporal(spec: str) -> list[float]:
    """Temporal recall (LoCoMo category 2) of ``spec`` at 1,000 to 8,000 tokens."""
    name = "recall" if ":" not in spec else "ablation-sliding"
    rows = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))["rows"]
    by_budget = {row["budget"]: row["by_category"]["2"] for row in rows if row["strategy"] == spec}
    return [by_budget[budget] for budget in sorted(by_budget)]


def _points(gains: list[float]) -> str:
    return f"{min(round(100 * g) for g in gains)} to {max(round(100 * g) for g in gains)} points"


def _shown(phrase: str) -> None:
    assert phrase in PROSE, f"the README should say, as docs/results does: {phrase}"


def test_the_opening_percentages_are_the_strategy_tables() -> None:
    """The opening's 80% and 4% are the defaults' and fixed's recall at 1,000 tokens."""
    sliding, fixed = _recall("sliding")[1000], _recall("fixed")[1000]
    _shown(
        f"it recovers {round(100 * sliding)}% of the evidence at 1,000 tokens where keeping "
        f"the most recent turns recovers {round(100 * fixed)}%"
    )
    assert abs(sliding - _recall("semantic")[1000]) <= 0.01  # "about what semantic recovers"


def test_what_each_part_earns_is_the_table_of_configurations() -> None:
    """Each part's points are its gain added in the table's order and taken out of the defaults."""
    defaults = _recall("sliding")
    bm25 = _recall(ABLATION + "neighbours=0;speaker=0;salience=0")
    neighbours = _recall(ABLATION + "speaker=0;salience=0")
    speaker = _recall(ABLATION + "salience=0")
    spread = [neighbours[b] - bm25[b] for b in (1000, 2000, 4000)]
    spread += [defaults[b] - _recall(ABLATION + "neighbours=0")[b] for b in (1000, 2000, 4000)]
    _shown(f"**Neighbours**: {_points(spread)} at 1,000 to 4,000 tokens")
    named = [
        speaker[1000] - neighbours[1000],
        defaults[1000] - _recall(ABLATION + "speaker=0")[1000],
    ]
    _shown(f"**Named speaker**: {_points(named)} at 1,000")


def test_the_asked_for_fact_figures_are_the_results_files() -> None:
    """The asked-for fact's overall and temporal figures are salience=0's against the defaults'."""
    defaults, without = _recall("sliding"), _recall(ABLATION + "salience=0")
    most = max(abs(defaults[b] - without[b]) for b in defaults)
    _shown(f"it moves the overall recall by at most {most:.3f}")
    before = " / ".join(f"{v:.3f}" for v in _temporal(ABLATION + "salience=0"))
    after = " / ".join(f"{v:.3f}" for v in _temporal("sliding"))
    _shown(f"which go from {before} with `salience=0` to {after}.")
