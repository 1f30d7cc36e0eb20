"""The conformance suite: subclass it in your plugin's tests and define ``strategy``.

from ctxwindow.testing import StrategyConformance

class TestMyStrategy(StrategyConformance):
    @pytest.fixture
    def strategy(self):
        return MyStrategy()
"""

from __future__ import annotations

import asyncio
import copy
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from ctxwindow import Message, Strategy, Window, Windower
from ctxwindow._contract import NAME_PATTERN
from ctxwindow._messages import read_message
from ctxwindow.errors import BudgetTooSmall, InvalidBudget, InvalidMessage, OrphanToolResult
from ctxwindow.testing._generated import holds_on, require_hypothesis
from ctxwindow.testing.checks import _mutated, check_window, checked_outcome
from ctxwindow.testing.conversations import BUDGETS, agent_histories, battery, histories
from ctxwindow.testing.pytest_plugin import note_generated

CASES = sorted(battery())

#: The budget the twins are windowed at: room for the instructions, the question and a
#: few of the twenty older units, so a strategy has to choose among them.
TWIN_BUDGET = 60


def twins() -> dict[str, list[dict[str, Any]]]:
    """Two conversations of the same shape (so the same units at the same indexes) that
    differ in one older note and in the newest question, which asks about that note: a
    strategy that matches older units against the question keeps a different note in
    each, and one that keeps state by unit index across conversations shows it."""
    out = {}
    for topic in ("invoices", "zebras"):
        messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
        for turn in range(10):
            about = topic if turn == 2 else "the weather"
            messages.append({"role": "user", "content": f"note {turn} about {about}"})
            messages.append({"role": "assistant", "content": f"noted {turn}"})
        messages.append({"role": "user", "content": f"What did I note about {topic}?"})
        out[topic] = messages
    return out


def example_instances(factory: Any, **options: Any) -> list[Strategy]:
    """Instances of a registered strategy class for generic tests (``options`` added to
    each): one per dict in the class's ``example_options``, else one with its defaults.

    A strategy that cannot work on its defaults (a pipeline needs its stages) declares
    ``example_options: ClassVar[tuple[dict[str, Any], ...]]`` so that tests which find
    strategies through the registry, rather than by name, can build it.
    """
    examples: Sequence[Mapping[str, Any]] = getattr(factory, "example_options", None) or ({},)
    return [factory(**{**dict(example), **options}) for example in examples]


class StrategyConformance:
    """The contract checks over a battery of conversations and generated histories."""

    #: Token counter spec the suite counts with.
    counter = "approx"
    #: Set False for strategies whose windows may differ between identical calls.
    deterministic = True

    @pytest.fixture
    def strategy(self) -> Strategy:  # pragma: no cover - subclasses override
        raise NotImplementedError("define a `strategy` fixture returning your strategy")

    def test_declares_what_the_host_needs(self, strategy: Strategy) -> None:
        assert isinstance(strategy.name, str) and re.match(NAME_PATTERN, strategy.name), (
            strategy.name
        )
        assert isinstance(getattr(strategy, "requires_llm", False), bool)
        overhead = getattr(strategy, "overhead_tokens", 0)
        assert isinstance(overhead, int) and overhead >= 0
        assert isinstance(strategy, Strategy)

    @pytest.mark.parametrize("budget", BUDGETS)
    @pytest.mark.parametrize("case", CASES)
    def test_contract_on_battery(self, strategy: Strategy, case: str, budget: int) -> None:
        messages = battery()[case]
        check_window(strategy, messages, budget, self.counter)

    @pytest.mark.parametrize("case", ["tool-chains", "pinned", "plain-chat"])
    def test_message_objects_in_message_objects_out(self, strategy: Strategy, case: str) -> None:
        messages = [read_message(m, i) for i, m in enumerate(battery()[case])]
        window = check_window(strategy, messages, 120, self.counter)
        assert window is not None
        assert all(isinstance(m, Message) for m in window.messages)

    def test_truncate_policy_keeps_a_cut_newest_message(self, strategy: Strategy) -> None:
        options = getattr(strategy, "options", None)
        if options is None or "oversize" not in options:
            pytest.skip("strategy does not build on BaseStrategy")
        cutting = type(strategy)(**{**options, "oversize": "truncate"})
        window = check_window(cutting, battery()["oversized-newest"], 200, self.counter)
        assert window is not None, "oversize='truncate' must cut, not raise"

    def test_generated_histories(self, strategy: Strategy, ctxwindow_examples: int) -> None:
        _needs_hypothesis()
        self._holds_on(strategy, histories(), ctxwindow_examples)

    def test_generated_agent_histories(self, strategy: Strategy, ctxwindow_examples: int) -> None:
        """Agent loops: the current turn (the exchange the model waits on) stays whenever
        it fits, a tool result too big for the budget is cut, the task statement stays."""
        _needs_hypothesis()
        self._holds_on(strategy, agent_histories(), ctxwindow_examples)

    def _holds_on(self, strategy: Strategy, generated: Any, examples: int) -> None:
        """The contract holds on ``examples`` histories from a hypothesis strategy."""

        def contract_holds(messages: list[Any], budget: int) -> None:
            _, outcome = checked_outcome(strategy, messages, budget, self.counter)
            note_generated(strategy.name, outcome)

        holds_on(contract_holds, generated, examples)

    def test_generated_histories_with_broken_tool_exchanges(
        self, strategy: Strategy, ctxwindow_examples: int
    ) -> None:
        """Orphan results and unanswered calls, dropped under orphans='drop'."""
        _needs_hypothesis()
        options = getattr(strategy, "options", None)
        if options is None or "orphans" not in options:
            pytest.skip("strategy does not build on BaseStrategy")
        dropping = type(strategy)(**{**options, "orphans": "drop"})

        def contract_holds(messages: list[Any], budget: int) -> None:
            window, outcome = checked_outcome(dropping, messages, budget, self.counter)
            note_generated(dropping.name, outcome)
            if window is not None and window.record.engaged:
                assert all(d.action == "dropped" for d in window.record.decisions if d.unit < 0)

        holds_on(contract_holds, histories(defects=True), ctxwindow_examples)

    @pytest.mark.parametrize("case", ["tool-chains", "plain-chat", "pinned"])
    def test_same_input_same_window(self, strategy: Strategy, case: str) -> None:
        if not self.deterministic:
            pytest.skip("strategy declared non-deterministic")
        messages = battery()[case]
        windower = Windower(strategy, 150, self.counter)
        first = windower.select(messages)
        second = windower.select(messages)
        assert [id(m) for m in first.messages] == [id(m) for m in second.messages] or (
            first.messages == second.messages
        )

    def test_one_instance_serves_many_conversations(self, strategy: Strategy) -> None:
        """One instance windows conversation after conversation (``ctxwindow.select``
        shares one per configuration): state it keeps must be per conversation. Each
        window, after the instance has seen the others, is the one a fresh instance
        gives (state kept on the class is shared with the fresh one: not caught here).
        Among them, twins: the same shape, so the same unit indexes, with other words
        at the same places and a newest question that asks for them, so that a cache of
        units by index (``self.cache[unit]``) gives the second twin the first's."""
        options = getattr(strategy, "options", None)
        if not self.deterministic or options is None:
            pytest.skip("strategy declared non-deterministic, or not built on BaseStrategy")
        cases: list[tuple[str, list[Any], int]] = [
            (case, battery()[case], 150)
            for case in ("tool-chains", "plain-chat", "pinned", "content-parts")
        ]
        cases += [(f"twin about {topic}", twin, TWIN_BUDGET) for topic, twin in twins().items()]
        shared = Windower(strategy, 150, self.counter)
        for _ in range(2):  # the second round: each case after all the others
            for case, messages, budget in cases:
                seen = shared.select(messages, budget=budget)
                fresh = Windower(type(strategy)(**options), budget, self.counter).select(messages)
                same = [id(m) for m in seen.messages] == [id(m) for m in fresh.messages]
                assert same or seen.messages == fresh.messages, (  # a summary: made anew
                    f"{case!r}: the window differs from a fresh instance's after the instance "
                    "windowed other conversations: state kept across conversations (keep it "
                    "per conversation, in a ctxwindow.kit.PerConversation read with "
                    ".of(history.conversation); a cache of units by index on the instance "
                    "gives one conversation another's units)"
                )

    @pytest.mark.parametrize("case", ["tool-chains", "agent-long-turn", "pinned"])
    def test_async_gives_the_sync_window(self, strategy: Strategy, case: str) -> None:
        """``aselect`` leaves the input as it was (the runner cannot see a change made in
        ``achoose``: both windows would hold the changed objects) and gives what
        ``select`` gives, at a tight budget and a loose one."""
        messages = battery()[case]
        before = copy.deepcopy(messages)
        for budget in (150, 400):
            windower = Windower(strategy, budget, self.counter)
            done = _or_error(functools.partial(_aselect, windower, messages))
            assert messages == before, f"aselect: {_mutated(before, messages)}"
            sync = _or_error(functools.partial(windower.select, messages))
            if isinstance(done, Exception) or isinstance(sync, Exception):
                assert type(done) is type(sync), f"aselect gave {done!r}, select gave {sync!r}"
            else:
                assert done.messages == sync.messages, f"{case!r} at {budget}"

    @pytest.mark.parametrize("budget", [0, -5, 2.5, "100", None, True])
    def test_bad_budget_is_a_clear_error(self, strategy: Strategy, budget: Any) -> None:
        messages = battery()["plain-chat"]
        before = copy.deepcopy(messages)
        with pytest.raises(InvalidBudget, match="budget"):
            Windower(strategy, budget, self.counter).select(messages)
        assert messages == before

    @pytest.mark.parametrize(
        "messages",
        [None, "hello", [{"role": "wizard", "content": "x"}], [{"role": "user"}], [42]],
    )
    def test_bad_messages_are_a_clear_error(self, strategy: Strategy, messages: Any) -> None:
        with pytest.raises(InvalidMessage):
            Windower(strategy, 100, self.counter).select(messages)


def _needs_hypothesis() -> None:
    """Fail the test, saying what to install, when hypothesis is missing (a bare
    ModuleNotFoundError would not say it comes with ctxwindow's ``testing`` extra)."""
    try:
        require_hypothesis()
    except ModuleNotFoundError as error:
        if error.name != "hypothesis":
            raise
        pytest.fail(str(error), pytrace=False)


def _aselect(windower: Windower, messages: Any) -> Window[Any]:
    return asyncio.run(windower.aselect(messages))


def _or_error(visit: Callable[[], Window[Any]]) -> Window[Any] | Exception:
    """The window, or the error a visit may rightly raise (BudgetTooSmall at a tight
    budget); any other error fails the test."""
    try:
        return visit()
    except (BudgetTooSmall, OrphanToolResult) as error:
        return error
