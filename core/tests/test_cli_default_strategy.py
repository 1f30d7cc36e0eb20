"""`ctxwindow select` with no strategy named tries the default, ``fixed``: when that is
not installed, the error says it was the default and how to name another, not only
"unknown strategy 'fixed'" (which the user never typed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import ctxwindow
from ctxwindow.testing import run_command


@pytest.fixture
def without_fixed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``fixed`` not installed: hidden when it is (here and in what the CLI loads)."""
    if "fixed" not in {entry["name"] for entry in ctxwindow.describe_strategies()}:
        yield
        return
    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", "ctxwindow-fixed")
    ctxwindow.reload_plugins()
    try:
        yield
    finally:
        monkeypatch.delenv("CTXWINDOW_DISABLE_PLUGINS")
        ctxwindow.reload_plugins()


@pytest.mark.usefixtures("without_fixed")
def test_the_default_strategy_missing_says_it_was_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ctxwindow.toml found
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    error = run_command("select", str(chat), "--budget", "100").error()
    assert "no strategy was named" in error and "the default 'fixed' was tried" in error
    assert "unknown strategy 'fixed'" in error  # what was not found is still said


@pytest.mark.usefixtures("without_fixed")
def test_a_named_strategy_missing_is_not_called_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    error = run_command("select", str(chat), "--budget", "100", "--strategy", "fixed").error()
    assert "unknown strategy 'fixed'" in error and "default" not in error
