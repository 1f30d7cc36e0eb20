"""The host checks every window; a strategy that breaks the contract is named by distribution."""

from __future__ import annotations

import types
from typing import Any

import pytest

import ctxwindow
from ctxwindow import (
    BaseStrategy,
    ContractViolation,
    History,
    PluginError,
    Selection,
    Window,
    plugins,
    registry,
)


def chat(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for turn in range(turns):
        out.append({"role": "user", "content": f"q{turn} " * 10})
        out.append({"role": "assistant", "content": f"a{turn} " * 10})
    return out


class KeepsEverything(BaseStrategy):
    """Ignores the budget."""

    name = "greedy"

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        for unit in range(len(history.units)):
            selection.keep(unit, "all of it")
        return selection


class DropsTheSystem(BaseStrategy):
    """Drops a must-keep unit."""

    name = "rude"

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        selection.drop(0, "who needs a system prompt")
        return selection


class Reverses:
    """Meets the protocol without BaseStrategy, and returns the window reversed."""

    name = "backwards"
    requires_llm = False
    overhead_tokens = 0

    def select(
        self, messages: Any, budget: int, counter: Any = None, *, query: Any = None
    ) -> Window[Any]:
        inner = ctxwindow.get_strategy("fixed").select(messages, budget, counter, query=query)
        return Window(list(reversed(inner.messages)), inner.record)

    async def aselect(
        self, messages: Any, budget: int, counter: Any = None, *, query: Any = None
    ) -> Window[Any]:
        return self.select(messages, budget, counter, query=query)


class Crashes(KeepsEverything):
    name = "crashes"

    def choose(self, history: History) -> Selection:
        raise ZeroDivisionError("oops")


@pytest.fixture
def bad_plugin():  # type: ignore[no-untyped-def]
    module = types.ModuleType("badstrategies")

    @ctxwindow.hookimpl
    def register_strategies(register: Any) -> None:
        for strategy in (KeepsEverything, DropsTheSystem, Reverses, Crashes):
            register(strategy)

    module.register_strategies = register_strategies  # type: ignore[attr-defined]
    plugins.host().register_plugin(module, "badstrategies", distribution="ctxwindow-badstrategies")
    registry.forget()
    yield
    plugins.host().unregister_plugin("badstrategies")
    registry.forget()


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("greedy", "over the limit of 100"),
        ("rude", "unit 0 (system message) must be kept but was dropped"),
        ("backwards", "out of order"),
    ],
)
@pytest.mark.usefixtures("bad_plugin")
def test_contract_violation_names_the_distribution(name: str, problem: str) -> None:
    with pytest.raises(ContractViolation) as caught:
        ctxwindow.select(chat(20), budget=100, strategy=name)
    assert caught.value.strategy == name
    assert caught.value.distribution == "ctxwindow-badstrategies"
    assert problem in str(caught.value)
    assert "ctxwindow-badstrategies" in str(caught.value)


@pytest.mark.usefixtures("bad_plugin")
def test_a_crashing_strategy_is_reported_by_distribution() -> None:
    with pytest.raises(
        PluginError,
        match=r"'crashes' from distribution 'ctxwindow-badstrategies'.*ZeroDivisionError",
    ):
        ctxwindow.select(chat(20), budget=100, strategy="crashes")
    # and the other strategies keep working
    assert ctxwindow.select(chat(20), budget=100, strategy="fixed").tokens <= 100


def test_unknown_strategy_lists_installed_and_hints_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CTXWINDOW_DISABLE_PLUGINS", "ctxwindow-sliding")  # as if not installed
    plugins.reset()
    try:
        with pytest.raises(ctxwindow.UnknownStrategy) as caught:
            ctxwindow.select(chat(2), budget=100, strategy="sliding")
        assert "fixed" in caught.value.installed
        assert "sliding" not in caught.value.installed
        assert caught.value.install_hint == "pip install ctxwindow-sliding"
    finally:
        monkeypatch.delenv("CTXWINDOW_DISABLE_PLUGINS")
        plugins.reset()


def test_malformed_registration_is_reported_not_raised() -> None:
    module = types.ModuleType("malformed")

    class BadName(KeepsEverything):
        name = "Has Spaces"

    @ctxwindow.hookimpl
    def register_strategies(register: Any) -> None:
        register(BadName)

    module.register_strategies = register_strategies  # type: ignore[attr-defined]
    plugins.host().register_plugin(module, "malformed", distribution="ctxwindow-malformed")
    registry.forget()
    try:
        problems = registry.registry().problems
        assert any("ctxwindow-malformed" in p and "lowercase" in p for p in problems)
        assert "fixed" in registry.strategy_names()
    finally:
        plugins.host().unregister_plugin("malformed")
        registry.forget()


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


def test_an_llm_strategy_is_checked_when_configured_not_at_first_call() -> None:
    module = types.ModuleType("llmish")

    @ctxwindow.hookimpl
    def register_strategies(register: Any) -> None:
        register(NeedsModel)

    module.register_strategies = register_strategies  # type: ignore[attr-defined]
    plugins.host().register_plugin(module, "llmish", distribution="ctxwindow-llmish")
    try:
        with pytest.raises(ctxwindow.LLMNotConfigured, match="needs model"):
            ctxwindow.from_config({"strategy": "needs-model", "budget": 100})
        with pytest.raises(ctxwindow.LLMNotConfigured):
            NeedsModel()  # the same check when built in Python
        windower = ctxwindow.from_config({"strategy": "needs-model", "budget": 100, "model": "m"})
        assert windower.strategy.requires_llm is True
    finally:
        plugins.host().unregister_plugin("llmish")


def test_a_name_two_distributions_register_is_a_visible_problem() -> None:
    module = types.ModuleType("clash")

    class Other(KeepsEverything):
        name = "fixed"

    @ctxwindow.hookimpl
    def register_strategies(register: Any) -> None:
        register(Other)

    module.register_strategies = register_strategies  # type: ignore[attr-defined]
    plugins.host().register_plugin(module, "clash", distribution="ctxwindow-clash")
    try:
        clash = "strategy 'fixed' is registered by both"
        assert any(clash in problem for problem in registry.registry().problems)
        described = {entry["name"]: entry for entry in registry.describe_strategies()}
        assert clash in described["fixed"]["conflict"]
        assert "ctxwindow-clash" in described["fixed"]["conflict"]
        assert "ctxwindow-fixed" in described["fixed"]["conflict"]
        errors = {p.distribution: p.error for p in plugins.get_plugins()}
        assert clash in (errors["ctxwindow-clash"] or "")
        assert clash in (errors["ctxwindow-fixed"] or "")
        with pytest.raises(ctxwindow.DuplicateName):
            ctxwindow.select(chat(2), budget=100)
    finally:
        plugins.host().unregister_plugin("clash")
    assert registry.registry().problems == []
    assert all(entry["conflict"] is None for entry in registry.describe_strategies())


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
            "ctxwindow-fixed,ctxwindow-fixd",
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
    plugins.reset()
    try:
        problems = registry.registry().problems
        assert [p for p in problems if p.startswith(problem)], problems
        assert "installed: ctxwindow-fixed" in next(p for p in problems if variable in p)
        assert "fixed" in registry.strategy_names(), "a typo beside a good name loads that one"
    finally:
        monkeypatch.delenv(variable)
        plugins.reset()
    assert not [p for p in registry.registry().problems if variable in p]


def test_unknown_strategy_names_the_plugins_the_environment_kept_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CTXWINDOW_LOAD_PLUGINS", "ctxwindow-sliding")
    plugins.reset()
    try:
        with pytest.raises(ctxwindow.UnknownStrategy) as caught:
            ctxwindow.select(chat(2), budget=100, strategy="fixed")
        assert "ctxwindow-fixed (CTXWINDOW_LOAD_PLUGINS)" in caught.value.skipped
        assert "Not loaded because of the environment: " in str(caught.value)
        assert caught.value.installed == ("sliding",)
    finally:
        monkeypatch.delenv("CTXWINDOW_LOAD_PLUGINS")
        plugins.reset()


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
