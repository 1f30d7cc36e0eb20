"""The README's time-as-a-signal table is read from the results files beside it
(``ablation/time-<rendering>.json``, written by ``ctxwindow eval --json``): every row it
shows is checked here, so the figures are never typed by hand."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parents[1]
README = (HERE / "README.md").read_text(encoding="utf-8")
BUDGETS = (1000, 2000, 4000, 8000)
#: LoCoMo's categories shown at 2,000 tokens: multi-hop, temporal.
SHOWN = ("1", "2")


@pytest.mark.parametrize("rendering", ["headers", "timestamps", "inline"])
def test_every_row_of_the_time_table_is_the_results_file(rendering: str) -> None:
    results = json.loads((HERE / "ablation" / f"time-{rendering}.json").read_text())
    by_label: dict[str, dict[int, dict[str, Any]]] = {}
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


# The prose under the time table: every figure and finding it states is worked out from
# the same files, per conversation (a fold) where it speaks of folds.

PROSE = " ".join(README.split())
VALUES = ("0.25", "0.5", "1", "2")
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


def _rows(rendering: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The rows of ablation/time-<rendering>.json by (time value, budget); "0": defaults."""
    results = json.loads((HERE / "ablation" / f"time-{rendering}.json").read_text())
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for row in results["rows"]:
        _, _, value = row["strategy"].partition("time=")
        out[(value or "0", row["budget"])] = row
    return out


ROWS = {rendering: _rows(rendering) for rendering in ("headers", "timestamps", "inline")}
FOLDS = tuple(sorted(ROWS["headers"][("0", 1000)]["by_conversation"]))


def _gains(rendering: str, value: str, budget: int) -> dict[str, float]:
    """What `time=value` changes in each fold's recall against the defaults."""
    rows = ROWS[rendering]
    new, old = rows[(value, budget)]["by_conversation"], rows[("0", budget)]["by_conversation"]
    return {fold: round(new[fold]["recall"] - old[fold]["recall"], 4) for fold in FOLDS}


def _overall(rendering: str, value: str, budget: int) -> float:
    """What `time=value` changes in the overall recall against the defaults."""
    rows = ROWS[rendering]
    return float(rows[(value, budget)]["recall"] - rows[("0", budget)]["recall"])


def _signed(value: float) -> str:
    return "0" if round(value, 3) == 0 else f"{value:+.3f}"


def _listed(names: list[str]) -> str:
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


def _shown(phrase: str) -> None:
    assert phrase in PROSE, f"the README should say, as the results files do: {phrase}"


def test_no_value_of_time_passes_the_rule_on_any_four_conversations() -> None:
    """The bold claim holds: the README's rule fails for every value on every 4 or 5 folds."""
    _shown(
        "a gain on at least 4 of the 5 conversations and a loss of at most 0.01 on none, "
        "at 1,000 and at 2,000, in every rendering"
    )
    _shown("**No value passes, on any four conversations**, so `time` stays 0")

    def passes(value: str, folds: tuple[str, ...]) -> bool:
        for rendering in ROWS:
            for budget in (1000, 2000):
                gains = _gains(rendering, value, budget)
                if sum(gains[fold] > 0 for fold in folds) < len(folds) - 1:
                    return False
                if any(gains[fold] < -0.01 for fold in folds):
                    return False
        return True

    for size in (4, 5):
        for folds in itertools.combinations(FOLDS, size):
            assert not any(passes(value, folds) for value in VALUES), folds


def test_the_headers_findings_are_the_results_files() -> None:
    """The headers bullet names exactly the folds the files show unchanged or losing."""
    assert all(_overall("headers", value, 1000) > 0 for value in VALUES)
    assert all(_overall("headers", value, 2000) <= 0 for value in VALUES)
    _shown("time adds a little at 1,000 and nothing at 2,000")
    unchanged = [
        fold
        for fold in FOLDS
        if all(_gains("headers", value, 2000)[fold] == 0 for value in ("0.25", "0.5", "1"))
    ]
    _shown(f"At 2,000 {_listed(unchanged)} are unchanged at every value up to 1")
    losses: dict[tuple[str, int], dict[str, float]] = {}
    for value in VALUES:
        for budget in (1000, 2000):
            for fold, gain in _gains("headers", value, budget).items():
                if gain < 0:
                    losses.setdefault((fold, budget), {})[value] = -gain
    assert set(losses) == {("conv-44", 2000), ("conv-41", 1000), ("conv-41", 2000)}, losses
    lost = losses[("conv-44", 2000)].values()
    _shown(f"conv-44 loses {min(lost):.3f} to {max(lost):.3f}")
    (at_1000,) = {f"{loss:.3f}" for loss in losses[("conv-41", 1000)].values()}
    (value,) = losses[("conv-41", 2000)]
    _shown(f"conv-41 loses {at_1000} at 1,000 (and at 2,000 with `time={value}`)")


def test_the_timestamps_findings_are_the_results_files() -> None:
    """The timestamps bullet's per-fold range and recall figures are the files'."""
    at_1000, at_2000 = _gains("timestamps", "1", 1000), _gains("timestamps", "1", 2000)
    assert all(gain > 0 for gain in at_1000.values())
    assert all(gain >= 0 for gain in at_2000.values())
    _shown("it pays on every fold with no loss")
    low, high = min(at_1000.values()), max(at_1000.values())
    low2, high2 = min(at_2000.values()), max(at_2000.values())
    _shown(
        f"`time=1` gives {_signed(low)} to {_signed(high)} per conversation at 1,000 and "
        f"{_signed(low2)} to {_signed(high2)} at 2,000"
    )
    stamped, headers = ROWS["timestamps"], ROWS["headers"]
    _shown(
        "closes the gap to the headers rendering ("
        f"{stamped[('1', 1000)]['recall']:.3f} / {stamped[('1', 2000)]['recall']:.3f} against "
        f"{headers[('0', 1000)]['recall']:.3f} / {headers[('0', 2000)]['recall']:.3f})"
    )
    before = stamped[("0", 2000)]["by_category"]["2"]
    after = stamped[("1", 2000)]["by_category"]["2"]
    _shown(f"temporal recall at 2,000 goes from {before:.3f} to {after:.3f}")


def test_the_inline_and_multi_hop_findings_are_the_results_files() -> None:
    """The inline and multi-hop findings are the files', so they cannot drift from them."""
    assert all(_overall("inline", value, 1000) > 0 for value in VALUES)
    _shown(f"`inline` gains at every value too ({_overall('inline', '1', 1000):+.3f} at 1,000")
    still = [sum(g == 0 for g in _gains("inline", v, 2000).values()) for v in VALUES]
    _shown(f"at 2,000 {WORDS[min(still)]} to {WORDS[max(still)]} folds stay unchanged")
    for rendering, rows in ROWS.items():
        multi_hop = {rows[(value, 2000)]["by_category"]["1"] for value in ("0", *VALUES)}
        assert len(multi_hop) == 1, rendering
    _shown("Multi-hop recall at 2,000 does not move at any value")


def test_time_leaves_the_agent_figures_of_its_run_unchanged() -> None:
    """time-agent.json backs the agent claim; its figures differ from agent.json's, as said."""
    results = json.loads((HERE / "ablation" / "time-agent.json").read_text())
    by_label: dict[str, dict[int, float]] = {}
    for row in results["rows"]:
        by_label.setdefault(row["strategy"], {})[row["budget"]] = row["next_action_recall"]
    plain, timed = by_label["sliding"], by_label["sliding:scorer=keywords:time=0.5"]
    assert plain == timed
    budgets = [f"{budget:,}" for budget in sorted(plain)]
    _shown(f"`time=0.5` leaves it unchanged at {_listed(budgets)} (`ablation/time-agent.json`")
    current = json.loads((HERE.parents[1] / "docs" / "results" / "agent.json").read_text())
    now = {
        r["budget"]: r["next_action_recall"] for r in current["rows"] if r["strategy"] == "sliding"
    }
    assert now != plain, "time-agent.json is no older than agent.json: drop 'a run older than'"
    _shown("a run older than the main README's agent figures")
