"""What ``ctxwindow eval`` and ``ctxwindow bench`` take and how they score it: bad
input stops early with an error naming what to fix, and every figure means what the
docs say (verbatim is whole, a summary is a summary, a table cuts nothing short)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwindow import BaseStrategy, History, Message, Selection
from ctxwindow.errors import ConfigError
from ctxwindow.testing.commands import run_command
from ctxwindow_eval import (
    StrategySpec,
    commands,
    evaluate,
    evaluate_agent,
    load_jsonl,
    load_locomo,
    load_trajectories,
)
from ctxwindow_eval import bench as bench_module
from ctxwindow_eval.agent_metrics import score_step
from ctxwindow_eval.bench import BenchRow
from ctxwindow_eval.metrics import window_contents
from ctxwindow_eval.report import columns, markdown, series


def write_chat(tmp_path: Path, messages: list[Any], questions: list[Any]) -> tuple[str, str]:
    chat, asked = tmp_path / "chat.jsonl", tmp_path / "questions.jsonl"
    chat.write_text("\n".join(json.dumps(m) for m in messages), encoding="utf-8")
    asked.write_text("\n".join(json.dumps(q) for q in questions), encoding="utf-8")
    return str(chat), str(asked)


def small_chat(tmp_path: Path, questions: list[Any]) -> tuple[str, str]:
    """Twenty turns, the dog's name in the first."""
    messages = [{"role": "user", "content": "My dog is Rex.", "id": "m1"}]
    messages += [
        {"role": "user" if n % 2 else "assistant", "content": f"small talk {n} " * 4, "id": f"t{n}"}
        for n in range(1, 20)
    ]
    return write_chat(tmp_path, messages, questions)


def locomo_file(tmp_path: Path, turn: dict[str, Any], qa: dict[str, Any]) -> Path:
    sample = {
        "sample_id": "x",
        "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": [turn]},
        "qa": [qa],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


TURN = {"speaker": "A", "dia_id": "D1:1", "text": "hi"}


# 1 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("agent_steps", [False, True], ids=["bench", "agent-steps"])
def test_bench_by_default_skips_a_strategy_its_defaults_cannot_build_saying_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, agent_steps: bool
) -> None:
    monkeypatch.setattr(bench_module, "no_llm_strategies", lambda: ["fixed", "pipeline"])
    out = tmp_path / "b.json"
    extra = ["--agent-steps"] if agent_steps else []
    run = run_command("bench", *extra, "--sizes", "20", "--repeats", "1", "--json", str(out))
    assert run.code == 0, run.err
    assert "skipped pipeline" in run.out and "stages" in run.out
    assert [r["strategy"] for r in json.loads(out.read_text())["rows"]] == ["fixed"]


def test_eval_and_bench_share_one_list_of_default_strategies() -> None:
    notes: list[str] = []
    names = bench_module.default_strategies(notes.append)
    assert "pipeline" not in names and "fixed" in names
    assert any(note.startswith("skipped pipeline") for note in notes)


# 2 ---------------------------------------------------------------------------------
def test_a_turn_sent_cut_is_not_kept_verbatim(tmp_path: Path) -> None:
    cut = {"role": "user", "content": "Here is", "id": "m2"}
    cut["metadata"] = {"truncated": True, "stands_in_for": 2}
    whole = {"role": "user", "content": "Sure.", "id": "m1"}
    assert window_contents([whole, cut])[0] == {"m1"}
    log = "line of log text " * 400 + " The secret code is 4711."
    chat, asked = write_chat(
        tmp_path,
        [
            {"role": "user", "content": "Plan my trip.", "id": "m0"},
            {"role": "assistant", "content": "Sure.", "id": "m1"},
            {"role": "user", "content": log, "id": "m2"},
        ],
        [{"question": "The code?", "evidence": ["m2"], "answer": "4711"}],
    )
    result = evaluate("fixed:oversize=truncate", load_jsonl(chat, asked)[0], budgets=[300])
    assert result.rows[0].recall == 0.0 and result.rows[0].all_kept == 0.0


def test_a_task_statement_sent_cut_is_not_kept_but_a_cut_pending_result_is() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history = [
        {"role": "user", "content": "Book flight HAT123 " * 50},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "result " * 100},
    ]
    action = {"role": "assistant", "content": None, "tool_calls": [call]}
    stand_in = {**history[0], "metadata": {"truncated": True, "stands_in_for": 0}}
    cut_result = {**history[2], "metadata": {"truncated": True, "stands_in_for": 2}}
    scored = score_step(history, action, [stand_in, history[1], cut_result])
    assert scored.task_kept is False  # cut: not the statement kept
    assert scored.pending_kept is True and scored.pending_cut is True  # counted, and said
    assert score_step(history, action, history).task_kept is True


# 3 ---------------------------------------------------------------------------------
def test_a_category_given_as_a_string_is_scored_and_one_evidence_id_is_one_id(
    tmp_path: Path,
) -> None:
    chat, asked = small_chat(tmp_path, [{"question": "Dog?", "evidence": "m1", "category": "4"}])
    conversations, report = load_jsonl(chat, asked)
    (question,) = conversations[0].questions
    assert question.category == 4 and question.evidence == ("m1",)
    assert report.dropped_evidence == []
    run = run_command("eval", chat, "--questions", asked, "-s", "fixed", "--budgets", "9000")
    assert run.code == 0, run.err
    data = load_locomo(
        locomo_file(tmp_path, TURN, {"question": "q", "evidence": "D1:1", "category": "1"})
    )
    assert data[0][0].questions[0].evidence == ("D1:1",)
    assert data[0][0].questions[0].category == 1


@pytest.mark.parametrize("category", [[1], "four", 2.5, True])
def test_a_category_that_is_no_whole_number_is_a_clear_error(tmp_path: Path, category: Any) -> None:
    chat, asked = small_chat(
        tmp_path, [{"question": "Dog?", "evidence": ["m1"], "category": category}]
    )
    with pytest.raises(ConfigError, match=r"questions.jsonl: entry 0: category must be a whole"):
        load_jsonl(chat, asked)


@pytest.mark.parametrize("evidence", [{"id": "m1"}, [["m1"]], 1.5])
def test_evidence_that_is_no_list_of_ids_is_a_clear_error(tmp_path: Path, evidence: Any) -> None:
    chat, asked = small_chat(tmp_path, [{"question": "Dog?", "evidence": evidence}])
    with pytest.raises(ConfigError, match="entry 0: evidence must be a list of message ids"):
        load_jsonl(chat, asked)


# 4 ---------------------------------------------------------------------------------
def test_evidence_named_twice_weighs_once_and_shared_message_ids_are_refused(
    tmp_path: Path,
) -> None:
    chat, asked = small_chat(tmp_path, [{"question": "Dog?", "evidence": ["m1", "m1", "t19"]}])
    (question,) = load_jsonl(chat, asked)[0][0].questions
    assert question.evidence == ("m1", "t19")
    messages = [
        {"role": "user", "content": "My code is 5521.", "id": "m1"},
        {"role": "assistant", "content": "Noted.", "id": "m2"},
        {"role": "user", "content": "What was it?", "id": "m1"},
    ]
    chat, asked = write_chat(tmp_path, messages, [{"question": "Code?", "evidence": ["m1"]}])
    with pytest.raises(ConfigError, match="messages 0 and 2 share the id 'm1'"):
        load_jsonl(chat, asked)


# 5 ---------------------------------------------------------------------------------
def test_message_ids_in_metadata_are_read_as_the_core_reads_them(tmp_path: Path) -> None:
    chat, asked = write_chat(
        tmp_path,
        [
            {"role": "user", "content": "My dog is Rex.", "metadata": {"id": "m1"}},
            {"role": "assistant", "content": "Nice.", "metadata": {"id": "m2"}},
        ],
        [{"question": "Dog?", "evidence": ["m1"], "category": 4}],
    )
    conversations, report = load_jsonl(chat, asked)
    assert conversations[0].texts() == {"m1": "My dog is Rex.", "m2": "Nice."}
    assert evaluate(["fixed"], conversations, budgets=[9000]).rows[0].recall == 1.0
    assert report.dropped_evidence == []


# 6 ---------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--json", "--markdown", "--plot"])
def test_an_eval_output_whose_folder_is_missing_stops_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    chat, asked = small_chat(tmp_path, [{"question": "Dog?", "evidence": ["m1"]}])

    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("the run started")

    monkeypatch.setattr(commands.runner, "evaluate", never)
    target = str(tmp_path / "missing" / "out")
    error = run_command("eval", chat, "--questions", asked, "-s", "fixed", flag, target).error()
    assert f"{flag} '{target}'" in error and "does not exist" in error


@pytest.mark.parametrize("agent_steps", [False, True], ids=["bench", "agent-steps"])
def test_a_bench_output_whose_folder_is_missing_stops_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent_steps: bool
) -> None:
    def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("the run started")

    monkeypatch.setattr(commands.bench, "run", never)
    monkeypatch.setattr(commands.steps, "run", never)
    target = str(tmp_path / "missing" / "b.json")
    extra = ["--agent-steps"] if agent_steps else []
    error = run_command("bench", *extra, "-s", "fixed", "--json", target).error()
    assert f"--json '{target}'" in error and "does not exist" in error


# 7 ---------------------------------------------------------------------------------
def fake_row(name: str) -> BenchRow:
    return BenchRow(name, 1_000_000, 99_999_999, 12345.6789, 123456.789, 0.0038, 2.5, 0.0012)


def test_bench_tables_off_a_terminal_cut_no_label_or_figure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    labels = ["sliding:important_share=0.8,excerpts=false", "sliding:important_share=0.8"]
    monkeypatch.setattr(commands.bench, "run", lambda *_, **__: [fake_row(n) for n in labels])
    run = run_command("bench", "-s", "fixed")
    assert run.code == 0, run.err
    assert "…" not in run.out
    assert all(label in run.out for label in labels)
    assert "123,456.79" in run.out and "0.00380" in run.out


# 8 ---------------------------------------------------------------------------------
def test_bench_ratios_keep_three_significant_figures() -> None:
    row = fake_row("fixed")
    row.trim_cached_ms, row.warm_ms = 0.2962, 113.8932
    ratios = row.ratios()
    assert ratios["trim_cached_over_warm"] == 0.0026
    row.trim_cached_ms = 4128.4
    assert row.ratios()["trim_cached_over_warm"] == 36.25  # two decimals, as before
    assert row.to_dict()["trim_cached_over_warm"] == 36.25
    assert commands._cell(0.0026) == "0.00260" and commands._cell(0.352) == "0.352"


# 9 ---------------------------------------------------------------------------------
def test_the_recall_table_says_when_the_budget_was_too_small(tmp_path: Path) -> None:
    chat, asked = small_chat(tmp_path, [{"question": "Dog?", "evidence": ["m1"]}])
    result = evaluate(["fixed"], load_jsonl(chat, asked)[0], budgets=[3, 9000])
    head, cells = columns(result)
    at = head.index("too small")
    assert [line[at] for line in cells] == ["1", "0"]
    assert "| too small |" in markdown(result)
    result = evaluate(["fixed"], load_jsonl(chat, asked)[0], budgets=[9000])
    assert "too small" not in columns(result)[0]  # never too small: no column of zeros


# 10 --------------------------------------------------------------------------------
class EmptySummary(BaseStrategy):
    """Test strategy: the newest unit, and a summary of the rest that carries nothing."""

    name = "test-empty-summary"

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        newest = len(history.units) - 1
        selection.keep(newest, "newest")
        older = [u for u in range(newest) if u not in history.must_keep]
        covered = [history.message_id(p) for u in older for p in history.span(u)]
        for unit in older:
            selection.summarize(unit, "in the summary")
        if older:
            summary = Message(
                "system", "They chatted.", metadata={"synthetic": True, "covers": covered}
            )
            selection.add_synthetic(summary, before_unit=older[0])
        return selection


def test_with_summaries_is_given_whenever_a_window_held_a_summary(
    tmp_path: Path, ctxwindow_register: Any
) -> None:
    ctxwindow_register(EmptySummary, name=EmptySummary.name)
    chat, asked = small_chat(tmp_path, [{"question": "Talk?", "evidence": ["t2"]}])
    result = evaluate([EmptySummary.name, "fixed"], load_jsonl(chat, asked)[0], budgets=[60])
    summarized, plain = result.rows
    assert summarized.recall == 0.0 and summarized.recall_with_summaries == 0.0
    assert plain.recall_with_summaries is None  # no summary at all


# 11 --------------------------------------------------------------------------------
def test_the_plot_joins_budgets_in_order_and_a_strategy_given_twice_is_one_line(
    tmp_path: Path,
) -> None:
    chat, asked = small_chat(tmp_path, [{"question": "Dog?", "evidence": ["m1"]}])
    conversations = load_jsonl(chat, asked)[0]
    result = evaluate(["fixed", "fixed"], conversations, budgets=[9000, 30, 60])
    assert [budget for budget, _ in series(result)["fixed"]] == [30, 60, 9000]
    assert len(result.rows) == 3
    apart = [StrategySpec("fixed", label="mine"), StrategySpec("sliding", label="mine")]
    result = evaluate(apart, conversations, budgets=[60])
    assert [row.strategy for row in result.rows] == ["mine", "mine (2)"]


# 12 --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--repeats", "-1"], "--repeats wants a whole number of runs of 1 or more, got -1"),
        (["--repeats", "0"], "--repeats wants a whole number of runs of 1 or more, got 0"),
        (["--sizes=-5"], "--sizes wants history lengths of at least 1 message, got -5"),
        (["--sizes", "10,0"], "--sizes wants history lengths of at least 1 message, got 0"),
        (["--agent-steps", "--sizes", "5"], "at least 8 messages (one tool result"),
        (["--agent-steps", "--one-task", "--sizes", "5"], "at least 8 messages (one tool"),
        (["--one-task"], "--one-task times agent steps: give it with --agent-steps"),
    ],
)
def test_bench_arguments_are_checked_naming_the_flag(argv: list[str], says: str) -> None:
    assert says in run_command("bench", "-s", "fixed", *argv).error()


# 13 --------------------------------------------------------------------------------
def test_the_python_api_takes_one_strategy_name_and_refuses_bad_budgets(
    tmp_path: Path,
) -> None:
    chat, asked = small_chat(tmp_path, [{"question": "Dog?", "evidence": ["m1"]}])
    conversations = load_jsonl(chat, asked)[0]
    assert [row.strategy for row in evaluate("fixed", conversations, budgets=[60]).rows] == [
        "fixed"
    ]
    runs = tmp_path / "runs.jsonl"
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Do it " * 40},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    runs.write_text(json.dumps({"id": "r", "messages": messages}), encoding="utf-8")
    trajectories = load_trajectories(runs)
    assert evaluate_agent("fixed", trajectories, budgets=[30]).rows[0].strategy == "fixed"
    for bad, says in [([], "budgets is empty"), (2000, r"as \[2000\]"), ([0], "holds 0")]:
        with pytest.raises(ConfigError, match=says):
            evaluate(["fixed"], conversations, budgets=bad)
        with pytest.raises(ConfigError, match=says):
            evaluate_agent(["fixed"], trajectories, budgets=bad)


# 14 --------------------------------------------------------------------------------
def test_a_missing_or_empty_questions_file_is_named_as_the_questions_file(
    tmp_path: Path,
) -> None:
    chat, _ = small_chat(tmp_path, [])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    error = run_command("eval", chat, "--questions", str(empty), "-s", "fixed").error()
    assert f"questions file '{empty}' is empty" in error and '"question"' in error
    assert "messages" not in error.split("is empty")[0]
    missing = str(tmp_path / "nothere.jsonl")
    error = run_command("eval", chat, "--questions", missing, "-s", "fixed").error()
    assert f"questions file '{missing}' does not exist" in error


def test_stdin_without_questions_says_what_stdin_is_for() -> None:
    error = run_command("eval", "-", "-s", "fixed", stdin=b"[]").error()
    assert "stdin" in error and "--questions" in error and "does not exist" not in error


@pytest.mark.parametrize(
    ("turn", "qa", "says"),
    [
        (TURN, {"question": "q", "evidence": ["D1:1"], "category": [1]}, "question 0: category"),
        ({**TURN, "text": 5}, {"question": "q", "evidence": ["D1:1"]}, "turn 'D1:1' of session_1"),
    ],
)
def test_a_locomo_sample_at_fault_is_named_with_its_file(
    tmp_path: Path, turn: dict[str, Any], qa: dict[str, Any], says: str
) -> None:
    path = locomo_file(tmp_path, turn, qa)
    error = run_command("eval", str(path), "-s", "fixed").error()
    assert f"benchmark file '{path}': sample 0" in error and says in error
    assert "agent trajectories" not in error  # the file is LoCoMo's


# 15 --------------------------------------------------------------------------------
def test_trajectories_sharing_an_id_are_told_apart_with_a_warning(tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Do it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    path = tmp_path / "runs.jsonl"
    path.write_text(
        "\n".join(json.dumps({"id": "run", "messages": messages}) for _ in range(3)),
        encoding="utf-8",
    )
    with pytest.warns(UserWarning, match="trajectories share the id 'run'"):
        runs = load_trajectories(path)
    assert [run.id for run in runs] == ["run (line 1)", "run (line 2)", "run (line 3)"]
    assert len({run.sample for run in runs}) == 3  # three samples for the interval


def test_a_run_uses_a_memory_cache_unless_the_spec_names_one() -> None:
    """Results must not depend on what earlier runs left in a strategy's cache (a
    summary rolls on from the newest checkpoint's it finds), nor add the benchmark's
    texts to a user's: a strategy with a cache option runs on memory by default."""
    from ctxwindow_eval.agent_runner import _windowers

    assert StrategySpec.parse("semantic").run_options == {"cache": "memory"}
    assert StrategySpec.parse("semantic:cache=mine.db").run_options == {"cache": "mine.db"}
    assert StrategySpec.parse("fixed").run_options == {}
    (windower,) = _windowers([StrategySpec.parse("semantic")], 2_000, "approx")
    assert windower.strategy.cache.where == "memory"
