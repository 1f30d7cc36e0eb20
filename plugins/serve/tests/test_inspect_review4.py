"""The inspect page, fourth review: a message split in two units (an Anthropic user
turn holding a tool result and new words, a pydantic-ai request holding a system
prompt and the user's) is one row with one cell per column, a summary an adapter
sends without ctxwindow's metadata still has its row, and two summaries each sit
after what they stand for.

Real parts: the ``fixed``, ``sliding`` and ``summarize`` strategies (its extractive
summarizer needs no LLM) and the Anthropic and pydantic-ai adapters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest

import ctxwindow
from ctxwindow.testing import calls, result
from ctxwindow_adapters import anthropic
from ctxwindow_serve.inspector import render_page


@dataclass
class Row:
    attrs: dict[str, str]
    cells: list[dict[str, str]] = field(default_factory=list)
    parts: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (column, attrs)


class Table(HTMLParser):
    """The page's body rows: each with its cells' attributes and the parts in them."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[Row] = []
        self._body = False
        self._column = ""
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        given = {key: value or "" for key, value in attrs}
        if tag == "tbody":
            self._body = True
        elif self._body and tag == "tr":
            self.rows.append(Row(given))
        elif self._body and tag == "td":
            self.rows[-1].cells.append(given)
            self._column = given.get("data-column", "")
        elif self._body and tag == "div" and "part" in given.get("class", "").split():
            self.rows[-1].parts.append((self._column, given))

    def position_rows(self) -> list[str]:
        """Each row as "3" (message 3) or "S 1 2" (a summary covering 1 and 2)."""
        return [
            row.attrs["data-position"]
            if "data-position" in row.attrs
            else "S " + row.attrs["data-covers"]
            for row in self.rows
        ]


def assert_one_cell_per_column_per_row(table: Table, columns: int) -> None:
    """Every row has each strategy column once: a cell starting on it, or one above
    spanning it, never both."""
    covered: dict[str, int] = {}  # column -> rows still under a rowspan from above
    for number, row in enumerate(table.rows):
        starting = [cell["data-column"] for cell in row.cells if "data-column" in cell]
        assert len(starting) == len(set(starting)), f"row {number}: {starting}"
        for column in map(str, range(columns)):
            above = covered.get(column, 0) > 0
            assert above != (column in starting), f"row {number}, column {column}"
            if above:
                covered[column] -= 1
        for cell in row.cells:
            if "data-column" in cell:
                covered[cell["data-column"]] = int(cell.get("rowspan", "1")) - 1


def _tool_use(number: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [
            {"type": "text", "text": f"Checking {number}."},
            {"type": "tool_use", "id": f"t{number}", "name": "lookup", "input": {"q": number}},
        ],
    }


def _tool_result(number: int, words: str = "", repeats: int = 150) -> dict[str, Any]:
    content: list[dict[str, Any]] = [
        {
            "type": "tool_result",
            "tool_use_id": f"t{number}",
            "content": f"result {number} " * repeats,
        }
    ]
    if words:
        content.append({"type": "text", "text": words})
    return {"role": "user", "content": content}


def test_a_message_split_in_two_units_is_one_row_with_one_cell_per_column() -> None:
    """Message 2 holds the tool result answering message 1 and the user's new words:
    the call's unit spans rows 1-2. The page gave row 2 a second cell per column under
    the rowspan from row 1, which Chromium drew past the last column, when the words
    were a unit of their own; they now go with the result (a part of the call's unit,
    as the Anthropic adapter reads words beside results), so no part is drawn."""
    messages = [
        {"role": "user", "content": "Plan a trip to Rome. " * 40},
        _tool_use(1),
        _tool_result(1, "what about hotels?", repeats=300),
        {"role": "assistant", "content": "Hotels are many."},
        {"role": "user", "content": "Book the cheapest."},
    ]
    columns = [
        (name, anthropic.select(messages, 300, name, system="Be brief."))
        for name in ("fixed", "sliding")
    ]
    table = Table(render_page(messages, columns))
    assert table.position_rows() == ["0", "1", "2", "3", "4"]
    assert_one_cell_per_column_per_row(table, len(columns))
    for index, (_, window) in enumerate(columns):
        assert not [d for d in window.record.decisions if d.positions == (2,)]
        call = next(cell for cell in table.rows[1].cells if cell.get("data-column") == str(index))
        assert call["data-positions"] == "1 2" and call["rowspan"] == "2"
        assert not [attrs for column, attrs in table.rows[1].parts if column == str(index)]


def test_an_anthropic_summary_has_its_row_where_the_window_sends_it() -> None:
    """The Anthropic shape sends a summary as a plain user message, without the
    metadata naming what it covers: the page showed no row for it. Its row now sits
    after the last message it stands for (the summarized ones around it)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Plan a trip. " * 10}]
    for number in range(5):
        messages += [_tool_use(number), _tool_result(number)]
    messages += [_tool_use(9), _tool_result(9, "now what about the hotel?")]
    window = anthropic.select(messages, 900, "summarize", system="Be brief.")
    sent = window.messages[1]
    assert sent["content"][0]["text"].startswith("Summary of the earlier conversation")
    assert "metadata" not in sent
    summarized = sorted(
        p for d in window.record.decisions if d.action == "summarized" for p in d.positions
    )
    assert summarized == list(range(1, 9))
    table = Table(render_page(messages, [("summarize", window)]))
    covers = " ".join(map(str, summarized))
    assert table.position_rows() == [*map(str, range(9)), f"S {covers}", "9", "10", "11", "12"]
    assert_one_cell_per_column_per_row(table, 1)


def test_a_pydantic_ai_summary_has_its_row_and_its_split_request_one_cell() -> None:
    """pydantic-ai sends a summary as a request of its own, with no metadata: the page
    showed no row for it. Its first request (system prompt and task) is two units on
    one row, as is its last (a tool return and new words)."""
    messages_module = pytest.importorskip("pydantic_ai.messages")
    from ctxwindow_adapters import pydantic_ai

    request, response = messages_module.ModelRequest, messages_module.ModelResponse
    text, call = messages_module.TextPart, messages_module.ToolCallPart
    returned, prompt = messages_module.ToolReturnPart, messages_module.UserPromptPart
    history: list[Any] = [
        request(parts=[messages_module.SystemPromptPart("Be brief."), prompt("Plan a trip. " * 10)])
    ]
    for number in range(5):
        history += [
            response(
                parts=[text(f"Checking {number}"), call("lookup", {}, tool_call_id=f"t{number}")]
            ),
            request(
                parts=[returned("lookup", f"result {number} " * 150, tool_call_id=f"t{number}")]
            ),
        ]
    history += [
        response(parts=[text("ok"), call("lookup", {}, tool_call_id="t9")]),
        request(parts=[returned("lookup", "r9 " * 50, tool_call_id="t9"), prompt("the hotel?")]),
    ]
    window = pydantic_ai.select(history, budget=900, strategy="summarize")
    summarized = sorted(
        p for d in window.record.decisions if d.action == "summarized" for p in d.positions
    )
    assert summarized == list(range(1, 7))
    table = Table(render_page(history, [("summarize", window)]))
    rows = table.position_rows()
    assert rows == [*map(str, range(7)), "S 1 2 3 4 5 6", *map(str, range(7, 13))]
    assert_one_cell_per_column_per_row(table, 1)
    assert len([part for row in table.rows for part in row.parts]) == 2


def test_two_summaries_each_sit_after_the_messages_they_stand_for() -> None:
    """The current turn outgrew the budget: the window sends the older history's
    summary (1-7), the newest user message (8), then the turn's own summary (9-10).
    The page put both rows after message 10, the first after the newest user message
    although the window sends it before."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "task: look at logs " * 30},
    ]
    for number in range(3):
        messages += [calls(f"c{number}"), result(f"c{number}", f"line {number} " * 200)]
    messages.append({"role": "user", "content": "now check the big ones"})
    messages += [
        calls("c10"),
        result("c10", "line 10 " * 1500),
        calls("c11"),
        result("c11", "line 11 " * 900),
    ]
    window = ctxwindow.select(messages, budget=800, strategy="summarize", task_statement=False)
    sent = [m for m in window.messages if m.get("metadata", {}).get("covers")]
    assert [m["metadata"]["covers"] for m in sent] == [
        tuple(f"#{p}" for p in range(1, 8)),
        ("#9", "#10"),
    ]
    assert window.messages.index(sent[0]) < window.messages.index(messages[8])
    table = Table(render_page(messages, [("summarize", window)]))
    assert table.position_rows() == [
        *map(str, range(8)),
        "S 1 2 3 4 5 6 7",
        "8",
        "9",
        "10",
        "S 9 10",
        "11",
        "12",
    ]
    assert_one_cell_per_column_per_row(table, 1)
