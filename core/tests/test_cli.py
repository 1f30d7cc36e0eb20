"""The ctxwindow command, run as a user runs it: a subprocess, real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "conversation.json"


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxwindow.cli", *args],
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_select_explain_on_the_example() -> None:
    result = run("select", str(EXAMPLE), "--strategy", "fixed", "--budget", "800", "--explain")
    assert result.returncode == 0, result.stderr
    window = json.loads(result.stdout)
    original = json.loads(EXAMPLE.read_text())
    assert window[0] == original[0]  # system
    assert original[1] in window  # pinned
    assert window[-1] == original[-1]  # newest user message
    assert len(window) < len(original)
    assert "strategy fixed | budget 800" in result.stderr
    assert "pinned" in result.stderr
    assert "kept" in result.stderr
    assert "dropped" in result.stderr


def test_select_reads_jsonl_from_stdin_and_writes_the_record(tmp_path: Path) -> None:
    messages = json.loads(EXAMPLE.read_text())
    jsonl = "\n".join(json.dumps(m) for m in messages).encode()
    record_file = tmp_path / "record.json"
    result = run(
        "select",
        "-",
        "-b",
        "600",
        "-o",
        "max_messages=6",
        "--record",
        str(record_file),
        stdin=jsonl,
    )
    assert result.returncode == 0, result.stderr
    window = json.loads(result.stdout)
    record = json.loads(record_file.read_text())
    assert record["strategy"] == "fixed"
    assert record["messages_after"] == len(window)
    assert record["tokens_after"] <= 600
    assert len(record["decisions"]) >= 1


def test_select_takes_settings_from_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "ctxwindow.toml"
    config.write_text('strategy = "fixed"\nbudget = 700\nmax_messages = 3\n')
    result = run("select", str(EXAMPLE), "--config", str(config))
    assert result.returncode == 0, result.stderr
    window = json.loads(result.stdout)
    original = json.loads(EXAMPLE.read_text())
    # system + pinned + the newest user message and one reply: the tool group before the
    # reply has three messages and would take the cap of 3 past its limit.
    assert window == [original[0], original[1], original[-2], original[-1]]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'[{"role": "user", "content": "hi"', "not valid JSON"),
        (b"\xff\xfe\x00binary\x00", "not UTF-8"),
        (b"", "is empty"),
        (b'[{"role": "wizard", "content": "x"}]', "message 0: unknown role 'wizard'"),
        (b'{"role": "user"}', "message 0: 'content' is missing"),
        (b'[{"role": "tool", "tool_call_id": "x", "content": "r"}]', "does not follow"),
    ],
)
def test_bad_input_is_one_clear_line_and_a_nonzero_exit(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    source = tmp_path / "messages.json"
    source.write_bytes(content)
    result = run("select", str(source), "--budget", "100")
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert source.read_bytes() == content


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--budget", "0"], "budget must be a positive int"),
        (["--budget", "100", "-o", "colour=red"], "unknown key(s) 'colour'"),
        (["--budget", "100", "-o", "max_messages=lots"], "expects int | None"),
        (["--budget", "100", "--counter", "nope"], "unknown token counter 'nope'"),
        (["--budget", "2"], "need"),
        ([], "pass --budget N"),
        (["--budget", "100", "-o", "budget=5"], "--option cannot set 'budget'; use --budget"),
        (["--budget", "100", "-o", "strategy=fixed"], "use --strategy instead"),
        (["--budget", "100", "-o", "counter=approx"], "use --counter instead"),
    ],
)
def test_bad_arguments_are_clear_errors(args: list[str], expected: str) -> None:
    result = run("select", str(EXAMPLE), *args)
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_first_party_strategy_gives_the_install_hint(
    uninstalled_first_party: str, install_advice: str
) -> None:
    name = uninstalled_first_party
    result = run("select", str(EXAMPLE), "--budget", "100", "--strategy", name)
    assert result.returncode == 1
    assert install_advice in result.stderr
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback() -> None:
    result = run("--debug", "select", str(EXAMPLE), "--budget", "0")
    assert result.returncode != 0
    assert "Traceback" in result.stderr


def test_missing_file() -> None:
    result = run("select", "/nonexistent/chat.json", "--budget", "100")
    assert result.returncode == 1
    assert "does not exist" in result.stderr


def test_plugins_and_strategies_report_json() -> None:
    plugins = json.loads(run("plugins").stdout)
    by_distribution = {p["distribution"]: p for p in plugins["plugins"]}
    assert by_distribution["ctxwindow"]["hooks"] == ["register_token_counters"]
    assert by_distribution["ctxwindow-fixed"]["hooks"] == ["register_strategies"]
    assert by_distribution["ctxwindow-fixed"]["error"] is None
    assert by_distribution["ctxwindow-fixed"]["version"]
    strategies = {s["name"]: s for s in json.loads(run("strategies").stdout)}
    fixed = strategies["fixed"]
    assert fixed["requires_llm"] is False
    assert fixed["distribution"] == "ctxwindow-fixed"
    from ctxwindow_fixed import FixedWindow

    declared = {option.name for option in FixedWindow.all_options()}
    assert {o["name"] for o in fixed["options"]} == declared
    assert {"max_messages", "oversize", "orphans"} <= declared


def test_no_command_prints_help() -> None:
    result = run()
    assert result.returncode == 2
    assert "select" in result.stderr


def test_output_file_instead_of_stdout(tmp_path: Path) -> None:
    target = tmp_path / "window.json"
    result = run("select", str(EXAMPLE), "--budget", "800", "--output", str(target))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert json.loads(target.read_text())[-1] == json.loads(EXAMPLE.read_text())[-1]


def test_jsonl_lines_split_on_newlines_only(tmp_path: Path) -> None:
    # U+2028, U+2029 and U+0085 are valid unescaped inside JSON strings
    lines = [
        {"role": "user", "content": "line one\u2028still the same string"},
        {"role": "assistant", "content": "ok\u0085NEL\u2029PS\x1cFS"},
        {"role": "user", "content": "q"},
    ]
    source = tmp_path / "chat.jsonl"
    text = "\r\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\n\n"
    source.write_text(text, encoding="utf-8")
    result = run("select", str(source), "--budget", "1000")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == lines


def test_strategies_and_plugins_flag_a_name_two_distributions_register() -> None:
    code = """
import io, json, contextlib
from ctxwindow import BaseStrategy, cli, hookimpl, plugins

class Other(BaseStrategy):
    name = "fixed"
    def choose(self, history):
        return history.selection()

class Mod:
    @hookimpl
    def register_strategies(register):
        register(Other)

plugins.host().register_plugin(Mod, "evil", "evil-dist")
out = {}
for command in ("plugins", "strategies"):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        cli.main([command])
    out[command] = json.loads(buffer.getvalue())
print(json.dumps(out))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    found = json.loads(done.stdout)
    clash = "strategy 'fixed' is registered by both"
    assert any(clash in problem for problem in found["plugins"]["problems"])
    errors = {p["distribution"]: p["error"] for p in found["plugins"]["plugins"]}
    assert clash in errors["evil-dist"]
    assert clash in errors["ctxwindow-fixed"]
    fixed = next(s for s in found["strategies"] if s["name"] == "fixed")
    assert clash in fixed["conflict"]
    others = [s for s in found["strategies"] if s["name"] != "fixed"]
    assert all(s["conflict"] is None for s in others)
