"""The agent kind of ``ctxwindow eval``: trajectories in, next-action recall, pending
exchange kept and task statement kept out, on tau-bench's airline runs and on a user's
own agent logs."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ctxwindow import BaseStrategy, BudgetTooSmall, History, Selection
from ctxwindow.testing.strategies import BadUnit
from ctxwindow.testing.strategies import Raises as Faulty
from ctxwindow_eval import evaluate_agent, load_trajectories
from ctxwindow_eval.agent_metrics import needed_values, pending_exchange, score_step
from ctxwindow_eval.spread import cluster_interval
from ctxwindow_eval.trajectories import looks_like_trajectories

ROOT = Path(__file__).resolve().parents[3]
TAU = ROOT.parent / "shared" / "bench" / "tau-airline" / "airline-dev.json"
LOCOMO = ROOT.parent / "shared" / "bench" / "locomo" / "locomo-dev.json"
RUNS = ROOT / "examples" / "agent-runs.jsonl"
needs_tau = pytest.mark.skipif(not TAU.exists(), reason=f"benchmark not at {TAU}")


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"id": call_id, "type": "function", "function": function}


def run() -> list[dict[str, Any]]:
    """A small trajectory: the action at 6 needs a user id, a payment id and an amount."""
    return [
        {"role": "system", "content": "Policy: refunds over 100 need approval. ZZZ999"},
        {"role": "user", "content": "I am user ann_77; refund order ORD-5521 please."},
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_order", id="x")]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"payment": "card_1234", "total": 250}'},
        {"role": "user", "content": "Go ahead."},
        {"role": "assistant", "content": None, "tool_calls": [call("c2", "approve", ok=True)]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("c3", "refund", user="ann_77", payment="card_1234", amount=250, note="ok"),
                call("c4", "log", code="ZZZ999", order=5521),
            ],
        },
    ]


def test_needed_values_follow_the_benchmark_rule() -> None:
    messages = run()
    needed = needed_values(messages[6], messages[:6])
    # string leaves of 3+ characters and numbers of 3+ digits seen past the system prompt;
    # "ok" is too short, ZZZ999 is only in the system prompt, 5521 is inside ORD-5521
    assert needed == {"ann_77", "card_1234", "250", "5521"}


def test_a_step_scores_recall_pending_and_task_from_the_window() -> None:
    messages = run()[:4]  # ends on the tool result the model waits on
    action = {"role": "assistant", "tool_calls": [call("c9", "refund", payment="card_1234")]}
    assert pending_exchange(messages) == range(2, 4)
    whole = score_step(messages, action, messages)
    assert (whole.recall, whole.pending_kept, whole.task_kept) == (1.0, True, True)
    without = score_step(messages, action, [messages[0], messages[1]])
    assert (without.recall, without.pending_kept, without.task_kept) == (0.0, False, True)
    cut = {**messages[3], "content": '{"payment": "card_1234" ...', "metadata": {}}
    cut["metadata"] = {"truncated": True, "stands_in_for": 3}
    stood = score_step(messages, action, [messages[0], messages[2], cut])
    assert stood.pending_kept is True and stood.pending_cut is True and stood.recall == 1.0
    nothing = score_step(messages, action, [])  # a strategy that raised
    assert (nothing.recall, nothing.pending_kept, nothing.task_kept) == (0.0, False, False)


def test_trajectory_files_of_every_accepted_shape(tmp_path: Path) -> None:
    listed = tmp_path / "runs.json"
    listed.write_text(json.dumps([{"task_id": 3, "trial": 1, "traj": run()}, run()]))
    first, second = load_trajectories(listed)
    assert (first.id, second.id) == ("task 3 trial 1", "trajectory 1")
    assert (first.sample, second.sample) == ("task 3", "run trajectory 1")
    assert list(first.actions()) == [2, 5, 6]
    lines = tmp_path / "runs.jsonl"
    lines.write_text("\n".join(json.dumps({"id": f"r{i}", "messages": run()}) for i in range(2)))
    assert [t.id for t in load_trajectories(lines)] == ["r0", "r1"]
    log = tmp_path / "one-run.jsonl"
    log.write_text("\n".join(json.dumps(m) for m in run()) + "\n")
    (only,) = load_trajectories(log)
    assert only.id == "one-run" and len(only.messages) == 7
    assert all(looks_like_trajectories(p) for p in (listed, lines, log))
    # a line separator inside a JSON string (written with ensure_ascii=False) is no line
    # break of the file: str.splitlines() broke the line there
    separated = tmp_path / "separated.jsonl"
    texts = [{"id": f"s{i}", "messages": run()} for i in range(2)]
    texts[0]["messages"][1] = {"role": "user", "content": "one\u2028two\u0085three"}
    separated.write_text("\n".join(json.dumps(t, ensure_ascii=False) for t in texts))
    assert looks_like_trajectories(separated)
    first, _ = load_trajectories(separated)
    assert first.messages[1]["content"] == "one\u2028two\u0085three"
    if LOCOMO.exists():
        assert not looks_like_trajectories(LOCOMO)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[{"no": "messages"}]', "entry 0 is not a trajectory"),
        ('[[{"content": "no role"}]]', "trajectory 0, message 0 is not an OpenAI message"),
        ('{"id": 1, "messages": []}\nnot json\n', "line 2 is not JSON"),
        ("[]", "holds no trajectories"),
    ],
)
def test_a_trajectory_file_of_the_wrong_shape_is_a_clear_error(
    tmp_path: Path, text: str, problem: str
) -> None:
    from ctxwindow.errors import ConfigError

    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem):
        load_trajectories(path)


class Raises(BaseStrategy):
    name = "raises-too-small"

    def choose(self, history: History) -> Selection:
        raise BudgetTooSmall(history.budget + 1, history.budget)


@pytest.fixture
def raising(ctxwindow_register: Any) -> None:
    ctxwindow_register(Raises, name="raises-too-small")


@pytest.mark.usefixtures("raising")
def test_steps_with_a_choice_are_counted_and_a_strategy_that_raises_keeps_nothing() -> None:
    runs = load_trajectories(RUNS)
    result = evaluate_agent(["fixed", "raises-too-small"], runs, budgets=[400, 100_000])
    small, roomy = result.row("fixed", 400), result.row("fixed", 100_000)
    assert small.steps > 0 and roomy.steps == 0 and roomy.recall is None
    assert small.task_kept == 1.0 and small.too_small == 0
    broken = result.row("raises-too-small", 400)
    assert broken.steps == small.steps and broken.too_small == broken.steps
    assert broken.recall == 0.0 and broken.task_kept == 0.0
    as_json = result.to_dict()
    assert as_json["kind"] == "agent" and len(as_json["rows"]) == 4


def test_the_interval_draws_whole_samples_and_is_the_same_every_run() -> None:
    """A sample's steps are drawn together: one big sample of misses weighs as one
    sample among many, not as its number of steps; samples all alike give a point."""
    assert cluster_interval([(1.0, 1)]) is None  # one sample says nothing of another
    assert cluster_interval([(2.0, 4), (1.5, 3)]) == pytest.approx((0.5, 0.5))
    spread = [(float(hits), 10) for hits in (10, 9, 10, 8, 10, 10, 7, 10)]
    low, high = cluster_interval(spread)  # type: ignore[misc]
    assert low < sum(h for h, _ in spread) / 80 < high <= 1.0
    assert cluster_interval(spread) == (low, high)
    clustered = cluster_interval([*spread, (0.0, 200)])  # one run of 200 misses
    assert clustered is not None and clustered[1] - clustered[0] > 0.3


@needs_tau
def test_the_recall_interval_groups_a_tasks_runs() -> None:
    """tau-bench's 100 runs are 25 tasks: the interval is over the tasks (those with a
    step over the budget), and holds the mean; a run alone is a sample when the file
    names no task."""
    runs = load_trajectories(TAU)
    row = evaluate_agent(["fixed"], runs, budgets=[2000]).row("fixed", 2000)
    assert 20 <= row.recall_samples <= len({run.task for run in runs}) == 25
    assert row.recall_interval is not None and row.recall is not None
    low, high = row.recall_interval
    assert low < row.recall < high and high - low < 0.3
    assert row.to_dict()["next_action_recall_interval"] == [round(low, 6), round(high, 6)]
    untasked = [replace(run, task=None) for run in runs]
    alone = evaluate_agent(["fixed"], untasked, budgets=[2000]).row("fixed", 2000)
    assert alone.recall == row.recall and alone.recall_samples > 3 * row.recall_samples
    assert alone.recall_interval is not None  # runs of one task as if unrelated: narrower
    assert alone.recall_interval[1] - alone.recall_interval[0] < high - low


@needs_tau
def test_recent_only_reproduces_the_benchmark_reference_points() -> None:
    """The benchmark's README: keeping the most recent messages that fit recalls 0.63 /
    0.83 / 0.89 at 2,000 / 3,000 / 4,000 tokens (with the task statement off, as that
    baseline keeps no first message)."""
    runs = load_trajectories(TAU)
    assert len(runs) == 100
    result = evaluate_agent(["fixed:task_statement=false"], runs)
    rows = [result.row("fixed:task_statement=false", b) for b in (2000, 3000, 4000)]
    assert [row.steps for row in rows] == [503, 265, 123]
    # within a point: where the pending exchange alone is over the budget, its results are
    # now cut to fit instead of lost, which the reference did not do
    assert [row.recall for row in rows] == pytest.approx([0.63, 0.83, 0.89], abs=0.01)
    assert all(row.pending_kept == 1.0 for row in rows)


def test_cli_finds_the_kind_and_writes_table_json_markdown_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "agent.json"
    markdown, plot = tmp_path / "agent.md", tmp_path / "agent.png"
    command = [sys.executable, "-m", "ctxwindow", "eval", str(RUNS), "-s", "fixed", "-s", "sliding"]
    outputs = ["--json", str(out), "--markdown", str(markdown), "--plot", str(plot)]
    done = subprocess.run(
        [*command, "--budgets", "400,600", *outputs],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "2 trajectories" in done.stdout and "next-action" in done.stdout
    rows = json.loads(out.read_text())["rows"]
    assert {(r["strategy"], r["budget"]) for r in rows} == {
        (s, b) for s in ("fixed", "sliding") for b in (400, 600)
    }
    assert markdown.read_text().startswith("| strategy | budget | steps | next-action recall")
    assert plot.read_bytes().startswith(b"\x89PNG")
    wrong = subprocess.run(
        [sys.executable, "-m", "ctxwindow", "eval", str(RUNS), "--kind", "locomo"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode != 0 and "agent-runs.jsonl' is not JSON" in wrong.stderr


def test_needed_values_leave_out_a_leading_system_prompt_only() -> None:
    """A log without a system prompt opens with the task statement: its values count."""
    with_system = run()
    without = with_system[1:]
    action = {"role": "assistant", "tool_calls": [call("c9", "refund", user="ann_77")]}
    assert needed_values(action, without[:1]) == {"ann_77"}
    assert needed_values(action, with_system[:1]) == set()  # only in the system prompt
    developer = [{"role": "developer", "content": "Ticket for ann_77."}, *without[1:2]]
    assert needed_values(action, developer) == set()


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (
            "first-is-a-chat.jsonl",
            json.dumps({"id": "chat", "messages": run()[:2]}) + "\n" + json.dumps(run()) + "\n",
        ),
        ("first-is-a-chat.json", json.dumps([{"id": "chat", "messages": run()[:2]}, run()])),
        ("one-pretty.json", json.dumps({"id": "one", "messages": run()}, indent=2)),
    ],
)
def test_trajectories_are_found_by_their_shape_not_a_first_tool_call(
    tmp_path: Path, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert looks_like_trajectories(path)
    assert sum(len(list(t.actions())) for t in load_trajectories(path)) == 3


def test_a_jsonl_with_a_broken_line_is_read_as_trajectories_naming_the_line(
    tmp_path: Path,
) -> None:
    from ctxwindow.testing.commands import run_command

    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps({"id": "ok", "messages": run()}) + '\n{"id": "cut", "mess\n')
    assert looks_like_trajectories(path)
    error = run_command("eval", str(path), "-s", "fixed").error()
    assert "line 2 is not JSON" in error and "LoCoMo" not in error


def test_a_file_of_neither_kind_says_what_each_kind_is(tmp_path: Path) -> None:
    from ctxwindow.testing.commands import run_command

    path = tmp_path / "neither.json"
    path.write_text('[{"no": "messages"}]')
    assert not looks_like_trajectories(path)
    error = run_command("eval", str(path), "-s", "fixed").error()
    assert "sample 0 is not a LoCoMo sample" in error
    assert "agent trajectories" in error and "OpenAI message lists" in error
    assert "--kind agent" in error and "--kind locomo" in error
    chat = tmp_path / "chat.jsonl"
    chat.write_text("\n".join(json.dumps(m) for m in run()[:2]))
    assert "no assistant message" in run_command("eval", str(chat), "-s", "fixed").error()


@pytest.fixture
def failing(ctxwindow_register: Any) -> None:
    """The kit's faulty strategies: one whose code raises, one that breaks the contract."""
    ctxwindow_register(Faulty, name=Faulty.name)
    ctxwindow_register(BadUnit, name=BadUnit.name)


@pytest.mark.usefixtures("failing")
def test_a_strategy_that_fails_keeps_nothing_and_the_others_are_still_scored() -> None:
    runs = load_trajectories(RUNS)
    with pytest.warns(RuntimeWarning) as caught:
        result = evaluate_agent(["fixed", Faulty.name, BadUnit.name], runs, budgets=[400, 600])
    fixed = result.row("fixed", 400)
    assert fixed.steps > 0 and fixed.raised == 0 and fixed.first_error is None
    for name, error in ((Faulty.name, "PluginError"), (BadUnit.name, "ContractViolation")):
        row = result.row(name, 400)
        assert row.steps == fixed.steps and row.raised == row.steps and row.too_small == 0
        assert row.recall == 0.0 and row.task_kept == 0.0
        assert row.first_error is not None and row.first_error.startswith(error)
    assert "the scoring table is empty" in (result.row(Faulty.name, 400).first_error or "")
    warned = [str(w.message) for w in caught if "ctxwindow eval" in str(w.message)]
    assert len(warned) == 2 and f"'{Faulty.name}'" in warned[0] and f"'{BadUnit.name}'" in warned[1]
    rows = {(r["strategy"], r["budget"]): r for r in result.to_dict()["rows"]}
    assert rows[(Faulty.name, 600)]["raised"] == result.row(Faulty.name, 600).steps
    assert "ValueError: faulty" in rows[(Faulty.name, 600)]["first_error"]
    from ctxwindow_eval import report

    head, cells = report.columns(result)
    assert cells[2][head.index("raised")] == str(result.row(Faulty.name, 400).raised)
    assert report.failures(result)[0].startswith(f"{Faulty.name} at 400: {fixed.steps} raised")


def test_the_plot_leaves_out_budgets_where_nothing_was_measured() -> None:
    from ctxwindow_eval import report

    result = evaluate_agent(["fixed"], load_trajectories(RUNS), budgets=[400, 100_000])
    assert result.row("fixed", 100_000).recall is None  # no step over that budget
    ((budget, recall), (roomy, nothing)) = report.series(result)["fixed"]
    assert (budget, roomy, nothing) == (400, 100_000, None) and recall is not None


def test_the_interval_is_a_column_on_a_page_and_under_the_recall_in_a_terminal() -> None:
    from ctxwindow_eval.report import markdown, table

    result = evaluate_agent(["fixed"], load_trajectories(RUNS), budgets=[400])
    (row,) = result.rows
    assert row.recall_interval is not None and row.recall_samples == 2
    low, high = row.recall_interval
    page = markdown(result).splitlines()
    head = [cell.strip() for cell in page[0].strip("|").split("|")]
    at = head.index("95% interval")
    assert head[at - 1] == "next-action recall"
    assert page[2].strip("|").split("|")[at].strip() == f"{low:.3f}-{high:.3f}"
    shown = table(result)
    names = [str(column.header) for column in shown.columns]
    assert "95% interval" not in names
    recall = shown.columns[names.index("next-action recall (95% interval)")]
    assert list(recall.cells) == [f"{row.recall:.3f} ({row.recall_steps})\n{low:.3f}-{high:.3f}"]


def shipped_runs() -> list[dict[str, Any]]:
    """The two sound runs of examples/agent-runs.jsonl, as objects with an id."""
    return [json.loads(line) for line in RUNS.read_text().splitlines() if line.strip()]


def orphaned(entry: dict[str, Any], **keys: Any) -> dict[str, Any]:
    """``entry``'s run with a tool result for a call nobody made at message 5 (after the
    exchange at 2-4 is whole), under ``keys`` instead of its id."""
    messages = list(entry["messages"])
    messages.insert(5, {"role": "tool", "tool_call_id": "call_3", "content": "{}"})
    return {**keys, "messages": messages}


def write_jsonl(path: Path, entries: list[Any], *, blank_first: bool = False) -> Path:
    path.write_text("\n" * blank_first + "\n".join(json.dumps(e) for e in entries) + "\n")
    return path


ORPHAN = "message 5: tool result for call 'call_3' does not follow an assistant message"


def test_a_broken_tool_exchange_stops_the_run_naming_its_line_and_the_way_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JSONL's line (a blank line first: the file's line, not the entry's index),
    its task, the message, and how to go on from the command line."""
    from ctxwindow.testing.commands import run_command

    monkeypatch.chdir(tmp_path)
    first, second = shipped_runs()
    bad = orphaned(second, task_id="refund-7", trial=0)
    write_jsonl(Path("my-agent-logs.jsonl"), [first, bad, second], blank_first=True)
    command = ["eval", "my-agent-logs.jsonl", "--kind", "agent", "--budgets", "400"]
    error = run_command(*command, "-s", "fixed", "-s", "sliding:task_statement=false").error()
    assert error == (
        "ctxwindow: error: my-agent-logs.jsonl: 1 of 3 trajectories is malformed; nothing "
        f"was evaluated: line 3 (task refund-7 trial 0), {ORPHAN} that made that call. To go "
        "on, fix it, drop broken tool exchanges (-s fixed:orphans=drop "
        "-s sliding:task_statement=false,orphans=drop), or leave it out (--skip-malformed)"
    )
    # a strategy that drops them already is not named; the way on runs
    error = run_command(*command, "-s", "fixed:orphans=drop", "-s", "sliding").error()
    assert "(-s sliding:orphans=drop)" in error and "fixed" not in error
    done = run_command(*command, "-s", "fixed:orphans=drop", "-s", "sliding:orphans=drop")
    assert done.code == 0, done.err
    assert "3 trajectories" in done.out and "next-action" in done.out


def test_skip_malformed_leaves_out_the_broken_ones_and_says_which(tmp_path: Path) -> None:
    from ctxwindow.testing.commands import run_command

    first, second = shipped_runs()
    path = write_jsonl(tmp_path / "logs.jsonl", [first, orphaned(second, id="r2"), second])
    out = tmp_path / "agent.json"
    done = run_command(
        "eval", str(path), "-s", "fixed", "--budgets", "400", "--skip-malformed", "--json", str(out)
    )
    assert done.code == 0, done.err
    said = " ".join(done.out.split())
    assert "2 trajectories" in said and "1 malformed left out" in said
    assert f"--skip-malformed left out 1 of 3 trajectories: line 2 (id 'r2'), {ORPHAN}" in said
    result = json.loads(out.read_text())
    assert result["trajectories"] == ["travel-lisbon", "bookshop-support"]
    assert result["left_out_malformed"] == [f"line 2 (id 'r2'), {ORPHAN} that made that call"]


def test_unreadable_messages_are_listed_by_index_the_first_few_then_a_count(
    tmp_path: Path,
) -> None:
    """A JSON list names each by its index (and id); a message no strategy could read is
    no broken exchange, so orphans=drop is no way on for it; when every trajectory is
    malformed, leaving them out is none either."""
    from ctxwindow.testing.commands import run_command

    first, second = shipped_runs()
    unreadable = {"id": "b", "messages": [*second["messages"][:1], {"role": "user", "content": 5}]}
    listed = tmp_path / "runs.json"
    listed.write_text(json.dumps([first, unreadable, second, *[unreadable["messages"]] * 4]))
    error = run_command("eval", str(listed), "-s", "fixed").error()
    assert "5 of 7 trajectories are malformed; nothing was evaluated" in error
    assert (
        "trajectory 1 (id 'b'), message 1: 'content' must be a string or a list of parts, got "
        "int; trajectory 3, message 1:" in error
    )
    assert "; trajectory 4, message 1: " in error and "; and 2 more. " in error
    assert error.endswith("To go on, fix them or leave them out (--skip-malformed)")
    listed.write_text(json.dumps([unreadable]))
    for extra in ((), ("--skip-malformed",)):
        error = run_command("eval", str(listed), "-s", "fixed", *extra).error()
        assert error.endswith(
            "1 of 1 trajectories is malformed; nothing was evaluated: "
            "trajectory 0 (id 'b'), message 1: 'content' must be a string "
            "or a list of parts, got int. To go on, fix it"
        )


class Counting(BaseStrategy):
    """Counts its windows (each raising BudgetTooSmall: it keeps nothing)."""

    name = "counting"
    windows = 0

    def choose(self, history: History) -> Selection:
        type(self).windows += 1
        raise BudgetTooSmall(history.budget + 1, history.budget)


def test_every_trajectory_is_checked_before_any_strategy_runs(
    tmp_path: Path, ctxwindow_register: Any
) -> None:
    """The malformed trajectory comes last: no window was made when the error comes; with
    skip_malformed the others are scored and the result names it."""
    from ctxwindow_eval.agent_runner import MalformedTrajectories

    ctxwindow_register(Counting, name=Counting.name)
    Counting.windows = 0
    first, second = shipped_runs()
    path = write_jsonl(tmp_path / "logs.jsonl", [first, second, orphaned(second)])
    runs = load_trajectories(path)
    with pytest.raises(MalformedTrajectories) as raised:
        evaluate_agent(["counting", "fixed"], runs, budgets=[400])
    assert Counting.windows == 0
    assert [str(fault) for fault in raised.value.faults] == [
        f"line 3, {ORPHAN} that made that call"
    ]
    assert str(raised.value).endswith(
        "To go on, fix it, drop broken tool exchanges ('counting:orphans=drop', "
        "'fixed:orphans=drop'), or leave it out (skip_malformed=True)"
    )
    result = evaluate_agent(["counting", "fixed"], runs, budgets=[400], skip_malformed=True)
    assert result.trajectories == ["travel-lisbon", "bookshop-support"]
    assert result.left_out == [f"line 3, {ORPHAN} that made that call"]
    assert Counting.windows == result.row("counting", 400).too_small > 0


def test_a_log_of_one_run_names_the_line_of_the_message(tmp_path: Path) -> None:
    """A JSONL of messages is one run: the fault is named by the message's line."""
    from ctxwindow_eval.agent_runner import MalformedTrajectories, screen_trajectories

    (_, second) = shipped_runs()
    path = write_jsonl(tmp_path / "one-run.jsonl", orphaned(second)["messages"], blank_first=True)
    (run_,) = load_trajectories(path)
    with pytest.raises(
        MalformedTrajectories, match=r"1 of 1 trajectories is malformed.*: line 7 \(message 5\)"
    ):
        screen_trajectories(["fixed"], [run_], cli=True)
    kept, faults = screen_trajectories(["fixed:orphans=drop"], [run_])
    assert kept == [run_] and faults == []


@pytest.mark.parametrize("kind", [(), ("--kind", "agent"), ("--kind", "locomo")])
def test_a_missing_file_is_said_plainly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: tuple[str, ...]
) -> None:
    from ctxwindow.testing.commands import run_command

    monkeypatch.chdir(tmp_path)
    error = run_command("eval", "nonexist.jsonl", *kind, "-s", "fixed").error()
    assert error == (
        "ctxwindow: error: file 'nonexist.jsonl' does not exist; DATA is agent trajectories "
        "(JSON or JSONL), LoCoMo's JSON, your messages JSONL (with --questions) or a "
        "benchmark's name (locomo, tau-airline)"
    )
    assert run_command("eval", "tau_airline").error().endswith("did you mean 'tau-airline'?")


@needs_tau
@pytest.mark.slow
def test_summarize_keeps_the_contract_at_every_step_of_the_benchmark() -> None:
    """Every step of every trajectory, at each budget: no step raised. A summary held at
    a bigger size than the room left (every summarizer failing to fit a smaller one)
    was kept whole, and the window ran over the budget at one step of 621."""
    result = evaluate_agent(["summarize"], load_trajectories(TAU))
    assert [(row.budget, row.raised, row.first_error) for row in result.rows] == [
        (budget, 0, None) for budget in (2000, 3000, 4000)
    ]
