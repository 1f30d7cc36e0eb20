"""The conformance suite as a plugin author meets it: the state bugs it catches and the
advice it gives, how fast and how readably a generated history's failure is reported,
and what it says when hypothesis is missing."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ctxwindow import BaseStrategy, History, Selection
from ctxwindow.kit import terms
from ctxwindow.testing import StrategyConformance, histories
from ctxwindow.testing._generated import (
    INSTALL,
    REDUCE_CHECKS,
    generated_settings,
    holds_on,
    reduced,
)
from ctxwindow.testing.checks import checked_outcome
from ctxwindow.testing.strategies import Newest, newest
from ctxwindow.testing.suite import TWIN_BUDGET, twins

SUITE = StrategyConformance()


class CachesUnitsByIndex(BaseStrategy):
    """Broken: keeps each unit's words on the instance by unit index, so a second
    conversation is scored with the first's words."""

    name = "caches-units-by-index"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.words: dict[int, set[str]] = {}

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        query = set(terms(history.effective_query))
        room = history.budget - history.must_keep_tokens

        def overlap(unit: int) -> int:
            if unit not in self.words:
                self.words[unit] = set(terms(history.unit_text(unit)))
            return len(self.words[unit] & query)

        free = [u for u in range(len(history.units)) if u not in history.must_keep]
        for unit in sorted(free, key=lambda u: (-overlap(u), -u)):
            if history.unit_tokens(unit) <= room:
                selection.keep(unit, "shares words with the question")
                room -= history.unit_tokens(unit)
        return selection


def test_a_cache_of_units_by_index_on_the_instance_fails_the_many_conversations_test() -> None:
    with pytest.raises(AssertionError, match="twin about") as raised:
        SUITE.test_one_instance_serves_many_conversations(CachesUnitsByIndex())
    advice = str(raised.value)
    assert "ctxwindow.kit.PerConversation" in advice and ".of(history.conversation)" in advice
    assert "WeakKeyDictionary" not in advice  # keeps a state that refers back to it alive


def test_the_twins_ask_for_what_tells_them_apart() -> None:
    """The twins differ where the question points: a fresh strategy that matches units
    against the question keeps each twin's own note; the other units are alike."""
    pair = twins()
    assert [len(m) for m in pair.values()] == [22, 22]
    differ = [i for i, (a, b) in enumerate(zip(*pair.values(), strict=True)) if a != b]
    assert differ == [5, 21]
    for topic, messages in pair.items():
        window = CachesUnitsByIndex().select(messages, TWIN_BUDGET)
        assert messages[5] in window.messages, topic
        assert len(window.messages) < len(messages)


def test_state_kept_per_conversation_passes_the_many_conversations_test() -> None:
    SUITE.test_one_instance_serves_many_conversations(Newest())


class MutatesEngaged(BaseStrategy):
    """Broken: writes into the caller's newest message whenever it engages."""

    name = "mutates-engaged"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.visits = 0

    def choose(self, history: History) -> Selection:
        self.visits += 1
        last = history.original(len(history) - 1)
        if isinstance(last, dict):
            last["content"] = "changed"
        return newest(history)


def test_the_suite_does_not_shrink_with_hypothesis() -> None:
    """hypothesis's shrinker draws every history again for each of hundreds of
    attempts: minutes for one failure. The suite stops at the first one."""
    from hypothesis import Phase

    chosen = generated_settings(40)
    assert Phase.shrink not in chosen.phases and Phase.generate in chosen.phases
    assert chosen.max_examples == 40 and chosen.report_multiple_bugs is False


def test_a_generated_failure_is_reported_after_a_bounded_number_of_visits() -> None:
    """The first failure, then at most REDUCE_CHECKS checks reducing it, then the
    replay: not the hundreds of visits shrinking made. The reduced example still
    fails, in the failure's notes."""
    strategy = MutatesEngaged()
    with pytest.raises(AssertionError, match="input was mutated") as raised:
        SUITE.test_generated_histories(strategy, 40)
    assert strategy.visits <= 40 + REDUCE_CHECKS + 2
    [note] = [n for n in getattr(raised.value, "__notes__", []) if "Falsifying example" in n]
    assert "reduced from" in note and "budget=" in note and "messages=[" in note


def test_a_failure_is_reduced_to_a_short_history_that_still_fails() -> None:
    def check(messages: list[Any], budget: int) -> None:
        checked_outcome(MutatesEngaged(), messages, budget)

    drawn = []
    for turn in range(15):
        drawn.append({"role": "user", "content": f"question {turn} " * 40})
        drawn.append({"role": "assistant", "content": f"answer {turn} " * 40})
    with pytest.raises(AssertionError) as raised:
        check(list(drawn), 900)
    messages, budget, count = reduced(check, drawn, 900, raised.value)
    assert count == 30 and len(messages) <= 3, messages
    assert all(len(m["content"]) <= 20 for m in messages), messages
    with pytest.raises(AssertionError, match="input was mutated"):
        check(messages, budget)


def test_a_passing_check_runs_every_example() -> None:
    seen: list[int] = []
    holds_on(lambda messages, budget: seen.append(budget), histories(), 25)
    assert len(seen) == 25


@contextlib.contextmanager
def without_hypothesis() -> Iterator[None]:
    """hypothesis not installed, as far as an import can tell (only within the block:
    hypothesis's own pytest plugin imports it around each test)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in sys.modules if n == "hypothesis" or n.startswith("hypothesis.")]:
            patch.delitem(sys.modules, name)
        patch.setitem(sys.modules, "hypothesis", None)
        yield


@pytest.mark.parametrize(
    "test",
    [
        "test_generated_histories",
        "test_generated_agent_histories",
        "test_generated_histories_with_broken_tool_exchanges",
    ],
)
def test_without_hypothesis_the_generated_tests_say_what_to_install(test: str) -> None:
    with without_hypothesis(), pytest.raises(pytest.fail.Exception) as raised:
        getattr(SUITE, test)(Newest(), 40)
    assert INSTALL in str(raised.value) and "hypothesis" in str(raised.value)
    assert INSTALL == "pip install 'ctxwindow[testing]'"


def test_without_hypothesis_histories_say_what_to_install() -> None:
    with (
        without_hypothesis(),
        pytest.raises(ModuleNotFoundError, match=r"ctxwindow\[testing\]") as raised,
    ):
        histories()
    assert raised.value.name == "hypothesis"
