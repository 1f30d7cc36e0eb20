"""The command line at its edges: a strategy spec for ``select``, ``-`` as stdout,
NaN and Infinity in the input, config files with a BOM or read from elsewhere, and
warnings as one line."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import pytest

from ctxwindow import BaseStrategy, History, Option, Selection
from ctxwindow._cli import EXIT_ERROR, main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "conversation.json"


class Few(BaseStrategy):
    """Keeps the must-keep units and at most the newest ``max_messages`` of the rest."""

    name = "few"
    option_specs = (Option("max_messages", int, 10, "At most this many.", minimum=0),)

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        room = history.budget - history.must_keep_tokens
        kept = 0
        for unit in reversed(range(len(history.units))):
            if unit in history.must_keep or kept >= self.options["max_messages"]:
                continue
            if history.unit_tokens(unit) <= room:
                selection.keep(unit, "fits")
                room -= history.unit_tokens(unit)
                kept += 1
        return selection


class Warns(Few):
    """Few, and a warning as a plugin's cache gives one when it fails."""

    name = "warns"

    def choose(self, history: History) -> Selection:
        warnings.warn(
            "ctxwindow: cache file 'x.db' failed (disk full); running without it\nfor now",
            RuntimeWarning,
            stacklevel=1,
        )
        return super().choose(history)


@pytest.fixture(autouse=True)
def _few(ctxwindow_register: Any) -> None:
    ctxwindow_register(Few, Warns, name="few", distribution="ctxwindow-few")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- 1: select takes NAME:key=value ----------------------------------------------------
def test_select_takes_a_strategy_spec_as_inspect_does(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "select", str(EXAMPLE), "-b", "1000", "-s", "few:max_messages=2")
    assert code == 0, err
    by_option = cli(
        capsys, "select", str(EXAMPLE), "-b", "1000", "-s", "few", "-o", "max_messages=2"
    )
    assert by_option[0] == 0 and json.loads(out) == json.loads(by_option[1])
    everything = cli(capsys, "select", str(EXAMPLE), "-b", "1000", "-s", "few")[1]
    assert len(json.loads(out)) < len(json.loads(everything))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["-s", "few:max_messages=2", "-o", "max_messages=3"],
            "--strategy 'few:max_messages=2' and --option both set 'max_messages'; set each "
            "option in one place",
        ),
        (["-s", "few:budget=100"], "'budget' is not a strategy option; give the budget with"),
        (["-s", "few:strategy=newest"], "'strategy' is not a strategy option; name the strategy"),
        (
            ["-s", "few:colour=red"],
            "--strategy 'few:colour=red', option 'colour': not an option of strategy 'few'",
        ),
        (["-s", "few:max_messages"], "'max_messages' is not key=value"),
    ],
)
def test_a_strategy_spec_that_cannot_be_is_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    code, out, err = cli(capsys, "select", str(EXAMPLE), "-b", "300", *args)
    assert code == EXIT_ERROR and out == ""
    assert err.startswith("ctxwindow: error: ") and err.count("\n") == 1
    assert said in err


# -- 3: NaN and Infinity ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "said"),
    [
        (
            '[{"role": "user", "content": "hi", "metadata": {"importance": NaN}}]',
            "holds NaN at [0].metadata.importance, which is not a JSON number",
        ),
        (
            '{"role": "user", "content": "a"}\n{"role": "user", "content": "b", "x": -Infinity}',
            "line 2 holds -Infinity at .x",
        ),
        ('[{"role": "user", "content": "hi", "score": 1e999}]', "holds 1e999 at [0].score"),
        (
            '{"model": "m", "messages": [{"role": "user", "content": "hi"}], "top_p": NaN}',
            "holds NaN at .top_p",
        ),
        (
            '{\n "model": "m",\n "messages": [{"role": "user", "content": "hi"}],\n "t": NaN\n}',
            "holds NaN at .t",
        ),
    ],
    ids=["array", "jsonl", "overflow", "request-body", "request-body-over-lines"],
)
def test_nan_or_infinity_in_the_input_is_refused_naming_where(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, said: str
) -> None:
    """Python's reader takes them, but writing them back would make the window no JSON."""
    source = tmp_path / "chat.json"
    source.write_text(content, encoding="utf-8")
    code, out, err = cli(capsys, "select", str(source), "-b", "300", "-s", "few")
    assert code == EXIT_ERROR and out == ""
    assert err.count("\n") == 1 and said in err and "write null or a finite number" in err


def test_the_window_and_the_record_are_never_written_with_nan() -> None:
    from ctxwindow._cli import _json_text  # what writes both

    with pytest.raises(ValueError, match="the record holds a NaN or an infinity"):
        _json_text({"score": math.nan}, "the record")
    assert json.loads(_json_text({"score": 1.5}, "the record")) == {"score": 1.5}


# -- 4: '-' is stdout -------------------------------------------------------------------
def test_dash_output_and_record_go_to_stdout_not_a_file_named_dash(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "select", str(EXAMPLE), "-b", "300", "-s", "few", "-O", "-")
    assert code == 0, err
    assert json.loads(out)[-1] == json.loads(EXAMPLE.read_text())[-1]
    window = tmp_path / "window.json"
    code, out, err = cli(
        capsys, "select", str(EXAMPLE), "-b", "300", "-s", "few", "-O", str(window), "--record", "-"
    )
    assert code == 0, err
    assert json.loads(out)["strategy"] == "few"
    assert json.loads(window.read_text())
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("output", [[], ["-O", "-"]], ids=["no-output", "output-dash"])
def test_record_to_stdout_beside_the_window_there_is_refused(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    output: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(
        capsys, "select", str(EXAMPLE), "-b", "300", "-s", "few", "--record", "-", *output
    )
    assert code == EXIT_ERROR and out == ""
    assert "--record - and the window would both go to stdout; give --output FILE" in err
    assert not (tmp_path / "-").exists()


# -- 6, 10: config files -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("ctxwindow.toml", 'budget = 300\r\nstrategy = "few"\r\n'),
        ("pyproject.toml", '[tool.ctxwindow]\r\nbudget = 300\r\nstrategy = "few"\r\n'),
    ],
)
def test_a_config_file_with_a_bom_and_crlf_is_read(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    text: str,
) -> None:
    """A Windows editor may save UTF-8 with a BOM, which is no TOML statement."""
    (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + text.encode())
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "select", str(EXAMPLE), "--explain")
    assert code == 0, err
    assert "strategy few | budget 300" in err


def test_config_from_stdin_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "select", str(EXAMPLE), "--config", "-")
    assert code == EXIT_ERROR
    assert "a config cannot be read from stdin ('-'); give the path of a ctxwindow.toml" in err
    assert "does not exist" not in err


def test_a_request_body_whose_messages_is_null_says_null(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    body = tmp_path / "body.json"
    body.write_text('{"model": "m", "messages": null}', encoding="utf-8")
    code, _, err = cli(capsys, "select", str(body), "-b", "300", "-s", "few")
    assert code == EXIT_ERROR
    assert "a 'messages' that is null" in err and "no 'messages'" not in err


# -- 9: warnings --------------------------------------------------------------------------
def test_a_warning_is_one_line_without_python_s_file_and_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = cli(capsys, "select", str(EXAMPLE), "-b", "300", "-s", "warns")
    assert code == 0, err
    assert err.splitlines() == [
        "ctxwindow: warning: cache file 'x.db' failed (disk full); running without it for now"
    ]


def test_under_debug_a_warning_shows_as_python_shows_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = warnings.showwarning
    with pytest.warns(RuntimeWarning, match="cache file 'x.db' failed"):
        code, _, err = cli(capsys, "--debug", "select", str(EXAMPLE), "-b", "300", "-s", "warns")
    assert code == 0, err
    assert "ctxwindow: warning:" not in err
    assert warnings.showwarning is shown  # the hook is the command's only
