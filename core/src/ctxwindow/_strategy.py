"""The base class of strategies: declared options, validated once at configuration, so
that a strategy only decides which units to keep (:meth:`BaseStrategy.choose`)."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, overload

from ctxwindow._contract import COMMON_OPTIONS, declaration_problem, unnamed_problem
from ctxwindow._history import History
from ctxwindow._messages import Message
from ctxwindow._options import Option, validate_options
from ctxwindow._selection import Selection
from ctxwindow._tokens import TokenCounter
from ctxwindow._window import Window
from ctxwindow._windower import Windower
from ctxwindow.errors import LLMNotConfigured, PluginError
from ctxwindow.kit import redact


class BaseStrategy(ABC):
    """Subclass this, set ``name`` and ``option_specs``, and implement :meth:`choose`.

    The optional members the runner reads are described on
    :class:`~ctxwindow.Strategy`: define ``async achoose(history)`` when choosing waits
    on I/O, ``transform(history)`` for a stage that may leave its window over budget.
    """

    name: ClassVar[str]
    #: True when the strategy calls an LLM. A class may leave it False and an instance
    #: set it in ``check_ready`` (when that depends on options); either way it must then
    #: declare ``billing`` (provider and model), checked at configuration.
    requires_llm: bool = False
    #: Tokens the strategy's output costs beyond its messages; taken off the budget.
    overhead_tokens: int = 0
    option_specs: ClassVar[tuple[Option, ...]] = ()
    #: Every option (the common ones too) is checked when the strategy is made, so the
    #: runner need not check them again on each Windower a pipeline makes.
    options_checked_when_made: ClassVar[bool] = True

    def __init__(self, **options: Any) -> None:
        if getattr(self, "name", None) is None:  # used without registering, unnamed
            raise PluginError(unnamed_problem(type(self)))
        owner = f"strategy {self.name!r}"
        problem = _declared_wrong(type(self))
        if problem:  # what registration refuses, for a class used without registering
            raise PluginError(f"{owner}: {problem}")
        self.options: Mapping[str, Any] = MappingProxyType(
            validate_options(owner, self.all_options(), options)
        )
        self.check_ready()
        if self.requires_llm:
            _check_billing(self)

    @property
    def billing(self) -> Mapping[str, Any] | None:
        """Who is paid for the LLM calls: ``{"provider": ..., "model": ...}``."""
        return None

    @classmethod
    def all_options(cls) -> tuple[Option, ...]:
        return COMMON_OPTIONS + tuple(cls.option_specs)

    def check_ready(self) -> None:
        """Raise LLMNotConfigured (or InvalidOption) here if the setup cannot work."""

    @abstractmethod
    def choose(self, history: History) -> Selection:
        """Decide which units to keep. ``history.selection()`` starts a selection."""

    def engages_within_budget(self, history: History) -> bool:
        """Whether to choose even though everything fits (a message cap, say).

        By default a visit where nothing is over budget returns the history unchanged.
        """
        return False

    @overload
    def select(
        self,
        messages: Sequence[Message],
        budget: int,
        counter: TokenCounter | str | None = None,
        *,
        query: str | None = None,
    ) -> Window[Message]: ...
    @overload
    def select(
        self,
        messages: Sequence[dict[str, Any]],
        budget: int,
        counter: TokenCounter | str | None = None,
        *,
        query: str | None = None,
    ) -> Window[dict[str, Any]]: ...
    @overload
    def select(
        self,
        messages: Any,
        budget: int,
        counter: TokenCounter | str | None = None,
        *,
        query: str | None = None,
    ) -> Window[Any]: ...
    def select(
        self,
        messages: Any,
        budget: int,
        counter: TokenCounter | str | None = None,
        *,
        query: str | None = None,
    ) -> Window[Any]:
        """This strategy's window of ``messages``: a shorthand for
        ``Windower(strategy, budget, counter).select(messages, query=query)``."""
        return Windower(self, budget, counter).select(messages, query=query)

    @overload
    async def aselect(
        self,
        messages: Sequence[Message],
        budget: int,
        counter: TokenCounter | str | None = None,
        *,
        query: str | None = None,
    ) -> Window[Message]: ...
    @overload
    async def aselect(
        self,
        messages: Any,
        budget: int,
        counter: TokenCounter | str | None = None,
        *,
        query: str | None = None,
    ) -> Window[Any]: ...
    async def aselect(
        self,
        messages: Any,
        budget: int,
        counter: TokenCounter | str | None = None,
        *,
        query: str | None = None,
    ) -> Window[Any]:
        """Async :meth:`select` (a list of dicts gives Window[Any]: see Windower.aselect)."""
        window: Window[Any] = await Windower(self, budget, counter).aselect(messages, query=query)
        return window

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled and deep-copied as its class and options, built again from them (its
        caches and per-conversation state start afresh): what it holds besides, an
        LLM client or a lock, need not pickle."""
        return (_rebuilt, (type(self), dict(self.options)))

    def __copy__(self) -> BaseStrategy:
        """A shallow copy, as before pickling was defined: the options and the state
        shared with this strategy."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin

    def __repr__(self) -> str:
        options = getattr(self, "options", {})  # none yet when its declaration was refused
        changed = {k: v for k, v in options.items() if v != _default(self, k)}
        # A URL option (a cache server's) may carry a password: never shown.
        shown = {
            k: redact(v) if isinstance(v, str) and "://" in v else v for k, v in changed.items()
        }
        args = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"{type(self).__name__}({args})"


def _rebuilt(cls: type[BaseStrategy], options: dict[str, Any]) -> BaseStrategy:
    """A strategy built again from its class and options (see ``__reduce__``)."""
    return cls(**options)


@functools.cache
def _declared_wrong(cls: type[BaseStrategy]) -> str | None:
    """What is wrong with how ``cls`` declares itself (its options, ``requires_llm``,
    an async ``choose``), read once per class."""
    return declaration_problem(cls)


def _default(strategy: BaseStrategy, name: str) -> Any:
    return next(o.default for o in strategy.all_options() if o.name == name)


def _check_billing(strategy: BaseStrategy) -> None:
    """An LLM strategy says who is paid for its calls; the error says what to set, as
    the strategy's author or its user (whose summarizer the billing may come from)
    can act on that, not on the dict that came back."""
    billing = strategy.billing
    missing = [key for key in ("provider", "model") if not (billing or {}).get(key)]
    if missing:
        raise LLMNotConfigured(
            f"strategy {strategy.name!r} calls an LLM but declares no billing "
            f"(no {' and no '.join(missing)} in {billing!r}): its billing property must "
            f"return {{'provider': <who is paid, such as 'openai'>, 'model': <the model's "
            f"name>}}; a summarizing strategy takes them from its summarizer's provider "
            f"and model attributes, so set those on the summarizer"
        )
