"""The strategy contract: the protocol every strategy meets, and the base class that
does the host's share (reading, counting, checking, recording) so a strategy only
decides which units to keep.
"""

from __future__ import annotations

import math
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, runtime_checkable

from ctxwindow.contract import overhead_problem
from ctxwindow.history import History, Selection
from ctxwindow.options import Option, validate_options
from ctxwindow.tokens import TokenCounter
from ctxwindow.window import Window

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_.-]*$")


def _seconds_problem(seconds: float) -> str | None:
    if math.isfinite(seconds) and 0 < seconds <= threading.TIMEOUT_MAX:
        return None
    return f"must be a positive, finite number of seconds, got {seconds!r}"


#: How long choosing may take; the host enforces it (see ``ctxwindow.visit``).
TIME_LIMIT = Option(
    "time_limit",
    float,
    None,
    "Seconds the strategy may take to choose (its LLM and embedding calls included), "
    "after the host has read and counted the history; None: no limit. Past it, "
    "on_timeout applies and the strategy's late answer is never used.",
    nullable=True,
    check=_seconds_problem,
)
ON_TIMEOUT = Option(
    "on_timeout",
    str,
    "raise",
    "When time_limit runs out: 'raise' VisitTimeout, or 'recent': the host keeps "
    "the must-keep messages and the newest units that fit, and the record says so.",
    choices=("raise", "recent"),
)

#: Options every strategy built on :class:`BaseStrategy` accepts.
COMMON_OPTIONS: tuple[Option, ...] = (
    Option(
        "oversize",
        str,
        "raise",
        "When the messages that must be kept exceed the budget: 'raise' BudgetTooSmall, "
        "or 'truncate' the newest user message's text with a visible marker.",
        choices=("raise", "truncate"),
    ),
    Option(
        "orphans",
        str,
        "raise",
        "A tool result without its call, or a call without its results: 'raise' "
        "OrphanToolResult, or 'drop' those messages and say so in the record.",
        choices=("raise", "drop"),
    ),
    TIME_LIMIT,
    ON_TIMEOUT,
)


@runtime_checkable
class Strategy(Protocol):
    """What the host calls. Build on :class:`BaseStrategy` rather than from scratch."""

    name: str
    requires_llm: bool
    overhead_tokens: int

    def select(
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
    ) -> Window[Any]: ...


class BaseStrategy(ABC):
    """Subclass this, set ``name`` and ``option_specs``, and implement :meth:`choose`."""

    name: ClassVar[str]
    #: True when the strategy calls an LLM. A class may leave it False and an instance
    #: set it in ``check_ready`` (when that depends on options); either way it must then
    #: declare ``billing`` (provider and model), checked at configuration.
    requires_llm: bool = False
    #: Tokens the strategy's output costs beyond its messages; taken off the budget.
    overhead_tokens: int = 0
    option_specs: ClassVar[tuple[Option, ...]] = ()

    def __init__(self, **options: Any) -> None:
        owner = f"strategy {self.name!r}"
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

    async def achoose(self, history: History) -> Selection:
        """Async twin of :meth:`choose`; override it when choosing waits on I/O."""
        return self.choose(history)

    def select(
        self,
        messages: Any,
        budget: int,
        counter: TokenCounter | str | None = None,
        *,
        query: str | None = None,
    ) -> Window[Any]:
        from ctxwindow import visit

        return visit.run(self, messages, budget, counter, query)

    async def aselect(
        self,
        messages: Any,
        budget: int,
        counter: TokenCounter | str | None = None,
        *,
        query: str | None = None,
    ) -> Window[Any]:
        from ctxwindow import visit

        return await visit.arun(self, messages, budget, counter, query)

    def __repr__(self) -> str:
        from ctxwindow.stores.redis_store import redact

        changed = {k: v for k, v in self.options.items() if v != _default(self, k)}
        # A URL option (a cache server's) may carry a password: never shown.
        shown = {
            k: redact(v) if isinstance(v, str) and "://" in v else v for k, v in changed.items()
        }
        args = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"{type(self).__name__}({args})"


def _default(strategy: BaseStrategy, name: str) -> Any:
    return next(o.default for o in strategy.all_options() if o.name == name)


def _check_billing(strategy: BaseStrategy) -> None:
    from ctxwindow.errors import LLMNotConfigured

    billing = strategy.billing
    if not billing or not billing.get("provider") or not billing.get("model"):
        raise LLMNotConfigured(
            f"strategy {strategy.name!r} calls an LLM but declares no billing "
            f"(provider and model): {billing!r}"
        )


def declared_options(factory: Any) -> tuple[Option, ...]:
    """The options a registered strategy declares (none for a bare protocol class)."""
    if hasattr(factory, "all_options"):
        return tuple(factory.all_options())
    return tuple(getattr(factory, "option_specs", ()))


def check_registration(factory: Any) -> str | None:
    """Why ``factory`` cannot be registered as a strategy, or None if it can."""
    name = getattr(factory, "name", None)
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        return f"strategy name {name!r} must be lowercase letters, digits, '_', '-' or '.'"
    if not callable(factory):
        return f"strategy {name!r}: register the class (or a factory), not an instance"
    for attribute in ("select", "aselect"):
        if not callable(getattr(factory, attribute, None)):
            return f"strategy {name!r} has no {attribute}() method"
    problem = _declaration_problem(factory)
    return f"strategy {name!r}: {problem}" if problem else None


def _declaration_problem(factory: Any) -> str | None:
    if not isinstance(getattr(factory, "requires_llm", False), bool):
        return "requires_llm must be True or False"
    overhead = getattr(factory, "overhead_tokens", 0)
    if not isinstance(overhead, property):  # a property is checked on each visit
        problem = overhead_problem(overhead)
        if problem:
            return problem
    specs: Sequence[Any] = declared_options(factory)
    if not all(isinstance(spec, Option) for spec in specs):
        return "option_specs must hold ctxwindow.Option objects"
    return None
