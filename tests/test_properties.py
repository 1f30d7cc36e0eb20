"""The contract, under generated histories, for every strategy the installed plugins
register (found through the plugin host, so a newly installed plugin is covered too).

Each case either gives a window that passes the independent oracle
(``ctxwindow.testing.checks``) or rightly raises BudgetTooSmall / OrphanToolResult;
the input is deep-equal before and after; a second call, a call on a deep copy,
``aselect`` and a call on a ``Conversation`` of the input give the same window.

A fast subset runs by default. For the long run pass ``--ctxwindow-examples=N`` (or set
``CTXWINDOW_EXAMPLES``): N examples per strategy and test. The end of the session says
how many generated histories were really checked. ``CI=true`` makes the runs
deterministic and keeps no example database.
"""

from __future__ import annotations

import asyncio
import copy
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxwindow
from ctxwindow import Conversation, Strategy
from ctxwindow.errors import InvalidOption, LLMNotConfigured
from ctxwindow.testing import example_instances
from ctxwindow.testing.checks import checked_outcome
from ctxwindow.testing.conversations import AWKWARD_TEXTS, agent_histories, wild_histories
from ctxwindow.testing.pytest_plugin import examples_wanted, note_generated

pytest_plugins = ["pytester"]

#: Default examples per strategy and test: enough to find the usual bugs in seconds.
FAST_EXAMPLES = 40
#: Strategies that embed every new text with a real model get fewer by default.
FAST_EXAMPLES_EMBEDDING = 8
COUNTERS = ("approx", "tiktoken:cl100k_base")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
#: Strategies that persist (embeddings) write under a throwaway cache folder.
pytestmark = pytest.mark.usefixtures("ctxwindow_cache_home")


def _installed() -> list[str]:
    return sorted(entry["name"] for entry in ctxwindow.describe_strategies())


def _build(name: str, **options: Any) -> list[Strategy]:
    """The installed strategy ``name`` with ``options``, once per set of its declared
    ``example_options`` (else with its defaults); skipped, saying why, when it needs an
    LLM that is not configured here."""
    factory = ctxwindow.strategy_class(name)
    try:
        return example_instances(factory, **options)
    except LLMNotConfigured as error:
        pytest.skip(f"{name} needs an LLM, and none is configured: {error}")
    except InvalidOption as error:
        if getattr(factory, "example_options", None):
            raise
        pytest.fail(
            f"strategy {name!r} (from {_describe(name)['distribution']}) cannot be built with its "
            f"defaults: {error}. Declare example_options on the class (see "
            f"ctxwindow.testing.example_instances) so that generic tests can build it."
        )


def _options(name: str) -> set[str]:
    return {option["name"] for option in _describe(name)["options"]}


def _describe(name: str) -> dict[str, Any]:
    return next(d for d in ctxwindow.describe_strategies() if d["name"] == name)


def _examples(config: pytest.Config, name: str) -> int:
    embeds = "embedder" in _options(name)
    return examples_wanted(config, FAST_EXAMPLES_EMBEDDING if embeds else FAST_EXAMPLES)


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=IN_CI,
        database=None if IN_CI else settings.default.database,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


#: From 1 token to far above any generated history (whose huge messages reach 30k).
budgets = st.one_of(
    st.integers(1, 64),
    st.integers(64, 4_000),
    st.integers(4_000, 80_000),
    st.just(10**9),
)
queries = st.one_of(st.none(), st.text(max_size=40), st.sampled_from(["weather in Paris", ""]))


def _same(first: list[Any], second: list[Any]) -> bool:
    return first == second


def _check_case(
    strategy: Strategy,
    messages: list[Any],
    budget: int,
    counter: str,
    query: str | None,
    *,
    generated: bool = True,
) -> None:
    """One case: the oracle, untouched input, and the same window again."""
    pristine = copy.deepcopy(messages)
    window, outcome = checked_outcome(strategy, messages, budget, counter, query)
    if generated:
        note_generated(strategy.name, outcome)
    assert messages == pristine, "the input changed"
    if window is None:
        return
    again = strategy.select(messages, budget, counter, query=query)
    assert _same(again.messages, window.messages), "a second call gave another window"
    assert [d.action for d in again.record.decisions] == [d.action for d in window.record.decisions]
    twin = copy.deepcopy(messages)
    copied = strategy.select(twin, budget, counter, query=query)
    assert _same(copied.messages, window.messages), "a deep copy of the input gave another window"
    awaited = asyncio.run(strategy.aselect(messages, budget, counter, query=query))
    assert _same(awaited.messages, window.messages), "aselect gave another window than select"
    conversation = strategy.select(Conversation(messages), budget, counter, query=query)
    assert _same(conversation.messages, window.messages), "a Conversation gave another window"
    assert messages == pristine, "the input changed"


def _check_generated(built: list[Strategy], histories: Any, examples: int) -> None:
    """The contract on ``examples`` generated cases: a history from ``histories``, a
    budget, a counter, a query and one of the ``built`` strategies."""

    @_settings(examples)
    @given(
        messages=histories,
        budget=budgets,
        counter=st.sampled_from(COUNTERS),
        query=queries,
        strategy=st.sampled_from(built),
    )
    def contract_holds(
        messages: list[Any], budget: int, counter: str, query: str | None, strategy: Strategy
    ) -> None:
        _check_case(strategy, messages, budget, counter, query)

    contract_holds()


@pytest.mark.parametrize("name", _installed())
def test_generated_histories_keep_the_contract(name: str, request: pytest.FixtureRequest) -> None:
    options = _options(name)
    built = [
        strategy
        for oversize in ("cut", "raise", "truncate")
        for strategy in _build(name, **({"oversize": oversize} if "oversize" in options else {}))
    ]
    _check_generated(built, wild_histories(), _examples(request.config, name))


@pytest.mark.parametrize("name", _installed())
def test_generated_agent_loops_keep_the_current_turn(
    name: str, request: pytest.FixtureRequest
) -> None:
    """Agent loops (parallel calls answered in any order, huge results, pending
    exchanges): the oracle checks the must-keep tiers (the current turn whole when it
    fits, else its newest exchange; the task statement); under oversize='cut' a pending
    exchange whose call fits is never lost to a too-big result."""
    options = _options(name)
    policies = ("cut", "raise") if "oversize" in options else (None,)
    built = [
        strategy
        for policy in policies
        for strategy in _build(name, **({"oversize": policy} if policy else {}))
    ]
    _check_generated(built, agent_histories(), _examples(request.config, name))


@pytest.mark.parametrize("name", _installed())
def test_generated_broken_tool_exchanges(name: str, request: pytest.FixtureRequest) -> None:
    """Orphan results, calls without results, interrupted and reused exchanges: with the
    default orphans='raise' an OrphanToolResult, with 'drop' a window without them."""
    options = _options(name)
    if "orphans" not in options:
        pytest.skip(f"{name} has no orphans option (it does not build on BaseStrategy)")
    built = [strategy for policy in ("raise", "drop") for strategy in _build(name, orphans=policy)]
    _check_generated(built, wild_histories(defects=True), _examples(request.config, name))


@pytest.mark.parametrize("name", _installed())
@pytest.mark.parametrize("counter", COUNTERS)
def test_awkward_unicode_in_every_strategy(name: str, counter: str) -> None:
    """Every awkward text (lone surrogates, NUL, RTL overrides, ...) once, not by chance:
    each strategy windows them, whatever its tokenizer or model makes of them."""
    messages: list[Any] = [{"role": "system", "content": "Be brief."}]
    for number, text in enumerate(AWKWARD_TEXTS):
        messages.append({"role": "user", "content": text * (1 + number)})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
    messages.append({"role": "user", "content": AWKWARD_TEXTS[6]})
    for strategy in _build(name):
        for budget in (60, 200, 10**6):
            _check_case(strategy, messages, budget, counter, AWKWARD_TEXTS[6], generated=False)


def test_every_registered_strategy_is_covered() -> None:
    """The parametrization above is the registry's list, not a list written here."""
    described = {d["name"] for d in ctxwindow.describe_strategies()}
    assert set(_installed()) == described
    assert "fixed" in described


def test_the_end_of_session_count_is_of_executed_cases(pytester: pytest.Pytester) -> None:
    """The summary line counts the cases that really ran, not the settings value."""
    pytester.makepyfile(
        test_counted="""
        from hypothesis import given, settings, strategies as st
        from ctxwindow.testing.pytest_plugin import note_generated

        @settings(max_examples=500, database=None)
        @given(st.booleans())
        def test_two_cases_exist(flag):
            note_generated("fixed", "window" if flag else "BudgetTooSmall")
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["ctxwindow: 2 generated histories checked over 1 strategies (fixed 2; *)"]
    )
