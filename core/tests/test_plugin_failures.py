"""Plugins that misbehave: each is reported by name, and the host and the other plugins
keep working (a plugin calling ``sys.exit()``, a plugin claiming a name of the core's,
an entry point the environment names, a name two plugins claim)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import pytest

import ctxwindow
from ctxwindow import ApproxCounter, BaseStrategy, History, Selection
from ctxwindow import _cli as cli
from ctxwindow._plugins import get_counter, get_plugins, plugin_problems

CHAT = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]

#: The ``install`` fixture (conftest.py): a distribution installed for one test.
Install = Callable[..., str]


def _command(*args: str) -> str:
    """What ``ctxwindow ARGS`` prints; it must succeed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(list(args)) == 0
    return printed.getvalue()


def _error_of(distribution: str) -> str:
    [error] = [p.error for p in get_plugins() if p.distribution == distribution]
    assert error is not None
    return error


# -- 1. sys.exit() in a plugin ------------------------------------------------------------
EXITS_AT_IMPORT = "import sys\nsys.exit('missing config, exiting')\n"
EXITS_IN_HOOK = (
    "import sys, ctxwindow\n"
    "@ctxwindow.hookimpl\n"
    "def register_strategies(register):\n"
    "    sys.exit(2)\n"
)


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (EXITS_AT_IMPORT, "SystemExit: missing config, exiting"),
        (EXITS_IN_HOOK, "register_strategies raised SystemExit: 2"),
    ],
    ids=["at-import", "in-hook"],
)
def test_a_plugin_calling_sys_exit_is_its_failure_not_the_hosts(
    install: Install, source: str, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    exiter = install("ctxwindow-exiter", "cw_exiter_test", source, ["exiter"])
    with caplog.at_level(logging.WARNING, logger="ctxwindow"):
        listed = json.loads(_command("plugins", "--json"))
    [plugin] = [p for p in listed["plugins"] if p["distribution"] == exiter]
    assert plugin["failed"] is True
    assert said in plugin["error"] and "sys.exit()" in plugin["error"]
    assert any(said in r.getMessage() for r in caplog.records if r.name == "ctxwindow.plugins")
    window = ctxwindow.select(CHAT, budget=100, strategy="newest")  # the others still work
    assert [m["content"] for m in window.messages] == ["hello", "hi"]


def test_a_plugin_that_fails_to_load_is_among_the_problems_once(install: Install) -> None:
    """plugin_problems() says what went wrong loading the plugins too (its docstring's
    promise); ``ctxwindow plugins`` says it in the plugin's row, not again below."""
    broken = install("ctxwindow-broken", "cw_broken_test", "import no_such_module_here\n", ["b"])
    hookless = install("ctxwindow-hookless", "cw_hookless_test", "def helper():\n    pass\n", ["h"])
    problems = plugin_problems()
    [failed] = [p for p in problems if p.startswith(f"{broken}:")]
    assert "failed to load: ModuleNotFoundError" in failed and "no_such_module_here" in failed
    assert not [p for p in problems if p.startswith(f"{hookless}:")]  # no hooks: no error
    listed = json.loads(_command("plugins", "--json"))
    assert not [p for p in listed["problems"] if p.startswith(f"{broken}:")]
    [row] = [p for p in listed["plugins"] if p["distribution"] == broken]
    assert row["failed"] is True and "no_such_module_here" in row["error"]
    shown = _command("plugins")
    assert shown.count("no_such_module_here") == 1


def test_ctrl_c_in_a_plugin_still_stops_the_host(ctxwindow_register: Any) -> None:
    class Interrupted:
        @ctxwindow.hookimpl
        def register_strategies(self, register: Any) -> None:
            raise KeyboardInterrupt

    ctxwindow_register(Interrupted(), name="interrupted", distribution="ctxwindow-interrupted")
    with pytest.raises(KeyboardInterrupt):
        plugin_problems()


# -- 2. a plugin registering a name of the core's -----------------------------------------
def _claims_approx(order: str) -> object:
    """A plugin registering a token counter named 'approx', called first or last."""

    class ClaimsApprox:
        @ctxwindow.hookimpl(tryfirst=order == "tryfirst", trylast=order == "trylast")
        def register_token_counters(self, register: Any) -> None:
            register("approx", lambda argument: None)
            register("mine", lambda argument: ApproxCounter())

    return ClaimsApprox()


@pytest.mark.parametrize("order", ["tryfirst", "trylast"])
def test_the_cores_own_names_win_over_a_plugins(
    ctxwindow_register: Any, order: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The core cannot be uninstalled or blocked: its registration stays, the plugin's
    is refused and reported, and the plugin's other names work."""
    with caplog.at_level(logging.WARNING, logger="ctxwindow"):
        ctxwindow_register(_claims_approx(order), name="myapprox", distribution="ctxwindow-approx")
        problems = plugin_problems()
    assert isinstance(get_counter("approx").inner, ApproxCounter)
    assert isinstance(get_counter("mine").inner, ApproxCounter)
    window = ctxwindow.select(CHAT, budget=100, strategy="newest")  # the default counter
    assert len(window.messages) == 2
    said = "ctxwindow-approx: token counter 'approx' is a name of the core"
    assert any(p.startswith(said) for p in problems), problems
    assert not any("registered by both" in p for p in problems)
    assert any(said in r.getMessage() for r in caplog.records)
    [plugin] = [p for p in get_plugins() if p.distribution == "ctxwindow-approx"]
    assert plugin.failed is False and "register yours under another name" in str(plugin.error)
    [core] = [p for p in get_plugins() if p.distribution == "ctxwindow"]
    assert core.error is None


# -- 4. the environment names one entry point of a distribution ---------------------------
TWO_ENTRY_POINTS = (
    "import ctxwindow\n"
    "from ctxwindow.testing.strategies import Newest\n"
    "class Alpha(Newest):\n"
    "    name = 'alpha-test'\n"
    "@ctxwindow.hookimpl\n"
    "def register_strategies(register):\n"
    "    register(Alpha)\n"
)


def test_blocking_one_entry_point_keeps_out_those_loading_its_module(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two entry points loading one module: blocking one blocks both (else the other
    imports what was blocked), and the report says so truly. (One of several modules
    can still be kept out alone: tests/test_ecosystem.py, disable-one-entry-point.)"""
    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", "alpha")
    twoep = install("ctxwindow-twoep", "cw_twoep_test", TWO_ENTRY_POINTS, ["alpha", "beta"])
    with pytest.raises(ctxwindow.UnknownStrategy) as unknown:
        ctxwindow.select(CHAT, budget=100, strategy="alpha-test")
    assert f"{twoep} (CTXWINDOW_DISABLE_PLUGINS)" in unknown.value.skipped
    assert "cw_twoep_test" not in sys.modules  # never imported, through either
    listed = json.loads(_command("plugins", "--json"))
    assert listed["kept_out"] == [{"distribution": twoep, "by": "CTXWINDOW_DISABLE_PLUGINS"}]
    assert not [p for p in listed["plugins"] if p["distribution"] == twoep]


def test_letting_in_one_entry_point_loads_its_module(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CTXWINDOW_LOAD_PLUGINS", "beta")
    twoep = install("ctxwindow-twoep", "cw_twoep_test", TWO_ENTRY_POINTS, ["alpha", "beta"])
    assert ctxwindow.select(CHAT, budget=100, strategy="alpha-test").record.strategy
    listed = json.loads(_command("plugins", "--json"))
    assert twoep not in {kept["distribution"] for kept in listed["kept_out"]}


# -- 5. the listing of a name two plugins claim -------------------------------------------
class Mine(BaseStrategy):
    """Keeps mine: the first claimant's summary."""

    name = "claimed-twice"

    def choose(self, history: History) -> Selection:
        return history.selection()


class Theirs(Mine):
    """Keeps theirs: the second claimant's summary."""


class Own(Mine):
    """A strategy no one else claims."""

    name = "own-name"


def test_the_listing_names_both_claimants_and_calls_neither_failed(
    ctxwindow_register: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # no line wrapped inside a distribution's name
    ctxwindow_register(Mine, name="mine", distribution="ctxwindow-mine")
    ctxwindow_register(Theirs, Own, name="theirs", distribution="ctxwindow-theirs")
    shown = " ".join(_command("strategies").split())
    row = next(line for line in _command("strategies").splitlines() if "claimed-twice" in line)
    assert "(2 claimants)" in row
    assert "Keeps mine" not in shown and "Keeps theirs" not in shown  # neither owns it
    assert "claimed by ctxwindow-mine and ctxwindow-theirs" in shown
    assert "failed" not in shown  # both loaded; 'own-name' works
    assert "A strategy no one else claims" in shown
    one = _command("strategies", "claimed-twice")
    assert "claimed by ctxwindow-mine and ctxwindow-theirs" in one and "Keeps" not in one
    listed = {s["name"]: s for s in json.loads(_command("strategies", "--json"))}
    assert listed["claimed-twice"]["claimed_by"] == ["ctxwindow-mine", "ctxwindow-theirs"]
    assert listed["own-name"]["claimed_by"] == ["ctxwindow-theirs"]


def test_an_unknown_strategy_calls_a_plugin_with_a_name_clash_not_failed(
    ctxwindow_register: Any,
) -> None:
    """Both claimants loaded: an unknown name lists neither among the plugins that
    failed to load or register."""
    ctxwindow_register(Mine, name="mine", distribution="ctxwindow-mine")
    ctxwindow_register(Theirs, name="theirs", distribution="ctxwindow-theirs")
    with pytest.raises(ctxwindow.UnknownStrategy) as unknown:
        ctxwindow.select(CHAT, budget=100, strategy="no-such-strategy")
    assert not [f for f in unknown.value.failed if "ctxwindow-mine" in f or "theirs" in f]


class RegistersAnInstance:
    """A plugin whose one strategy the host refuses (an instance, not a class)."""

    @ctxwindow.hookimpl
    def register_strategies(self, register: Any) -> None:
        register(Own())


def test_a_refused_strategy_is_named_as_refused_not_as_a_failed_plugin(
    ctxwindow_register: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    ctxwindow_register(RegistersAnInstance(), name="odd", distribution="ctxwindow-odd-test")
    shown = " ".join(_command("strategies").split())
    assert "refused, while the plugin's other strategies work: ctxwindow-odd-test:" in shown
    assert "failed to load" not in shown
    with pytest.raises(ctxwindow.UnknownStrategy) as unknown:
        ctxwindow.select(CHAT, budget=100, strategy="own-name")
    assert [f for f in unknown.value.failed if f.startswith("ctxwindow-odd-test: ")]
    assert "failed to load or register" in str(unknown.value)


class _Named(BaseStrategy):
    name = "named-here"

    def choose(self, history: History) -> Selection:
        return history.selection()


class _Unnamed(BaseStrategy):
    def choose(self, history: History) -> Selection:
        return history.selection()


class _RegistersAsOtherHooks:
    """register_strategies called as the other hooks' register(name, factory) is."""

    @ctxwindow.hookimpl
    def register_strategies(self, register: Any) -> None:
        register("named-here", _Named)


def test_a_strategy_registered_with_a_name_argument_is_told_register_takes_the_class(
    ctxwindow_register: Any,
) -> None:
    """The other hooks' register takes (name, factory); register_strategies' takes the
    class. Called like the others, the error said "strategy name None must be lowercase
    letters", of a valid name, and never what register() takes."""
    ctxwindow_register(_RegistersAsOtherHooks(), name="as-other-hooks")
    with pytest.raises(ctxwindow.UnknownStrategy) as raised:
        ctxwindow.get_strategy("named-here")
    message = str(raised.value)
    assert "register() takes one argument, the strategy class" in message
    assert "got register('named-here', _Named)" in message
    assert "name None" not in message


def test_a_strategy_class_without_a_name_says_to_declare_one(ctxwindow_register: Any) -> None:
    """Built directly, it raised a bare AttributeError; registered, "strategy name None
    must be lowercase letters": both say now what to add."""
    with pytest.raises(ctxwindow.PluginError, match="strategy class _Unnamed declares no name"):
        _Unnamed()
    ctxwindow_register(_Unnamed, name="unnamed-plugin")
    problems = " ".join(plugin_problems())
    assert "strategy class _Unnamed declares no name: give it a class attribute" in problems
