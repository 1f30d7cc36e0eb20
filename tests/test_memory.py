"""Memory of one visit on a long history: every first-party strategy that loads no model
stays under its ceiling (``ctxwindow_eval.memory.CEILINGS_MIB``, shown in
docs/reliability.md beside what ``python -m ctxwindow_eval.memory`` measured). The
100,000-message run takes a few minutes, so it is marked slow (``nox -s tests`` runs
it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ctxwindow
from ctxwindow_eval import memory


def strategy_names() -> set[str]:
    return {entry["name"] for entry in ctxwindow.describe_strategies()}


def test_a_small_run_reports_each_strategy_from_its_own_process(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert memory.main(["-s", "fixed", "-s", "no-such-strategy", "--size", "2000"]) == 1
    rows = json.loads(capsys.readouterr().out)
    fixed, unknown = rows
    assert fixed["strategy"] == "fixed" and fixed["messages"] == 2000
    assert fixed["kept"] > 0 and fixed["rss_growth_mib"] >= 0
    assert fixed["peak_rss_mib"] >= fixed["rss_growth_mib"]
    assert "unknown strategy 'no-such-strategy'" in unknown["error"]


def test_a_strategy_that_needs_options_is_measured_with_its_examples() -> None:
    if "pipeline" not in strategy_names():
        pytest.skip("ctxwindow-pipeline is not installed")
    (row,) = memory.measure(["pipeline"], size=500)
    assert row["options"]["stages"], row
    assert row["kept"] > 0


@pytest.mark.slow
def test_every_model_free_strategy_stays_under_its_documented_ceiling() -> None:
    names = [name for name in memory.CEILINGS_MIB if name in strategy_names()]
    rows = memory.measure(names)
    over = [
        f"{row['strategy']}: {row.get('rss_growth_mib', row.get('error'))} MiB "
        f"(ceiling {memory.CEILINGS_MIB[row['strategy']]})"
        for row in rows
        if "error" in row or row["rss_growth_mib"] > memory.CEILINGS_MIB[row["strategy"]]
    ]
    assert not over, over
    assert all(row["messages"] == 100_000 for row in rows)


def test_a_strategy_with_a_cache_starts_from_an_empty_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache an earlier run filled would turn a cold visit into reads: each run gets a
    SQLite cache of its own, gone after, and the row shows the options as given."""
    if "semantic" not in strategy_names():
        pytest.skip("ctxwindow-semantic is not installed")
    given: list[dict[str, object]] = []

    def recording(name: str, **options: object) -> ctxwindow.BaseStrategy:
        given.append(options)
        return ctxwindow.get_strategy("fixed")

    monkeypatch.setattr(memory, "get_strategy", recording)
    row = memory.measure_one("semantic", size=200)
    (options,) = given
    path = Path(str(options["cache"]))
    assert path.name == "cache.sqlite3" and not path.parent.exists()
    assert row["options"] == {}
    memory.measure_one("semantic", size=200, options={"cache": "memory"})
    assert given[-1] == {"cache": "memory"}
