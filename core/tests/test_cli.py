"""The ctxwindow command, run as a user runs it: a subprocess, real files (the
``run_cli`` fixture registers the testing kit's strategies in that process)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow.testing.strategies import Newest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "conversation.json"
Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run(run_cli: Run) -> Run:
    return run_cli


def test_select_explain_on_the_example(run: Run) -> None:
    result = run("select", str(EXAMPLE), "--strategy", "newest", "--budget", "800", "--explain")
    assert result.returncode == 0, result.stderr
    window = json.loads(result.stdout)
    original = json.loads(EXAMPLE.read_text())
    assert window[0] == original[0]  # system
    assert original[1] in window  # pinned
    assert window[-1] == original[-1]  # newest user message
    assert len(window) < len(original)
    assert "strategy newest | budget 800" in result.stderr
    assert "pinned" in result.stderr
    assert "kept" in result.stderr
    assert "dropped" in result.stderr


def test_select_reads_jsonl_from_stdin_and_writes_the_record(run: Run, tmp_path: Path) -> None:
    messages = json.loads(EXAMPLE.read_text())
    jsonl = "\n".join(json.dumps(m) for m in messages).encode()
    record_file = tmp_path / "record.json"
    result = run(
        "select",
        "-",
        "-s",
        "newest",
        "-b",
        "600",
        "-o",
        "oversize=truncate",
        "--record",
        str(record_file),
        stdin=jsonl,
    )
    assert result.returncode == 0, result.stderr
    window = json.loads(result.stdout)
    record = json.loads(record_file.read_text())
    assert record["strategy"] == "newest"
    assert record["messages_after"] == len(window)
    assert record["tokens_after"] <= 600
    assert len(record["decisions"]) >= 1


def test_select_takes_settings_from_a_config_file(run: Run, tmp_path: Path) -> None:
    config = tmp_path / "ctxwindow.toml"
    config.write_text('strategy = "newest"\nbudget = 300\noversize = "truncate"\n')
    result = run("select", str(EXAMPLE), "--config", str(config))
    assert result.returncode == 0, result.stderr
    window = json.loads(result.stdout)
    original = json.loads(EXAMPLE.read_text())
    same = ctxwindow.select(original, 300, "newest", oversize="truncate")
    assert window == same.messages  # the command's window is the API's
    assert window[:2] == original[:2] and window[-1] == original[-1]
    assert len(window) < len(original)


def test_strategy_flag_sets_aside_the_config_strategys_own_options(
    run: Run, tmp_path: Path
) -> None:
    """A config written for one strategy (with its options) still serves another named
    by --strategy: its budget, counter and visit bounds apply, and the options the other
    strategy takes too; the rest is set aside, and --explain says so."""
    config = tmp_path / "ctxwindow.toml"
    config.write_text('strategy = "bare-newest"\nbudget = 300\ntime_limit = 5\nmax_messages = 40\n')
    result = run("select", str(EXAMPLE), "--config", str(config), "-s", "newest", "--explain")
    assert result.returncode == 0, result.stderr
    original = json.loads(EXAMPLE.read_text())
    same = ctxwindow.select(original, 300, "newest", time_limit=5)
    assert json.loads(result.stdout) == same.messages
    assert "its options for strategy 'bare-newest' (max_messages) set aside" in result.stderr
    # the config's own strategy still gets them, and rejects the one it does not know
    plain = run("select", str(EXAMPLE), "--config", str(config))
    assert plain.returncode != 0 and "max_messages" in plain.stderr
    # an option the other strategy takes too stays, checked as ever
    config.write_text('strategy = "bare-newest"\nbudget = 300\noversize = "bogus"\n')
    bogus = run("select", str(EXAMPLE), "--config", str(config), "-s", "newest")
    assert bogus.returncode != 0 and "'oversize' must be one of" in bogus.stderr


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
    run: Run, tmp_path: Path, content: bytes, expected: str
) -> None:
    source = tmp_path / "messages.json"
    source.write_bytes(content)
    result = run("select", str(source), "--budget", "100", "--strategy", "newest")
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert source.read_bytes() == content


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--budget", "0"], "budget must be a positive int"),
        (
            ["--budget", "100", "-o", "colour=red"],
            "--option 'colour': not an option of strategy 'newest'; it takes on_timeout, "
            "orphans, oversize, task_statement, time_limit",
        ),
        (["--budget", "100", "-o", "oversise=cut"], "did you mean 'oversize'?"),
        (["--budget", "100", "-o", "oversize=lots"], "must be one of 'cut', 'truncate', 'raise'"),
        (["--budget", "100", "--counter", "nope"], "unknown token counter 'nope'"),
        (["--budget", "2"], "need"),
        ([], "pass --budget N"),
        (["--budget", "100", "-o", "budget=5"], "--option cannot set 'budget'; use --budget"),
        (["--budget", "100", "-o", "strategy=newest"], "use --strategy instead"),
        (["--budget", "100", "-o", "counter=approx"], "use --counter instead"),
    ],
)
def test_bad_arguments_are_clear_errors(run: Run, args: list[str], expected: str) -> None:
    result = run("select", str(EXAMPLE), "--strategy", "newest", *args)
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_first_party_strategy_gives_the_install_hint(
    run: Run, uninstalled_first_party: str, install_advice: str
) -> None:
    name = uninstalled_first_party
    result = run("select", str(EXAMPLE), "--budget", "100", "--strategy", name)
    assert result.returncode == 1
    assert install_advice in result.stderr
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(run: Run) -> None:
    result = run("--debug", "select", str(EXAMPLE), "--budget", "0")
    assert result.returncode != 0
    assert "Traceback" in result.stderr


def test_missing_file(run: Run) -> None:
    result = run("select", "/nonexistent/chat.json", "--budget", "100")
    assert result.returncode == 1
    assert "does not exist" in result.stderr


def test_plugins_and_strategies_report_json(run: Run) -> None:
    plugins = json.loads(run("plugins", "--json").stdout)
    by_distribution = {p["distribution"]: p for p in plugins["plugins"]}
    assert by_distribution["ctxwindow"]["hooks"] == ["register_token_counters"]
    assert by_distribution["ctxwindow"]["version"]
    assert by_distribution["ctxwindow-testing"]["hooks"] == ["register_strategies"]
    assert by_distribution["ctxwindow-testing"]["error"] is None
    strategies = {s["name"]: s for s in json.loads(run("strategies", "--json").stdout)}
    newest = strategies["newest"]
    assert newest["requires_llm"] is False
    assert newest["distribution"] == "ctxwindow-testing"
    declared = {option.name for option in Newest.all_options()}
    assert {o["name"] for o in newest["options"]} == declared
    assert {"oversize", "orphans", "time_limit", "on_timeout"} <= declared


def test_no_command_prints_help(run: Run) -> None:
    result = run()
    assert result.returncode == 2
    assert "select" in result.stderr


def test_output_file_instead_of_stdout(run: Run, tmp_path: Path) -> None:
    target = tmp_path / "window.json"
    result = run("select", str(EXAMPLE), "-s", "newest", "--budget", "800", "--output", str(target))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert json.loads(target.read_text())[-1] == json.loads(EXAMPLE.read_text())[-1]


def test_jsonl_lines_split_on_newlines_only(run: Run, tmp_path: Path) -> None:
    # U+2028, U+2029 and U+0085 are valid unescaped inside JSON strings
    lines = [
        {"role": "user", "content": "line one\u2028still the same string"},
        {"role": "assistant", "content": "ok\u0085NEL\u2029PS\x1cFS"},
        {"role": "user", "content": "q"},
    ]
    source = tmp_path / "chat.jsonl"
    text = "\r\n".join(json.dumps(line, ensure_ascii=False) for line in lines) + "\n\n"
    source.write_text(text, encoding="utf-8")
    result = run("select", str(source), "--budget", "1000", "-s", "newest")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == lines


def test_strategies_and_plugins_flag_a_name_two_distributions_register() -> None:
    code = """
import io, json, contextlib
import ctxwindow
from ctxwindow import BaseStrategy, hookimpl
from ctxwindow._cli import main
from ctxwindow.testing.strategies import Newest

class Other(BaseStrategy):
    name = "newest"
    def choose(self, history):
        return history.selection()

class Mine:
    @hookimpl
    def register_strategies(register):
        register(Newest)

class Evil:
    @hookimpl
    def register_strategies(register):
        register(Other)

ctxwindow.register_plugin(Mine, "mine", "mine-dist")
ctxwindow.register_plugin(Evil, "evil", "evil-dist")
out = {}
for command in ("plugins", "strategies"):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        main([command, "--json"])
    out[command] = json.loads(buffer.getvalue())
print(json.dumps(out))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    found = json.loads(done.stdout)
    clash = "strategy 'newest' is registered by both"
    assert any(clash in problem for problem in found["plugins"]["problems"])
    errors = {p["distribution"]: p["error"] for p in found["plugins"]["plugins"]}
    assert clash in errors["evil-dist"]
    assert clash in errors["mine-dist"]
    newest = next(s for s in found["strategies"] if s["name"] == "newest")
    assert clash in newest["conflict"]
    others = [s for s in found["strategies"] if s["name"] != "newest"]
    assert all(s["conflict"] is None for s in others)


class Greets:
    """A plugin that adds a command of its own through register_commands."""

    @ctxwindow.hookimpl
    def register_commands(self, cli: Any) -> None:
        hello = cli.add_parser("hello", help="say hello")
        hello.add_argument("name")
        hello.add_argument("--fail", action="store_true")
        hello.set_defaults(run=self.run)

    def run(self, args: Any) -> int:
        if args.fail:
            raise ctxwindow.InvalidOption(f"no greeting for {args.name}")
        print(f"hello {args.name}")
        return 0


class BrokenCommands:
    @ctxwindow.hookimpl
    def register_commands(self, cli: Any) -> None:
        raise RuntimeError("the command table is gone")


def test_a_plugin_adds_a_command_and_a_broken_one_is_reported(
    ctxwindow_register: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxwindow._cli import main

    ctxwindow_register(Greets(), name="greets", distribution="ctxwindow-greets")
    ctxwindow_register(BrokenCommands(), name="broken", distribution="ctxwindow-broken-commands")
    assert main(["hello", "world"]) == 0
    assert capsys.readouterr().out == "hello world\n"
    assert main(["hello", "world", "--fail"]) == 1  # its error is one line, as the core's
    assert capsys.readouterr().err == "ctxwindow: error: no greeting for world\n"
    assert main(["plugins", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    problem = "ctxwindow-broken-commands: register_commands raised RuntimeError"
    assert any(p.startswith(problem) for p in report["problems"])
    errors = {p["distribution"]: p["error"] for p in report["plugins"]}
    assert "the command table is gone" in errors["ctxwindow-broken-commands"]
    assert errors["ctxwindow-greets"] is None


def test_a_command_whose_plugin_the_environment_keeps_out_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Installed but kept out: the error says which variable, not to install it (a
    plugin not installed at all is tests/test_ecosystem.py's, in a venv of the core)."""
    from ctxwindow._cli import main

    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", "ctxwindow-eval")
    ctxwindow.reload_plugins()
    try:
        assert main(["eval", "data.json"]) == 2
        error = capsys.readouterr().err
        installed = (  # the tests session has it; the core sessions have the core alone
            "ctxwindow: error: no command 'eval' here: ctxwindow-eval is installed, but "
            "CTXWINDOW_DISABLE_PLUGINS keeps it out\n"
        )
        missing = (
            "ctxwindow: error: no command 'eval' here; it comes with `pip install ctxwindow-eval`\n"
        )
        assert error == (installed if _installed("ctxwindow-eval") else missing)
        with pytest.raises(SystemExit) as usage:  # argparse's own one-line error
            main(["no-such-command"])
        assert usage.value.code == 2
        assert "invalid choice: 'no-such-command'" in capsys.readouterr().err
    finally:
        monkeypatch.delenv("CTXWINDOW_DISABLE_PLUGINS")
        ctxwindow.reload_plugins()


def _installed(distribution: str) -> bool:
    from importlib import metadata

    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True
