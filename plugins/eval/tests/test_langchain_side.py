"""The bench's LangChain side: what ``ctxwindow-eval[langchain]`` brings, and what the
bench's row says when a piece of it is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from ctxwindow_eval.bench import _LangChain, _missing, bench_strategy

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
EXTRA = (
    "ctxwindow-eval's langchain extra brings langchain-core 0.3.46 or later and ctxwindow-adapters"
)


def _langchain_extra() -> dict[str, Requirement]:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    required = map(Requirement, project["optional-dependencies"]["langchain"])
    return {requirement.name: requirement for requirement in required}


def test_the_langchain_extra_brings_the_adapter_the_bench_times() -> None:
    """bench.py imports ctxwindow_adapters.langchain: the extra installs it, with its own
    langchain extra, in the range the other first-party requirements use."""
    extra = _langchain_extra()
    adapters = extra["ctxwindow-adapters"]
    assert adapters.extras == {"langchain"}
    assert str(adapters.specifier) == ">=0.2"  # this release's, as versions.toml has it


def test_the_langchain_extra_needs_a_langchain_core_the_adapter_imports() -> None:
    """The adapter imports count_tokens_approximately, first in langchain-core 0.3.46."""
    specifier = _langchain_extra()["langchain-core"].specifier
    assert not specifier.contains("0.3.45")
    assert specifier.contains("0.3.46") and specifier.contains("1.0.0")


@pytest.mark.parametrize(
    ("hidden", "said"),
    [
        ("ctxwindow_adapters", "ctxwindow-adapters is not installed"),
        ("langchain_core.messages", "langchain-core is not installed"),
    ],
)
def test_the_row_says_which_piece_is_missing(
    hidden: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not "langchain-core not installed" when it is and the adapter is not."""
    monkeypatch.setitem(sys.modules, hidden, None)  # importing it raises ModuleNotFoundError
    assert _LangChain.load() is None
    row = bench_strategy("fixed", 60, repeats=1)
    assert row.notes == [f"{said}: no adapter or trim_messages figures ({EXTRA})"]
    assert "[" not in row.notes[0]  # `ctxwindow bench` prints it as rich markup
    assert row.adapter_warm_ms is None and row.trim_ms is None and row.trim_cached_ms is None
    assert row.warm_ms is not None and row.warm_ms > 0  # our own figures still measured


def test_an_adapter_that_does_not_import_is_named_with_its_cause() -> None:
    """langchain-core installed but older than the adapter needs (0.3.0 to 0.3.45): the
    adapter's own ImportError and its cause, not "not installed"."""
    cause = ImportError(
        "cannot import name 'count_tokens_approximately' from 'langchain_core.messages.utils'",
        name="langchain_core.messages.utils",
    )
    error = ImportError("ctxwindow_adapters.langchain needs langchain-core")
    error.__cause__ = cause
    note = _missing(error)
    assert "not installed" not in note
    assert "ctxwindow_adapters.langchain needs langchain-core" in note
    assert "cannot import name 'count_tokens_approximately'" in note
    assert note.endswith(f"({EXTRA})")
