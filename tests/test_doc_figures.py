"""The figures the docs quote in their prose agree with where they come from.

A figure a run measured is read from docs/results; a count or size that a short
deterministic computation gives is computed here. Each test fails when the page and its
source part, so a rerun that moves a figure, or a figure typed by hand, cannot go unseen.
"""

from __future__ import annotations

import importlib.util
import json
import re
import tracemalloc
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow.testing.strategies import FAULTY

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
BUDGETS = (1000, 2000, 4000, 8000)
#: The LoCoMo split's own README, beside the repository (not shipped with it).
LOCOMO_README = ROOT.parent / "shared" / "bench" / "locomo" / "README.md"


def prose(path: str) -> str:
    """The page with every run of whitespace as one space: a figure may wrap a line."""
    return " ".join((ROOT / path).read_text(encoding="utf-8").split())


def recall_json() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / "recall.json").read_text(encoding="utf-8"))
    return data


def recall_row(data: dict[str, Any], strategy: str, budget: int) -> dict[str, Any]:
    return next(r for r in data["rows"] if r["strategy"] == strategy and r["budget"] == budget)


def number(pattern: str, source: str) -> int:
    """The integer ``pattern``'s group holds in ``source`` (a test's constant)."""
    found = re.search(pattern, source, flags=re.M)
    assert found, pattern
    return int(found.group(1))


def figures(values: list[float], digits: int) -> str:
    """Recalls as the pages write a series of them: ``0.036 / 0.097 / ...``."""
    return " / ".join(f"{value:.{digits}f}" for value in values)


def test_evaluation_quotes_fixed_and_summarize_recall_from_recall_json() -> None:
    """The prose beside the recall table quotes recall.json's rows, as rounded there."""
    data, page = recall_json(), prose("docs/evaluation.md")
    fixed = [recall_row(data, "fixed", budget)["recall"] for budget in BUDGETS]
    assert f"`fixed` scores {figures(fixed, 3)} here" in page
    assert "keeps a tenth of the evidence at 2,000 tokens" in page
    assert round(recall_row(data, "fixed", 2000)["recall"], 1) == 0.1
    carried = recall_row(data, "summarize", 8000)["recall_with_summaries"]
    assert f"`summarize` at 8,000 tokens carries {round(carried * 100)}%" in page


def test_evaluation_says_semantic_and_sliding_beat_bm25_only_where_they_do() -> None:
    """ "beat it at every budget" is recall.json against the BM25 figures the page quotes."""
    data, page = recall_json(), prose("docs/evaluation.md")
    quoted = re.search(r"scores ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+) \(as the", page)
    assert quoted, "the BM25 reference figures moved"
    bm25 = [float(value) for value in quoted.groups()]
    assert "`semantic` and `sliding` beat it at every budget" in page
    for strategy in ("semantic", "sliding"):
        ours = [recall_row(data, strategy, budget)["recall"] for budget in BUDGETS]
        assert all(a > b for a, b in zip(ours, bm25, strict=True)), (strategy, ours)


def test_evaluation_counts_the_questions_recall_json_scored() -> None:
    """The question and window counts are recall.json's, for every row."""
    data, page = recall_json(), prose("docs/evaluation.md")
    asked = {row["questions"] for row in data["rows"]}
    assert len(asked) == 1, asked
    questions = asked.pop()
    assert f"{questions:,} questions)" in page
    windows = questions * len(BUDGETS)
    assert f"{questions:,} questions at {len(BUDGETS)} budgets: {windows:,} windows" in page


def test_evaluation_reports_the_loaders_repairs_as_recall_json_does() -> None:
    """The loader's repairs on the split, in the page's words, are recall.json's
    load_report: ids repaired, ids dropped by conversation, questions skipped."""
    report = recall_json()["load_report"]
    joined = {entry.split(" -> ")[0] for entry in report["repaired"]}
    by_conversation: dict[str, list[str]] = defaultdict(list)
    for entry in report["dropped_evidence"]:
        question, evidence = entry.split(": ", 1)
        by_conversation[question.split("#")[0]].append(f"`{evidence.strip(chr(39))}`")
    dropped = ", ".join(
        f"{' and '.join(ids)} in {conversation}" for conversation, ids in by_conversation.items()
    )
    strings = "one joined string" if len(joined) == 1 else f"{len(joined)} joined strings"
    expected = (
        f"{len(report['repaired'])} ids repaired ({strings}), "
        f"{len(report['dropped_evidence'])} dropped because they name no turn ({dropped}), "
        f"and {len(report['skipped_questions'])} category-3 questions skipped"
    )
    assert expected in prose("docs/evaluation.md")


@pytest.mark.skipif(not LOCOMO_README.exists(), reason=f"benchmark not at {LOCOMO_README}")
def test_evaluation_quotes_the_benchmarks_readme_as_it_reads() -> None:
    """The reference points the page credits to the benchmark's README are in it."""
    readme = " ".join(LOCOMO_README.read_text(encoding="utf-8").split())
    page = prose("docs/evaluation.md")
    for series in ("0.04 / 0.10 / 0.19 / 0.36", "0.64 / 0.68 / 0.74 / 0.82"):
        assert series in page and series in readme, series


def test_caches_bound_what_a_full_embedding_layer_really_holds() -> None:
    """The caches page's vectors in a full embedding layer and its traced memory
    against the 64 MiB bound: a memory-only cache filled with MiniLM-sized vectors."""
    np = pytest.importorskip("numpy")
    from ctxwindow_semantic.cache import MEMORY_BYTES, EmbeddingCache
    from ctxwindow_semantic.embedder import _OWN_VECTORS, DEFAULT_MODEL, DEFAULT_ONNX

    class MiniLMSized:
        """Unit vectors of MiniLM's size, under the longest name MiniLM's are cached by."""

        name = f"sentence-transformers:{DEFAULT_MODEL}{_OWN_VECTORS[DEFAULT_ONNX]}"

        def embed(self, texts: Sequence[str]) -> Any:
            vectors = np.ones((len(texts), 384), dtype=np.float32)
            return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    tracemalloc.start()
    try:
        cache = EmbeddingCache(None)
        before = tracemalloc.get_traced_memory()[0]
        for start in range(0, 45_000, 1_000):  # past the bound
            cache.embed(MiniLMSized(), [f"text {i}" for i in range(start, start + 1_000)])
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    kept = len(cache.store)  # type: ignore[arg-type]
    page = prose("docs/caches.md")
    shown = re.search(r"keeps about ([\d,]+) MiniLM vectors", page)
    assert shown and int(shown.group(1).replace(",", "")) == round(kept, -3), kept
    assert MEMORY_BYTES == 64 * 2**20 and "stays within a tenth of its 64 MiB" in page
    assert abs(held - MEMORY_BYTES) <= MEMORY_BYTES / 10, held / 2**20


def test_the_index_pools_vectors_are_the_size_the_pages_give() -> None:
    """146 MiB is the index pool's bound in units, as 384-dimension float32 vectors."""
    from ctxwindow_semantic.index import MAX_UNITS

    mib = round(MAX_UNITS * 384 * 4 / 2**20)
    assert f"{MAX_UNITS:,} units across them ({mib} MiB of 384-dimension" in prose("docs/caches.md")
    assert f"per-conversation index ({mib} MiB)" in prose("docs/reliability.md")


def test_caches_give_the_query_lines_bound_the_code_keeps() -> None:
    """The bound of the lines of recent queries (ctxwindow.kit.query_terms) and of the
    lines it holds, as the page states them."""
    from ctxwindow.kit._words import _LINE_WORDS

    bound = f"| {_LINE_WORDS.held // 2**20} MiB; a line over {_LINE_WORDS.most:,} characters"
    assert _LINE_WORDS.held % 2**20 == 0 and bound in prose("docs/caches.md")


def test_caches_counts_the_selects_tests_shared_cache_runs() -> None:
    """Selects per process: conversations x turns x two strategies, as the test runs them."""
    source = (ROOT / "tests" / "test_shared_cache.py").read_text(encoding="utf-8")
    runs = re.findall(
        r'measure\(redis_server, "([\w-]+)", conversations=(\d+), turns=(\d+)\)', source
    )
    assert len(runs) == 2, runs
    page = prose("docs/caches.md")
    for _embedder, conversations, turns in runs:
        selects = int(conversations) * int(turns) * 2  # semantic and summarize each turn
        assert f"{conversations} conversations x {turns} turns | {selects} |" in page


def test_reliability_counts_the_faulty_strategies_and_the_concurrent_visits() -> None:
    """The faulty strategies are FAULTY; the visits are tests/test_concurrency.py's."""
    page = prose("docs/reliability.md")
    assert f"Its {len(FAULTY)} strategies crash, cheat or hang" in page
    source = (ROOT / "tests" / "test_concurrency.py").read_text(encoding="utf-8")
    calls = number(r"^CALLS = (\d+)$", source)
    workers = number(r"^WORKERS = (\d+)$", source)
    semantic = number(r'pytest.param\("semantic", (\d+), id="semantic"\)', source)
    assert f"{calls} visits per strategy ({semantic} for `semantic`)" in page
    assert (
        f"{calls} histories each, in order, from {workers} threads, and as {calls} gathered" in page
    )
    assert f"{semantic} of the histories (all {calls} with `-m slow`)" in page


def test_reliability_gives_the_memory_runs_input_size_by_approx() -> None:
    """The memory run's history, counted as ctxwindow_eval.memory counts it."""
    from ctxwindow_eval.bench import synthetic_history
    from ctxwindow_eval.memory import SIZE

    tokens = ctxwindow.select(synthetic_history(SIZE), budget=4000).record.tokens_before
    assert f"of {SIZE:,} messages" in prose("docs/reliability.md")
    assert f"about {tokens / 1e6:.1f} million tokens by `approx`" in prose("docs/reliability.md")


PIPELINE = "plugins/pipeline/README.md"


@pytest.fixture
def agent() -> Any:
    """The pipeline tests' research agent (plugins/pipeline/tests/agent.py)."""
    path = ROOT / "plugins" / "pipeline" / "tests" / "agent.py"
    spec = importlib.util.spec_from_file_location("doc_figures_pipeline_agent", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.agent


def test_pipeline_readme_clears_the_research_agent_as_it_says(agent: Any) -> None:
    """The clear_tool_outputs figures are its run on the pipeline tests' research agent."""
    history = agent(20)
    window = ctxwindow.select(history, budget=10**6, strategy="clear_tool_outputs", when="always")
    record = window.record
    cleared = re.search(
        r"cleared the tool output of (\d+) exchange\(s\): ([\d,]+) -> ([\d,]+)",
        " ".join(record.notes),
    )
    assert cleared and record.count("dropped") == 0
    counter = ctxwindow.ApproxCounter()
    results = [
        counter.count_message(ctxwindow.Message(**m)) for m in history if m["role"] == "tool"
    ]
    mean = round(sum(results) / len(results), -1)
    expected = (
        f"whose every search returns about {mean:.0f} tokens ({record.tokens_before:,} tokens "
        f'in all), `when = "always"` clears {cleared.group(1)} of the {len(results)} results: '
        f"{cleared.group(2)} -> {cleared.group(3)} tokens for those, "
        f"{record.tokens_before:,} -> {record.tokens_after:,} for the whole history, "
        "no message dropped"
    )
    assert expected in prose(PIPELINE)


STAGES: list[dict[str, Any]] = [
    {"strategy": "clear_tool_outputs", "keep_recent": 2, "min_tokens": 40},
    {"strategy": "summarize", "budget_share": 1.5},
    {"strategy": "sliding"},
]


def test_pipeline_readme_shows_what_its_example_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's --explain output is the command's, the visit's time left out."""
    from ctxwindow._cli import main

    text = (ROOT / PIPELINE).read_text(encoding="utf-8")
    shown = re.findall(r"```text\n(strategy pipeline \| budget 600.*?)```", text, flags=re.S)[0]
    assert "`keep_recent = 2, min_tokens = 40` and `sliding` in place of `semantic`" in prose(
        PIPELINE
    )
    config = tmp_path / "ctxwindow.toml"
    stages = ",\n".join(
        "  {" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in stage.items()) + "}"
        for stage in STAGES
    )
    config.write_text(f'strategy = "pipeline"\nbudget = 600\nstages = [\n{stages},\n]\n')
    monkeypatch.chdir(ROOT)
    argv = ["select", "examples/conversation.json", "--config", str(config), "--explain"]
    assert main([*argv, "--output", str(tmp_path / "window.json")]) in (0, None)
    printed = capsys.readouterr()
    timed = re.sub(r"engaged \| [0-9.]+ ms", "engaged | ... ms", printed.out + printed.err)
    for line in shown.strip().splitlines():
        assert line.rstrip() in timed, line


def test_pipeline_readmes_stage_table_is_the_records() -> None:
    """Each stage's row in the README's table is that stage's record on the example."""
    from ctxwindow_pipeline import PipelineStrategy

    messages = json.loads((ROOT / "examples" / "conversation.json").read_text(encoding="utf-8"))
    record = PipelineStrategy(stages=STAGES).select(messages, 600).record
    page = prose(PIPELINE)
    assert f"pinned message, {record.tokens_before:,} tokens)" in page
    names = [stage["strategy"] for stage in STAGES]
    for stage, name in zip(record.stages, names, strict=True):
        share = "(`budget_share = 1.5`) " if name == "summarize" else ""
        row = (
            f"| `{name}` | {stage.budget} {share}"
            f"| {stage.tokens_before:,} -> {stage.tokens_after:,} "
            f"| {stage.messages_before} -> {stage.messages_after} |"
        )
        assert row in page, row
    cleared, summarized, ranked = record.stages
    stubs = [d.reason for d in cleared.decisions if d.action == "replaced"]
    sizes = [number(r"; (\d+) -> \d+ tokens$", reason) for reason in stubs]
    stands = [number(r" -> (\d+) tokens$", reason) for reason in stubs]
    before, after = sum(sizes), sum(stands)
    results = sum(reason.count("(call_") for reason in stubs)
    did = f"cleared {results} results in {len(stubs)} exchanges ({before} -> {after} tokens)"
    assert f"{did}, dropped nothing" in page
    assert cleared.count("dropped") == 0
    assert f"folded the {summarized.count('summarized')} oldest units into one summary" in page
    kept, dropped = ranked.count("kept"), ranked.count("dropped")
    assert (
        f"kept {kept} units, the newest and those it ranked highest, and dropped {dropped}" in page
    )


LOCOMO = LOCOMO_README.parent / "locomo-dev.json"


@pytest.mark.skipif(not LOCOMO.exists(), reason=f"benchmark not at {LOCOMO}")
def test_evaluation_describes_the_locomo_split_as_it_is() -> None:
    """The split's sessions, turns and questions, counted in the file itself."""
    samples = json.loads(LOCOMO.read_text(encoding="utf-8"))
    sessions, turns = [], []
    for sample in samples:
        conversation = sample["conversation"]
        keys = [key for key in conversation if re.fullmatch(r"session_\d+", key)]
        sessions.append(len(keys))
        turns.append(sum(len(conversation[key]) for key in keys))
    questions = sum(len(sample["qa"]) for sample in samples)
    page = prose("docs/evaluation.md")
    assert (
        f"{len(samples)} long conversations ({min(sessions)} to {max(sessions)} sessions, "
        f"{min(turns)} to {max(turns)} turns each) and {questions:,} questions"
    ) in page
    assert f"embedding the {sum(turns):,} turns" in page


TAU = ROOT.parent / "shared" / "bench" / "tau-airline" / "airline-dev.json"


@pytest.mark.skipif(not TAU.exists(), reason=f"benchmark not at {TAU}")
def test_evaluation_describes_the_tau_split_as_it_is() -> None:
    """The split's runs, tasks and system prompt size by approx, read from the file."""
    runs = json.loads(TAU.read_text(encoding="utf-8"))
    trials = Counter(run["task_id"] for run in runs)
    assert len(set(trials.values())) == 1, trials
    prompts = {run["traj"][0]["content"] for run in runs}
    assert len(prompts) == 1 and runs[0]["traj"][0]["role"] == "system"
    message = ctxwindow.Message(role="system", content=prompts.pop())
    prompt = ctxwindow.ApproxCounter().count_message(message)
    page = prose("docs/evaluation.md")
    assert (
        f"{len(runs)} real runs of a gpt-4o customer-service agent, tasks {min(trials)}-"
        f"{max(trials)} with {next(iter(trials.values()))} trials each"
    ) in page
    assert (
        f"about {round(prompt, -1):,} tokens by `approx`, so a 2,000-token window leaves "
        f"some {round(2000 - prompt, -1):,} for the conversation"
    ) in page
