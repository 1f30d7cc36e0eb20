"""``ctxwindow inspect``: the page's structure, read back with the standard library's
HTML parser and compared with the records the same strategies give in this process.

Real parts throughout: the installed ``ctxwindow`` command, the ``fixed``, ``sliding``
and ``summarize`` strategies (its extractive summarizer needs no LLM) and the shipped
example conversation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow_serve.inspector import render_page

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "conversation.json"
BUDGET = 600
STRATEGIES = ("fixed", "sliding", "summarize")


@dataclass
class Cell:
    tag: str
    attrs: dict[str, str]
    text: str = ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


@dataclass
class Row:
    attrs: dict[str, str]
    cells: list[Cell] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class Page(HTMLParser):
    """The page's table rows (with their cells and the text in each), its column
    headers, and every start tag seen."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.head: list[Cell] = []
        self.rows: list[Row] = []
        self.tags: list[str] = []
        self._cell: Cell | None = None
        self._in_head = False
        self.html = html
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        given = {key: value or "" for key, value in attrs}
        if tag == "thead":
            self._in_head = True
        elif tag == "tr" and not self._in_head:
            self.rows.append(Row(given))
        elif tag in ("td", "th"):
            self._cell = Cell(tag, given)
            (self.head if self._in_head else self.rows[-1].cells).append(self._cell)

    def handle_endtag(self, tag: str) -> None:
        if tag == "thead":
            self._in_head = False
        elif tag in ("td", "th"):
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.text += data

    @property
    def messages(self) -> list[Row]:
        return [row for row in self.rows if "msg" in row.classes]

    def column(self, index: int) -> list[tuple[int, Cell]]:
        """(row number, cell) of each cell in strategy column ``index``."""
        return [
            (number, cell)
            for number, row in enumerate(self.rows)
            for cell in row.cells
            if cell.attrs.get("data-column") == str(index)
        ]


def inspect(
    *args: str, cwd: Path | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxwindow", "inspect", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )


@pytest.fixture(scope="module")
def example_page(tmp_path_factory: pytest.TempPathFactory) -> Page:
    out = tmp_path_factory.mktemp("inspect") / "page.html"
    strategies = [arg for name in STRATEGIES for arg in ("-s", name)]
    done = inspect(str(EXAMPLE), *strategies, "-b", str(BUDGET), "--html", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out.resolve())
    return Page(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def example() -> tuple[list[Any], list[ctxwindow.Window[Any]]]:
    messages = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    windows = [ctxwindow.select(messages, budget=BUDGET, strategy=name) for name in STRATEGIES]
    return messages, windows


def test_a_row_per_message_in_order_and_a_column_per_strategy_with_its_totals(
    example_page: Page, example: tuple[list[Any], list[ctxwindow.Window[Any]]]
) -> None:
    messages, windows = example
    rows = example_page.messages
    assert [row.attrs["data-position"] for row in rows] == [str(p) for p in range(len(messages))]
    assert rows[1].attrs["data-id"] == "u-constraints"
    # self-contained: nothing fetched when the page is opened, no script
    assert not {"script", "link", "img", "iframe", "object"} & set(example_page.tags)
    assert "url(" not in example_page.html and "@import" not in example_page.html
    headers = [cell for cell in example_page.head if "strategy" in cell.classes]
    assert [header.attrs["data-strategy"] for header in headers] == list(STRATEGIES)
    for header, window in zip(headers, windows, strict=True):
        record = window.record
        assert f"tokens {record.tokens_before} → {record.tokens_after} of {BUDGET}" in header.text
        assert f"messages {record.messages_before} → {record.messages_after}" in header.text


def test_each_cell_shows_its_units_decision_over_the_units_rows(
    example_page: Page, example: tuple[list[Any], list[ctxwindow.Window[Any]]]
) -> None:
    messages, windows = example
    row_of = {
        int(row.attrs["data-position"]): number
        for number, row in enumerate(example_page.rows)
        if "msg" in row.classes
    }
    actions_seen: set[str] = set()
    for index, window in enumerate(windows):
        by_positions = {d.positions: d for d in window.record.decisions}
        covered: list[int] = []
        for number, cell in example_page.column(index):
            if "summary-cell" in cell.classes or "gap" in cell.classes:
                continue
            positions = tuple(int(p) for p in cell.attrs["data-positions"].split())
            decision = by_positions[positions]
            assert cell.classes == {"cell", decision.action}
            assert cell.attrs["data-action"] == decision.action
            assert int(cell.attrs["data-tokens"]) == decision.tokens
            assert decision.reason in cell.attrs["title"]
            assert row_of[positions[0]] == number
            rows = int(cell.attrs.get("rowspan", "1"))
            assert row_of[positions[-1]] == number + rows - 1
            covered.extend(positions)
            actions_seen.add(decision.action)
        assert sorted(covered) == list(range(len(messages)))
        assert {d.action for d in window.record.decisions} <= actions_seen
    assert {"kept", "dropped", "summarized", "replaced"} <= actions_seen


def test_tool_calls_are_joined_to_their_results_in_the_bracket_and_every_column(
    example_page: Page, example: tuple[list[Any], list[ctxwindow.Window[Any]]]
) -> None:
    messages, windows = example
    rows = example_page.messages
    for position, message in enumerate(messages):
        if message["role"] != "tool":
            continue
        call = next(
            p
            for p in range(position - 1, -1, -1)
            if any(c["id"] == message["tool_call_id"] for c in messages[p].get("tool_calls") or ())
        )
        assert rows[position].attrs["data-call"] == str(call)
        assert rows[call].attrs["data-call"] == str(call)
        assert "start" in rows[call].cells[1].classes
        last = max(
            p
            for p, m in enumerate(messages)
            if m["role"] == "tool"
            and any(c["id"] == m["tool_call_id"] for c in messages[call]["tool_calls"])
        )
        assert "end" in rows[last].cells[1].classes
        for index in range(len(windows)):
            spanning = [
                cell
                for _, cell in example_page.column(index)
                if str(call) in cell.attrs.get("data-positions", "").split()
            ]
            assert len(spanning) == 1
            assert str(position) in spanning[0].attrs["data-positions"].split()
    assert "data-call" not in rows[0].attrs


def test_the_summary_has_a_row_saying_what_it_covers(
    example_page: Page, example: tuple[list[Any], list[ctxwindow.Window[Any]]]
) -> None:
    _, windows = example
    summarized = sorted(
        p for d in windows[2].record.decisions if d.action == "summarized" for p in d.positions
    )
    assert summarized == list(range(2, 17))  # 17-19: written from, and sent verbatim too
    summary_rows = [row for row in example_page.rows if "summary-row" in row.classes]
    assert len(summary_rows) == 1
    summary = summary_rows[0]
    assert summary.attrs["data-column"] == "2"
    assert summary.attrs["data-covers"] == " ".join(map(str, range(2, 20)))
    number = example_page.rows.index(summary)  # where the window sent it: before 17
    assert example_page.rows[number - 1].attrs["data-position"] == "16"
    assert "covering messages 2–19" in summary.cells[2].text
    assert "Summary of the earlier conversation" in summary.cells[2].text
    cell = next(c for c in summary.cells if "summary-cell" in c.classes)
    assert cell.attrs["data-column"] == "2"
    assert "covers messages 2–19" in cell.text


def test_a_stand_in_is_shown_for_the_message_it_replaced(example_page: Page) -> None:
    replaced = [cell for _, cell in example_page.column(1) if "replaced" in cell.classes]
    assert [cell.attrs["data-positions"] for cell in replaced] == ["4 5 6"]
    assert "#6 sent as: ← call_fl1: [excerpt: " in replaced[0].text


def test_a_truncated_message_and_an_anthropic_body(tmp_path: Path) -> None:
    body = {
        "model": "claude-x",
        "max_tokens": 10,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "What is the weather?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "tu1", "name": "wx", "input": {"c": "x"}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "sunny"}],
            },
            {"role": "assistant", "content": "Sunny."},
            {"role": "user", "content": "word " * 400},
        ],
    }
    source = tmp_path / "body.json"
    source.write_text(json.dumps(body), encoding="utf-8")
    done = inspect(str(source), "-s", "fixed:oversize=truncate", "-b", "60", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "body.inspect.html"
    assert done.stdout.strip() == str(out.resolve())
    page = Page(out.read_text(encoding="utf-8"))
    rows = page.messages
    assert len(rows) == 5
    assert [rows[p].attrs.get("data-call") for p in range(5)] == [None, "1", "1", None, None]
    header = next(cell for cell in page.head if "strategy" in cell.classes)
    assert "kept outside the list: system message" in header.text
    last = [cell for _, cell in page.column(0)][-1]
    assert last.classes == {"cell", "truncated"}
    assert "#4 sent as: word word" in last.text


def test_jsonl_on_stdin(tmp_path: Path) -> None:
    messages = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    lines = "".join(json.dumps(message) + "\n" for message in messages)
    done = inspect("-", "-s", "fixed", "-b", "300", cwd=tmp_path, stdin=lines)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "ctxwindow.inspect.html"
    assert done.stdout.strip() == str(out.resolve())
    assert len(Page(out.read_text(encoding="utf-8")).messages) == len(messages)


def test_everything_is_escaped_and_no_password_is_shown() -> None:
    hostile = '<script>alert("x")</script>'
    messages = [
        {"role": "system", "content": hostile},
        {"role": "user", "content": "a & b", "metadata": {"id": '"><img src=x>'}},
    ]
    window = ctxwindow.select(messages, budget=1000, strategy="fixed")
    label = "summarize:cache=redis://:hunter2@cache:6379/0,summary_share=0.2"
    html = render_page(messages, [(label, window)], title=hostile)
    page = Page(html)
    assert "script" not in page.tags and "img" not in page.tags
    assert "hunter2" not in html
    assert "redis://:***@cache:6379/0" in html
    assert hostile in page.messages[0].cells[2].text
    assert page.messages[1].attrs["data-id"] == '"><img src=x>'


def test_the_command_shows_a_store_url_nowhere_with_its_password(tmp_path: Path) -> None:
    """A strategy's cache given as a Redis URL: its password is in neither the summary
    lines, the page, nor an error (the store is unreachable: the strategy says so)."""
    spec = "summarize:cache=redis://ada:hunter2@127.0.0.1:1/0"
    done = inspect(str(EXAMPLE), "-s", spec, "-b", str(BUDGET), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "conversation.inspect.html").read_text(encoding="utf-8")
    for shown in (done.stdout, done.stderr, page):
        assert "hunter2" not in shown
    assert "summarize:cache=redis://ada:***@127.0.0.1:1/0: tokens" in done.stderr
    bad = inspect(str(EXAMPLE), "-s", spec + ",summary_share=lots", "-b", "9", cwd=tmp_path)
    assert bad.returncode == 1 and "hunter2" not in bad.stderr + bad.stdout


def test_errors_are_one_line_and_the_input_is_never_overwritten(tmp_path: Path) -> None:
    source = tmp_path / "chat.json"
    source.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    same = inspect(str(source), "-s", "fixed", "-b", "600", "--html", str(source))
    assert same.returncode == 1
    assert "never overwrites its input" in same.stderr
    assert source.read_text(encoding="utf-8") == EXAMPLE.read_text(encoding="utf-8")
    bad = inspect(str(source), "-s", "fixed:oops", "-b", "600", cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stderr.count("\n") == 1 and "'oops' is not key=value" in bad.stderr
    unknown = inspect(str(source), "-s", "nosuch", "-b", "600", cwd=tmp_path)
    assert unknown.returncode == 1 and "nosuch" in unknown.stderr
    assert not (tmp_path / "chat.inspect.html").exists()


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("fixed:strategy=sliding", "'strategy' is not a strategy option; name the strategy"),
        ("fixed:budget=100", "'budget' is not a strategy option; give the budget with the"),
        ("fixed:counter=approx", "'counter' is not a strategy option; give the counter with"),
    ],
)
def test_a_spec_cannot_set_the_columns_strategy_or_the_pages_budget_or_counter(
    tmp_path: Path, spec: str, said: str
) -> None:
    """Each would quietly win over the column's name or the page's -b/-c, so that the
    heading's budget and counter would not be the column's."""
    done = inspect(str(EXAMPLE), "-s", spec, "-s", "fixed", "-b", "300", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and said in done.stderr
    assert not (tmp_path / "conversation.inspect.html").exists()


def test_inspect_loads_nothing_of_the_proxy(tmp_path: Path) -> None:
    """Looking needs no server: no starlette, uvicorn or httpx is imported."""
    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "ctxwindow",
            "inspect",
            str(EXAMPLE),
            "-s",
            "fixed",
            "-b",
            "600",
            "--html",
            str(tmp_path / "p.html"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, done.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "ctxwindow_serve.inspector" in imported
    assert not {"starlette", "uvicorn", "httpx"} & {name.split(".")[0] for name in imported}


def test_the_legend_says_a_truncated_cell_may_be_a_cut_tool_result() -> None:
    """A current turn held whole has its older round's big result cut (a *truncated*
    cell) on every request of the turn: the legend said a truncated cell was the newest
    user message shortened, which here was not cut at all."""
    from ctxwindow.testing import calls, result, user

    messages = [
        {"role": "system", "content": "You are a coding agent."},
        user("Run the tests and fix it."),
        calls("c0"),
        result("c0", "FAILED test_x\n" * 6000),
        calls("c1"),
        result("c1", "ok " * 30),
    ]
    window = ctxwindow.select(messages, 3000, "fixed")
    [cut] = [d for d in window.record.decisions if d.action == "truncated"]
    assert cut.positions == (2, 3) and "tool result cut" in cut.reason
    html = render_page(messages, [("fixed", window)])
    assert "<b>truncated</b> cut: a tool result of the current turn" in html
