"""A configured strategy ready to use: strategy, budget and counter bound together.

This is where the host stands between the caller and a plugin: a strategy that does not
build on BaseStrategy still has its windows checked, and a plugin that crashes is
reported by its distribution.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxwindow.contract import check_window
from ctxwindow.errors import ContractViolation, CtxWindowError, PluginError
from ctxwindow.history import Conversation
from ctxwindow.messages import Message, read_message
from ctxwindow.strategy import BaseStrategy, Strategy
from ctxwindow.tokens import TokenCounter
from ctxwindow.visit import check_budget, check_query
from ctxwindow.window import Window


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
        limit, query = self._arguments(budget, query)
        if isinstance(self.strategy, BaseStrategy):
            return self._guard(
                lambda: self.strategy.select(messages, limit, self.counter, query=query)
            )
        conversation = _conversation(messages)
        window = self._guard(
            lambda: self.strategy.select(conversation.originals, limit, self.counter, query=query)
        )
        return self._checked(conversation, window, limit, query)

    async def aselect(
        self, messages: Any, *, query: str | None = None, budget: int | None = None
    ) -> Window[Any]:
        limit, query = self._arguments(budget, query)
        try:
            if isinstance(self.strategy, BaseStrategy):
                return await self.strategy.aselect(messages, limit, self.counter, query=query)
            conversation = _conversation(messages)
            window = await self.strategy.aselect(
                conversation.originals, limit, self.counter, query=query
            )
        except CtxWindowError:
            raise
        except Exception as error:
            raise self._failure(error) from error
        return self._checked(conversation, window, limit, query)

    def _arguments(self, budget: int | None, query: object) -> tuple[int, str | None]:
        return (self.budget if budget is None else check_budget(budget)), check_query(query)

    def _guard(self, call: Callable[[], Window[Any]]) -> Window[Any]:
        try:
            return call()
        except CtxWindowError:
            raise
        except Exception as error:
            raise self._failure(error) from error

    def _failure(self, error: Exception) -> PluginError:
        return PluginError(
            f"strategy {self.strategy.name!r} from distribution {self.distribution!r} "
            f"failed: {type(error).__name__}: {error}"
        )

    def _checked(
        self, conversation: Conversation, window: Any, budget: int, query: str | None
    ) -> Window[Any]:
        """Check a window from a strategy that does not build on BaseStrategy."""
        if not isinstance(window, Window):
            raise ContractViolation(
                self.strategy.name,
                self.distribution,
                [f"select() returned {type(window).__name__}, not a Window"],
            )
        limit = budget - int(getattr(self.strategy, "overhead_tokens", 0))
        history = conversation.view(self.counter, limit, query)
        where = {id(original): position for position, original in enumerate(conversation.originals)}
        positions: list[int | None] = []
        synthetic: list[Message] = []
        problems: list[str] = []
        for item in window.messages:
            position = where.get(id(item))
            positions.append(position)
            if position is None:
                try:
                    synthetic.append(read_message(item, None))
                except CtxWindowError as error:
                    problems.append(f"window holds an invalid message: {error}")
                    positions.pop()
        found, _ = check_window(history, positions, synthetic, limit)
        problems.extend(found)
        if problems:
            raise ContractViolation(self.strategy.name, self.distribution, problems)
        return window

    def __repr__(self) -> str:
        return f"Windower({self.strategy!r}, budget={self.budget}, counter={self.counter.name!r})"


def _conversation(messages: Any) -> Conversation:
    return messages if isinstance(messages, Conversation) else Conversation(messages)
