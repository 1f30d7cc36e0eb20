"""What type checkers see of the public API: every public name and no other (a typo is
an error), windows typed by what they hold, and protocols that accept implementations
written as the docs describe them. The mypy test runs mypy on a client module; the
others check at runtime what the annotations promise."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import (
    AsyncSummarizer,
    Embedder,
    History,
    ImportanceScorer,
    Summarizer,
    SummaryRequest,
    SummaryResult,
    Windower,
)
from ctxwindow.testing.strategies import Newest

CHAT = [
    {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 30}
    for i in range(9)
]

#: A client of the API, with the errors mypy must find marked ``# E: <part of it>``
#: and what reveal_type must say marked ``# R: <type>``.
CLIENT = """
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import ctxwindow
from ctxwindow import Action, AsyncSummarizer, Conversation, Embedder, History
from ctxwindow import ImportanceScorer, Message, Role, Selection, Summarizer
from ctxwindow import SummaryRequest, SummaryResult, Windower
from ctxwindow import Windwer  # E: Module "ctxwindow" has no attribute "Windwer"

ctxwindow.selct([], 100)  # E: Module has no attribute "selct"
version: str = ctxwindow.__version__


def windows(
    windower: Windower,
    messages: list[Message],
    dicts: list[dict[str, str]],
    conversation: Conversation,
    strategy: ctxwindow.BaseStrategy,
) -> None:
    reveal_type(windower.select(messages))  # R: Window[Message]
    reveal_type(windower.select(dicts))  # R: Window[dict[str, Any]]
    reveal_type(windower.select(conversation))  # R: Window[Any]
    reveal_type(windower.transform(tuple(messages)))  # R: Window[Message]
    reveal_type(asyncio.run(windower.aselect(messages)))  # R: Window[Message]
    reveal_type(strategy.select(dicts, 100))  # R: Window[dict[str, Any]]
    windower.select(messages).messages[0].no_such_field  # E: "Message" has no attribute


def decide(history: History) -> Selection:
    selection = history.selection()
    selection.drop(1, None)
    selection.drop(range(1, 3), "older")
    return selection


ctxwindow.read_messages_file(Path("chat.json"))
kept: Action = "kept"
user: Role = "user"
wrong: Action = "kept it"  # E: Incompatible types in assignment


class ClassConstants:
    name: ClassVar[str] = "constants"
    requires_llm: ClassVar[bool] = False
    max_input_tokens: ClassVar[int] = 1000

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        return SummaryResult("")


class Properties:
    @property
    def name(self) -> str:
        return "properties"

    def embed(self, texts: Sequence[str]) -> Any:
        return None

    def score(self, history: History) -> Sequence[float]:
        return []


summarizer: Summarizer = ClassConstants()
embedder: Embedder = Properties()
scorer: ImportanceScorer = Properties()
not_async: AsyncSummarizer = ClassConstants()  # E: has type "AsyncSummarizer"
"""


def _expected(source: str, marker: str) -> dict[int, str]:
    return {
        number: line.split(marker, 1)[1].strip()
        for number, line in enumerate(source.splitlines(), start=1)
        if marker in line
    }


@pytest.mark.slow  # mypy reads the package: several seconds
def test_mypy_sees_every_public_name_and_no_other(tmp_path: Path) -> None:
    """A typo in a name imported from ctxwindow is an error (the module's __getattr__
    is hidden from type checkers); the windows, Selection.drop, read_messages_file,
    the Literal types and the protocols are typed as documented."""
    pytest.importorskip("mypy")
    every = ", ".join(f"ctxwindow.{name}" for name in ctxwindow.__all__)
    source = textwrap.dedent(CLIENT) + f"public = [{every}]  # every public name is known\n"
    client = tmp_path / "client.py"
    client.write_text(source, encoding="utf-8")
    found = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--show-error-codes",
         "--no-error-summary", "--cache-dir", str(tmp_path / "cache"), str(client)],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    errors: dict[int, list[str]] = {}
    revealed: dict[int, str] = {}
    for line in found.stdout.splitlines():
        parts = line.split(":", 3)
        if len(parts) < 4 or not parts[1].isdigit():
            continue
        number, kind, text = int(parts[1]), parts[2].strip(), parts[3].strip()
        if kind == "error":
            errors.setdefault(number, []).append(text)
        elif text.startswith("Revealed type is"):
            shown = text.removeprefix("Revealed type is ").strip('"')
            revealed[number] = re.sub(r"\b(ctxwindow\._\w+|builtins)\.", "", shown)
    expected_errors = _expected(source, "# E:")
    assert set(errors) == set(expected_errors), found.stdout
    for number, part in expected_errors.items():
        assert any(part in error for error in errors[number]), (number, errors[number])
    assert revealed == _expected(source, "# R:"), found.stdout


def test_getattr_is_hidden_from_type_checkers() -> None:
    """The lazy loader is defined under ``if not TYPE_CHECKING``: a module-level
    ``__getattr__`` that type checkers see makes every name, a typo too, Any to them."""
    tree = ast.parse(Path(ctxwindow.__file__).read_text(encoding="utf-8"))
    top = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert "__getattr__" not in top
    hidden = [
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.UnaryOp)
        and isinstance(node.test.op, ast.Not)
        and isinstance(node.test.operand, ast.Name)
        and node.test.operand.id == "TYPE_CHECKING"
    ]
    assert [f.name for f in hidden[0].body if isinstance(f, ast.FunctionDef)] == ["__getattr__"]
    assert isinstance(ctxwindow.__version__, str)  # still there at runtime


# -- protocols, at runtime (they are runtime_checkable) ----------------------------------
class FirstLines:
    """A summarizer as the docs describe one, without the optional asummarize."""

    name = "first-lines"
    requires_llm = False
    max_input_tokens = 1000

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        return SummaryResult("\n".join(text.splitlines()[0] for text in request.texts))


class AsyncFirstLines(FirstLines):
    async def asummarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize(request)


class PropertyNamed:
    @property
    def name(self) -> str:
        return "property-named"

    def embed(self, texts: Sequence[str]) -> Any:
        return [[1.0] for _ in texts]

    def score(self, history: History) -> Sequence[float]:
        return [0.0] * len(history.units)


def test_a_summarizer_without_asummarize_is_a_summarizer() -> None:
    assert isinstance(FirstLines(), Summarizer)
    assert not isinstance(FirstLines(), AsyncSummarizer)
    assert isinstance(AsyncFirstLines(), Summarizer)
    assert isinstance(AsyncFirstLines(), AsyncSummarizer)
    assert not isinstance(object(), Summarizer)


def test_a_read_only_name_is_a_name() -> None:
    assert isinstance(PropertyNamed(), Embedder)
    assert isinstance(PropertyNamed(), ImportanceScorer)


# -- what the annotations promise ---------------------------------------------------------
def test_drop_takes_none_for_one_unit() -> None:
    """``drop(unit, None)``: the selection's default reason says why (typed so)."""

    class DropsFirst(Newest):
        name = "drops-first"

        def choose(self, history: History) -> Any:
            selection = super().choose(history)
            selection.drop(0, None)
            return selection

    window = Windower(DropsFirst(), 300).select(CHAT)
    assert window.record.decisions[0].action == "dropped"
    assert window.record.decisions[0].reason == "older than the newest units that fit"


def test_read_messages_file_takes_a_path(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    assert ctxwindow.read_messages_file(path) == [{"role": "user", "content": "hi"}]
    with pytest.raises(ctxwindow.InvalidMessage, match="does not exist"):
        ctxwindow.read_messages_file(tmp_path / "none.json")


def test_windows_hold_what_their_types_say() -> None:
    """Messages in, Messages out; dicts in, dicts out (the overloads' Window[Message]
    and Window[dict[str, Any]])."""
    windower = Windower(Newest(), 300)
    messages = [ctxwindow.Message.from_dict(d) for d in CHAT]
    assert all(type(m) is dict for m in windower.select(CHAT).messages)
    assert all(type(m) is ctxwindow.Message for m in windower.select(messages).messages)
