"""What a WindowRecord promises its reader: what it keeps alive, what equality means,
that its dict reads back, and that its scores are numbers JSON can hold."""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import weakref
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

import ctxwindow
from ctxwindow import BaseStrategy, History, Selection, Window, WindowRecord
from ctxwindow.errors import InvalidOption, UnknownStrategy
from ctxwindow.testing.strategies import Newest


def chat(count: int, seed: int = 0) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"chat {seed} message {i} " * 20}
        for i in range(count)
    ]


@pytest.fixture
def forgetful() -> Iterator[None]:
    """No history remembered between visits: what a record holds is all that holds it."""
    before = ctxwindow.remember_histories(0, 0)
    yield
    ctxwindow.remember_histories(*before)


class Watched(Newest):
    """:class:`Newest`, holding a weak reference to each history it chose from."""

    name = "watched"
    seen: ClassVar[list[weakref.ref[History]]] = []

    def choose(self, history: History) -> Selection:
        self.seen.append(weakref.ref(history))
        return super().choose(history)


# -- what a record keeps alive -------------------------------------------------------
@pytest.mark.usefixtures("forgetful")
@pytest.mark.parametrize("read", ["decisions", "to_dict", "explain", "equality"])
def test_a_record_lets_go_of_its_history_once_its_decisions_are_read(read: str) -> None:
    Watched.seen.clear()
    window = Watched().select(chat(200), 500)
    record = window.record
    assert window.record.count("dropped") > 0  # runs read: the history is still needed
    gc.collect()
    assert Watched.seen[0]() is not None  # held, to build the decisions from
    decisions = len(record.decisions)
    if read == "decisions":
        assert record.decisions
    elif read == "to_dict":
        record.to_dict()
    elif read == "explain":
        record.explain()
    else:
        assert record == dataclasses.replace(record)
    del window
    gc.collect()
    assert Watched.seen[0]() is None
    assert len(record.decisions) == decisions  # read as they were
    assert record.count("dropped") + record.count("kept") == len(record.decisions)
    assert record.decision_runs[-1].action == "kept"


@pytest.mark.usefixtures("forgetful")
def test_a_stage_record_lets_go_once_its_decisions_are_read() -> None:
    Watched.seen.clear()

    class Staged(BaseStrategy):
        name = "staged"

        def choose(self, history: History) -> Selection:
            stage = Watched().select(history.originals, history.budget)
            selection = Newest().choose(history)
            selection.stages.append(stage.record)
            return selection

    record = Staged().select(chat(100), 400).record
    record.to_dict()  # every stage's decisions read
    gc.collect()
    assert Watched.seen and all(seen() is None for seen in Watched.seen)


def test_the_record_docs_say_what_a_record_holds() -> None:
    doc = " ".join((WindowRecord.__doc__ or "").split())
    assert "holds the visit's history" in doc
    assert "keep ``to_dict()`` instead" in doc


# -- equality --------------------------------------------------------------------------
def test_two_visits_of_the_same_input_are_equal() -> None:
    messages = chat(21)
    first, second = Newest().select(messages, 300), Newest().select(messages, 300)
    assert first == second
    assert first.record == second.record
    assert hash(first.record) == hash(second.record)
    assert len({first.record, second.record}) == 1
    assert Newest().select(messages, 400) != first


def test_records_differing_only_in_decisions_are_not_equal() -> None:
    window = Newest().select(chat(21), 300)
    decisions = window.record.decisions
    flipped = tuple(
        dataclasses.replace(d, action="dropped" if d.action == "kept" else "kept")
        for d in decisions
    )
    other = dataclasses.replace(window.record, _decide=lambda: flipped)
    assert other.decisions != decisions
    assert other != window.record
    same = dataclasses.replace(window.record, elapsed_ms=window.record.elapsed_ms + 5)
    assert same == window.record  # the time taken is a measurement, not an outcome


def test_a_window_is_not_hashable_and_compares_only_with_windows() -> None:
    window = Newest().select(chat(5), 300)
    with pytest.raises(TypeError, match="unhashable type: 'Window'"):
        hash(window)
    assert window != window.messages
    assert window.record != window.record.to_dict()
    assert window == Window(list(window.messages), window.record)


# -- reading a record's dict back --------------------------------------------------------
def strategy_windows() -> Iterator[tuple[str, Window[Any]]]:
    """A window of each kind of strategy installed: the core's own, then first-party
    plugins when installed (``fixed``, ``sliding``, ``summarize``, ``pipeline``)."""
    messages = [{"role": "system", "content": "Be brief."}, *chat(40)]
    yield "newest", Newest().select(messages, 600)
    yield "fits", Newest().select(messages[:3], 10_000)
    orphan = [*messages, {"role": "tool", "tool_call_id": "gone", "content": "late"}]
    yield "defects", Newest(orphans="drop").select(orphan, 600)
    configs: list[dict[str, Any]] = [
        {"strategy": "fixed"},
        {"strategy": "sliding"},
        {"strategy": "summarize", "summarizer": "extractive"},
        {"strategy": "pipeline", "stages": ["fixed", "sliding"]},
    ]
    for config in configs:
        try:
            windower = ctxwindow.from_config({**config, "budget": 600})
        except UnknownStrategy:
            continue  # the core alone: its own strategies only
        yield config["strategy"], windower.select(messages, query="message 3")


@pytest.mark.parametrize("decisions_first", [False, True])
def test_from_dict_reads_back_what_to_dict_wrote(decisions_first: bool) -> None:
    for name, window in strategy_windows():
        record = window.record
        if decisions_first:
            assert record.decisions
        written = json.loads(json.dumps(record.to_dict()))
        back = WindowRecord.from_dict(written)
        assert back.to_dict() == written, name
        assert back == record, name
        assert back.decisions == record.decisions, name
        for action in ("kept", "dropped", "summarized", "truncated", "replaced"):
            assert back.count(action) == record.count(action), (name, action)
        assert back.explain().splitlines()[1:] == record.explain().splitlines()[1:], name
        assert len(back.stages) == len(record.stages), name


def test_from_dict_reads_llm_usage_and_stages() -> None:
    decision = ctxwindow.Decision(0, (0,), ("a",), "kept", "fits", 5, 0.25)
    usage = ctxwindow.LLMUsage("openai", "gpt", 1, 100, 20)
    stage = WindowRecord("inner", 100, "approx", 5, 5, True, 0.5, 1, 1, _decide=lambda: (decision,))
    record = WindowRecord(
        "outer", 100, "approx", 5, 5, True, 1.25, 1, 1, usage, ("a note",), lambda: (decision,)
    )
    record = dataclasses.replace(record, stages=(stage,))
    back = WindowRecord.from_dict(record.to_dict())
    assert back == record and back.llm == usage and back.notes == ("a note",)
    assert back.stages == (stage,) and back.elapsed_ms == 1.25


def test_from_dict_refuses_a_dict_without_decisions() -> None:
    record = Newest().select(chat(21), 300).record
    with pytest.raises(InvalidOption, match=r"to_dict\(decisions=False\).*to_dict\(\)"):
        WindowRecord.from_dict(record.to_dict(decisions=False))


# -- scores ----------------------------------------------------------------------------
class Scored(BaseStrategy):
    """Keeps the newest units, scoring every unit through ``unit_scores``."""

    name = "scored"
    scores: ClassVar[Any] = ()

    def choose(self, history: History) -> Selection:
        selection = Newest().choose(history)
        selection.unit_scores = self.scores
        return selection


@pytest.mark.parametrize("kind", ["list", "numpy"])
def test_non_finite_unit_scores_are_no_score_in_the_record(kind: str) -> None:
    messages = chat(11)
    scores = [math.inf, -math.inf, math.nan, *[0.5] * 8]
    if kind == "numpy":
        numpy = pytest.importorskip("numpy")
        Scored.scores = numpy.array(scores)
    else:
        Scored.scores = scores
    record = Scored().select(messages, 300).record
    assert [d.score for d in record.decisions] == [None, None, None, *[0.5] * 8]
    json.dumps(record.to_dict(), allow_nan=False)  # standard JSON: no Infinity, no NaN
    assert "score inf" not in record.explain()


def test_a_non_finite_score_written_into_scores_is_no_score_either() -> None:
    class WritesScores(BaseStrategy):
        name = "writes-scores"

        def choose(self, history: History) -> Selection:
            selection = Newest().choose(history)
            selection.scores.update({0: math.inf, 1: math.nan, 2: 0.75})
            return selection

    record = WritesScores().select(chat(11), 300).record
    assert [d.score for d in record.decisions[:4]] == [None, None, 0.75, None]
    json.dumps(record.to_dict(), allow_nan=False)


def test_a_non_finite_keep_score_is_still_refused() -> None:
    class KeepsInfinity(BaseStrategy):
        name = "keeps-infinity"

        def choose(self, history: History) -> Selection:
            selection = history.selection()
            selection.keep(len(history.units) - 1, "newest", math.inf)
            return selection

    with pytest.raises(ctxwindow.ContractViolation, match="must be a finite number"):
        KeepsInfinity().select(chat(11), 300)
