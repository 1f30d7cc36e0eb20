"""The first stage's kept reasons are shared from visit to visit without a copy of
every unit's (:class:`_Reasons`: the last visit's below, this visit's on top, folded in
now and then): read, they say what a dict copied and cut on every visit would, for the
visit itself and for any earlier one a branch still starts from, and a pipeline's
windows are a fresh pipeline's whenever the reasons are folded in."""

from __future__ import annotations

import operator
import random
from typing import Any

import pytest
from test_incremental import _assert_as_afresh, _history

import ctxwindow_pipeline.pipeline as pipeline_module
from ctxwindow import Conversation
from ctxwindow_pipeline import PipelineStrategy
from ctxwindow_pipeline.pipeline import NO_REASONS, _before, _Reasons, _same_for


def _visits(seed: int, count: int) -> list[tuple[_Reasons, dict[int, str]]]:
    """Visits as a pipeline makes them, each with the dict the plain way gives: the last
    visit's reasons cut at a unit (a copy), then the newer units' written in order (as
    the first stage's decisions come), some skipped (a decision about no message), some
    written again (a unit of several messages)."""
    rng = random.Random(seed)
    reasons, plain = NO_REASONS, {}
    made = []
    for visit in range(count):
        units = max(0, (max(plain) + 1 if plain else 0) - rng.randrange(0, 4))
        carried, top = reasons.carried(units)
        plain = _before(plain, units)
        for unit in range(units, units + rng.randrange(1, 6)):
            if rng.random() < 0.2:
                continue
            top[unit] = plain[unit] = f"kept on visit {visit}"
            if rng.random() < 0.3:
                top[unit] = plain[unit] = f"kept again on visit {visit}"
        reasons = _Reasons(carried.below, carried.limit, top).settled()
        made.append((reasons, dict(plain)))
    return made


@pytest.mark.parametrize("most_on_top", [0, 3, 64])
def test_shared_reasons_read_as_a_dict_copied_and_cut_on_every_visit(
    monkeypatch: pytest.MonkeyPatch, most_on_top: int
) -> None:
    monkeypatch.setattr(pipeline_module, "MOST_ON_TOP", most_on_top)
    made = _visits(seed=most_on_top, count=400)
    folded = sum(reasons.limit > 10**9 for reasons, _ in made)
    assert folded > 1  # the fold is taken, and so is the path that keeps a top
    assert folded < len(made) or most_on_top == 0
    for reasons, plain in made:  # every visit's, read after all the later ones
        units = max(plain) + 5
        assert [reasons.get(unit) for unit in range(units)] == [plain.get(u) for u in range(units)]


ALWAYS_CLEARED = {"strategy": "clear_tool_outputs", "when": "always", "min_tokens": 5}


@pytest.mark.parametrize("most_on_top", [0, 2])
@pytest.mark.parametrize(
    ("stages", "budget"),
    [
        (["clear_tool_outputs", "sliding"], 1_500),
        ([{"strategy": "clear_tool_outputs", "keep_recent": 1, "min_tokens": 10}, "fixed"], 1_500),
        ([ALWAYS_CLEARED, "sliding"], 100_000),  # the last stage never engages
        ([ALWAYS_CLEARED], 100_000),
    ],
)
def test_reasons_folded_in_at_any_visit_give_a_fresh_pipelines_window(
    monkeypatch: pytest.MonkeyPatch, most_on_top: int, stages: list[Any], budget: int
) -> None:
    """Folded in on every visit (0) or every few (2), through a conversation and its
    branch: the records say why each unit was kept as a fresh pipeline's do, the
    first stage's word where no later stage engaged."""
    monkeypatch.setattr(pipeline_module, "MOST_ON_TOP", most_on_top)
    steps, history = _history(seed=35)
    conversation = Conversation(history)
    pipeline = PipelineStrategy(stages=stages)
    pipeline.select(conversation, budget)
    for number, step in enumerate(steps):
        conversation.extend(step)
        if number == len(steps) // 2:
            branch = conversation.branch(len(conversation) - len(step) // 2)
            branch.extend(steps[-1])
            window = pipeline.select(branch, budget)
            _assert_as_afresh(window, stages, branch.originals, budget)
        window = pipeline.select(conversation, budget)
        _assert_as_afresh(window, stages, conversation.originals, budget)
    if budget > 10_000:  # and a fresh pipeline's say the first stage's word too
        kept = {run.reason for run in window.record.decision_runs if run.action == "kept"}
        assert "stages[0] clear_tool_outputs: not an old, large tool output" in kept


def test_the_first_stages_reasons_are_read_where_no_later_stage_engaged() -> None:
    """A list taken back to where every message fits once cleared: the last stage does
    not engage, and why each unit was kept is the first stage's word, carried over from
    the longer list's visit (which the last stage engaged on, writing reasons of its
    own that must not become the first stage's)."""
    steps, history = _history(seed=36)
    stages: list[Any] = [
        {"strategy": "clear_tool_outputs", "when": "always", "min_tokens": 5},
        "sliding",
    ]
    pipeline = PipelineStrategy(stages=stages)
    listed = history
    engaged = []
    for step in steps[:6]:
        listed = listed + step
        for messages in (listed, listed[:40], listed):
            window = pipeline.select(messages, 1_500)
            _assert_as_afresh(window, stages, messages, 1_500)
            engaged.append(tuple(stage.engaged for stage in window.record.stages))
    assert {(True, True), (True, False)} <= set(engaged)


def test_a_cut_copy_holds_what_one_cut_entry_by_entry_would() -> None:
    """:func:`_before` takes the cut units off the end: the entries (and their order)
    of a copy whose cut units were deleted one by one."""
    rng = random.Random(5)
    for _ in range(200):
        units = sorted(rng.sample(range(60), rng.randrange(0, 40)))
        by_unit = {unit: f"why {unit}" for unit in units}
        cut = rng.randrange(0, 62)
        plain = dict(by_unit)
        for unit in reversed(by_unit):
            if unit < cut:
                break
            del plain[unit]
        assert list(_before(by_unit, cut).items()) == list(plain.items())


def test_the_same_decisions_are_counted_up_to_the_first_other_object() -> None:
    made = [object() for _ in range(6)]
    for these, those, count in [
        (made, made, 6),
        (made, made[:4], 4),
        (made[:3], made, 3),
        (made, [*made[:2], object(), *made[3:]], 2),
        ([], made, 0),
    ]:
        assert _same_for(these, those) == count
        same = list(map(operator.is_, these, those))
        assert count == (same.index(False) if False in same else len(same))
