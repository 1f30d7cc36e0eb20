"""A configured strategy ready to use: strategy, budget and counter bound together.

This is where the host stands between the caller and a plugin: a strategy that does not
build on BaseStrategy (or overrides its select) still has its windows checked, and a
plugin that crashes is reported by its distribution.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ctxwindow.contract import check_window
from ctxwindow.errors import ContractViolation, CtxWindowError, PluginError
from ctxwindow.history import Conversation, History
from ctxwindow.messages import Message, read_message
from ctxwindow.strategy import BaseStrategy, Strategy
from ctxwindow.tokens import TokenCounter
from ctxwindow.visit import check_budget, check_query, strategy_limit
from ctxwindow.window import Window, WindowRecord


class Windower:
    """Chooses windows with one strategy, budget and counter. Build it with from_config."""

    def __init__(
        self,
        strategy: Strategy,
        budget: int,
        counter: TokenCounter | str | None,
        distribution: str | None = None,
    ) -> None:
        from ctxwindow.registry import get_counter

        self.strategy = strategy
        self.budget = check_budget(budget)
        self.counter = get_counter(counter)
        self.distribution = distribution

    def select(
        self, messages: Any, *, query: str | None = None, budget: int | None = None
    ) -> Window[Any]:
        """The window for ``messages``; ``budget`` overrides the configured one."""
        total, query = self._arguments(budget, query)
        strategy = self.strategy
        if _checks_itself(strategy, "select"):
            return self._guard(lambda: strategy.select(messages, total, self.counter, query=query))
        before = _Before(self, messages, total, query)
        window = self._guard(
            lambda: strategy.select(before.originals, total, self.counter, query=query)
        )
        return self._checked(before, window)

    async def aselect(
        self, messages: Any, *, query: str | None = None, budget: int | None = None
    ) -> Window[Any]:
        total, query = self._arguments(budget, query)
        strategy = self.strategy
        if _checks_itself(strategy, "aselect"):
            return await self._aguard(
                lambda: strategy.aselect(messages, total, self.counter, query=query)
            )
        before = _Before(self, messages, total, query)
        window = await self._aguard(
            lambda: strategy.aselect(before.originals, total, self.counter, query=query)
        )
        return self._checked(before, window)

    def _arguments(self, budget: int | None, query: object) -> tuple[int, str | None]:
        return (self.budget if budget is None else check_budget(budget)), check_query(query)

    def _guard(self, call: Callable[[], Window[Any]]) -> Window[Any]:
        try:
            return call()
        except CtxWindowError:
            raise
        except Exception as error:
            raise self._failure(error) from error

    async def _aguard(self, call: Callable[[], Awaitable[Window[Any]]]) -> Window[Any]:
        try:
            return await call()
        except CtxWindowError:
            raise
        except Exception as error:
            raise self._failure(error) from error

    def _failure(self, error: Exception) -> PluginError:
        return PluginError(
            f"strategy {self.strategy.name!r} from distribution {self.distribution!r} "
            f"failed: {type(error).__name__}: {error}"
        )

    def _violation(self, problems: Sequence[str]) -> ContractViolation:
        return ContractViolation(self.strategy.name, self.distribution, problems)

    def _checked(self, before: _Before, window: object) -> Window[Any]:
        """Check a window from a strategy whose select() the host does not control."""
        if not isinstance(window, Window):
            raise self._violation([f"select() returned {type(window).__name__}, not a Window"])
        if not isinstance(window.messages, list) or not isinstance(window.record, WindowRecord):
            raise self._violation(["select() returned a Window without a message list and record"])
        synthetic: list[Message] = []
        problems: list[str] = []
        for item in window.messages:
            if id(item) not in before.where:
                try:
                    synthetic.append(read_message(item, None))
                except CtxWindowError as error:
                    problems.append(f"window holds an invalid message: {error}")
        if problems:
            raise self._violation(problems)
        found: list[str] = []
        for positions in before.readings(window.messages):
            found, _ = check_window(
                before.history,
                positions,
                synthetic,
                before.limit,
                before.must_keep,
                self.counter,
            )
            if not found:
                return window
        raise self._violation(found)

    def __repr__(self) -> str:
        return f"Windower({self.strategy!r}, budget={self.budget}, counter={self.counter.name!r})"


class _Before:
    """What the host knows before an unchecked strategy runs: the view it is checked
    against, and the very list it is given (a message appended meanwhile is not in it)."""

    def __init__(self, windower: Windower, messages: Any, budget: int, query: str | None) -> None:
        conversation = messages if isinstance(messages, Conversation) else Conversation(messages)
        self.limit = strategy_limit(windower.strategy, budget, windower.distribution)
        self.history: History = conversation.view(windower.counter, self.limit, query)
        self.must_keep: Mapping[int, str] = MappingProxyType(dict(self.history.must_keep))
        self.originals: list[Any] = conversation._originals[: len(self.history)]
        self.where = {id(original): p for p, original in enumerate(self.originals)}

    def readings(self, window: Sequence[Any]) -> list[list[int | None]]:
        """The window's positions in the input (None: made). An object the input holds
        more than once has several readings: the latest positions first, then earliest."""
        if len(self.where) == len(self.originals):
            where = self.where
            return [[where.get(id(item)) for item in window]]
        every: dict[int, list[int]] = {}
        for position, original in enumerate(self.originals):
            every.setdefault(id(original), []).append(position)
        return [_assign(window, every, latest=True), _assign(window, every, latest=False)]


def _assign(window: Sequence[Any], every: dict[int, list[int]], latest: bool) -> list[int | None]:
    """Give each window item one of its object's positions, in order where possible:
    from the end taking the latest that fits, or from the start taking the earliest."""
    used: set[int] = set()
    out: list[int | None] = [None] * len(window)
    order = range(len(window) - 1, -1, -1) if latest else range(len(window))
    bound = len(every) + max(map(max, every.values()), default=0) if latest else -1
    for index in order:
        candidates = every.get(id(window[index]))
        if candidates is None:
            continue
        free = [p for p in candidates if p not in used]
        fitting = [p for p in free if (p < bound if latest else p > bound)]
        if fitting:
            chosen = fitting[-1] if latest else fitting[0]
        elif free:
            chosen = free[-1] if latest else free[0]
        else:
            chosen = candidates[-1] if latest else candidates[0]  # reported as out of order
        used.add(chosen)
        out[index] = chosen
        bound = chosen
    return out


def _checks_itself(strategy: object, method: str) -> bool:
    """Whether ``method`` is BaseStrategy's own, which runs the host's visit and check."""
    return (
        isinstance(strategy, BaseStrategy)
        and getattr(type(strategy), method) is getattr(BaseStrategy, method)
        and method not in vars(strategy)
    )
