"""The pipeline: stages by name, the budget flowing through, one record, config checks."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from agent import agent
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxwindow
from ctxwindow import BaseStrategy, History, LLMUsage, Message, Selection, get_counter
from ctxwindow.errors import InvalidOption, UnknownStrategy
from ctxwindow.kit import recent_units
from ctxwindow.testing.conversations import wild_histories
from ctxwindow_pipeline import ClearToolOutputs, PipelineStrategy

COUNTER = get_counter("approx")
CLEAR = {"strategy": "clear_tool_outputs", "keep_recent": 2, "min_tokens": 20}


def tokens(messages: list[dict[str, Any]]) -> int:
    return sum(COUNTER.count_message(Message.from_dict(m)) for m in messages)


def test_config_file_with_stage_tables(tmp_path: Path) -> None:
    config = tmp_path / "ctxwindow.toml"
    config.write_text(
        'strategy = "pipeline"\n'
        "budget = 1500\n"
        "stages = [\n"
        '  { strategy = "clear_tool_outputs", keep_recent = 2 },\n'
        '  { strategy = "summarize" },\n'
        '  "fixed",\n'
        "]\n"
    )
    windower = ctxwindow.from_config(config)
    messages = agent(10)
    window = windower.select(messages)
    record = window.record
    assert record.strategy == "pipeline" and window.tokens <= 1500
    assert [stage.strategy for stage in record.stages] == [
        "clear_tool_outputs",
        "summarize",
        "fixed",
    ]
    assert record.stages[0].engaged and record.stages[0].tokens_before == tokens(messages)
    # the budget flows through: each stage starts where the previous one ended
    for before, after in zip(record.stages, record.stages[1:], strict=False):
        assert after.tokens_before == before.tokens_after
    assert record.tokens_after == record.stages[-1].tokens_after
    dumped = json.loads(json.dumps(record.to_dict()))
    assert [stage["strategy"] for stage in dumped["stages"]] == [
        "clear_tool_outputs",
        "summarize",
        "fixed",
    ]
    assert all("decisions" in stage for stage in dumped["stages"])
    assert (
        "stages" not in ctxwindow.select(messages, budget=1500, strategy="fixed").record.to_dict()
    )


def test_array_of_tables_in_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.ctxwindow]\n"
        'strategy = "pipeline"\n'
        "budget = 900\n"
        "[[tool.ctxwindow.stages]]\n"
        'strategy = "clear_tool_outputs"\n'
        "keep_recent = 1\n"
        "[[tool.ctxwindow.stages]]\n"
        'strategy = "sliding"\n'
    )
    window = ctxwindow.from_config(tmp_path / "pyproject.toml").select(agent(8))
    assert [stage.strategy for stage in window.record.stages] == ["clear_tool_outputs", "sliding"]
    assert window.tokens <= 900


def test_the_record_maps_the_final_window_back_to_every_original_unit() -> None:
    messages = agent(10)
    budget = 1200
    window = PipelineStrategy(stages=[CLEAR, "summarize", "fixed"]).select(messages, budget)
    record = window.record
    assert window.tokens <= budget
    by_unit = {d.unit: d for d in record.decisions}
    assert sorted(p for d in record.decisions for p in d.positions) == list(range(len(messages)))
    sent = {id(m) for m in window.messages}
    for decision in record.decisions:
        inside = [id(messages[p]) in sent for p in decision.positions]
        if decision.action == "replaced":  # the call is sent, its result as a stub
            assert inside == [True, False], decision
        else:
            assert all(inside) == (decision.action == "kept"), decision
    # an old exchange was cleared by stage 0, then folded into stage 1's summary: the
    # record names the stage that summarized it, and stage 0's own record the clearing
    old_exchange = next(d for d in record.decisions if 2 in d.positions)
    assert old_exchange.action == "summarized"
    assert old_exchange.reason.startswith("stages[1] summarize: ")
    cleared = next(d for d in record.stages[0].decisions if 2 in d.positions)
    assert cleared.action == "replaced"
    assert cleared.reason.startswith("tool output cleared: search (call_0)")
    # the newest exchanges stayed whole (keep_recent=2) and are kept, verbatim
    newest_call = len(messages) - 3
    assert by_unit[next(d.unit for d in record.decisions if newest_call in d.positions)].action == (
        "kept"
    )
    made = [
        m
        for m in window.messages
        if m.get("metadata", {}).get("synthetic") and "stands_in_for" not in m["metadata"]
    ]
    assert made and made[0]["role"] == "system"  # the summary
    assert any(note.startswith("stages[0] clear_tool_outputs: tokens ") for note in record.notes)


def test_a_unit_cleared_then_dropped_says_which_stage_dropped_it() -> None:
    """The window lacks it because the later stage let it go: its reason is that
    stage's (one fate for the dropped run, however many outputs were cleared in it);
    the clearing is in the first stage's own record."""
    messages = agent(10)
    pipeline = PipelineStrategy(stages=[{**CLEAR, "keep_recent": 0}, "fixed"])
    window = pipeline.select(messages, 400)
    assert window.tokens <= 400
    first_exchange = next(d for d in window.record.decisions if 2 in d.positions)
    assert first_exchange.action == "dropped"
    fixed_dropped_it = "stages[1] fixed: outside the most recent units that fit the budget"
    assert first_exchange.reason == fixed_dropped_it
    cleared = next(d for d in window.record.stages[0].decisions if 2 in d.positions)
    assert cleared.action == "replaced"
    assert cleared.reason.startswith("tool output cleared")


@pytest.mark.parametrize("last", ["fixed", "summarize", "sliding"])
def test_old_outputs_cleared_then_removed_are_one_entry_of_the_record(last: str) -> None:
    """Hundreds of old exchanges, each output cleared by the first stage, then dropped
    or summarized by the last: the pipeline's record holds them as runs of the last
    stage's decision (its selection a call per run, the runner's check a run each),
    not one reason per cleared exchange, which every turn of an agent loop made again
    (a step at 100,000 messages spent most of its 120 ms there). The clearing is in the
    first stage's record."""
    messages = agent(300, words=60)
    stages = [{**CLEAR, "keep_recent": 1}, last]
    window = PipelineStrategy(stages=stages).select(messages, 1_500)
    record = window.record
    removed = [run for run in record.decision_runs if run.action in ("dropped", "summarized")]
    sent = [run for run in record.decision_runs if run.action not in ("dropped", "summarized")]
    assert sum(len(run.units) for run in removed) > 250
    # the removed runs lie between the runs sent: as many as the window has gaps
    assert len(removed) <= len(sent) + 1 < 150, [(run.units, run.reason) for run in removed]
    assert all(run.reason.startswith("stages[1] ") for run in removed)
    cleared = [d for d in record.stages[0].decisions if d.action == "replaced"]
    assert len(cleared) >= 250


@pytest.mark.parametrize("far", [False, True], ids=["log-near", "log-far-back"])
@pytest.mark.parametrize("given", ["conversation", "list"])
def test_a_held_turn_whose_log_the_host_cuts_carries_and_gives_fresh_windows(
    given: str, far: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's turn reads a log far over the budget, then makes small calls: the host
    holds the turn, its log cut, so the clearing stage reads a list parted near its end
    from the last request's. It carries the units before the log (it re-decided every
    unit of the history on every such request: 143 ms a request at 20,000 messages
    against 11 ms uncut), and each request's window and record are those of a fresh
    pipeline on the same list. The caller's history may be a plain list grown each
    request (the proxy's, read from JSON): the stage's list is then remembered beside
    the caller's, not read as a branch of it turn after turn (430 ms a request at
    20,000 messages, the clearing stage's state lost every time).

    ``far``: 140 rounds of the turn after the log, so that the stage's list parts from
    the last request's more than 256 messages before its end (the newest messages the
    runner compares when it recognises a list): it was read whole on every request
    (280 ms at 20,000 messages, each list remembered anew, pushing other conversations
    out) while the host cut the log to a new size each time. The cut keeps its size
    now, so the stage's list is the last one grown by the new round."""
    from ctxwindow.testing import calls, result, user

    carried: list[int] = []
    carry = Selection.carry

    def counted(self: Selection, previous: Selection, units: int) -> int:
        carried.append(carry(self, previous, units))
        return carried[-1]

    monkeypatch.setattr(Selection, "carry", counted)
    stages = [{**CLEAR, "keep_recent": 2}, "fixed"]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for turn in range(60):
        messages += [user(f"question {turn} " * 8), calls(f"o{turn}")]
        messages += [result(f"o{turn}", f"old out {turn} " * 40), user(f"thanks {turn}")]
    messages += [user("Run the tests and fix it."), calls("log")]
    messages.append(result("log", "FAILED test_x\n" * (30_000 if far else 3_000)))
    for step in range(140 if far else 0):
        messages += [calls(f"r{step}"), result(f"r{step}", f"ok {step}")]
    budget = 8_000 if far else 2_000
    conversation = ctxwindow.Conversation(messages)
    windower = ctxwindow.Windower(PipelineStrategy(stages=stages), budget)
    seen: list[tuple[list[Any], ctxwindow.Window[Any]]] = []
    for step in range(4):
        new = [calls(f"c{step}"), result(f"c{step}", f"ok {step} " * (4 if far else 20))]
        if given == "list":
            messages = [dict(message) for message in messages + new]  # rebuilt, as JSON
            window = windower.select(messages)
        else:
            conversation.extend(new)
            messages = list(conversation.originals)
            window = windower.select(conversation)
        assert any("cut the tool result" in note for note in window.record.notes)
        seen.append((messages, window))
    # the 182 units before the log; far back, most of the 140 rounds after it too
    assert len(carried) == 3 and min(carried) > (282 if far else 100), carried
    logs = {m["content"] for _, w in seen for m in w.messages if m.get("tool_call_id") == "log"}
    assert len(logs) == 1  # one cut, request after request
    for originals, window in seen:  # fresh ones after: their lists are remembered too
        fresh = ctxwindow.Windower(PipelineStrategy(stages=stages), budget).select(originals)
        assert window.messages == fresh.messages
        assert window.record.to_dict()["decisions"] == fresh.record.to_dict()["decisions"]


@pytest.mark.parametrize("how", ["select", "aselect", "time_limit"])
@pytest.mark.parametrize(
    "stages",
    [["fixed"], [{"strategy": "clear_tool_outputs", "when": "always", "min_tokens": 5}]],
    ids=["fixed", "clearing"],
)
def test_a_stage_handed_a_list_the_host_cut_leaves_holding_the_turn_to_the_host(
    stages: list[Any], how: str
) -> None:
    """A turn of two rounds whose results are each far over the budget: the host keeps
    the newest exchange, its result cut, and hands the stages a list with that cut. A
    stage's own visit is nested in the pipeline's (begun while it runs): it must not
    hold the turn again, cutting the older round's result the host let go (the
    pipeline then sent that cut on as its own stand-in: a ContractViolation, found by
    the property tests), whether it runs on the caller's thread, on the event loop or
    in a worker under a time limit."""
    from ctxwindow.testing import calls, check_window, result

    log = "row 1,2,3 " * 1_000
    messages = [{"role": "user", "content": "0"}, calls("r0"), result("r0", log)]
    messages += [calls("r1"), result("r1", log)]
    options: dict[str, Any] = {"time_limit": 30} if how == "time_limit" else {}
    strategy = PipelineStrategy(stages=stages, **options)
    if how == "aselect":
        window = asyncio.run(strategy.aselect(messages, 284))
    else:
        window = strategy.select(messages, 284)
    assert window.tokens <= 284
    assert window.messages[-2:][0] is messages[3]  # the newest exchange, its result cut
    assert "cut the tool result of message 4" in window.record.notes[0]
    assert messages[2] not in window.messages  # not sent whole
    assert check_window(strategy, messages, 284) is not None


def test_a_transform_stage_only_transforms_and_later_stages_fit_the_budget() -> None:
    messages = agent(10)
    budget = 1200
    alone = ClearToolOutputs(keep_recent=2, min_tokens=20).select(messages, budget)
    assert alone.record.count("dropped") > 0  # alone, it has to drop to fit
    window = PipelineStrategy(stages=[CLEAR, "summarize"]).select(messages, budget)
    first = window.record.stages[0]
    assert first.strategy == "clear_tool_outputs" and first.count("dropped") == 0
    assert first.tokens_after > budget  # it left the fitting to the summarize stage
    assert window.record.stages[1].engaged and window.tokens <= budget
    assert window.record.count("dropped") == 0  # nothing lost: cleared or summarized


def test_clearing_first_can_make_later_stages_unnecessary() -> None:
    messages = agent(6)
    budget = tokens(messages) - 50
    window = PipelineStrategy(stages=[CLEAR, "summarize"]).select(messages, budget)
    cleared, summarize = window.record.stages
    assert cleared.engaged and not summarize.engaged
    assert window.record.count("replaced") == cleared.count("replaced") > 0
    assert window.record.count("summarized") == 0
    assert not any(m.get("role") == "system" and m is not messages[0] for m in window.messages)


def test_budget_share_leaves_a_later_stage_something_to_choose_from() -> None:
    # results small enough that the newest ones, kept whole, fit what the budget leaves
    messages = agent(16, words=60)
    stages = [CLEAR, {"strategy": "summarize", "budget_share": 1.5}, "sliding"]
    window = PipelineStrategy(stages=stages).select(messages, 400)
    cleared, summarized, chosen = window.record.stages
    assert (cleared.budget, summarized.budget, chosen.budget) == (400, 600, 400)
    assert summarized.engaged and 400 < summarized.tokens_after <= 600
    assert chosen.engaged and window.tokens <= 400
    assert window.record.count("summarized") > 0 and chosen.count("dropped") > 0
    # what sliding dropped, the summary it keeps was written from: summarized, said so
    later = [  # dropped by sliding: a unit of its own, or one cleared first
        d
        for d in window.record.decisions
        if d.reason.startswith("stages[2] sliding: neither") or "sliding dropped it" in d.reason
    ]
    (summary,) = [m for m in window.messages if m.get("metadata", {}).get("synthetic")]
    written_from = {int(ref[1:]) for ref in summary["metadata"]["covers"]}
    assert any(set(d.positions) <= written_from for d in later)
    for d in later:  # those it was not written from are dropped
        if set(d.positions) <= written_from:
            assert d.action == "summarized"
            assert d.reason.endswith("in the summary stages[1] summarize wrote")
        else:
            assert d.action == "dropped" and not set(d.positions) & written_from
    # without the share, summarize fits the budget itself and sliding has nothing to do
    same = PipelineStrategy(stages=[CLEAR, "summarize", "sliding"]).select(messages, 400)
    assert not same.record.stages[2].engaged


def test_engaging_within_budget_follows_the_stages() -> None:
    messages = agent(6)
    roomy = 100_000
    lazy = PipelineStrategy(stages=[CLEAR, "fixed"]).select(messages, roomy)
    assert lazy.record.engaged is False and lazy.messages == messages
    assert lazy.record.stages == ()
    eager = PipelineStrategy(stages=[{**CLEAR, "when": "always"}, "fixed"]).select(messages, roomy)
    assert eager.record.engaged is True
    assert eager.record.stages[0].engaged and not eager.record.stages[1].engaged
    assert eager.tokens < tokens(messages)


def test_third_party_strategy_as_a_stage_by_name() -> None:
    """recency-decay is the plugin tutorial's package, installed like any third party."""
    messages = agent(10)
    window = PipelineStrategy(stages=[CLEAR, "recency-decay"]).select(messages, 900)
    assert window.record.stages[1].strategy == "recency-decay"
    assert window.tokens <= 900


class _Paid(BaseStrategy):
    """A real (if tiny) strategy that reports LLM usage, as an LLM-backed one would."""

    name = "paid-fixed"
    requires_llm: ClassVar[bool] = True  # type: ignore[misc]

    @property
    def billing(self) -> dict[str, str]:
        return {"provider": "local", "model": "m"}

    def engages_within_budget(self, history: History) -> bool:
        return True

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        for unit in range(len(history.units)):
            selection.keep(unit, "kept")
        selection.llm = LLMUsage("local", "m", calls=1, prompt_tokens=10, completion_tokens=2)
        return selection


def test_llm_usage_is_summed_over_stages_and_billing_comes_from_a_paying_stage() -> None:
    pipeline = PipelineStrategy(stages=[_Paid(), _Paid()])
    assert pipeline.requires_llm is True
    assert pipeline.billing == {"provider": "local", "model": "m"}
    window = pipeline.select(agent(2), 100_000)
    assert window.record.llm == LLMUsage("local", "m", 2, 20, 4)
    assert [stage.llm for stage in window.record.stages] == [LLMUsage("local", "m", 1, 10, 2)] * 2
    assert PipelineStrategy(stages=["fixed"]).requires_llm is False


def test_async_gives_the_sync_record() -> None:
    messages = agent(10)
    pipeline = PipelineStrategy(stages=[CLEAR, "summarize", "sliding"])
    sync = pipeline.select(messages, 1000)
    asynchronous = asyncio.run(pipeline.aselect(messages, 1000))
    assert asynchronous.messages == sync.messages
    assert [d.to_dict() for d in asynchronous.record.decisions] == [
        d.to_dict() for d in sync.record.decisions
    ]
    assert [s.strategy for s in asynchronous.record.stages] == [
        s.strategy for s in sync.record.stages
    ]


def test_a_cut_newest_user_message_reaches_the_stages_cut() -> None:
    messages = [*agent(3), {"role": "user", "content": "long question " * 400}]
    window = PipelineStrategy(stages=[CLEAR, "fixed"], oversize="truncate").select(messages, 300)
    assert window.tokens <= 300
    newest = window.messages[-1]
    assert newest is not messages[-1] and "cut by ctxwindow" in newest["content"]
    assert window.record.decisions[-1].action == "truncated"


class SDKMessage:
    """A message object an SDK returns (read through ``model_dump()``, as the openai
    SDK's): an agent loop appends the response's message to its history as it is."""

    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return dict(self.fields)


@pytest.mark.parametrize("stages", [["fixed"], [CLEAR, "sliding"]])
def test_sdk_message_objects_in_the_current_turn_are_pinned_for_the_stages(stages: Any) -> None:
    call = {"id": "a", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
    response = SDKMessage(role="assistant", content=None, tool_calls=[call])
    messages: list[Any] = [
        {"role": "system", "content": "agent"},
        {"role": "user", "content": "task " * 200},
        {"role": "user", "content": "next"},
        response,
        {"role": "tool", "tool_call_id": "a", "content": "x" * 400},
    ]
    window = PipelineStrategy(stages=stages).select(messages, 150)
    assert window.tokens <= 150
    # the current turn (its exchange pinned for the stages) comes back as passed
    assert window.messages[-3:] == messages[-3:] and window.messages[-2] is response


# -- configuration errors, each naming the stage ---------------------------------------
def select_with(stages: Any) -> None:
    ctxwindow.from_config({"strategy": "pipeline", "budget": 1000, "stages": stages})


def test_unknown_stage_name() -> None:
    with pytest.raises(UnknownStrategy) as raised:
        select_with(["clear_tool_outputs", "semantik"])
    text = str(raised.value)
    assert text.startswith("strategy 'pipeline': stages[1] ('semantik'): unknown strategy")
    assert "installed strategies: " in text and "fixed" in text


def test_a_first_party_stage_kept_out_is_named_with_what_kept_it_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", "ctxwindow-sliding")
    ctxwindow.reload_plugins()
    try:
        with pytest.raises(UnknownStrategy) as raised:
            select_with(["fixed", {"strategy": "sliding"}])
    finally:
        monkeypatch.delenv("CTXWINDOW_DISABLE_PLUGINS")
        ctxwindow.reload_plugins()
    assert "stages[1] ('sliding')" in str(raised.value)
    # Hidden by the environment, not missing: the error says which variable kept it out.
    assert "ctxwindow-sliding (CTXWINDOW_DISABLE_PLUGINS)" in str(raised.value)
    assert raised.value.install_hint == "pip install ctxwindow-sliding"


@pytest.mark.parametrize(
    ("stages", "expected"),
    [
        ([], "option 'stages' is empty; list at least one"),
        (
            ["fixed", {"strategy": "clear_tool_outputs", "keep_recnt": 2}],
            "stages[1] ('clear_tool_outputs'): unknown option(s) 'keep_recnt'; valid options: "
            "keep_recent, min_tokens, ",
        ),
        (
            [{"strategy": "clear_tool_outputs", "keep_recent": "two"}],
            "stages[0] ('clear_tool_outputs'): strategy 'clear_tool_outputs': option "
            "'keep_recent' expects int, got str 'two'",
        ),
        (
            [{"strategy": "fixed", "max_messages": -1}],
            "stages[0] ('fixed'): strategy 'fixed': option 'max_messages' must be >= 0",
        ),
        (
            ["fixed", {"strategy": "pipeline", "stages": ["fixed"]}],
            "stages[1] ('pipeline'): a pipeline cannot be a stage of a pipeline",
        ),
        ([{"keep_recent": 2}], "stages[0] has no 'strategy'"),
        ([3], "stages[0] must be a strategy name, a table with 'strategy'"),
        ([{"strategy": 7}], "stages[0]: 'strategy' must be a name (str), got 7"),
        ("fixed", "option 'stages' expects list | tuple, got str 'fixed'"),
        (
            ["clear_tool_outputs", {"strategy": "fixed", "budget_share": 2.0}],
            "stages[1] ('fixed'): 'budget_share' is for the stages before the last",
        ),
        (
            [{"strategy": "summarize", "budget_share": "twice"}, "fixed"],
            "stages[0] ('summarize'): 'budget_share' must be a number > 0",
        ),
        (
            [{"strategy": "summarize", "budget_share": 0}, "fixed"],
            "stages[0] ('summarize'): 'budget_share' must be a number > 0",
        ),
    ],
)
def test_bad_stages_are_clear_errors(stages: Any, expected: str) -> None:
    with pytest.raises(InvalidOption) as raised:
        select_with(stages)
    assert expected in str(raised.value)


def test_a_pipeline_object_cannot_be_a_stage_either() -> None:
    inner = PipelineStrategy(stages=["fixed"])
    with pytest.raises(InvalidOption, match=r"stages\[0\]: a pipeline cannot be a stage"):
        PipelineStrategy(stages=[inner])


def test_the_cli_explains_a_pipeline(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "chat.json").write_text(json.dumps(agent(8)))
    (tmp_path / "ctxwindow.toml").write_text(
        'strategy = "pipeline"\nbudget = 900\n'
        'stages = [{ strategy = "clear_tool_outputs", keep_recent = 1 }, "summarize"]\n'
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxwindow",
            "select",
            "chat.json",
            "--explain",
            "--config",
            "ctxwindow.toml",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stderr.startswith("strategy pipeline | budget 900")
    assert "note: stages[0] clear_tool_outputs: tokens " in done.stderr
    assert "note: stages[1] summarize: tokens " in done.stderr
    assert len(json.loads(done.stdout)) < len(agent(8))


def test_stage_records_survive_choosing_in_a_worker_thread() -> None:
    """With time_limit the host chooses in a worker thread (or task): the stage records
    still reach the pipeline's record."""
    pipeline = PipelineStrategy(stages=[CLEAR, "summarize", "fixed"], time_limit=60.0)
    for window in (
        pipeline.select(agent(10), 900),
        asyncio.run(pipeline.aselect(agent(10), 900)),
    ):
        assert [s.strategy for s in window.record.stages] == [
            "clear_tool_outputs",
            "summarize",
            "fixed",
        ]
        assert window.tokens <= 900


class _Broken(BaseStrategy):
    name = "broken"

    def choose(self, history: History) -> Selection:
        raise RuntimeError("index out of date")


def test_a_failing_stage_is_named() -> None:
    from ctxwindow.errors import PluginError

    with pytest.raises(PluginError, match=r"strategy 'broken' .* RuntimeError: index out of date"):
        PipelineStrategy(stages=[CLEAR, _Broken()]).select(agent(10), 900)


EXAMPLE_CHAT = json.loads(
    (Path(__file__).parents[3] / "examples" / "conversation.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize(
    ("stages", "budget"),
    [
        ([{"strategy": "sliding", "budget_share": 0.2}, "fixed"], 300),  # must-keep over share
        ([{"strategy": "summarize", "budget_share": 0.15}, "sliding"], 400),
        ([{"strategy": "fixed", "budget_share": 0.1}, "summarize"], 500),
    ],
)
def test_budget_shares_that_cannot_work_are_set_aside_not_failed(
    stages: list[Any], budget: int
) -> None:
    """The must-keep messages fit the pipeline's budget, so it must give a window: when a
    stage's share leaves a stage unable to keep what it must, the visit runs again on
    the full budget for every stage, and the record says so."""
    from ctxwindow.testing import check_window
    from ctxwindow_pipeline.pipeline import SHARES_SET_ASIDE

    strategy = PipelineStrategy(stages=stages)
    window = check_window(strategy, EXAMPLE_CHAT, budget)
    assert window is not None
    assert SHARES_SET_ASIDE in window.record.notes
    again = asyncio.run(strategy.aselect(EXAMPLE_CHAT, budget))
    assert again.record.decisions == window.record.decisions


@pytest.mark.parametrize("last", ["fixed", "summarize"])
def test_a_share_too_small_for_the_current_turn_is_set_aside_not_a_violation(last: str) -> None:
    """A stage whose share is too small for the current turn's tool results had its host
    cut them: a stand-in for a message the pipeline must send as its own host cut it.
    The pipeline took that attempt as it was (pinned, a stand-in was not looked at) and
    broke the contract (ContractViolation), where it must run again without the shares."""
    from ctxwindow.testing import check_window
    from ctxwindow_pipeline.pipeline import SHARES_SET_ASIDE

    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        for i in range(3)
    ]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Compare the three reports."},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *(
            {"role": "tool", "tool_call_id": f"c{i}", "content": "report text " * 60}
            for i in range(3)
        ),
    ]
    strategy = PipelineStrategy(stages=[{"strategy": "fixed", "budget_share": 0.8}, last])
    window = check_window(strategy, messages, 300)
    assert window is not None
    assert SHARES_SET_ASIDE in window.record.notes
    unshared = check_window(PipelineStrategy(stages=["fixed", last]), messages, 300)
    assert unshared is not None and window.messages == unshared.messages
    again = asyncio.run(strategy.aselect(messages, 300))
    assert again.record.decisions == window.record.decisions


def test_a_summary_a_later_stage_drops_leaves_its_units_dropped() -> None:
    """A first stage's summary of a run of units, dropped by the last stage: each unit
    is dropped, with what became of it, and no unit is summarized, so no made message is
    due (a run summarized, then each of its units dropped, broke the contract)."""
    from ctxwindow.testing import check_window

    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for n in range(200):
        role = "user" if n % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"message {n} about topic {n % 7} " * 10})
    strategy = PipelineStrategy(stages=[{"strategy": "summarize", "budget_share": 1.5}, "fixed"])
    window = check_window(strategy, messages, 2_000)
    assert window is not None and window.record.count("summarized") == 0
    reasons = {run.reason for run in window.record.decision_runs if run.action == "dropped"}
    assert any("then stages[1] fixed dropped it" in reason for reason in reasons), reasons


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    messages=wild_histories(),
    budget=st.integers(1, 3_000),
    share=st.sampled_from([0.2, 0.5, 1.5, 3.0]),
    first=st.sampled_from(["summarize", "sliding", "fixed"]),
)
def test_pipelines_with_budget_shares_keep_the_contract(
    messages: list[Any], budget: int, share: float, first: str
) -> None:
    from ctxwindow.testing.checks import checked_outcome

    strategy = PipelineStrategy(stages=[{"strategy": first, "budget_share": share}, "fixed"])
    checked_outcome(strategy, messages, budget)


@pytest.fixture
def summaries_then_newest(ctxwindow_register: Any) -> None:
    ctxwindow_register(SummariesThenNewest, name=SummariesThenNewest.name)


class SummariesThenNewest(BaseStrategy):
    """A last stage that keeps the summaries it is given, then the newest units."""

    name = "summaries-then-newest"

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        room = history.budget - history.must_keep_tokens
        for unit in range(len(history.units)):
            if any(history.messages[p].synthetic for p in history.span(unit)):
                selection.keep(unit, "a summary")
                room -= history.unit_tokens(unit)
        for unit in recent_units(history, room, skip=selection.kept):
            selection.keep(unit, "recent")
        return selection


@pytest.mark.usefixtures("summaries_then_newest")
def test_a_summary_covers_what_it_was_written_from_when_a_later_stage_drops_it() -> None:
    """A summary is written from more than the units its stage summarizes: the newest
    of them stay verbatim in the room it leaves. When a later stage dropped those, the
    pipeline's covers named only the summarized ones, though the summary quotes the
    rest, and the record called them dropped."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Plan trips."}]
    for n in range(40):
        messages.append(
            {"role": "user", "content": f"Leg {n}: Lisbon to Porto on day {n}, seat {n}A."}
        )
        messages.append({"role": "assistant", "content": f"Noted leg {n}, seat {n}A."})
    messages.append({"role": "user", "content": "Which seat on leg 3?"})
    stages = [{"strategy": "summarize", "budget_share": 1.6}, "summaries-then-newest"]
    window = ctxwindow.select(messages, 500, "pipeline", counter="approx", stages=stages)
    (summary,) = [m for m in window.messages if m.get("metadata", {}).get("synthetic")]
    covers = set(summary["metadata"]["covers"])
    written = {  # the summarize stage's own decisions, in the caller's positions
        p
        for d in window.record.stages[0].decisions
        if d.action == "kept" and "room the summary leaves" in d.reason
        for p in d.positions
    }
    kept = {id(m) for m in window.messages}
    dropped_later = {p for p in written if id(messages[p]) not in kept}
    assert dropped_later, "the case needs a written-from unit the last stage drops"
    assert {f"#{p}" for p in dropped_later} <= covers
    action = {p: d.action for d in window.record.decisions for p in d.positions}
    assert {action[p] for p in dropped_later} == {"summarized"}


def test_the_pipelines_task_statement_option_is_its_stages() -> None:
    """``task_statement = false`` on the pipeline reaches every stage given by name or
    table: each stage runs a visit of its own, which read its own option (true) and
    kept the small talk that opened the chat as the task statement."""
    messages = [{"role": "user", "content": "hello there, how are you today?"}]
    for n in range(30):
        messages.append({"role": "assistant", "content": f"reply {n} " + "word " * 30})
        messages.append({"role": "user", "content": f"question {n} " + "word " * 30})
    alone = ctxwindow.select(messages, 600, "fixed", task_statement=False)
    assert messages[0] not in alone.messages
    for stages in (["fixed"], [CLEAR, "fixed"], [{"strategy": "fixed", "max_messages": 40}]):
        window = PipelineStrategy(stages=stages, task_statement=False).select(messages, 600)
        assert window.messages == alone.messages, stages
        assert not any("task statement" in d.reason for d in window.record.decisions)
    # a stage that sets its own keeps it
    own = [{"strategy": "fixed", "task_statement": True}]
    window = PipelineStrategy(stages=own, task_statement=False).select(messages, 600)
    assert messages[0] in window.messages


def test_a_share_above_one_does_not_rewrite_the_summary_every_agent_round() -> None:
    """With a share of 1.5 the stages ran pinned first: the current turn's exchanges,
    pinned copies, changed summarize's input and checkpoints every round, and the
    summary was written again on most rounds (14 calls in 40 rounds where summarize
    alone made 4). A stage with at least the pipeline's budget keeps what the pipeline
    must unpinned, so the pipeline tries that first."""
    calls = [0]
    pipeline = PipelineStrategy(
        stages=[CLEAR, {"strategy": "summarize", "budget_share": 1.5}, "sliding"]
    )
    summarize = pipeline.stages[1].strategy
    for summarizer in summarize._summarizers:  # type: ignore[attr-defined]
        original = summarizer.summarize

        def counted(request: Any, _original: Any = original) -> Any:
            calls[0] += 1
            return _original(request)

        summarizer.summarize = counted
    conversation = ctxwindow.Conversation(agent(60, words=60))
    pipeline.select(conversation, 1_500)
    before = calls[0]
    for n in range(40):
        call = {"id": f"x{n}", "type": "function",
                "function": {"name": "find", "arguments": f'{{"q": "ORD{n:03d}"}}'}}  # fmt: skip
        conversation.append({"role": "assistant", "content": None, "tool_calls": [call]})
        conversation.append({"role": "tool", "tool_call_id": f"x{n}", "content": f"ORD{n:03d} ok"})
        window = pipeline.select(conversation, 1_500)
        assert window.tokens <= 1_500
    assert calls[0] - before <= 4, calls[0] - before


def _turn_with_a_big_older_result() -> list[dict[str, Any]]:
    """An agent's turn: a test log far over the budget, then one small round."""
    from ctxwindow.testing import calls, result, user

    return [
        {"role": "system", "content": "You are an agent."},
        user("Find the failing test and fix it."),
        calls("read"),
        result("read", "def test_a(): ... " * 10),
        calls("log"),
        result("log", "HEAD " + "test ok " * 5_000 + "TAIL: failed"),
        calls("fix"),
        result("fix", "patched"),
    ]


@pytest.mark.parametrize("oversize", ["raise", "cut"])
def test_a_stage_leaves_holding_the_turn_to_the_pipelines_own_policy(oversize: str) -> None:
    """Found by the contract's property test: under ``oversize='raise'`` the pipeline's
    visit keeps the turn's newest exchange alone, but its stage (``cut`` by default)
    held the turn and cut the log itself, a cut the pipeline could not account for
    (ContractViolation: the stand-in is not marked synthetic). Only the outer visit
    holds the turn, under its own policy; its stages see what it held and cut."""
    from ctxwindow.testing import check_window

    messages = _turn_with_a_big_older_result()
    clearing = {"strategy": "clear_tool_outputs", "when": "always", "min_tokens": 5}
    strategy = PipelineStrategy(oversize=oversize, stages=[clearing])
    window = check_window(strategy, messages, 600)
    assert window is not None and window.messages[-1] is messages[-1]
    logs = [m for m in window.messages if m.get("tool_call_id") == "log"]
    if oversize == "raise":  # an older round: no host cut, clear_tool_outputs clears it
        assert all("truncated" not in log["metadata"] for log in logs)
        assert all(log["metadata"]["synthetic"] for log in logs)
    else:  # held by the pipeline's visit, cut once, its head and tail kept
        [log] = logs
        assert log["metadata"]["truncated"] and log["content"].endswith("TAIL: failed")
