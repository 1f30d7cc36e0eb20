"""CLI conventions, as a user meets them: ``--version``, listings that are tables (JSON
with ``--json``), "did you mean" for typos, config found in the current directory,
request bodies in and out, and plugin problems on the ``logging`` module."""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import BaseStrategy, History, Option, Selection
from ctxwindow._cli import EXIT_ERROR, EXIT_USAGE, main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "conversation.json"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


class Capped(BaseStrategy):
    """Keeps the newest units that fit.

    A second paragraph the table leaves out.
    """

    name = "capped"
    option_specs = (Option("max_messages", int, 10, "At most this many messages.", minimum=0),)

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        room = history.budget - history.must_keep_tokens
        for unit in reversed(range(len(history.units))):
            if unit not in history.must_keep and history.unit_tokens(unit) <= room:
                selection.keep(unit, "fits")
                room -= history.unit_tokens(unit)
        return selection


@pytest.fixture(autouse=True)
def _capped(ctxwindow_register: Any) -> None:
    ctxwindow_register(Capped, name="capped", distribution="ctxwindow-capped")


# -- version ---------------------------------------------------------------------------
def test_version_flag_and_attribute_come_from_the_installed_metadata(
    capsys: pytest.CaptureFixture[str],
) -> None:
    installed = importlib.metadata.version("ctxwindow")
    assert ctxwindow.__version__ == installed
    code, out, err = cli(capsys, "--version")
    assert (code, out, err) == (0, f"ctxwindow {installed}\n", "")


def test_import_reads_no_metadata_until_the_version_is_asked_for() -> None:
    code = (
        "import sys, ctxwindow\n"
        "before = 'importlib.metadata' in sys.modules\n"
        "version = ctxwindow.__version__\n"
        "print(before, bool(version))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


def test_version_without_metadata_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxwindow import _plugins

    monkeypatch.setattr(_plugins, "_version", lambda distribution: None)
    assert _plugins.core_version() == _plugins.UNKNOWN_VERSION == "0+unknown"


# -- listings --------------------------------------------------------------------------
def test_strategies_is_a_table_in_80_columns(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "strategies")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["name", "distribution", "LLM", "summary"]
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    row = next(line for line in lines if line.startswith("capped "))
    assert row.split()[:3] == ["capped", "ctxwindow-capped", "no"]
    assert "Keeps the newest units" in row
    assert "second paragraph" not in out
    assert "max_messages" not in out  # options only with --verbose or NAME


def test_strategies_verbose_and_one_strategy_show_its_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = cli(capsys, "strategies", "--verbose")
    assert code == 0
    assert "capped (from ctxwindow-capped; needs no LLM)" in out
    assert "max_messages: int (>= 0) = 10" in out
    code, one, _ = cli(capsys, "strategies", "capped")
    assert code == 0
    assert one.startswith("capped (from ctxwindow-capped; needs no LLM)\n")
    assert "max_messages: int (>= 0) = 10" in one and "At most this many messages." in one
    assert "oversize: 'cut' | 'truncate' | 'raise' = 'cut'" in one
    assert all(len(line) <= 80 for line in one.splitlines())
    code, raw, _ = cli(capsys, "strategies", "capped", "--json")
    described = json.loads(raw)
    assert described["name"] == "capped"
    options = {option["name"]: option for option in described["options"]}
    assert (options["max_messages"]["minimum"], options["max_messages"]["maximum"]) == (0, None)


def test_strategies_json_is_the_list_it_always_was(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "strategies", "--json")
    assert code == 0
    assert json.loads(out) == json.loads(json.dumps(ctxwindow.describe_strategies(), default=str))


def test_strategies_name_that_is_a_typo(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["strategies", "Capped"])
    assert usage.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown strategy 'Capped'; installed strategies: " in err
    assert "did you mean 'capped'?" in err


def test_plugins_is_a_table_and_json_with_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "plugins")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["name", "distribution", "version", "hooks"]
    assert all(len(line) <= 80 for line in lines)
    core = next(line for line in lines if line.startswith("ctxwindow "))
    assert core.split() == ["ctxwindow", "ctxwindow", ctxwindow.__version__, "token_counters"]
    assert any(line.split()[:2] == ["capped", "ctxwindow-capped"] for line in lines)
    code, verbose, _ = cli(capsys, "plugins", "--verbose")
    assert "module" in verbose.splitlines()[0] and "ctxwindow._tokens" in verbose
    code, raw, _ = cli(capsys, "plugins", "--json")
    report = json.loads(raw)
    assert set(report) == {"plugins", "kept_out", "problems"}
    assert report["plugins"][0]["distribution"] == "ctxwindow"


def test_plugins_table_shows_a_broken_plugin_and_the_problems(
    ctxwindow_register: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    class Broken:
        @ctxwindow.hookimpl
        def register_strategies(self, register: Any) -> None:
            raise RuntimeError("no strategies today")

    ctxwindow_register(Broken(), name="broken", distribution="ctxwindow-broken")
    code, out, _ = cli(capsys, "plugins")
    assert code == 0
    row = out[out.index("broken ") :]
    assert "ERROR register_strategies raised RuntimeError" in " ".join(row.split())
    problems = out[out.index("\nproblems:\n") :]
    assert "ctxwindow-broken: register_strategies raised RuntimeError" in " ".join(problems.split())


def test_plugins_table_shows_a_clash_beside_the_hooks_that_still_work(
    ctxwindow_register: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name another plugin registered too is refused, the plugin's other names still
    work: its row keeps its hooks and names the problem, not ERROR as if it were broken."""

    class Clashing(BaseStrategy):
        name = "newest"  # the testing plugin's

        def choose(self, history: History) -> Selection:
            return history.selection()

    class Own(Clashing):
        name = "clashing-own"

    ctxwindow_register(Clashing, Own, name="clashing", distribution="ctxwindow-clashing")
    code, out, _ = cli(capsys, "plugins")
    assert code == 0
    row = " ".join(out[out.index("clashing ") :].split())
    assert row.startswith("clashing ctxwindow-clashing")
    assert "ERROR" not in row.split("problems:")[0]
    assert "strategies (problem: strategy 'newest' is registered by both" in row
    assert "ctxwindow.select" not in row
    code, raw, _ = cli(capsys, "plugins", "--json")
    found = {p["name"]: p for p in json.loads(raw)["plugins"]}
    assert found["clashing"]["failed"] is False
    assert "registered by both" in found["clashing"]["error"]
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert ctxwindow.select(history, budget=1000, strategy="clashing-own").messages


# -- did you mean ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("fixd", "fixed"),
        ("semantik", "semantic"),
        ("Fixed", "fixed"),
        ("clear-tool-outputs", "clear_tool_outputs"),
        ("capd", "capped"),
        ("bare_newest", "bare-newest"),
    ],
)
def test_unknown_strategy_suggests_the_name_meant(typo: str, meant: str) -> None:
    with pytest.raises(ctxwindow.UnknownStrategy) as raised:
        ctxwindow.from_config({"strategy": typo, "budget": 100})
    text = str(raised.value)
    assert text.startswith(f"unknown strategy {typo!r}; installed strategies: ")
    assert "capped" in text  # the list of what is installed stays
    assert f"did you mean {meant!r}?" in text
    assert raised.value.suggestion == meant


def test_unknown_strategy_far_from_every_name_suggests_nothing() -> None:
    with pytest.raises(ctxwindow.UnknownStrategy) as raised:
        ctxwindow.from_config({"strategy": "magic", "budget": 100})
    assert "did you mean" not in str(raised.value)
    assert raised.value.suggestion is None


def test_unknown_option_and_counter_suggest_the_name_meant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ctxwindow.InvalidOption, match=r"did you mean 'max_messages'\?"):
        Capped(max_mesages=3)
    with pytest.raises(ctxwindow.InvalidOption) as raised:
        ctxwindow.from_config({"strategy": "capped", "budget": 100, "max_mesages": 3})
    assert "unknown key(s) 'max_mesages' for strategy 'capped'; valid keys: " in str(raised.value)
    assert str(raised.value).endswith("did you mean 'max_messages'?")
    with pytest.raises(ctxwindow.InvalidOption) as raised:
        ctxwindow.select([{"role": "user", "content": "hi"}], 100, "capped", max_mesages=3)
    assert str(raised.value) == (  # the call's keyword argument: it wrote no config
        "select(): unknown option(s) 'max_mesages' for strategy 'capped'; its options: "
        "max_messages, on_timeout, orphans, oversize, task_statement, time_limit; did you "
        "mean 'max_messages'?"
    )
    with pytest.raises(ctxwindow.UnknownCounter) as counter:
        ctxwindow.get_counter("aprox")
    assert "unknown token counter 'aprox'; available: approx" in str(counter.value)
    assert "did you mean 'approx'?" in str(counter.value)
    code, _, err = cli(capsys, "select", str(EXAMPLE), "-s", "capped", "-b", "800", "-c", "aprox")
    assert code == EXIT_ERROR
    assert "did you mean 'approx'?" in err
    code, _, err = cli(capsys, "select", str(EXAMPLE), "-s", "capd", "-b", "800")
    assert code == EXIT_ERROR and "did you mean 'capped'?" in err


def test_several_typos_say_which_is_meant_for_which() -> None:
    with pytest.raises(ctxwindow.InvalidOption) as raised:
        ctxwindow.from_config(
            {"strategy": "capped", "budget": 100, "max_mesages": 3, "ovresize": "cut"}
        )
    assert "did you mean 'max_messages' for 'max_mesages', 'oversize' for 'ovresize'?" in str(
        raised.value
    )


# -- config: a typo'd key, and discovery -----------------------------------------------
def test_a_typod_budget_is_named_not_reported_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ctxwindow.InvalidOption, match=r"'buget'.*did you mean 'budget'\?"):
        ctxwindow.from_config({"strategy": "capped", "buget": 4000})
    with pytest.raises(ctxwindow.InvalidOption, match=r"'stratgy'.*did you mean 'strategy'\?"):
        ctxwindow.from_config({"stratgy": "capped", "budget": 4000})
    config = tmp_path / "ctxwindow.toml"
    config.write_text('strategy = "capped"\nbuget = 4000\n', encoding="utf-8")
    with pytest.raises(ctxwindow.InvalidOption, match=r"unknown key\(s\) 'buget'"):
        ctxwindow.from_config(config)
    code, _, err = cli(capsys, "select", str(EXAMPLE), "--config", str(config))
    assert code == EXIT_ERROR
    assert "unknown key(s) 'buget'" in err and "did you mean 'budget'?" in err
    assert "no token budget" not in err
    monkeypatch.chdir(tmp_path)  # found in the current directory: the same error
    code, _, err = cli(capsys, "select", str(EXAMPLE))
    assert code == EXIT_ERROR and "did you mean 'budget'?" in err


def test_without_budget_or_typo_the_error_is_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "select", str(EXAMPLE), "-s", "capped")
    assert code == EXIT_ERROR
    assert err.startswith("ctxwindow: error: no token budget: pass --budget N")
    with pytest.raises(ctxwindow.ConfigError, match="config has no 'budget'"):
        ctxwindow.from_config({"strategy": "capped"})


@pytest.mark.parametrize(
    ("files", "used"),
    [
        ({"ctxwindow.toml": 'strategy = "capped"\nbudget = 300\n'}, "ctxwindow.toml"),
        (
            {"pyproject.toml": '[tool.ctxwindow]\nstrategy = "capped"\nbudget = 300\n'},
            "pyproject.toml",
        ),
        (
            {
                "ctxwindow.toml": 'strategy = "capped"\nbudget = 300\n',
                "pyproject.toml": '[tool.ctxwindow]\nstrategy = "newest"\nbudget = 5\n',
            },
            "ctxwindow.toml",
        ),
    ],
    ids=["ctxwindow.toml", "pyproject", "ctxwindow.toml-first"],
)
def test_select_finds_the_config_in_the_current_directory(
    files: dict[str, str],
    used: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "select", str(EXAMPLE), "--explain")
    assert code == 0, err
    assert err.startswith("strategy capped | budget 300")  # the record first, as before
    assert err.splitlines()[-1] == f"config {used!r}"
    assert "strategy capped | budget 300" in err
    assert json.loads(out)
    # the command line wins over the file
    code, _, err = cli(capsys, "select", str(EXAMPLE), "-b", "500", "--explain")
    assert "strategy capped | budget 500" in err


def test_explain_names_the_config_given_or_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "select", str(EXAMPLE), "-s", "capped", "-b", "300", "--explain")
    assert code == 0
    assert err.splitlines()[-1].startswith("config: none")
    given = tmp_path / "other.toml"
    given.write_text('strategy = "capped"\nbudget = 300\n', encoding="utf-8")
    (tmp_path / "ctxwindow.toml").write_text("broken = [", encoding="utf-8")  # not read
    code, _, err = cli(capsys, "select", str(EXAMPLE), "--config", str(given), "--explain")
    assert code == 0, err
    assert err.splitlines()[-1] == f"config {str(given)!r} (--config)"


# -- request bodies --------------------------------------------------------------------
def test_select_windows_a_saved_request_body_and_keeps_its_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    messages = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    body = {"model": "gpt-4o", "messages": messages, "temperature": 0.2, "tools": []}
    source = tmp_path / "request.json"
    source.write_text(json.dumps(body, indent=2), encoding="utf-8")
    code, out, err = cli(capsys, "select", str(source), "-s", "capped", "-b", "800")
    assert code == 0, err
    windowed = json.loads(out)
    assert list(windowed) == list(body)
    assert {k: v for k, v in windowed.items() if k != "messages"} == {
        k: v for k, v in body.items() if k != "messages"
    }
    assert 0 < len(windowed["messages"]) < len(messages)
    code, plain, _ = cli(capsys, "select", str(EXAMPLE), "-s", "capped", "-b", "800")
    assert windowed["messages"] == json.loads(plain)


def test_select_reads_a_request_body_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    stdin = io.TextIOWrapper(io.BytesIO(json.dumps(body).encode()))
    monkeypatch.setattr(sys, "stdin", stdin)
    code, out, err = cli(capsys, "select", "-", "-s", "capped", "-b", "100")
    assert code == 0, err
    assert json.loads(out) == body


def test_an_anthropic_body_without_the_adapters_names_the_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {
        "model": "claude",
        "max_tokens": 100,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "hi"}],
    }
    source = tmp_path / "anthropic.json"
    source.write_text(json.dumps(body), encoding="utf-8")
    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", "ctxwindow-adapters")  # as if not installed
    ctxwindow.reload_plugins()
    try:
        code, out, err = cli(capsys, "select", str(source), "-s", "capped", "-b", "100")
    finally:
        monkeypatch.delenv("CTXWINDOW_DISABLE_PLUGINS")
        ctxwindow.reload_plugins()
    assert code == EXIT_ERROR and out == ""
    assert "Anthropic Messages request body" in err
    assert "pip install 'ctxwindow-adapters" in err
    assert "unknown role" not in err


class UpperBody:
    """A request format for the test: a body with ``"shout": true``, whose messages
    come back upper-cased after windowing."""

    def recognises(self, body: Any) -> bool:
        return body.get("shout") is True

    def select(
        self, body: Any, windower: ctxwindow.Windower, query: str | None
    ) -> tuple[dict[str, Any], ctxwindow.Window[Any]]:
        window = windower.select(body["messages"], query=query)
        shouted = [{**m, "content": m["content"].upper()} for m in window.messages]
        return {**body, "messages": shouted}, window


class RaisingBody(UpperBody):
    """A broken format: logged and skipped, the others still read their bodies."""

    def recognises(self, body: Any) -> bool:
        raise RuntimeError("cannot tell")


class UpperFormats:
    @ctxwindow.hookimpl
    def register_request_formats(self, register: Any) -> None:
        register("a-raising", RaisingBody())  # asked first: formats go by name
        register("upper", UpperBody())
        register("broken", object())  # no recognises/select: reported, not used


def test_a_plugin_request_format_reads_and_writes_its_bodies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ctxwindow_register: Any
) -> None:
    ctxwindow_register(UpperFormats(), name="upper", distribution="ctxwindow-upper")
    messages = [
        {"role": "user", "content": "an old question " * 40},
        {"role": "assistant", "content": "an old answer " * 40},
        {"role": "user", "content": "new question"},
    ]
    body = {"shout": True, "model": "m", "messages": messages}
    source = tmp_path / "shout.json"
    source.write_text(json.dumps(body), encoding="utf-8")
    code, out, err = cli(capsys, "select", str(source), "-s", "capped", "-b", "50")
    assert code == 0, err
    assert json.loads(out) == {
        "shout": True,
        "model": "m",
        "messages": [{"role": "user", "content": "NEW QUESTION"}],
    }
    plain = tmp_path / "plain.json"  # a body the format does not recognise: OpenAI's
    plain.write_text(json.dumps({**body, "shout": False}), encoding="utf-8")
    code, out, err = cli(capsys, "select", str(plain), "-s", "capped", "-b", "50")
    assert code == 0, err
    assert json.loads(out)["messages"] == [{"role": "user", "content": "new question"}]
    problems = ctxwindow.plugin_problems()
    assert any("ctxwindow-upper: request format 'broken'" in p for p in problems), problems


def test_a_single_message_object_is_still_jsonl(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "one.jsonl"
    source.write_text('{"role": "user", "content": "hi", "messages": []}\n', encoding="utf-8")
    code, out, err = cli(capsys, "select", str(source), "-s", "capped", "-b", "100")
    assert code == 0, err
    assert json.loads(out) == [{"role": "user", "content": "hi", "messages": []}]


# -- logging ---------------------------------------------------------------------------
def test_a_plugin_that_fails_to_load_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from ctxwindow import _plugins

    class Dist:
        def __init__(self) -> None:
            self.metadata = {"Name": "ctxwindow-broken"}
            self.version = "9.9"

    class EntryPoint:
        name = "broken"
        value = "ctxwindow_broken_nowhere"
        dist = Dist()

        def load(self) -> Any:
            raise ModuleNotFoundError("No module named 'numpyy'")

    class Metadata:  # importlib.metadata, with one broken entry point installed
        PackageNotFoundError = importlib.metadata.PackageNotFoundError
        version = staticmethod(importlib.metadata.version)

        @staticmethod
        def entry_points(group: str) -> list[EntryPoint]:
            return [EntryPoint()]

    monkeypatch.setattr(_plugins, "_metadata", lambda: Metadata)
    fresh = _plugins.Plugins()
    with caplog.at_level(logging.WARNING, logger="ctxwindow"):
        fresh.loaded()
    assert fresh.infos["broken"].error == "ModuleNotFoundError: No module named 'numpyy'"
    [record] = [r for r in caplog.records if r.name == "ctxwindow.plugins"]
    assert record.levelno == logging.WARNING
    assert "'broken' from distribution 'ctxwindow-broken' failed to load" in record.getMessage()
    assert "numpyy" in record.getMessage()


def test_a_hook_that_raises_is_logged(
    ctxwindow_register: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        @ctxwindow.hookimpl
        def register_strategies(self, register: Any) -> None:
            raise RuntimeError("no strategies today")

    with caplog.at_level(logging.WARNING, logger="ctxwindow"):
        ctxwindow_register(Broken(), name="broken", distribution="ctxwindow-broken")
        ctxwindow.plugin_problems()
    assert any(
        r.name == "ctxwindow.plugins"
        and "ctxwindow-broken: register_strategies raised" in r.getMessage()
        for r in caplog.records
    )


def test_an_unknown_strategy_names_the_plugins_that_failed(
    ctxwindow_register: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The strategy asked for may be a broken plugin's: the error, and the table of
    strategies, say which plugins failed and why, not only what is installed."""

    class Broken:
        @ctxwindow.hookimpl
        def register_strategies(self, register: Any) -> None:
            raise RuntimeError("no strategies today")

    ctxwindow_register(Broken(), name="questions", distribution="ctxwindow-questions")
    with pytest.raises(ctxwindow.UnknownStrategy) as raised:
        ctxwindow.select([{"role": "user", "content": "hi"}], 100, "questions")
    [failed] = [f for f in raised.value.failed if "ctxwindow-questions" in f]
    assert "RuntimeError: no strategies today" in failed
    assert "failed to load" in str(raised.value) and failed in str(raised.value)
    assert main(["strategies"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "ctxwindow-questions" in shown and "no strategies today" in shown


def test_the_library_prints_no_log_output_by_default() -> None:
    code = (
        "import ctxwindow\n"
        "class Broken:\n"
        "    @ctxwindow.hookimpl\n"
        "    def register_strategies(self, register):\n"
        "        raise RuntimeError('boom')\n"
        "ctxwindow.register_plugin(Broken(), 'broken')\n"
        "print(len(ctxwindow.plugin_problems()) > 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"
    assert done.stderr == ""


def test_a_listing_whose_reader_has_gone_ends_quietly() -> None:
    """`ctxwindow plugins | head -1`: no traceback, no error line, a clean exit."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ctxwindow", "plugins", "--verbose"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before the command writes anything
    errors = process.stderr.read()
    assert process.wait(timeout=60) == 0
    assert errors == b""


def test_with_every_strategy_kept_out_the_listing_says_so() -> None:
    """The environment keeps every plugin out: the listing names them, not an install
    (the core installed alone is tests/test_ecosystem.py's, in a venv)."""
    env = {**os.environ, "CTXWINDOW_LOAD_PLUGINS": ""}  # no plugin loads
    for flags in ([], ["--verbose"]):
        done = subprocess.run(
            [sys.executable, "-m", "ctxwindow", "strategies", *flags],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert (done.returncode, done.stdout) == (0, "")
        if not _plugins_installed():  # the core sessions: the core alone
            hint = "pip install ctxwindow-fixed"
            assert done.stderr == f"no strategy is installed; for the first one: {hint}\n"
            continue
        said = "no strategy is loaded; not loaded because of the environment: "
        assert done.stderr.startswith(said)
        assert "ctxwindow-fixed (CTXWINDOW_LOAD_PLUGINS)" in done.stderr


def _plugins_installed() -> bool:
    """Whether any plugin distribution is installed besides the core."""
    from importlib import metadata

    found = metadata.entry_points(group="ctxwindow")
    return any(entry.dist is not None and entry.dist.name != "ctxwindow" for entry in found)
