"""The record of a composed strategy: each stage's own record, kept in order."""

from __future__ import annotations

import json

from ctxwindow import Decision, WindowRecord


def record(name: str, stages: tuple[WindowRecord, ...] = ()) -> WindowRecord:
    decisions = (Decision(0, (0,), (None,), "kept", "fits", 5),)
    return WindowRecord(
        name, 100, "approx", 50, 40, True, 1.0, 3, 2, stages=stages, _decide=lambda: decisions
    )


def test_a_plain_record_has_no_stages_key() -> None:
    out = record("fixed").to_dict()
    assert "stages" not in out
    assert out["counts"] == {
        "kept": 1,
        "dropped": 0,
        "summarized": 0,
        "truncated": 0,
        "replaced": 0,
    }


def test_stages_are_written_in_order_with_or_without_decisions() -> None:
    stages = (record("clear_tool_outputs"), record("summarize"))
    composed = record("pipeline", stages)
    assert composed.stages == stages
    full = json.loads(json.dumps(composed.to_dict()))
    assert [stage["strategy"] for stage in full["stages"]] == ["clear_tool_outputs", "summarize"]
    assert full["stages"][0]["decisions"][0]["reason"] == "fits"
    brief = composed.to_dict(decisions=False)
    assert "decisions" not in brief and all("decisions" not in s for s in brief["stages"])
