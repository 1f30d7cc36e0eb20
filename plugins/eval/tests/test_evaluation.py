"""The eval kit on the real shipped benchmark and on a user's own data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ctxwindow import BaseStrategy, History, Message, Selection
from ctxwindow.testing.strategies import Raises
from ctxwindow_eval import StrategySpec, evaluate, load_jsonl, load_locomo
from ctxwindow_eval.bench import agent_history, bench_strategy, synthetic_history, to_json
from ctxwindow_eval.dataset import Question
from ctxwindow_eval.metrics import key_terms, score, window_contents

ROOT = Path(__file__).resolve().parents[3]
LOCOMO = ROOT.parent / "shared" / "bench" / "locomo" / "locomo-dev.json"
needs_locomo = pytest.mark.skipif(not LOCOMO.exists(), reason=f"benchmark not at {LOCOMO}")


@pytest.fixture(scope="module")
def locomo() -> Any:
    return load_locomo(LOCOMO)


@needs_locomo
def test_loader_repairs_and_reports_the_known_evidence_defects(locomo: Any) -> None:
    conversations, report = locomo
    assert [c.id for c in conversations] == ["conv-26", "conv-41", "conv-42", "conv-44", "conv-47"]
    assert sum(len(c.questions) for c in conversations) == 998  # 1000 less 2 without evidence
    assert report.skipped_questions == ["conv-26#q30", "conv-26#q46"]
    assert report.dropped_evidence == [
        "conv-42#q58: 'D10:19'",
        "conv-42#q88: 'D'",
        "conv-47#q38: 'D4:36'",
    ]
    joined = next(q for q in conversations[0].questions if q.id == "conv-26#q37")
    assert joined.evidence == ("D8:6", "D9:17")
    ids = {m["id"] for c in conversations for m in c.messages}
    assert all(e in ids for c in conversations for q in c.questions for e in q.evidence)
    first = conversations[0].messages
    assert first[0] == {
        "role": "user",
        "content": "[Session 1: 1:56 pm on 8 May, 2023]",
        "id": "S1",
    }
    assert (
        first[1]["name"] == "Caroline" and first[1]["role"] == "user" and first[1]["id"] == "D1:1"
    )
    captioned = next(m for m in first if m["id"] == "D1:5")
    assert captioned["content"].endswith(
        "[shares an image: a photo of a dog walking past a wall with a painting of a woman]"
    )


@needs_locomo
def test_fixed_reproduces_the_reference_points(locomo: Any) -> None:
    conversations, report = locomo
    result = evaluate(["fixed"], conversations, load_report=report)
    recalls = [round(row.recall, 3) for row in result.rows]
    reference = [0.04, 0.10, 0.19, 0.36]  # the benchmark README's "most recent messages"
    assert recalls == pytest.approx(reference, abs=0.015), recalls
    assert all(row.questions == 774 for row in result.rows)  # categories 1-4
    assert result.rows[0].by_category.keys() == {1, 2, 3, 4}
    assert all(row.recall_with_summaries is None for row in result.rows)


def test_recall_counts_verbatim_ids_and_summaries_by_the_rule() -> None:
    texts = {
        "a": "Caroline adopted a golden retriever named Biscuit",
        "b": "We met in Lisbon in 2019",
    }
    question = Question("q", "What is the dog called?", ("a", "b"), 4, "Biscuit")
    window = [
        {"role": "user", "content": "We met in Lisbon in 2019", "id": "b"},
        {
            "role": "system",
            "content": "Summary: Caroline's dog is Biscuit.",
            "metadata": {"synthetic": True, "covers": ["a"]},
        },
    ]
    kept, summaries = window_contents(window)
    result = score(question, kept, summaries, texts)
    assert result.verbatim == 0.5
    assert result.with_summaries == 1.0  # the answer string is in the summary
    assert result.all_kept is False
    vague = [
        {
            "role": "system",
            "content": "They talked about pets.",
            "metadata": {"synthetic": True, "covers": ["a", "b"]},
        }
    ]
    kept, summaries = window_contents(vague)
    assert score(question, kept, summaries, texts).with_summaries == 0.0
    terms = [
        {
            "role": "system",
            "content": "Caroline adopted a golden retriever; lisbon 2019 trip",
            "metadata": {"synthetic": True, "covers": ["a", "b"]},
        }
    ]
    kept, summaries = window_contents(terms)
    assert key_terms(texts["b"]) == {"lisbon", "2019"}
    assert (
        score(Question("q", "?", ("a", "b"), 1, None), kept, summaries, texts).with_summaries == 1.0
    )


class SummarizeOld(BaseStrategy):
    """Test strategy: keeps the newest half of the budget and one summary of the rest."""

    name = "test-summary"

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        room = history.budget // 2 - history.must_keep_tokens
        unit = len(history.units) - 1
        while unit >= 0 and (unit in history.must_keep or history.unit_tokens(unit) <= room):
            if unit not in history.must_keep:
                selection.keep(unit, "recent")
                room -= history.unit_tokens(unit)
            unit -= 1
        older = [u for u in range(unit + 1) if u not in history.must_keep]
        covered = [history.message_id(p) for u in older for p in history.span(u)]
        text = " ".join(history.unit_text(u)[:40] for u in older)[: history.budget]
        for u in older:
            selection.summarize(u, "in the summary")
        summary = Message(
            "system", f"Summary: {text}", metadata={"synthetic": True, "covers": covered}
        )
        if older and history.counter.count_message(summary) <= history.budget // 2:
            selection.add_synthetic(summary, before_unit=older[0])  # where what it covers was
        return selection


@pytest.fixture
def summary_plugin(ctxwindow_register: Any) -> None:
    ctxwindow_register(SummarizeOld, name="test-summary")


@pytest.mark.usefixtures("summary_plugin")
def test_own_data_jsonl_and_summaries_scored_separately(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "Be brief.", "id": "sys"}]
    for turn in range(60):
        fact = f"My locker code is {1000 + turn}" if turn == 3 else f"small talk number {turn} " * 4
        messages.append({"role": "user", "content": fact, "id": f"u{turn}"})
        messages.append({"role": "assistant", "content": "noted " * 6, "id": f"a{turn}"})
    (tmp_path / "chat.jsonl").write_text("\n".join(json.dumps(m) for m in messages))
    questions = [
        {
            "question": "What is my locker code?",
            "evidence": ["u3"],
            "answer": "1003",
            "category": 4,
        },
        {"question": "What did I say last?", "evidence": ["u59", "missing-id"], "category": 4},
        {"question": "No evidence at all", "evidence": []},
    ]
    (tmp_path / "questions.jsonl").write_text("\n".join(json.dumps(q) for q in questions))
    conversations, report = load_jsonl(tmp_path / "chat.jsonl", tmp_path / "questions.jsonl")
    assert report.dropped_evidence == ["q1: 'missing-id'"]
    assert report.skipped_questions == ["q2"]
    result = evaluate(
        [StrategySpec("fixed"), StrategySpec("test-summary", label="summary")],
        conversations,
        budgets=[300, 100_000],
    )
    by = {(r.strategy, r.budget): r for r in result.rows}
    assert by["fixed", 300].recall == 0.5  # the newest turn, not the old locker code
    assert by["fixed", 100_000].recall == 1.0
    assert by["summary", 300].recall == 0.5
    assert by["summary", 300].recall_with_summaries == 1.0  # "1003" survives in the summary
    assert by["fixed", 300].recall_with_summaries is None


@needs_locomo
def test_cli_eval_writes_table_json_plot_and_markdown(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxwindow",
            "eval",
            str(LOCOMO),
            "-s",
            "fixed",
            "-s",
            "fixed:max_messages=40",
            "--budgets",
            "1000,4000",
            "--json",
            str(tmp_path / "r.json"),
            "--plot",
            str(tmp_path / "r.png"),
            "--markdown",
            str(tmp_path / "r.md"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Evidence recall" in result.stdout and "fixed:max_messages=40" in result.stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert [r["strategy"] for r in data["rows"]] == [
        "fixed",
        "fixed",
        "fixed:max_messages=40",
        "fixed:max_messages=40",
    ]
    assert data["load_report"]["skipped_questions"] == ["conv-26#q30", "conv-26#q46"]
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| fixed | 1000 |" in (tmp_path / "r.md").read_text()


def test_bench_measures_every_figure_without_asserting_speed() -> None:
    history = synthetic_history(1000)
    assert len(history) == 1000 and history[0]["role"] == "system"
    assert history[-1]["role"] == "user"  # the request the next window is for
    assert any(m.get("tool_calls") for m in history)
    row = bench_strategy("fixed", 300, repeats=3)
    assert row.messages == 300 and row.window_tokens <= 4000
    timed = (row.count_ms, row.cold_ms, row.warm_ms, row.select_cold_ms, row.select_warm_ms)
    timed += (row.adapter_cold_ms, row.adapter_warm_ms, row.trim_ms, row.trim_cached_ms)
    assert all(value is not None and value > 0 for value in timed)
    assert row.encode_new_ms is None  # fixed has no model
    # the anchor's window is alike ours, or the row says it is not
    assert row.trim_tokens_ratio is not None
    alike = abs(row.trim_tokens_ratio - 1) <= 0.05
    assert alike == (not any("like for like" in note for note in row.notes))
    data = json.loads(to_json([row]))
    assert data["counter"] == "approx" and data["budget"] == 4000
    (got,) = data["rows"]
    assert got["trim_cached_over_warm"] == round(row.trim_cached_ms / row.warm_ms, 2)
    assert data["summary"]["fixed"]["warm_growth"] == 1.0  # one length: no growth
    assert data["import_ms"] is None  # not measured unless asked
    from ctxwindow_eval.bench import import_ms

    imports = import_ms(runs=1)  # a fresh interpreter's `import ctxwindow`
    assert imports > 0
    assert json.loads(to_json([row], imports=imports))["import_ms"] == imports


def test_the_benchs_cold_histories_are_unseen_and_its_warm_ones_grow() -> None:
    """Cold means nothing remembered: each cold run gets a history of its own seed."""
    first, second = agent_history(200, 1), agent_history(200, 2)
    assert first[1:] != second[1:]
    assert agent_history(200, 1) == first  # reproducible
    assert max(len(m["content"] or "") for m in first if m["role"] == "tool") > 600
    # every cold run of every row in one process reads a history no row read before: the
    # runner remembers the lists it read, and a later row would otherwise find them warm
    seeds: list[int] = []

    def recorded(size: int, seed: int) -> list[dict[str, Any]]:
        seeds.append(seed)
        return agent_history(size, seed)

    for name in ("fixed", "fixed:max_messages=40"):
        bench_strategy(name, 120, repeats=2, history=recorded)
    cold = [seed for seed in seeds if seed != 7]  # 7: the base history, grown warm
    assert len(cold) == 2 * 3 * 2 and len(set(cold)) == len(cold)


class _CountingEmbedder:
    """Stands in for a model where only the bench's bookkeeping is under test: it
    counts the texts it is asked to embed."""

    def __init__(self) -> None:
        self.texts = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return [[float(len(text))] for text in texts]


class RecentWithModel(BaseStrategy):
    """Test strategy: the newest units that fit, embedding each text it reads."""

    name = "test-with-model"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.embedder = _CountingEmbedder()

    def choose(self, history: History) -> Selection:
        self.embedder.embed([history.unit_text(u) for u in range(len(history.units))])
        return _recent_that_fit(history)


def _recent_that_fit(history: History) -> Selection:
    selection = history.selection()
    room = history.budget - history.must_keep_tokens
    for unit in reversed(range(len(history.units))):
        if unit not in history.must_keep and history.unit_tokens(unit) <= room:
            selection.keep(unit, "recent")
            room -= history.unit_tokens(unit)
    return selection


def test_a_model_strategy_times_every_cold_entry_point_only_when_small(
    ctxwindow_register: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond the smallest size a model's cold runs are its embedding, three times over:
    the row times the Windower's and the encoding anchor, and says the others are not."""
    from ctxwindow_eval import bench

    ctxwindow_register(RecentWithModel, name="test-with-model")
    monkeypatch.setattr(bench, "MODEL_COLD_ENTRY_POINTS_UP_TO", 60)
    small = bench_strategy("test-with-model", 60, repeats=1)
    large = bench_strategy("test-with-model", 80, repeats=1)
    assert small.select_cold_ms and small.adapter_cold_ms and small.encode_all_ms
    assert large.select_cold_ms is None and large.adapter_cold_ms is None
    assert large.cold_ms and large.encode_all_ms and large.encode_new_ms
    assert any("not timed" in note for note in large.notes)
    assert not any("not timed" in note for note in small.notes)


class NewestTextSeen(BaseStrategy):
    """Test strategy: the newest units that fit, noting the newest unit's text of each
    visit, as a strategy caching by text would meet it."""

    name = "test-newest-text"
    seen: ClassVar[list[str]] = []

    def choose(self, history: History) -> Selection:
        NewestTextSeen.seen.append(history.unit_text(len(history.units) - 1))
        return _recent_that_fit(history)


def test_no_warm_turn_of_any_row_sends_a_text_an_earlier_row_sent(
    ctxwindow_register: Any,
) -> None:
    """The one-call API keeps its windowers, and their caches, from row to row: a warm
    turn repeating an earlier row's text would time a cache hit, not a turn."""
    ctxwindow_register(NewestTextSeen, name="test-newest-text")
    NewestTextSeen.seen = []
    for size in (60, 80):
        bench_strategy("test-newest-text", size, repeats=1)
    turns = [text for text in NewestTextSeen.seen if "one more question" in text]
    assert len(turns) >= 2 * 3 * 3  # warm, warm with caches cold, one-call warm: per row
    assert len(set(turns)) == len(turns)


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ('{"conversation": {}}', "a list of samples"),
        ("[1, 2]", "sample 0 is not a LoCoMo sample"),
        ('[{"conversation": {"speaker_a": "A"}}]', "sample 0 is not a LoCoMo sample"),
        ("[" * 100_000, "is not JSON"),
    ],
)
def test_a_benchmark_of_the_wrong_shape_is_a_clear_error(
    tmp_path: Path, payload: str, says: str
) -> None:
    from ctxwindow.errors import ConfigError

    path = tmp_path / "bench.json"
    path.write_text(payload, encoding="utf-8")
    with pytest.raises(ConfigError, match=says):
        load_locomo(path)
    with pytest.raises(ConfigError, match="is a directory"):
        load_locomo(tmp_path)


def own_data(tmp_path: Path, questions: list[dict[str, Any]]) -> tuple[str, str]:
    """A chat of 40 turns (the locker code in turn 3) and the questions, as files."""
    messages = [{"role": "system", "content": "Be brief.", "id": "sys"}]
    for turn in range(40):
        fact = f"My locker code is {1000 + turn}" if turn == 3 else f"small talk number {turn} " * 4
        messages.append({"role": "user", "content": fact, "id": f"u{turn}"})
        messages.append({"role": "assistant", "content": "noted " * 6, "id": f"a{turn}"})
    chat, asked = tmp_path / "chat.jsonl", tmp_path / "questions.jsonl"
    chat.write_text("\n".join(json.dumps(m) for m in messages), encoding="utf-8")
    asked.write_text("\n".join(json.dumps(q) for q in questions), encoding="utf-8")
    return str(chat), str(asked)


def test_cli_eval_scores_questions_without_a_category(tmp_path: Path) -> None:
    from ctxwindow.testing.commands import run_command

    chat, asked = own_data(
        tmp_path,
        [
            {"question": "What is my locker code?", "evidence": ["u3"]},
            {"question": "What did I say last?", "evidence": ["u39"]},
        ],
    )
    run = run_command("eval", chat, "--questions", asked, "-s", "fixed", "--budgets", "200,9000")
    assert run.code == 0, run.err
    said = " ".join(run.out.split())  # the title wraps to the table's width
    assert "uncategorised questions" in said and "0.500" in said and "1.000" in said
    assert "single-hop" not in run.out  # a category column only for categories present
    # with a categorised question too: its column, and every question in the recall
    chat, asked = own_data(
        tmp_path,
        [
            {"question": "What is my locker code?", "evidence": ["u3"]},
            {"question": "What did I say last?", "evidence": ["u39"], "category": 4},
            {"question": "An adversarial one", "evidence": ["u39"], "category": 5},
        ],
    )
    result = evaluate(["fixed"], load_jsonl(chat, asked)[0], budgets=[200])
    (row,) = result.rows
    assert row.questions == 2 and row.recall == 0.5 and row.uncategorised == 1
    assert row.by_category == {4: 1.0} and result.scored_categories() == (4,)
    run = run_command("eval", chat, "--questions", asked, "-s", "fixed", "--budgets", "200")
    assert run.code == 0, run.err
    said = " ".join(run.out.split())
    assert "categories 4 and uncategorised questions" in said and "single-hop" in said
    assert "multi-hop" not in run.out and "temporal" not in run.out


@pytest.mark.parametrize(
    ("questions", "says"),
    [
        ([{"question": "Q?", "evidence": ["u3"], "category": 5}], "none of --categories 1,2,3,4"),
        ([{"question": "Q?", "evidence": ["nowhere"]}], "no question has evidence"),
    ],
)
def test_cli_eval_that_scores_no_question_says_so(
    tmp_path: Path, questions: list[dict[str, Any]], says: str
) -> None:
    from ctxwindow.testing.commands import run_command

    chat, asked = own_data(tmp_path, questions)
    run = run_command("eval", chat, "--questions", asked, "-s", "fixed", "--json")
    assert run.code != 0
    assert "no question to score" in run.err and says in run.err
    assert not run.out.strip()  # no JSON of zeros
    assert run_command("eval", chat, "--questions", asked, "--categories", "5").code == (
        0 if "category" in questions[0] else 1
    )


def test_cli_eval_json_without_a_file_goes_to_stdout(tmp_path: Path) -> None:
    from ctxwindow.testing.commands import run_command

    chat, asked = own_data(tmp_path, [{"question": "Locker code?", "evidence": ["u3"]}])
    common = ("eval", chat, "--questions", asked, "-s", "fixed", "--budgets", "200,9000")
    run = run_command(*common, "--json")
    assert run.code == 0, run.err
    data = json.loads(run.out)  # JSON alone on stdout; the table on stderr
    assert [(r["budget"], r["recall"]) for r in data["rows"]] == [(200, 0.0), (9000, 1.0)]
    assert data["rows"][0]["uncategorised"] == 1
    assert "Evidence recall" in run.err
    written = tmp_path / "r.json"
    run = run_command(*common, "--json", str(written))
    assert run.code == 0, run.err
    timed = ("seconds", "median_ms_per_window")
    saved = json.loads(written.read_text(encoding="utf-8"))
    assert [{k: v for k, v in r.items() if k not in timed} for r in saved["rows"]] == [
        {k: v for k, v in r.items() if k not in timed} for r in data["rows"]
    ]
    assert "Evidence recall" in run.out and not run.err


def test_a_strategy_that_raises_keeps_nothing_and_the_others_are_still_scored(
    tmp_path: Path, ctxwindow_register: Any
) -> None:
    ctxwindow_register(Raises, name=Raises.name)  # the kit's: its choose raises
    chat, asked = own_data(tmp_path, [{"question": "My locker code?", "evidence": ["u3"]}])
    conversations, _ = load_jsonl(chat, asked)
    with pytest.warns(RuntimeWarning, match=f"strategy '{Raises.name}' raised at 1 question,"):
        result = evaluate(["fixed", Raises.name], conversations, budgets=[300, 100_000])
    assert result.recall("fixed", 300) == 0.0 and result.recall("fixed", 100_000) == 1.0
    flaky = next(r for r in result.rows if r.strategy == Raises.name and r.budget == 300)
    assert (flaky.questions, flaky.recall, flaky.raised) == (1, 0.0, 1)
    assert result.recall(Raises.name, 100_000) == 1.0  # all fits: the strategy is not asked
    assert flaky.first_error is not None and "the scoring table is empty" in flaky.first_error
    assert flaky.to_dict()["raised"] == 1


def test_an_agent_step_asks_about_what_the_history_holds(tmp_path: Path) -> None:
    """bench --agent-steps: the history's tool results are records with identifiers and
    each step names one of them, in words the history uses, so a strategy's ranking
    has something to rank (the main bench's warm turn matches nothing)."""
    from ctxwindow.testing.commands import run_command
    from ctxwindow_eval import steps

    history, ids = steps.identified_history(300)
    assert len(history) == 300 and ids
    results = [json.loads(m["content"]) for m in history if m["role"] == "tool"]
    assert [r["reservation_id"] for r in results] == ids
    step = next(steps.agent_steps(ids))
    assert [m["role"] for m in step] == ["user", "assistant", "tool"]
    named = json.loads(step[1]["tool_calls"][0]["function"]["arguments"])["reservation_id"]
    assert named in ids and named in step[0]["content"]
    assert {"plan", "flight", "price"} <= set(step[0]["content"].lower().split())
    row = steps.bench_steps("sliding", 300, steps=3)
    assert row.step_ms > 0 and 0 < row.window_tokens <= 4000
    out = tmp_path / "steps.json"
    result = run_command(
        "bench", "--agent-steps", "-s", "fixed", "--sizes", "100,200", "--repeats", "2",
        "--json", str(out),
    )  # fmt: skip
    assert result.code == 0, result.error()
    data = json.loads(out.read_text(encoding="utf-8"))
    assert [(r["strategy"], r["messages"]) for r in data["rows"]] == [
        ("fixed", 100),
        ("fixed", 200),
    ]
    assert data["summary"]["fixed"]["smallest"] == 100 and data["machine"]["cpus"]
