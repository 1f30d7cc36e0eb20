"""A configured strategy ready to use: strategy, budget and counter bound together.

This is where the host stands between the caller and a plugin: a strategy that does not
build on BaseStrategy (or overrides its select) still has its windows checked, and a
plugin that crashes is reported by its distribution. A ``time_limit`` given here bounds
any strategy, BaseStrategy or not (see :mod:`ctxwindow.visit` for how).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ctxwindow import visit, workers
from ctxwindow.contract import check_window
from ctxwindow.errors import ContractViolation, CtxWindowError, PluginError, VisitTimeout
from ctxwindow.history import Conversation, History
from ctxwindow.messages import Message, read_message
from ctxwindow.strategy import ON_TIMEOUT, TIME_LIMIT, BaseStrategy, Strategy
from ctxwindow.tokens import TokenCounter
from ctxwindow.visit import TimeLimit, check_budget, check_query, strategy_limit
from ctxwindow.window import Window, WindowRecord


class Windower:
    """Chooses windows with one strategy, budget and counter. Build it with from_config.

    ``time_limit`` (seconds) and ``on_timeout`` ('raise' or 'recent') bound every visit
    of any strategy, as BaseStrategy's options of those names do; given here, they win
    over the strategy's own.
    """

    def __init__(
        self,
        strategy: Strategy,
        budget: int,
        counter: TokenCounter | str | None,
        distribution: str | None = None,
        *,
        time_limit: float | None = None,
        on_timeout: str = "raise",
    ) -> None:
        from ctxwindow.registry import get_counter

        self.strategy = strategy
        self.budget = check_budget(budget)
        self.counter = get_counter(counter)
        self.distribution = distribution
        seconds = TIME_LIMIT.validate("Windower", time_limit)
        on_timeout = ON_TIMEOUT.validate("Windower", on_timeout)
        self.time_limit = None if seconds is None else TimeLimit(seconds, on_timeout)

    def select(
        self, messages: Any, *, query: str | None = None, budget: int | None = None
    ) -> Window[Any]:
        """The window for ``messages``; ``budget`` overrides the configured one."""
        total, query = self._arguments(budget, query)
        strategy = self.strategy
        limit = self.time_limit
        if _checks_itself(strategy, "select"):
            assert isinstance(strategy, BaseStrategy)
            return self._guard(
                lambda: visit.run(
                    strategy, messages, total, self.counter, query, limit, self.distribution
                )
            )
        before = _Before(self, messages, total, query)

        def call() -> Window[Any]:
            return strategy.select(before.originals, total, self.counter, query=query)

        if limit is None:
            return self._checked(before, self._guard(call))
        if workers.saturated(strategy):  # earlier visits' workers still running
            return self._timed_out(before, total, query, limit)
        future = workers.in_thread(lambda: self._guard(call), strategy.name, strategy)
        done, _ = concurrent.futures.wait((future,), timeout=limit.seconds)
        if not done:
            return self._timed_out(before, total, query, limit)
        return self._checked(before, future.result())

    async def aselect(
        self, messages: Any, *, query: str | None = None, budget: int | None = None
    ) -> Window[Any]:
        total, query = self._arguments(budget, query)
        strategy = self.strategy
        limit = self.time_limit
        if _checks_itself(strategy, "aselect"):
            assert isinstance(strategy, BaseStrategy)
            return await self._aguard(
                lambda: visit.arun(
                    strategy, messages, total, self.counter, query, limit, self.distribution
                )
            )
        before = _Before(self, messages, total, query)

        def call() -> Awaitable[Window[Any]]:
            return strategy.aselect(before.originals, total, self.counter, query=query)

        if limit is None:
            return self._checked(before, await self._aguard(call))
        finished, window = await visit.within(self._aguard(call), limit.seconds)
        if not finished:
            return self._timed_out(before, total, query, limit)
        return self._checked(before, window)

    def _timed_out(
        self, before: _Before, budget: int, query: str | None, limit: TimeLimit
    ) -> Window[Any]:
        if limit.on_timeout != "recent":
            raise VisitTimeout(self.strategy.name, self.distribution, limit.seconds)
        return visit.fallback_window(
            self.strategy, before.originals, budget, self.counter, query, limit
        )

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
        limit = self.time_limit
        timed = (
            ""
            if limit is None
            else (f", time_limit={limit.seconds:g}, on_timeout={limit.on_timeout!r}")
        )
        return (
            f"Windower({self.strategy!r}, budget={self.budget}, "
            f"counter={self.counter.name!r}{timed})"
        )


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
