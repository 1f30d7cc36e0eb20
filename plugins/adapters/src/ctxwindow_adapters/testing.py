"""The conformance suite for adapters: subclass it in an adapter's tests.

Every adapter makes the same promises whatever its framework: the window is valid for
the framework's API and fits the budget as its own reading counts it; the items kept
whole are the very objects passed in, in order; nothing passed in is changed; the
record accounts for every item, in the caller's positions; async gives the same window;
a configured windower gives the same window as the same settings by name; an item the
adapter cannot read is named by its position. Needs pytest and ``ctxwindow[testing]``.

::

    from ctxwindow_adapters.testing import AdapterConformance
    from my_adapter import adapter

    class TestMyAdapter(AdapterConformance):
        @pytest.fixture
        def adapter(self):
            return adapter

        @pytest.fixture
        def history(self):
            return long_agent_history()

        def read(self, items):
            return adapter.read_items(items).messages

        def check_valid(self, items):
            ...  # what the framework's API requires of a request
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from typing import Any

import pytest

import ctxwindow
from ctxwindow import BudgetTooSmall, InvalidMessage, Message
from ctxwindow.testing.strategies import Newest


class AdapterConformance:
    """The promises of every adapter, over a history in its framework's shape."""

    #: Strategies the suite windows with (by name); ``newest`` is the testing kit's,
    #: registered by the suite itself, so an adapter needs no strategy plugin to run it.
    strategies: tuple[str, ...] = ("newest",)
    #: Budgets the every-budget test tries; one too small for what must stay is skipped.
    budgets: Sequence[int] = range(60, 1400, 40)
    #: The budget of the single-window tests.
    budget = 400
    #: Something the adapter cannot read as an item of its framework.
    not_an_item: Any = 42
    #: True when the framework's items are never split between units (one item, one
    #: message): then every item in a window is the caller's own object, but for the
    #: host's cut of the newest user message.
    whole_items = False

    @pytest.fixture
    def adapter(self) -> Any:  # pragma: no cover - subclasses override
        """The adapter: an object (a module) with ``select`` and ``aselect``."""
        raise NotImplementedError("define an `adapter` fixture returning the adapter module")

    @pytest.fixture
    def history(self) -> list[Any]:  # pragma: no cover - subclasses override
        """A long agent history in the framework's shape: tool calls and their results
        (parallel calls too), ending with the user's turn."""
        raise NotImplementedError("define a `history` fixture returning a list of items")

    def read(self, items: Sequence[Any]) -> list[Message]:  # pragma: no cover
        """The adapter's own reading of ``items`` as ctxwindow Messages (for counting)."""
        raise NotImplementedError("define read(items) -> list[Message]")

    def check_valid(self, items: Sequence[Any]) -> None:  # pragma: no cover
        """Assert that ``items`` form a request the framework's API accepts."""
        raise NotImplementedError("define check_valid(items)")

    def options(self) -> dict[str, Any]:
        """More keyword arguments for every ``select`` (Anthropic's ``system``, say)."""
        return {}

    @pytest.fixture(autouse=True)
    def _newest(self, ctxwindow_register: Any) -> None:
        ctxwindow_register(Newest, name="adapter-conformance", distribution="ctxwindow-testing")

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Each test that takes ``strategy`` runs once per name in :attr:`strategies`."""
        if "strategy" in metafunc.fixturenames:
            metafunc.parametrize("strategy", self.strategies)

    def _select(self, adapter: Any, items: Any, budget: int, strategy: str, **more: Any) -> Any:
        return adapter.select(items, budget, strategy, **self.options(), **more)

    # -- the promises -----------------------------------------------------------------
    def test_every_budget_gives_a_valid_window_within_it(
        self, adapter: Any, history: list[Any], strategy: str
    ) -> None:
        counter = ctxwindow.get_counter("approx")
        before = copy.deepcopy(history)
        fitted = 0
        for budget in self.budgets:
            try:
                window = self._select(adapter, history, budget, strategy, counter=counter)
            except BudgetTooSmall:
                continue
            fitted += 1
            self.check_valid(window.messages)
            if self.whole_items:
                ids = {id(item) for item in history}
                assert all(id(item) in ids for item in window.messages), (strategy, budget)
            cost = sum(counter.count_message(m) for m in self.read(window.messages))
            assert cost == window.record.tokens_after <= budget, (strategy, budget)
            assert window.record.messages_before == len(history)
            assert window.record.messages_after == len(window.messages)
        assert fitted, "every budget was too small: give the suite larger budgets"
        assert history == before, "the adapter changed what it was given"

    def test_kept_items_are_the_callers_own_objects_in_order(
        self, adapter: Any, history: list[Any]
    ) -> None:
        window = self._select(adapter, history, self.budget, self.strategies[0])
        where = {id(item): index for index, item in enumerate(history)}
        own = [where[id(item)] for item in window.messages if id(item) in where]
        assert own == sorted(own), "the caller's items come back out of order"
        assert own, "no item came back as the very object passed in"
        assert window.messages[-1] is history[-1], "the newest turn is not the caller's own"

    def test_the_record_accounts_for_every_item(self, adapter: Any, history: list[Any]) -> None:
        window = self._select(adapter, history, self.budget, self.strategies[0])
        decisions = window.record.decisions
        seen = {position for decision in decisions for position in decision.positions}
        assert seen == set(range(len(history)))
        assert all(decision.reason for decision in decisions)
        kept = {
            position
            for decision in decisions
            if decision.action in ("kept", "truncated", "replaced")
            for position in decision.positions
        }
        where = {id(item): index for index, item in enumerate(history)}
        assert {where[id(item)] for item in window.messages if id(item) in where} <= kept

    def test_the_runs_and_counts_say_what_the_decisions_say(
        self, adapter: Any, history: list[Any], strategy: str
    ) -> None:
        """``decision_runs`` and the counts read from them are another view of the
        decisions: the same positions in the caller's list, actions and reasons."""
        record = self._select(adapter, history, self.budget, strategy).record
        decisions = {decision.unit: decision for decision in record.decisions}
        covered = []
        for run in record.decision_runs:
            told = [decisions[unit] for unit in run.units]
            covered.extend(run.units)
            if not told:  # the runner's decision about defective messages
                continue
            assert {(d.action, d.reason) for d in told} == {(run.action, run.reason)}, run
            items = sorted({position for decision in told for position in decision.positions})
            assert list(run.positions) == items, run
        assert covered == sorted(unit for unit in decisions if unit >= 0)
        for action in ("kept", "dropped", "summarized", "truncated", "replaced"):
            told = [decision for decision in record.decisions if decision.action == action]
            assert record.count(action) == len(told), action

    def test_async_gives_the_same_window(self, adapter: Any, history: list[Any]) -> None:
        strategy = self.strategies[0]
        sync = self._select(adapter, history, self.budget, strategy)
        done = asyncio.run(adapter.aselect(history, self.budget, strategy, **self.options()))
        assert done.messages == sync.messages
        assert [d.to_dict() for d in done.record.decisions] == [
            d.to_dict() for d in sync.record.decisions
        ]

    def test_a_configured_windower_gives_the_same_window(
        self, adapter: Any, history: list[Any]
    ) -> None:
        strategy = self.strategies[0]
        windower = ctxwindow.from_config({"strategy": strategy, "budget": self.budget})
        configured = adapter.select(history, windower=windower, **self.options())
        assert configured.messages == self._select(adapter, history, self.budget, strategy).messages

    def test_an_item_it_cannot_read_is_named_by_its_position(
        self, adapter: Any, history: list[Any]
    ) -> None:
        position = min(3, len(history) - 1)
        items = [*history[:position], self.not_an_item, *history[position:]]
        with pytest.raises(InvalidMessage) as raised:
            self._select(adapter, items, self.budget, self.strategies[0])
        assert raised.value.index == position, str(raised.value)
