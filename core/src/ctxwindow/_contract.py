"""The strategy contract: what a strategy declares and what the runner asks of it.

A strategy is a class with a ``name`` and a ``choose(history) -> Selection`` method;
that is the whole plugin API. Everything around the choice (reading and counting the
history, the policies, time limits, checking the window, the record) is the runner's
(:class:`~ctxwindow.Windower`). The optional members below, read with their defaults
when absent, let a strategy say more.
"""

from __future__ import annotations

import inspect
import math
import re
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ctxwindow._options import Option
from ctxwindow.errors import InvalidBudget, InvalidOption, InvalidQuery, PluginError

if TYPE_CHECKING:
    from ctxwindow._history import History
    from ctxwindow._selection import Selection

#: What a strategy's name must match (``re`` compiles it on its first use, not at import).
NAME_PATTERN = r"^[a-z][a-z0-9_.-]*$"


@runtime_checkable
class Strategy(Protocol):
    """What the runner calls. Build on :class:`~ctxwindow.BaseStrategy` for options,
    validation and the policies; a plain class with these members works too.

    Optional members, with the runner's default when absent: ``requires_llm`` (False),
    ``overhead_tokens`` (0: tokens the window costs beyond its messages, taken off the
    budget), ``options`` (a mapping; the runner reads ``oversize``, ``orphans``,
    ``task_statement``, ``time_limit`` and ``on_timeout``, each defaulting as in
    :data:`COMMON_OPTIONS`),
    ``async achoose(history)`` (awaited by ``aselect`` instead of running ``choose``),
    ``engages_within_budget(history)`` (False: a history that fits is returned whole),
    and ``transform(history)`` (a choice that may leave the window over budget, for a
    stage whose successors fit it: see :meth:`~ctxwindow.Windower.transform`).
    """

    @property
    def name(self) -> str:
        """The name users select the strategy by: lowercase letters, digits, '_-.'."""
        ...

    def choose(self, history: History) -> Selection:
        """Decide which units to keep; ``history.selection()`` starts a selection."""
        ...


def _seconds_problem(seconds: float) -> str | None:
    if math.isfinite(seconds) and 0 < seconds <= threading.TIMEOUT_MAX:
        return None
    return f"must be a positive, finite number of seconds, got {seconds!r}"


#: How long choosing may take; the runner enforces it.
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
OVERSIZE = Option(
    "oversize",
    str,
    "cut",
    "When the messages that must be kept exceed the budget: 'cut' the largest tool "
    "results of the current turn (head and tail kept, with a visible marker) so that "
    "they leave older context (if any) a quarter of the budget, else raise BudgetTooSmall; "
    "'truncate': the same, then cut the newest user message's text too; 'raise' "
    "BudgetTooSmall, naming the biggest message.",
    choices=("cut", "truncate", "raise"),
)
ORPHANS = Option(
    "orphans",
    str,
    "raise",
    "A tool result without its call, or a call without its results: 'raise' "
    "OrphanToolResult, or 'drop' those messages and say so in the record.",
    choices=("raise", "drop"),
)
TASK_STATEMENT = Option(
    "task_statement",
    bool,
    True,
    "Keep the first user message (an agent's task) whenever it fits after the current "
    "turn and costs at most a quarter of the budget; the record says so.",
)
#: What a config (or ``select``) gives the host, not the strategy: no strategy may
#: declare an option so named, since nothing could set it.
HOST_KEYS = ("strategy", "budget", "counter")
#: The options the runner reads from every strategy (BaseStrategy declares them all).
COMMON_OPTIONS: tuple[Option, ...] = (OVERSIZE, ORPHANS, TASK_STATEMENT, TIME_LIMIT, ON_TIMEOUT)
_DEFAULTS = {option.name: option.default for option in COMMON_OPTIONS}


def common_option(strategy: object, name: str) -> Any:
    """The value of one of :data:`COMMON_OPTIONS` for ``strategy``, else its default."""
    options = getattr(strategy, "options", None)
    value = options.get(name) if isinstance(options, Mapping) else None
    return _DEFAULTS[name] if value is None else value


def declared_options(factory: Any) -> tuple[Option, ...]:
    """The options a registered strategy declares (none for a plain protocol class)."""
    if hasattr(factory, "all_options"):
        return tuple(factory.all_options())
    return tuple(getattr(factory, "option_specs", ()))


def check_registration(factory: Any) -> str | None:
    """Why ``factory`` cannot be registered as a strategy, or None if it can."""
    name = getattr(factory, "name", None)
    if name is None:
        return unnamed_problem(factory)
    if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        return f"strategy name {name!r} must be lowercase letters, digits, '_', '-' or '.'"
    if not callable(factory):
        return f"strategy {name!r}: register the class (or a factory), not an instance"
    if not callable(getattr(factory, "choose", None)):
        return (
            f"strategy {name!r} has no choose() method: a strategy implements "
            f"choose(history) -> Selection, and the runner does the rest"
        )
    problem = declaration_problem(factory)
    return f"strategy {name!r}: {problem}" if problem else None


def unnamed_problem(factory: Any) -> str:
    """What to do about a strategy class that declares no ``name``."""
    owner = getattr(factory, "__name__", None) or type(factory).__name__
    return (
        f"strategy class {owner} declares no name: give it a class attribute "
        "`name = \"...\"` (lowercase letters, digits, '_', '-' or '.'), the name users "
        "pick it by"
    )


def declaration_problem(factory: Any) -> str | None:
    """What is wrong with how a strategy class declares itself, or None."""
    if not isinstance(getattr(factory, "requires_llm", False), bool):
        return "requires_llm must be True or False"
    overhead = getattr(factory, "overhead_tokens", 0)
    if not isinstance(overhead, property):  # a property is checked on each visit
        problem = overhead_problem(overhead)
        if problem:
            return problem
    single = getattr(factory, "option_specs", ())
    if isinstance(single, Option):
        return (
            f"option_specs is one Option ({single.name!r}), not a tuple of them: add the "
            f"trailing comma, option_specs = (Option(...),)"
        )
    try:  # a mistake in the declaration must refuse this strategy, not end the hook
        specs: Sequence[Any] = declared_options(factory)
    except Exception as error:
        return (
            f"its options cannot be read ({type(error).__name__}: {error}); option_specs "
            f"must be a tuple of ctxwindow.Option objects"
        )
    if not all(isinstance(spec, Option) for spec in specs):
        return "option_specs must hold ctxwindow.Option objects"
    return _options_problem(specs) or _async_problem(factory)


def _options_problem(specs: Sequence[Option]) -> str | None:
    """A declared option that cannot work: a name the host keeps, a name declared twice
    (one of the options every strategy takes, or its own twice), a type that is not a
    type, or a default its own rules refuse."""
    names = [spec.name for spec in specs]
    common = {option.name for option in COMMON_OPTIONS}
    for name in names:
        if name in HOST_KEYS:
            return (
                f"option {name!r} is a name the host keeps (it reads {', '.join(HOST_KEYS)} "
                f"itself), so nothing could set it; give it another name"
            )
    for at, name in enumerate(names):
        if name in names[:at]:
            whose = "one every strategy takes" if name in common else "declared twice"
            return f"option {name!r} is {whose}; give it another name"
    for spec in specs:
        problem = _type_problem(spec) or _default_problem(spec)
        if problem:
            return problem
    return None


def _default_problem(spec: Option) -> str | None:
    """Why an option's default fails its own rules (or its check raises on it), or None."""
    if spec.default is None and spec.nullable:
        return None
    try:
        spec.validate("its declaration", spec.default)
    except InvalidOption as error:
        return f"the default of option {spec.name!r} breaks its own rules ({error})"
    except PluginError as error:  # its check answers yes or no
        return str(error)
    except Exception as error:  # its check, or a range its default cannot meet, raised
        return (
            f"checking the default of option {spec.name!r} raised "
            f"{type(error).__name__}: {error}; fix the option's declaration"
        )
    return None


def _type_problem(spec: Option) -> str | None:
    """An option whose ``type`` is not a type (or a tuple of types): most often its
    type and default swapped, which no value could then pass."""
    types = spec.type if isinstance(spec.type, tuple) else (spec.type,)
    if types and all(isinstance(one, type) for one in types):
        return None
    return (
        f"option {spec.name!r}: its type must be a type or a tuple of types, got "
        f"{spec.type!r}; declare it Option(name, type, default, help), e.g. "
        f"Option({spec.name!r}, int, 10, '...')"
    )


def _async_problem(factory: Any) -> str | None:
    """``choose`` written ``async``: the runner calls it without awaiting (async code
    goes in ``achoose``, which it awaits)."""
    if inspect.iscoroutinefunction(getattr(factory, "choose", None)):
        return "choose() is async; write a plain choose() and put the async one in achoose()"
    return None


def overhead_problem(overhead: object) -> str | None:
    """Why a strategy's ``overhead_tokens`` is unusable, or None."""
    if isinstance(overhead, bool) or not isinstance(overhead, int) or overhead < 0:
        return f"overhead_tokens must be an int >= 0 (tokens), got {overhead!r}"
    return None


def check_budget(budget: object) -> int:
    """The budget as an int: any whole number is taken (``numpy.int64(4000)``, or
    ``4000.0`` from arithmetic or a JSON file), since a count of tokens is all it means."""
    tokens = _whole_number(budget)
    if tokens is None:
        raise InvalidBudget(
            f"budget must be a positive int (tokens), or a whole number such as 4000.0; "
            f"got {type(budget).__name__} {budget!r}"
        )
    if tokens <= 0:
        raise InvalidBudget(f"budget must be a positive int (tokens), got {budget!r}")
    return tokens


#: Past this, a float cannot tell neighbouring integers apart: not an exact count.
EXACT_FLOAT = 2**53


def _whole_number(value: object) -> int | None:
    """``value`` as an int when it is an integral number (an int, a numpy integer, a
    float such as 4000.0 up to 2**53); None for a fraction, NaN, infinity, a bool or
    anything that is not a number."""
    import numbers  # here: `import ctxwindow` does without it; a second import is a lookup

    if isinstance(value, bool):  # an Integral, but never meant as a count
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if number.is_integer() and abs(number) <= EXACT_FLOAT:  # not NaN, not infinite
            return int(number)
    return None


def check_query(query: object) -> str | None:
    if query is not None and not isinstance(query, str):
        raise InvalidQuery(f"query must be a string or None, got {type(query).__name__}")
    return query
