"""The README's commands and its plugin example stay true."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import docs_scripts
import pytest

import ctxwindow
from ctxwindow.testing import battery, check_window

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_readme_opens_with_the_demo_and_the_test_command_ci_runs() -> None:
    first = bash_blocks(README)[0].strip().splitlines()
    assert first == [
        "python3 -m pip install nox && python3 -m nox -s demo",
        "python3 -m pip install nox && python3 -m nox -s tests",
    ]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 -m pip install --quiet --disable-pip-version-check nox" in ci
    assert "python3 -m nox -s tests" in ci
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    assert '"examples/conversation.json"' in noxfile


def test_the_readme_shows_what_the_demo_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's output in the README is the demo's output, with the time left out (it is
    this machine's, not a figure to quote): the command nox -s demo runs, in process."""
    from ctxwindow._cli import main

    shown = re.findall(r"```text\n(strategy fixed \| budget 800.*?)```", README, flags=re.S)[0]
    monkeypatch.chdir(ROOT)
    window = tmp_path / "window.json"
    command = ["select", "examples/conversation.json", "--strategy", "fixed", "--budget", "800"]
    assert main([*command, "--explain", "--output", str(window)]) in (0, None)
    printed = capsys.readouterr()
    text = printed.out + printed.err
    timed = re.sub(r"engaged \| [0-9.]+ ms", "engaged | ... ms", text)
    for line in shown.strip().splitlines():
        assert line.rstrip() in timed, line


@pytest.fixture
def readme_plugin(ctxwindow_register: Any) -> Any:
    """Run the README's plugin example and register it as a plugin would be."""
    source = re.findall(r"```python\n(# my_strategy/__init__.py.*?)```", README, flags=re.S)[0]
    namespace: dict[str, object] = {"__name__": "my_strategy"}
    exec(compile(source, "README.md", "exec"), namespace)
    module = type(ctxwindow)("my_strategy")
    module.__dict__.update(namespace)
    ctxwindow_register(module, name="my-strategy")
    return namespace["KeepQuestions"]


def test_readme_plugin_example_works_and_keeps_the_contract(readme_plugin) -> None:  # type: ignore[no-untyped-def]
    messages = [{"role": "system", "content": "Be brief."}]
    for turn in range(30):
        messages.append({"role": "user", "content": f"Is number {turn} prime?"})
        messages.append({"role": "assistant", "content": "Let me think. " * 8})
    messages.append({"role": "user", "content": "Is number 30 prime?"})  # the request to send
    window = ctxwindow.select(messages, budget=150, strategy="questions")
    kept_questions = [m for m in window.messages if m["role"] == "user"]
    assert len(kept_questions) > 5
    assert all(m["role"] != "assistant" for m in window.messages)
    for case, conversation in battery().items():
        for budget in (30, 200, 5000):
            check_window(readme_plugin(), conversation, budget), case


def test_the_speed_tables_show_the_figures_in_docs_results() -> None:
    """The speed tables of docs/evaluation.md are read from docs/results/bench*.json by
    docs_gen/bench_tables.py; `nox -s bench` rewrites both."""
    reference = docs_scripts.load("reference")
    tables = reference.bench_tables()
    page = (ROOT / "docs" / "evaluation.md").read_text(encoding="utf-8")
    assert tables in page, "run: python docs_gen/bench_tables.py (or nox -s bench)"
    for name in ("fixed", "sliding", "summarize"):
        assert f"| {name} | 10,000 |" in tables, name
    serve = (ROOT / "docs" / "serve.md").read_text(encoding="utf-8")
    assert reference.serve_table() in serve, "run: python docs_gen/bench_tables.py"


def test_the_memory_table_shows_the_figures_in_docs_results() -> None:
    """docs/reliability.md's memory table is read from docs/results/memory.json, beside
    the ceilings tests/test_memory.py holds the strategies to."""
    reference = docs_scripts.load("reference")
    table = reference.memory_table()
    page = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    assert table in page, "run: python docs_gen/bench_tables.py (or nox -s bench)"
    rows = json.loads((ROOT / "docs" / "results" / "memory.json").read_text(encoding="utf-8"))
    for row in rows:
        assert f"| `{row['strategy']}` |" in table, row
    assert "| `fixed` | defaults |" in table and "| 60 |" in table


def test_a_bar_against_trim_messages_says_when_its_window_was_not_alike() -> None:
    """A bar met against a trim_messages window 0.9x ours is not met like for like: the
    bars table says so beside it, as the row's note does; within 5% it says nothing."""
    reference = docs_scripts.load("reference")
    row = {"strategy": "fixed", "messages": 10_000, "encode_new_ms": None}
    row |= {"trim_cached_over_warm": 25.0, "cold_over_trim": 0.5, "cold_over_count": 2.0}
    unlike = reference.bench_bars([{**row, "trim_tokens_ratio": 0.9}], {}, None)
    alike = reference.bench_bars([{**row, "trim_tokens_ratio": 1.02}], {}, None)
    marked = [line for line in unlike if "not like for like" in line]
    assert len(marked) == 2 and all("0.90x ours" in line for line in marked)
    assert not any("like for like" in line for line in alike)
    assert not any("count loop" in line and "like" in line for line in unlike)


def test_the_strategy_table_shows_the_figures_in_docs_results() -> None:
    """Every figure in the README's strategy table is read from docs/results (both
    benchmarks), by docs_gen/readme_table.py; `nox -s eval` rewrites both."""
    reference = docs_scripts.load("reference")
    table = reference.readme_table()
    assert table in README, "run: python docs_gen/readme_table.py (or nox -s eval)"
    assert "LoCoMo evidence recall" in table and "next-action recall" in table
    for name in ("fixed", "sliding", "semantic", "summarize"):
        assert reference.result_rows(name) and reference.result_rows(name, "agent"), name


def test_the_plugin_tables_of_configurations_show_the_figures_in_docs_results() -> None:
    """The sliding and semantic READMEs' tables of measured configurations are read from
    docs/results by docs_gen/ablation_tables.py (the defaults' rows from the run behind
    the README's strategy table, so the two agree); `nox -s eval` rewrites them."""
    reference = docs_scripts.load("reference")
    for readme in reference.ABLATIONS:
        page = (ROOT / readme).read_text(encoding="utf-8")
        table = reference.ablation_table(readme)
        assert table in page, f"{readme}: run python docs_gen/ablation_tables.py"
    defaults = {row["budget"]: row["recall"] for row in reference.result_rows("sliding")}
    assert f"**{defaults[1000]:.3f}**" in reference.ablation_table("plugins/sliding/README.md")
