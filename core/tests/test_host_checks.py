"""The runner checks every window; a strategy that breaks the contract is named by
distribution, and the plugin host reports what plugins register wrong."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow import BaseStrategy, ContractViolation, History, PluginError, Selection
from ctxwindow.testing.strategies import Newest, OverBudget


def chat(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for turn in range(turns):
        out.append({"role": "user", "content": f"q{turn} " * 10})
        out.append({"role": "assistant", "content": f"a{turn} " * 10})
    return out


def strategy_names() -> set[str]:
    return {entry["name"] for entry in ctxwindow.describe_strategies()}


#: The distribution core/tests/conftest.py registers the testing kit's strategies as.
TESTING = "ctxwindow-testing"


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("faulty-over-budget", "over the limit of 100"),
        ("faulty-drops-system", "unit 0 (system message) must be kept but was dropped"),
    ],
)
def test_contract_violation_names_the_distribution(name: str, problem: str) -> None:
    with pytest.raises(ContractViolation) as caught:
        ctxwindow.select(chat(20), budget=100, strategy=name)
    assert caught.value.strategy == name
    assert caught.value.distribution == TESTING
    assert problem in str(caught.value)
    assert TESTING in str(caught.value)


def test_a_crashing_strategy_is_reported_by_distribution() -> None:
    with pytest.raises(
        PluginError,
        match=r"'faulty-raises' from distribution 'ctxwindow-testing'.*ValueError",
    ):
        ctxwindow.select(chat(20), budget=100, strategy="faulty-raises")
    # and the other strategies keep working
    assert ctxwindow.select(chat(20), budget=100, strategy="newest").tokens <= 100


def test_unknown_strategy_lists_installed_and_hints_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", "ctxwindow-sliding")  # as if not installed
    ctxwindow.reload_plugins()
    try:
        with pytest.raises(ctxwindow.UnknownStrategy) as caught:
            ctxwindow.select(chat(2), budget=100, strategy="sliding")
        assert "sliding" not in caught.value.installed
        assert caught.value.install_hint == "pip install ctxwindow-sliding"
    finally:
        monkeypatch.delenv("CTXWINDOW_DISABLE_PLUGINS")
        ctxwindow.reload_plugins()


def test_malformed_registration_is_reported_not_raised(ctxwindow_register: Any) -> None:
    class BadName(OverBudget):
        name = "Has Spaces"

    ctxwindow_register(BadName, distribution="ctxwindow-malformed")
    problems = ctxwindow.plugin_problems()
    assert any("ctxwindow-malformed" in p and "lowercase" in p for p in problems)
    assert "newest" in strategy_names()


class NeedsModel(BaseStrategy):
    """Pretends to summarize with an LLM; needs a model to be named."""

    name = "needs-model"
    requires_llm = True
    option_specs = (ctxwindow.Option("model", str, None, "LLM model name.", nullable=True),)

    def check_ready(self) -> None:
        if not self.options["model"]:
            raise ctxwindow.LLMNotConfigured("strategy 'needs-model' needs model = '<name>'")

    @property
    def billing(self) -> dict[str, Any]:
        return {"provider": "example", "model": self.options["model"]}

    def choose(self, history: History) -> Selection:  # pragma: no cover - never reached
        raise AssertionError("an unconfigured LLM strategy must fail before any call")


def test_an_llm_strategy_is_checked_when_configured_not_at_first_call(
    ctxwindow_register: Any,
) -> None:
    ctxwindow_register(NeedsModel, distribution="ctxwindow-llmish")
    with pytest.raises(ctxwindow.LLMNotConfigured, match="needs model"):
        ctxwindow.from_config({"strategy": "needs-model", "budget": 100})
    with pytest.raises(ctxwindow.LLMNotConfigured):
        NeedsModel()  # the same check when built in Python
    windower = ctxwindow.from_config({"strategy": "needs-model", "budget": 100, "model": "m"})
    assert windower.strategy.requires_llm is True


def test_a_name_two_distributions_register_is_a_visible_problem(ctxwindow_register: Any) -> None:
    class Other(OverBudget):
        name = "newest"

    clash_plugin = ctxwindow_register(Other, distribution="ctxwindow-clash")
    clash = "strategy 'newest' is registered by both"
    assert any(clash in problem for problem in ctxwindow.plugin_problems())
    described = {entry["name"]: entry for entry in ctxwindow.describe_strategies()}
    assert clash in described["newest"]["conflict"]
    assert "ctxwindow-clash" in described["newest"]["conflict"]
    assert "ctxwindow-testing" in described["newest"]["conflict"]
    errors = {p.distribution: p.error for p in ctxwindow.get_plugins()}
    assert clash in (errors["ctxwindow-clash"] or "")
    assert clash in (errors["ctxwindow-testing"] or "")
    with pytest.raises(ctxwindow.DuplicateName):
        ctxwindow.select(chat(2), budget=100, strategy="newest")
    ctxwindow.unregister_plugin(clash_plugin)
    assert not [p for p in ctxwindow.plugin_problems() if "registered by both" in p]
    assert all(entry["conflict"] is None for entry in ctxwindow.describe_strategies())


def test_a_hook_that_is_never_called_makes_its_plugin_an_error() -> None:
    """A misspelt hook (pluggy keeps it, unverified) or a hook left unmarked (pluggy
    passes it over) registers nothing: the plugin's row says why instead of looking
    fine while its strategy is unknown."""

    class Misspelt:
        @ctxwindow.hookimpl
        def register_strategy(self, register: Any) -> None:  # the hook is ..._strategies
            register(Newest)

    class Unmarked:
        def register_strategies(self, register: Any) -> None:
            register(Newest)

    said = {
        "misspelt": "hook 'register_strategy' is not a ctxwindow hook; did you mean "
        "'register_strategies'? (it is never called)",
        "unmarked": "register_strategies() is not marked @ctxwindow.hookimpl, so it is "
        "never called",
    }
    for name, plugin in (("misspelt", Misspelt()), ("unmarked", Unmarked())):
        ctxwindow.register_plugin(plugin, name, f"ctxwindow-{name}")
        try:
            errors = {info.name: info.error for info in ctxwindow.get_plugins()}
            assert errors[name] == said[name]
        finally:
            ctxwindow.unregister_plugin(name)
    assert all(info.error is None for info in ctxwindow.get_plugins())


def test_a_strategy_class_that_declares_itself_wrong_is_refused_when_built() -> None:
    """What registration refuses, refused too for a class built without registering:
    a default its own rules refuse, a yes/no check, a common option's name, an async
    choose."""

    def built(**members: Any) -> str:
        strategy = type("Made", (Newest,), {"name": "made", **members})
        with pytest.raises(PluginError) as raised:
            strategy()
        return str(raised.value)

    option = ctxwindow.Option
    text = built(option_specs=(option("turns", int, 0, "turns", minimum=1),))
    assert "the default of option 'turns' breaks its own rules" in text
    text = built(option_specs=(option("turns", int, 3, "odd", check=lambda v: v % 2 == 1),))
    assert "its check returned True; a check returns None when the value is fine" in text
    text = built(option_specs=(option("time_limit", str, "soon", "mine"),))
    assert "option 'time_limit' is one every strategy takes" in text
    text = built(option_specs=(option("x", int, 1, "a"), option("x", str, "s", "b")))
    assert "option 'x' is declared twice" in text

    async def choose(self: Any, history: History) -> Selection:
        return history.selection()

    assert "choose() is async" in built(choose=choose)


def test_an_achoose_written_without_async_is_named_by_the_host() -> None:
    class SyncAchoose(Newest):
        name = "sync-achoose"

        def achoose(self, history: History) -> Selection:  # type: ignore[override]
            return self.choose(history)

    import asyncio

    with pytest.raises(PluginError, match=r"achoose\(\) returned a Selection, not an awaitable"):
        asyncio.run(SyncAchoose().aselect(chat(6), 60))


def test_a_score_that_is_not_finite_is_refused() -> None:
    for score in (float("nan"), float("inf")):

        class Scores(Newest):
            name = "scores"

            def choose(self, history: History, score: float = score) -> Selection:
                selection = super().choose(history)
                selection.keep(len(history.units) - 1, "newest", score=score)
                return selection

        with pytest.raises(ContractViolation, match="must be a finite number"):
            Scores().select(chat(6), 60)


def test_a_name_one_distribution_registers_twice_says_so() -> None:
    """Nothing to uninstall: the advice is to rename one."""

    class First(Newest):
        name = "twice"

    class Second(Newest):
        name = "twice"

    class Twice:
        @ctxwindow.hookimpl
        def register_strategies(self, register: Any) -> None:
            register(First)
            register(Second)

    ctxwindow.register_plugin(Twice(), "twice", "ctxwindow-twice")
    try:
        problems = ctxwindow.plugin_problems()
    finally:
        ctxwindow.unregister_plugin("twice")
    said = "strategy 'twice' is registered twice by 'ctxwindow-twice'; a name is registered once"
    assert any(said in problem for problem in problems), problems


class ForgetsBilling(NeedsModel):
    name = "forgets-billing"

    @property
    def billing(self) -> None:  # type: ignore[override]
        return None


def test_an_llm_strategy_must_declare_who_is_billed() -> None:
    with pytest.raises(ctxwindow.LLMNotConfigured, match="declares no billing"):
        ForgetsBilling(model="m")


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        (
            "CTXWINDOW_LOAD_PLUGINS",
            "ctxwindow-fixd",
            "CTXWINDOW_LOAD_PLUGINS names 'ctxwindow-fixd', which no installed plugin matches",
        ),
        (
            "CTXWINDOW_DISABLE_PLUGINS",
            "ctxwindow-semantik",
            "CTXWINDOW_DISABLE_PLUGINS names 'ctxwindow-semantik', which no installed plugin",
        ),
    ],
)
def test_a_name_in_the_plugin_variables_that_matches_nothing_is_a_problem(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, problem: str
) -> None:
    monkeypatch.setenv(variable, value)
    ctxwindow.reload_plugins()
    try:
        problems = ctxwindow.plugin_problems()
        assert [p for p in problems if p.startswith(problem)], problems
        assert "installed: " in next(p for p in problems if variable in p)
    finally:
        monkeypatch.delenv(variable)
        ctxwindow.reload_plugins()
    assert not [p for p in ctxwindow.plugin_problems() if variable in p]


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A distribution ``ctxwindow-kept-out`` installed on the path for one test (its
    dist-info with a ``ctxwindow`` entry point, and its module), as pip would leave it:
    the plugin host finds it through importlib.metadata like any installed plugin."""
    (tmp_path / "ctxwindow_kept_out.py").write_text(
        "import ctxwindow\n"
        "from ctxwindow.testing.strategies import Newest\n\n"
        "class KeptOut(Newest):\n"
        "    name = 'kept-out'\n\n"
        "@ctxwindow.hookimpl\n"
        "def register_strategies(register):\n"
        "    register(KeptOut)\n",
        encoding="utf-8",
    )
    info = tmp_path / "ctxwindow_kept_out-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ctxwindow-kept-out\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[ctxwindow]\nkept-out = ctxwindow_kept_out\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ctxwindow.reload_plugins()
    yield "ctxwindow-kept-out"
    monkeypatch.undo()
    ctxwindow.reload_plugins()


def test_an_installed_plugin_loads_and_the_environment_keeps_it_out(
    installed_plugin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "kept-out" in {entry["name"] for entry in ctxwindow.describe_strategies()}
    loaded = {p.distribution: p for p in ctxwindow.get_plugins()}
    assert loaded[installed_plugin].version == "0.1"
    for variable, value in (
        ("CTXWINDOW_LOAD_PLUGINS", "ctxwindow-nothing-of-the-sort"),
        ("CTXWINDOW_DISABLE_PLUGINS", installed_plugin),
    ):
        monkeypatch.setenv(variable, value)
        monkeypatch.delitem(sys.modules, "ctxwindow_kept_out", raising=False)
        ctxwindow.reload_plugins()
        try:
            with pytest.raises(ctxwindow.UnknownStrategy) as caught:
                ctxwindow.select(chat(2), budget=100, strategy="kept-out")
            assert f"{installed_plugin} ({variable})" in caught.value.skipped
            assert "Not loaded because of the environment: " in str(caught.value)
            assert "newest" in caught.value.installed  # registered by hand: kept on reload
            assert "ctxwindow_kept_out" not in sys.modules  # kept out: never even imported
            listed = _command("plugins", "--json")  # listed still, saying what keeps it out
            assert {"distribution": installed_plugin, "by": variable} in listed["kept_out"]
            assert f"kept out by {variable}" in " ".join(_command("plugins", text=True).split())
        finally:
            monkeypatch.delenv(variable)
            ctxwindow.reload_plugins()


def _command(*args: str, text: bool = False) -> Any:
    """What ``ctxwindow ARGS`` prints (JSON read, unless ``text``)."""
    import contextlib
    import io
    import json

    from ctxwindow import _cli as cli

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(list(args)) == 0
    return printed.getvalue() if text else json.loads(printed.getvalue())


def test_a_strategy_kept_out_by_the_environment_is_not_said_to_need_installing() -> None:
    from ctxwindow.errors import UnknownStrategy

    hint = "pip install ctxwindow-semantic"
    kept_out = UnknownStrategy(
        "semantic", ["fixed"], hint, ["ctxwindow-semantic (CTXWINDOW_DISABLE_PLUGINS)"]
    )
    assert hint not in str(kept_out)
    assert "ctxwindow-semantic (CTXWINDOW_DISABLE_PLUGINS)" in str(kept_out)
    assert hint in str(UnknownStrategy("semantic", ["fixed"], hint, []))
    other = UnknownStrategy("semantic", ["fixed"], hint, ["ctxwindow-fixed (X)"])
    assert hint in str(other)


def test_the_installed_distributions_are_read_once_for_errors(monkeypatch: Any) -> None:
    """Each error naming a strategy no plugin registered (a class given to a Windower)
    read every installed distribution's file list: 0.5 to 1.7 s an error, and a
    VisitTimeout came that much past its limit."""
    import importlib.metadata

    from ctxwindow import _plugins

    reads: list[int] = []
    real = importlib.metadata.packages_distributions

    def counted() -> Any:
        reads.append(1)
        return real()

    monkeypatch.setattr(importlib.metadata, "packages_distributions", counted)
    _plugins._installed_by_module.cache_clear()

    class Unregistered(Newest):
        name = "unregistered-here"

    for _ in range(3):
        assert _plugins.distribution_of(Unregistered()) is None
    assert len(reads) == 1
    _plugins.reload_plugins()  # reads again after a reload, as the plugins are
    _plugins.distribution_of(Unregistered())
    assert len(reads) == 2
