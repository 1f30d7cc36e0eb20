"""Hostile input at the eval and bench commands: one clear line and a non-zero exit,
and no input file changed (the core's own commands are tested in core/tests), run as
``ctxwindow.testing.commands.run_command`` runs any command."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ctxwindow.testing.commands import run_command


@pytest.fixture
def unchanged() -> Iterator[Callable[[Path], None]]:
    """``unchanged(path)``: fail the test if that file changes before it ends."""
    watched: dict[Path, str] = {}

    def watch(path: Path) -> None:
        watched[path] = hashlib.sha256(path.read_bytes()).hexdigest()

    yield watch
    for path, digest in watched.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, f"{path} changed"


@pytest.mark.parametrize("argv", [["eval"], ["bench", "--repeats", "x"]], ids=" ".join)
def test_usage_errors_are_one_line(argv: list[str]) -> None:
    result = run_command(*argv)
    assert result.code == 2  # a usage error
    assert "--help" in result.error()


@pytest.mark.parametrize(
    ("data", "extra", "phrase"),
    [
        (b'[{"sample_id": 1', [], "is not JSON"),
        (b'["a", "b"]', [], "sample 0 is not a LoCoMo sample"),
        (b'{"role": "user"}', [], "must hold LoCoMo's JSON: a list of samples"),
        (b"[[[]]]", [], "sample 0 is not a LoCoMo sample"),
        (random.Random(4).randbytes(300), [], "not JSON"),
        (b"[]", ["--budgets", "abc"], "--budgets wants comma-separated whole numbers"),
        (b"[]", ["--categories", "1,x"], "--categories wants"),
        (b"[]", ["--budgets", ","], "--budgets is empty"),
    ],
)
def test_cli_eval_bad_data(
    tmp_path: Path,
    data: bytes,
    extra: list[str],
    phrase: str,
    unchanged: Callable[[Path], None],
) -> None:
    source = tmp_path / "bench.json"
    source.write_bytes(data)
    unchanged(source)
    assert phrase in run_command("eval", str(source), *extra).error()


def test_cli_eval_data_that_is_a_directory(
    tmp_path: Path,
) -> None:
    assert "is a directory" in run_command("eval", str(tmp_path)).error()
