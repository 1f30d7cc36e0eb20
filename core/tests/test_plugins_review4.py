"""A third-party plugin author's review (4): plugins are told apart by distribution, and
what a plugin gets wrong (registering nothing, a bad option spec, a bug of its own, a
command half added) is reported as that plugin's problem, saying what to do."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest

import ctxwindow
from ctxwindow import BaseStrategy, History, Option, Selection
from ctxwindow._contract import check_registration
from ctxwindow._plugins import get_plugins, plugin_problems

HI = [{"role": "user", "content": "hi"}]

#: The ``install`` fixture (conftest.py): a distribution installed for one test.
Install = Callable[..., str]


def _strategy_source(name: str) -> str:
    """A plugin module registering one strategy called ``name``."""
    return (
        "import ctxwindow\n"
        "class S(ctxwindow.BaseStrategy):\n"
        f'    """Strategy {name}."""\n'
        f"    name = {name!r}\n"
        "    def choose(self, history):\n"
        "        return history.selection()\n"
        "@ctxwindow.hookimpl\n"
        "def register_strategies(register):\n"
        "    register(S)\n"
    )


def _selects(strategy: str) -> bool:
    """Whether ``strategy`` is found and selects."""
    return ctxwindow.select(HI, 100, strategy).messages == HI


def _rows() -> list[tuple[str, str]]:
    """(name, distribution) of each plugin, as ``ctxwindow plugins`` lists them."""
    return [(info.name, info.distribution) for info in get_plugins()]


# -- 1. entry-point names are the distribution's own -------------------------------------
def test_two_distributions_may_use_one_entry_point_name(install: Install) -> None:
    install("ep-clash-one", "ep_clash_one", _strategy_source("one"), ["questions"])
    install("ep-clash-two", "ep_clash_two", _strategy_source("two"), ["questions"])
    assert ("questions", "ep-clash-one") in _rows()
    assert ("questions", "ep-clash-two") in _rows()
    assert _selects("one") and _selects("two")
    assert plugin_problems() == []


@pytest.mark.parametrize(("disabled", "kept"), [("ep-clash-one", "two"), ("ep-clash-two", "one")])
def test_disabling_one_of_two_same_named_entry_points_leaves_the_other(
    install: Install, monkeypatch: pytest.MonkeyPatch, disabled: str, kept: str
) -> None:
    install("ep-clash-one", "ep_clash_one", _strategy_source("one"), ["questions"])
    install("ep-clash-two", "ep_clash_two", _strategy_source("two"), ["questions"])
    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", disabled)
    ctxwindow.reload_plugins()
    assert _selects(kept)
    [row] = [info for info in get_plugins() if info.name == "questions"]
    assert row.distribution == f"ep-clash-{kept}"
    assert row.error is None
    assert ctxwindow._plugins.plugins().skipped == {disabled: "CTXWINDOW_DISABLE_PLUGINS"}
    with pytest.raises(ctxwindow.UnknownStrategy):
        ctxwindow.select(HI, 100, "two" if kept == "one" else "one")


def test_an_entry_point_named_ctxwindow_loads_and_never_hides_the_core(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    install("cw-corename", "cw_corename", _strategy_source("cn"), ["ctxwindow"])
    assert ("ctxwindow", "cw-corename") in _rows()
    assert _selects("cn")
    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", "cw-corename")
    ctxwindow.reload_plugins()
    assert ctxwindow.get_counter("approx").name == "approx"
    assert _selects("newest")
    monkeypatch.setenv("CTXWINDOW_LOAD_PLUGINS", "")  # load none: the core still counts
    monkeypatch.delenv("CTXWINDOW_DISABLE_PLUGINS")
    ctxwindow.reload_plugins()
    assert ctxwindow.get_counter("approx").name == "approx"


def test_a_plugin_registered_by_hand_under_a_kept_out_entry_points_name_works(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    install("ep-fixed", "ep_fixed", _strategy_source("ep-fixed"), ["fixed"])
    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", "ep-fixed")
    ctxwindow.reload_plugins()

    class Mine(BaseStrategy):
        """Mine."""

        name = "mine"

        def choose(self, history: History) -> Selection:
            return history.selection()

    plugin = types.ModuleType("my_app_plugins")
    plugin.register_strategies = ctxwindow.hookimpl(lambda register: register(Mine))  # type: ignore[attr-defined]
    ctxwindow.register_plugin(plugin, "fixed", distribution="my-app")
    try:
        [mine] = [info for info in get_plugins() if info.distribution == "my-app"]
        assert (mine.name, mine.hooks, mine.error) == ("fixed", ["register_strategies"], None)
        assert _selects("mine")
    finally:
        ctxwindow.unregister_plugin("fixed")


def test_unregistering_a_name_registered_by_hand_leaves_the_installed_plugin(
    install: Install,
) -> None:
    install("ep-decay", "ep_decay", _strategy_source("decay"), ["decay"])
    decay = ctxwindow.strategy_class("decay")
    wrapper = types.SimpleNamespace(
        register_strategies=ctxwindow.hookimpl(lambda register: register(decay))
    )
    ctxwindow.register_plugin(wrapper, "decay", distribution="decay")
    assert [info.distribution for info in get_plugins() if info.name == "decay"] == [
        "decay",
        "ep-decay",
    ]
    ctxwindow.unregister_plugin("decay")  # the fixture's teardown
    assert [info.distribution for info in get_plugins() if info.name == "decay"] == ["ep-decay"]
    assert _selects("decay")


# -- 3, 4. a strategy's option declaration ---------------------------------------------
def _strategy(name: str, specs: Any) -> type[BaseStrategy]:
    """A strategy class called ``name`` declaring ``specs`` as its option_specs."""

    def choose(self: BaseStrategy, history: History) -> Selection:
        return history.selection()

    namespace = {"__doc__": f"{name}.", "name": name, "option_specs": specs, "choose": choose}
    return type(name.title().replace("-", ""), (BaseStrategy,), namespace)


def _register_together(
    ctxwindow_register: Callable[..., str], *classes: type[BaseStrategy]
) -> None:
    """Register ``classes`` through one hook of one plugin (distribution cw-options)."""
    plugin = types.SimpleNamespace(
        register_strategies=ctxwindow.hookimpl(
            lambda register: [register(cls) for cls in classes] and None
        )
    )
    ctxwindow_register(plugin, name="options-by-hand", distribution="cw-options")


@pytest.mark.parametrize(
    ("specs", "said"),
    [
        (Option("min_chars", int, 10, "Ignore shorter."), "add the trailing comma"),
        ((Option("min_chars", 10, int, "Ignore shorter."),), "Option(name, type, default, help)"),
        (42, "option_specs must be a tuple of ctxwindow.Option objects"),
    ],
    ids=["no-trailing-comma", "type-and-default-swapped", "not-a-tuple"],
)
def test_a_bad_option_spec_refuses_that_strategy_and_the_others_register(
    ctxwindow_register: Callable[..., str], specs: Any, said: str
) -> None:
    good_one, good_two = _strategy("good-one", ()), _strategy("good-two", ())
    _register_together(ctxwindow_register, good_one, _strategy("bad-spec", specs), good_two)
    assert _selects("good-one") and _selects("good-two")
    [problem] = [p for p in plugin_problems() if p.startswith("cw-options")]
    assert problem.startswith("cw-options: strategy 'bad-spec': ")
    assert "'min_chars'" in problem or specs == 42
    assert said in problem
    with pytest.raises(ctxwindow.UnknownStrategy, match="bad-spec"):
        ctxwindow.select(HI, 100, "bad-spec")


def test_an_option_whose_check_raises_on_its_default_is_refused_by_name(
    ctxwindow_register: Callable[..., str],
) -> None:
    broken = Option("depth", int, 3, "How deep.", check=lambda value: value.upper())
    _register_together(ctxwindow_register, _strategy("deep", (broken,)), _strategy("fine", ()))
    assert _selects("fine")
    [problem] = [p for p in plugin_problems() if p.startswith("cw-options")]
    assert "strategy 'deep': checking the default of option 'depth' raised AttributeError" in (
        problem
    )


@pytest.mark.parametrize("host_key", ["strategy", "budget", "counter"])
def test_an_option_named_like_a_host_key_is_refused(
    ctxwindow_register: Callable[..., str], host_key: str
) -> None:
    inner = _strategy("inner", (Option(host_key, str, "x", "Taken by the host."),))
    _register_together(ctxwindow_register, inner, _strategy("fine", ()))
    assert _selects("fine")
    [problem] = [p for p in plugin_problems() if p.startswith("cw-options")]
    assert f"strategy 'inner': option {host_key!r} is a name the host keeps" in problem
    assert "give it another name" in problem
    assert check_registration(inner) is not None


# -- 2. a plugin that registers nothing --------------------------------------------------
def test_a_hook_that_returns_its_strategies_is_a_problem_that_says_call_register(
    ctxwindow_register: Callable[..., str],
) -> None:
    ret = _strategy("ret", ())
    plugin = types.SimpleNamespace(register_strategies=ctxwindow.hookimpl(lambda register: [ret]))
    ctxwindow_register(plugin, name="ret-by-hand", distribution="cw-returns")
    [info] = [info for info in get_plugins() if info.distribution == "cw-returns"]
    assert info.failed
    assert "register_strategies returned [" in (info.error or "")
    assert "call register(...)" in (info.error or "")
    assert any(p.startswith("cw-returns: register_strategies returned") for p in plugin_problems())
    with pytest.raises(ctxwindow.UnknownStrategy, match="call register"):
        ctxwindow.select(HI, 100, "ret")


def test_a_hook_whose_lambda_returns_what_register_returned_is_fine(
    ctxwindow_register: Callable[..., str],
) -> None:
    one, two = _strategy("one-of-two", ()), _strategy("two-of-two", ())
    plugin = types.SimpleNamespace(
        register_strategies=ctxwindow.hookimpl(lambda register: (register(one), register(two)))
    )
    ctxwindow_register(plugin, name="pair", distribution="cw-pair")
    [info] = [info for info in get_plugins() if info.distribution == "cw-pair"]
    assert (info.error, info.failed) == (None, False)
    assert _selects("one-of-two") and _selects("two-of-two")


def test_an_entry_point_whose_hooks_are_in_an_unimported_submodule_says_where_to_point(
    install: Install,
) -> None:
    hooks = _strategy_source("nh")
    install("cw-nohooks", "cw_nohooks", '"""Hooks in .hooks."""\n', ["nohooks"], {"hooks": hooks})
    [info] = [info for info in get_plugins() if info.distribution == "cw-nohooks"]
    assert info.failed and info.hooks == []
    assert "has no ctxwindow hook, so it registers nothing" in (info.error or "")
    assert "point the entry point at that module (e.g. 'cw_nohooks.hooks')" in (info.error or "")
    with pytest.raises(ctxwindow.UnknownStrategy, match="cw-nohooks"):
        ctxwindow.select(HI, 100, "nh")


def test_a_package_with_no_hook_anywhere_is_listed_without_a_problem(install: Install) -> None:
    """A library listed for its version (as ctxwindow-stores is) registers nothing on purpose."""
    install("cw-library", "cw_library", '"""A library."""\n', ["library"], {"util": "X = 1\n"})
    [info] = [info for info in get_plugins() if info.distribution == "cw-library"]
    assert (info.hooks, info.error, info.failed) == ([], None, False)


# -- 5. a plugin's own bug while building ------------------------------------------------
class _InitBug(BaseStrategy):
    """Has a bug in __init__: a TypeError whatever the options."""

    name = "initbug"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.window_size = self.options["task_statement"] + "x"

    def choose(self, history: History) -> Selection:
        return history.selection()


def test_a_type_error_with_no_options_given_is_the_plugins_error(
    ctxwindow_register: Callable[..., str],
) -> None:
    ctxwindow_register(_InitBug, name="initbug", distribution="cw-initbug")
    for build in (
        lambda: ctxwindow.get_strategy("initbug"),
        lambda: ctxwindow.from_config({"strategy": "initbug", "budget": 100}),
        lambda: ctxwindow.select(HI, 100, "initbug"),
    ):
        with pytest.raises(ctxwindow.PluginError) as raised:
            build()
        assert not isinstance(raised.value, ctxwindow.InvalidOption)
        said = str(raised.value)
        assert "strategy 'initbug' from distribution 'cw-initbug'" in said
        assert "no options given" in said and "TypeError" in said


def test_a_type_error_with_options_given_still_names_the_options_and_the_distribution(
    ctxwindow_register: Callable[..., str],
) -> None:
    ctxwindow_register(_InitBug, name="initbug", distribution="cw-initbug")
    with pytest.raises(ctxwindow.InvalidOption, match="rejected its options") as raised:
        ctxwindow.get_strategy("initbug", task_statement=False)
    assert "'cw-initbug'" in str(raised.value)


# -- 6. a command half added -------------------------------------------------------------
def _half_command(cli: Any) -> None:
    """A register_commands hook that fails after add_parser (a lazy import, say)."""
    parser = cli.add_parser("half-done", help="half done")
    raise ImportError("No module named 'numpyy'")
    parser.set_defaults(run=lambda args: 0)  # never reached


def test_a_command_whose_hook_failed_after_add_parser_names_the_plugin_when_run(
    ctxwindow_register: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxwindow._cli import main

    plugin = types.SimpleNamespace(register_commands=ctxwindow.hookimpl(_half_command))
    ctxwindow_register(plugin, name="half", distribution="cw-half")
    assert main(["half-done"]) == 1
    err = capsys.readouterr().err
    assert "internal error" not in err
    assert "command 'half-done' from distribution 'cw-half' was not fully registered" in err
    assert "ImportError: No module named 'numpyy'" in err


def test_a_command_left_without_run_says_to_set_it(
    ctxwindow_register: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxwindow._cli import main

    plugin = types.SimpleNamespace(
        register_commands=ctxwindow.hookimpl(lambda cli: cli.add_parser("no-run") and None)
    )
    ctxwindow_register(plugin, name="norun", distribution="cw-norun")
    assert main(["no-run"]) == 1
    assert "parser.set_defaults(run=...)" in capsys.readouterr().err


# -- 7. the reduced example's own error --------------------------------------------------
def test_a_reduced_generated_failure_says_what_is_wrong_with_the_example_shown() -> None:
    """The error shown with "Falsifying example (reduced ...)" is the check's on that
    example: its positions exist in it (not the longer history drawn)."""
    import re

    from hypothesis import strategies as st

    from ctxwindow.testing._generated import holds_on

    def check(messages: list[Any], budget: int) -> None:
        if len(messages) >= 2:
            raise AssertionError(f"message {len(messages) - 1} is one too many")

    message = st.fixed_dictionaries({"role": st.just("user"), "content": st.just("hi")})
    with pytest.raises(AssertionError) as raised:
        holds_on(check, st.lists(message, min_size=6, max_size=9), 5)
    [note] = [n for n in getattr(raised.value, "__notes__", []) if "Falsifying example" in n]
    found = re.search(r"reduced from (\d+) generated messages to (\d+);", note)
    assert found is not None, note
    drawn, shown = int(found.group(1)), int(found.group(2))
    assert (drawn >= 6, shown) == (True, 2)
    assert str(raised.value) == "message 1 is one too many"


# -- 8. a name two distributions claim, as JSON ------------------------------------------
def test_strategies_json_gives_a_claimed_name_neither_claimants_summary_or_options(
    ctxwindow_register: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from ctxwindow._cli import main

    for distribution, option in (("cw-dup-a", "alpha"), ("cw-dup-b", "beta")):
        claimant = _strategy("dup", (Option(option, int, 1, f"{option}."),))
        claimant.__doc__ = f"Strategy of {distribution}."
        ctxwindow_register(claimant, name=distribution, distribution=distribution)
    for args in (["strategies", "--json"], ["strategies", "dup", "--json"]):
        capsys.readouterr()
        assert main(args) == 0
        listed = json.loads(capsys.readouterr().out)
        [dup] = [s for s in listed if s["name"] == "dup"] if isinstance(listed, list) else [listed]
        assert dup["claimed_by"] == ["cw-dup-a", "cw-dup-b"]
        assert (dup["distribution"], dup["summary"], dup["options"]) == (None, None, [])
        assert "registered by both" in dup["conflict"]
