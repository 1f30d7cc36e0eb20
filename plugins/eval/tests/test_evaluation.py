"""The eval kit on the real shipped benchmark and on a user's own data."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from ctxwindow import ApproxCounter, BaseStrategy, Conversation, History, Message, Selection
from ctxwindow.kit import unit_text
from ctxwindow.testing.strategies import Raises, newest
from ctxwindow_eval import StrategySpec, evaluate, load_jsonl, load_locomo
from ctxwindow_eval.bench import (
    agent_history,
    alternated_ms,
    bench_strategy,
    significant,
    synthetic_history,
    to_json,
)
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
    assert got["trim_cached_over_warm"] == significant(row.trim_cached_ms / row.warm_ms)
    assert data["summary"]["fixed"]["warm_growth"] == 1.0  # one length: no growth
    assert data["import_ms"] is None  # not measured unless asked
    from ctxwindow_eval.bench import import_ms

    imports = import_ms(runs=1)  # a fresh interpreter's `import ctxwindow`
    assert imports > 0
    assert json.loads(to_json([row], imports=imports))["import_ms"] == imports


def test_a_warm_turn_and_its_anchors_are_timed_by_turns_in_blocks() -> None:
    """A ratio of our warm turn to an anchor's compares runs made under the same load:
    the two run by turns, a block of each, not one whole series after the other."""
    order: list[str] = []
    times = alternated_ms([lambda: order.append("ours"), lambda: order.append("trim")], 7, 3)
    assert order == ["ours"] * 3 + ["trim"] * 3 + ["ours"] * 3 + ["trim"] * 3 + ["ours", "trim"]
    assert len(times) == 2 and all(t >= 0 for t in times)


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
        return newest(history)


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
        return newest(history)


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


class _LazyModel(_CountingEmbedder):
    """Stands in for a model that loads on first use (as sentence-transformers' does):
    logs each call (the model, whether it came inside a timed cold run, whether the
    model was loaded before it, the texts) in the order the calls came."""

    log: ClassVar[list[tuple[_LazyModel, bool, bool, list[str]]]] = []
    #: Set by the spy on the bench's cold timer while a cold run's work runs.
    timing: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self.loaded = False

    def embed(self, texts: list[str]) -> list[list[float]]:
        _LazyModel.log.append((self, _LazyModel.timing, self.loaded, list(texts)))
        self.loaded = True
        return super().embed(texts)


class _PreloadableModel(_LazyModel):
    """A lazy model with ``preload()``, as SentenceTransformerEmbedder has."""

    def preload(self) -> None:
        self.loaded = True


class UnitsWithModel(BaseStrategy):
    """Test strategy: the newest units that fit, embedding each unit's text (the kit's
    ``unit_text``, as semantic embeds them) on every visit."""

    name = "test-units-with-model"
    model: ClassVar[type[_LazyModel]] = _LazyModel

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.embedder = self.model()

    def choose(self, history: History) -> Selection:
        self.embedder.embed([unit_text(history, u) for u in range(len(history.units))])
        return newest(history)


@pytest.fixture
def cold_runs(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], None]]:
    """Spies on the bench's cold timer: each probe appended is called as each cold run
    starts (after what the timer does untimed before it), and the models note the calls
    made inside a cold run. The timer itself runs as it is."""
    from ctxwindow_eval import bench

    timer = bench.median_each_ms
    probes: list[Callable[[], None]] = []

    def spied(work: Callable[[Any], Any], inputs: Sequence[Any], *args: Any, **kw: Any) -> float:
        def run(item: Any) -> Any:
            for probe in probes:
                probe()
            _LazyModel.timing = True
            try:
                return work(item)
            finally:
                _LazyModel.timing = False

        return timer(run, inputs, *args, **kw)

    monkeypatch.setattr(bench, "median_each_ms", spied)
    _LazyModel.log = []
    return probes


@pytest.mark.parametrize("model", [_LazyModel, _PreloadableModel])
def test_a_model_is_loaded_before_any_cold_run_of_any_entry_point(
    ctxwindow_register: Any,
    monkeypatch: pytest.MonkeyPatch,
    cold_runs: list[Callable[[], None]],
    model: type[_LazyModel],
) -> None:
    """A cold run is a process's first visit with the strategy built and its model
    loaded (preload() when the model has it, else one untimed embedding): loading it is
    not the visit's cost. Every entry point's: the one-call API and the adapter share a
    Windower of their own, whose strategy has a model of its own here."""
    ctxwindow_register(UnitsWithModel, name=UnitsWithModel.name)
    monkeypatch.setattr(UnitsWithModel, "model", model)
    bench_strategy(UnitsWithModel.name, 60, repeats=1)
    cold = [loaded for _, timed, loaded, _ in _LazyModel.log if timed]
    assert len(cold) >= 2  # the Windower's and the one-call API's, the adapter's too
    assert all(cold), cold
    if model is _PreloadableModel:  # loaded by preload(), not by an embedding
        assert not any(not loaded for _, _, loaded, _ in _LazyModel.log)


def test_every_cold_run_finds_no_history_remembered(
    cold_runs: list[Callable[[], None]],
) -> None:
    """Cold means a new process's state: neither the runner's memory of the lists it
    read nor the LangChain adapter's of its conversions holds an earlier run's or row's
    history (each opens with the same system message, so each would be compared with)."""
    from ctxwindow._recent import RECENT

    adapter = pytest.importorskip("ctxwindow_adapters.langchain")
    found: list[tuple[int, int]] = []
    cold_runs.append(lambda: found.append((len(RECENT), len(adapter._READS.remembered))))
    for size in (120, 140):
        bench_strategy("fixed", size, repeats=2)
    assert len(found) == 2 * 3 * 2  # two rows, three entry points, two cold runs each
    assert set(found) == {(0, 0)}, found
    assert len(adapter._READS.remembered) > 0  # the warm runs remember, as they should


def test_the_encoding_anchor_encodes_what_a_cold_run_embeds(
    ctxwindow_register: Any,
    monkeypatch: pytest.MonkeyPatch,
    cold_runs: list[Callable[[], None]],
) -> None:
    """The model's cold limit: one text per unit (a tool exchange is one) of a history
    as long as the cold runs' and never seen, as many texts as a cold run embeds, none
    embedded before; the PyTorch twin encodes the very same texts."""
    from ctxwindow_eval import bench

    ctxwindow_register(UnitsWithModel, name=UnitsWithModel.name)
    twin = _LazyModel()
    monkeypatch.setattr(bench, "_torch_twin", lambda embedder: twin)
    row = bench_strategy(UnitsWithModel.name, 60, repeats=1)
    assert row.encode_all_ms is not None and row.encode_all_torch_ms is not None
    cold = next(texts for _, timed, _, texts in _LazyModel.log if timed)  # the Windower's
    ours = [texts for model, _, _, texts in _LazyModel.log if model is not twin]
    *before, anchor = ours
    assert len(cold) < 60  # units, not messages: the history holds tool exchanges
    assert len(anchor) == len(cold)
    assert not set(anchor) & {text for texts in before for text in texts}
    assert [texts for model, _, _, texts in _LazyModel.log if model is twin][-1] == anchor


def test_an_agent_step_times_its_append_with_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the main bench's warm turn times its append, an agent step's clock runs over
    appending the step's messages and windowing: a clock of our own, moved by each piece
    of work, says which work the step's time holds (no speed is asserted)."""
    from ctxwindow import Windower
    from ctxwindow_eval import steps

    loop = steps._Loop("fixed", 100, 4000)
    clock = [0.0]
    extend, select = Conversation.extend, Windower.select

    def appended(self: Conversation, *args: Any, **kw: Any) -> Any:
        clock[0] += 1.0
        return extend(self, *args, **kw)

    def windowed(self: Windower, *args: Any, **kw: Any) -> Any:
        clock[0] += 0.25
        return select(self, *args, **kw)

    monkeypatch.setattr(steps, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(Conversation, "extend", appended)
    monkeypatch.setattr(Windower, "select", windowed)
    loop.step(timed=True)
    loop.step(timed=False)
    assert loop.times == [1.25]


def test_the_anchors_count_what_our_counter_counts() -> None:
    """The count loop and trim_messages' counter give an agent history (tool calls, tool
    results with their call ids, a speaker's name) the tokens ctxwindow's approx
    counter gives it: the same counter on every side."""
    from ctxwindow_eval.bench import _LangChain, tight_count

    history = agent_history(200, 3)
    history[2] = {**history[2], "name": "ada"}
    assert any(m.get("tool_call_id") for m in history) and any(m.get("name") for m in history)
    counter = ApproxCounter()
    ours = Conversation(history).view(counter, 4000).total_tokens
    assert tight_count(history, counter) == ours
    langchain = _LangChain.load()
    if langchain is None:
        pytest.skip("langchain-core not installed")
    assert sum(map(langchain.count, langchain.messages(history))) == ours


#: A time typed as a figure: "20 microseconds", "275.15 ms", "1-2 us", "5 µs", "about a
#: minute", "a few microseconds", "about a third of a cold visit" (the generated tables
#: are where such figures belong).
_UNIT = r"(?:ms|[µμ]s|us|milliseconds?|microseconds?|seconds?|minutes?|hours?)"
_TIMING = re.compile(
    rf"\b\d[\d,.]*\s*{_UNIT}\b"
    r"|\b(?:about|around|some|under|over|nearly|roughly|of|within|below|above)\s+"
    rf"(?:(?:one|two|three|four|five|six|seven|eight|nine|ten)(?: and a half)?|an?)\s+{_UNIT}\b"
    rf"|\b(?:a few|several|a couple of|tens of|hundreds of|thousands of)\s+{_UNIT}\b"
    r"|\b(?:a|one) (?:third|half|quarter|tenth|fifth) of an? (?:cold |warm )?"
    r"(?:visit|turn|run|window|second|millisecond)",
    re.IGNORECASE,
)
#: A block another program writes (`<!-- NAME: generated by docs_gen/... -->` to
#: `<!-- end of NAME -->`): its figures are read from docs/results.
_GENERATED = re.compile(r"<!-- ([\w-]+): generated by docs_gen/.*?<!-- end of \1 -->", re.S)
#: Every page a user reads: the docs, the README, each plugin's and example's README.
_PAGES = sorted(
    {
        *(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")),
        "README.md",
        *(p.relative_to(ROOT).as_posix() for p in ROOT.glob("plugins/*/README.md")),
        *(p.relative_to(ROOT).as_posix() for p in ROOT.glob("examples/*/README.md")),
    }
)


def test_the_timing_pattern_finds_times_in_every_spelling() -> None:
    """The page test is only as good as its pattern: each spelling below is a typed
    time, and the prose around figures that are not times is left alone."""
    typed = [
        "20 microseconds",
        "275.15 ms",
        "about 1-2 us per item",
        "5 µs",
        "3μs",
        "about a minute",
        "a few microseconds per pass",
        "of two seconds",
        "about a third of a cold visit",
    ]
    for text in typed:
        assert _TIMING.search(text), text
    for text in ("a budget of 4,000 tokens", "64 MiB", "the second stage", "use us-east-1"):
        assert not _TIMING.search(text), text


def test_every_page_a_user_reads_is_checked_for_typed_times() -> None:
    """A page added later is covered without anyone listing it."""
    assert {"README.md", "docs/evaluation.md", "plugins/pipeline/README.md"} <= set(_PAGES)
    assert any(page.startswith("examples/") for page in _PAGES)


@pytest.mark.parametrize("page", _PAGES)
def test_no_time_is_typed_by_hand_in_the_pages_prose(page: str) -> None:
    """Times go stale with every change and machine: a page points to the tables
    generated from docs/results (between generated markers) instead of typing one, in
    its prose and its example output alike."""
    text = _GENERATED.sub("", (ROOT / page).read_text(encoding="utf-8"))
    typed = [" ".join(m.group(0).split()) for m in _TIMING.finditer(text)]
    assert not typed, f"{page}: {typed}"


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


def test_an_agent_run_from_one_task_appends_tool_rounds(tmp_path: Path) -> None:
    """bench --agent-steps --one-task: one request, then tool rounds only, each result a
    record with identifiers; a step appends a round naming one of them, so the current
    turn (and the query of a strategy that reads it) is the whole history."""
    from ctxwindow import Conversation, get_counter
    from ctxwindow.testing.commands import run_command
    from ctxwindow_eval import steps

    for size in (300, 301):
        history, ids = steps.task_history(size)
        assert len(history) == size
        roles = [m["role"] for m in history]
        assert roles.count("user") == 1 and roles[:2] == ["system", "user"]
        results = [json.loads(m["content"]) for m in history if m["role"] == "tool"]
        assert [r["reservation_id"] for r in results] == ids
        assert all(60 <= len(r["notes"].split()) <= 600 for r in results)
    step = next(steps.agent_steps(ids, requests=False))
    assert [m["role"] for m in step] == ["assistant", "tool"]
    assert 60 <= len(json.loads(step[1]["content"])["notes"].split()) <= 610  # a round's
    named = json.loads(step[0]["tool_calls"][0]["function"]["arguments"])["reservation_id"]
    assert named in ids and named in step[1]["content"]
    view = Conversation(history + step).view(get_counter("approx"), 4000)
    assert len(view.current_turn) == len(view.units) - 1  # all but the system prompt
    out = tmp_path / "task.json"
    result = run_command(
        "bench", "--agent-steps", "--one-task", "-s", "sliding", "--sizes", "100,200",
        "--repeats", "2", "--json", str(out),
    )  # fmt: skip
    assert result.code == 0, result.error()
    assert "of a run from one task" in result.out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["one_task"] is True
    assert [(r["strategy"], r["messages"]) for r in data["rows"]] == [
        ("sliding", 100),
        ("sliding", 200),
    ]
