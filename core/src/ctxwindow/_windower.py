"""The runner: the one place a strategy is called.

A :class:`Windower` binds a strategy, a budget and a counter. Each visit reads and
counts the history, applies the policies, calls the strategy's ``choose`` (or, async,
its ``achoose``), checks the selection and the window against the contract, and writes
the record. The strategy's own code is bounded by its time limit and fenced: its
crash is a PluginError and its bad selection a ContractViolation, both naming its
distribution.

With a time limit, the strategy chooses in a worker thread (or, async, a task) that
the runner waits on for at most that long. Python cannot kill a thread: a strategy
that never returns keeps its thread (a daemon, so it does not hold the process open)
until it does, but its late answer is discarded and it cannot change the window or
record the runner returned, since the runner keeps its own copy of everything it
reports. Async, the strategy's task is cancelled; one that chose in
``asyncio.to_thread`` keeps that thread of the loop's default executor busy until it
returns, and ``asyncio.run`` waits for such threads when it ends (a long-lived loop, a
server's, does not end).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast, overload

from ctxwindow._contract import (
    COMMON_OPTIONS,
    ON_TIMEOUT,
    TIME_LIMIT,
    Strategy,
    check_budget,
    check_query,
    common_option,
)
from ctxwindow._history import History
from ctxwindow._messages import Message
from ctxwindow._plugins import distribution_of, get_counter
from ctxwindow._selection import Selection
from ctxwindow._tokens import TokenCounter
from ctxwindow._visit import TimeLimit, Visit, await_strategy, run_strategy
from ctxwindow._window import Window
from ctxwindow._workers import abandon, in_thread, saturated, within
from ctxwindow.errors import (
    ContractViolation,
    CtxWindowError,
    InvalidMessage,
    InvalidOption,
    InvalidSelection,
    PluginError,
)

if TYPE_CHECKING:
    import concurrent.futures

#: The options every strategy takes, by name (see :meth:`Windower.common_option`).
_COMMON_NAMES = tuple(option.name for option in COMMON_OPTIONS)


def _checked_strategy(strategy: object) -> Strategy:
    """``strategy`` if it is one (a str ``name`` and a ``choose`` method), else
    InvalidOption saying how to get one: a name is a natural thing to pass here."""
    if isinstance(getattr(strategy, "name", None), str) and callable(
        getattr(strategy, "choose", None)
    ):
        return cast("Strategy", strategy)
    if isinstance(strategy, str):
        raise InvalidOption(
            f"Windower takes a strategy object, got the name {strategy!r}: build one with "
            f"ctxwindow.get_strategy({strategy!r}), or pick it by name with "
            f"ctxwindow.from_config({{'strategy': {strategy!r}, 'budget': ...}})"
        )
    raise InvalidOption(
        f"Windower takes a strategy (an object with a str 'name' and a choose(history) "
        f"method, such as a BaseStrategy), got {type(strategy).__name__}"
    )


def _checked_common_options(strategy: Strategy) -> None:
    """Check the options every strategy takes, as the runner reads them, when the
    strategy has them: a BaseStrategy checked its own, but a plain strategy's are
    whatever it was given (``time_limit="soon"``, ``orphans="keep"``), and would
    otherwise fail on a visit, or pass unnoticed."""
    # a BaseStrategy checked them when it was made (a pipeline makes a windower per
    # stage on every visit): its class says so
    if getattr(type(strategy), "options_checked_when_made", False) is True:
        return
    options = getattr(strategy, "options", None)
    if not isinstance(options, Mapping):
        return
    owner = f"strategy {strategy.name!r}"
    for option in COMMON_OPTIONS:
        value = options.get(option.name)
        if value is not None:  # None: the default, as the runner reads it
            option.validate(owner, value)


def _visit_limit(
    strategy: Strategy, seconds: float | None, on_timeout: str | None
) -> TimeLimit | None:
    """The limit a Windower's visits run under: its own ``time_limit`` and
    ``on_timeout`` where given, the strategy's options for the other (an
    ``on_timeout`` given alone goes with the strategy's own limit: it is not dropped).
    None when the Windower sets neither, or no limit at all: the strategy's options
    then decide each visit."""
    if seconds is None:
        own = common_option(strategy, "time_limit")
        if on_timeout is None or own is None:
            return None
        seconds = float(own)
    return TimeLimit(seconds, on_timeout or str(common_option(strategy, "on_timeout")))


class Windower:
    """Chooses windows with one strategy, budget and counter. Build it with from_config,
    or directly with a strategy object.

    ``time_limit`` (seconds) and ``on_timeout`` ('raise' or 'recent') bound every visit;
    given here, they win over the strategy's own options of those names (one given
    alone goes with the strategy's own other).
    ``distribution`` names the strategy's distribution in errors (found from the
    installed plugins when not given).
    """

    def __init__(
        self,
        strategy: Strategy,
        budget: int,
        counter: TokenCounter | str | None = None,
        distribution: str | None = None,
        *,
        time_limit: float | None = None,
        on_timeout: str | None = None,
    ) -> None:
        self.strategy = _checked_strategy(strategy)
        _checked_common_options(self.strategy)
        self.budget = check_budget(budget)
        self.counter = get_counter(counter)
        self._distribution = distribution
        seconds = TIME_LIMIT.validate("Windower", time_limit)
        self._seconds: float | None = seconds
        self._on_timeout = (
            None if on_timeout is None else ON_TIMEOUT.validate("Windower", on_timeout)
        )
        self.time_limit = _visit_limit(self.strategy, seconds, self._on_timeout)

    @property
    def distribution(self) -> str | None:
        """The distribution that ships the strategy (for errors), looked up once."""
        if self._distribution is None:
            self._distribution = distribution_of(self.strategy)
        return self._distribution

    def distribution_for_error(self) -> str | Callable[[], str | None]:
        """The distribution as an error takes it: the name when known, else how to look
        it up when the error is read, so that raising never waits on the lookup."""
        return self._distribution or (lambda: self.distribution)

    def common_option(self, name: str) -> Any:
        """What one of the options every strategy takes (``orphans``, ``oversize``,
        ``task_statement``, ``time_limit``, ``on_timeout``) is on this windower's
        visits: the windower's own time limit when it was given one, else the
        strategy's option, else the default. For a host that prepares visits (an
        evaluation that screens broken tool exchanges needs to know if they raise)."""
        if name not in _COMMON_NAMES:
            raise InvalidOption(
                f"Windower.common_option({name!r}): not an option every strategy takes; "
                f"use one of {', '.join(_COMMON_NAMES)}"
            )
        if name == "on_timeout" and self._on_timeout is not None:
            return self._on_timeout
        if self.time_limit is not None and name in ("time_limit", "on_timeout"):
            limit = self.time_limit
            return limit.seconds if name == "time_limit" else limit.on_timeout
        return common_option(self.strategy, name)

    # -- visits --------------------------------------------------------------------
    @overload
    def select(
        self, messages: Sequence[Message], *, query: str | None = None, budget: int | None = None
    ) -> Window[Message]: ...
    @overload
    def select(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        query: str | None = None,
        budget: int | None = None,
    ) -> Window[dict[str, Any]]: ...
    @overload
    def select(
        self, messages: Any, *, query: str | None = None, budget: int | None = None
    ) -> Window[Any]: ...
    def select(
        self, messages: Any, *, query: str | None = None, budget: int | None = None
    ) -> Window[Any]:
        """The window for ``messages`` (a list, a Conversation, or a strategy's History,
        handed on by a strategy windowing it through this one: seen again, not read
        again); ``budget`` overrides the configured one."""
        return self._run(messages, query, budget, "choose")

    @overload
    def transform(
        self, messages: Sequence[Message], *, query: str | None = None, budget: int | None = None
    ) -> Window[Message]: ...
    @overload
    def transform(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        query: str | None = None,
        budget: int | None = None,
    ) -> Window[dict[str, Any]]: ...
    @overload
    def transform(
        self, messages: Any, *, query: str | None = None, budget: int | None = None
    ) -> Window[Any]: ...
    def transform(
        self, messages: Any, *, query: str | None = None, budget: int | None = None
    ) -> Window[Any]:
        """Run the strategy's ``transform(history)``: a visit like :meth:`select` whose
        window may stay over the budget, for a stage whose successors fit it (a
        pipeline's message transforms). Everything else is checked as for select."""
        if not callable(getattr(self.strategy, "transform", None)):
            raise InvalidOption(
                f"strategy {self.strategy.name!r} has no transform(): only a strategy that "
                "transforms messages for later stages (such as clear_tool_outputs) runs "
                "through Windower.transform; use select() for this one"
            )
        return self._run(messages, query, budget, "transform")

    # No overload for dicts here: where an argument holds Any (list[dict[str, Any]]),
    # mypy erases ambiguous overloads' coroutines to Coroutine[Any, Any, Any], and such a
    # list would then await to Any, not to the Window[Any] it always gave.
    @overload
    async def aselect(
        self, messages: Sequence[Message], *, query: str | None = None, budget: int | None = None
    ) -> Window[Message]: ...
    @overload
    async def aselect(
        self, messages: Any, *, query: str | None = None, budget: int | None = None
    ) -> Window[Any]: ...
    async def aselect(
        self, messages: Any, *, query: str | None = None, budget: int | None = None
    ) -> Window[Any]:
        """Async :meth:`select`: awaits the strategy's ``achoose`` when it has one, else
        runs its ``choose``: the whole visit in a worker thread for a history of more
        than :data:`ASYNC_ON_LOOP_UP_TO` messages, else on the loop (in a worker thread
        under a time limit, so that it cannot block the event loop past the limit).
        With ``achoose``, a history that long is read and counted in a worker thread,
        and the window laid out there too unless the strategy carried an earlier visit's
        selection (then it costs what changed); ``achoose`` itself runs on the loop."""
        import asyncio  # here, not at the top: `import ctxwindow` stays free of asyncio (and ssl)

        achoose = getattr(self.strategy, "achoose", None)
        long = _length(messages) > ASYNC_ON_LOOP_UP_TO
        if achoose is None and long:
            # a strategy that cannot wait, on a long history: the whole visit in a worker
            # thread, where reading, counting and choosing a history not seen before (a
            # cold one: seconds at 10,000 messages) cannot hold the event loop
            window: Window[Any] = await asyncio.to_thread(
                self._run, messages, query, budget, "choose"
            )
            return window
        if long:  # read and counted cold, 50,000 messages hold the thread for about 0.1 s
            visit = await asyncio.to_thread(self._begin, messages, budget, query, True)
        else:
            visit = self._begin(messages, budget, query, bounded=True)
        if isinstance(visit, Window):
            return visit
        if achoose is not None:  # its errors name the method that made the selection
            visit.method = "achoose()"
        history = visit.history
        limit = self._time_limit()
        if limit is None:
            with self._strategy_code():
                selection = (
                    await await_strategy(visit, _awaitable(achoose(history)))
                    if achoose
                    else run_strategy(visit, self.strategy.choose)
                )
            return await _finished(visit, selection, long)
        call: Awaitable[Selection]
        future = None  # the worker's, when choose runs in one
        if achoose is not None:
            with self._strategy_code():
                call = await_strategy(visit, _awaitable(achoose(history)))
        else:
            future = self._worker(visit, "choose")
            if future is None:
                return visit.timed_out(limit)
            call = asyncio.wrap_future(future)
        with self._strategy_code():
            finished, chosen = await within(call, limit.seconds)
        if finished:
            return await _finished(visit, chosen, long)
        if future is not None:
            abandon(future)
        return visit.timed_out(limit)

    def _run(self, messages: Any, query: object, budget: int | None, method: str) -> Window[Any]:
        visit = self._begin(messages, budget, query, bounded=method == "choose")
        if isinstance(visit, Window):
            return visit
        limit = self._time_limit()
        if limit is None:
            with self._strategy_code():
                selection = run_strategy(visit, getattr(self.strategy, method))
            return visit.finish(selection)
        import concurrent.futures  # here: only a visit under a time limit needs it

        future = self._worker(visit, method)
        if future is None:
            return visit.timed_out(limit)
        if not concurrent.futures.wait((future,), timeout=limit.seconds)[0]:
            abandon(future)
            return visit.timed_out(limit)
        with self._strategy_code():
            selection = future.result()
        return visit.finish(selection)

    def _begin(
        self, messages: Any, budget: int | None, query: object, bounded: bool
    ) -> Visit | Window[Any]:
        """A visit ready for the strategy to choose, or the window when it need not."""
        total = self.budget if budget is None else check_budget(budget)
        visit = Visit(self, messages, total, check_query(query), bounded)
        if visit.fits_untouched():
            return visit.untouched()
        if bounded:
            visit.apply_oversize_policy()
        return visit

    # -- the strategy's own code ---------------------------------------------------
    def _time_limit(self) -> TimeLimit | None:
        return self.time_limit or TimeLimit.of(self.strategy)

    def _worker(self, visit: Visit, method: str) -> concurrent.futures.Future[Selection] | None:
        """The strategy's choice under way in a worker thread; None when the strategy
        already has too many still running that earlier visits gave up on (a backend
        that hangs)."""
        strategy = self.strategy
        if saturated(strategy):
            return None
        choose: Callable[[History], Selection] = getattr(strategy, method)
        return in_thread(lambda: run_strategy(visit, choose), strategy.name, strategy)

    def engages(self, history: History) -> bool:
        """Whether the strategy chooses though everything fits (its
        ``engages_within_budget``; False when it has none)."""
        engages = getattr(self.strategy, "engages_within_budget", None)
        if engages is None:
            return False
        with self._strategy_code():
            return bool(engages(history))

    def _strategy_code(self) -> _StrategyCode:
        """Around a call of the strategy's code: a bad unit is its ContractViolation, a
        message it built wrong or any other failure its PluginError; ctxwindow's own
        errors about the caller's input (budget, options, messages), and those a
        nested visit already blamed on its strategy, pass as they are."""
        return _StrategyCode(self)

    def violation(self, problems: Sequence[str]) -> ContractViolation:
        """The strategy's ContractViolation for ``problems``, naming its distribution."""
        return ContractViolation(self.strategy.name, self.distribution_for_error(), problems)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled and deep-copied as its configuration (strategy, budget, counter, time
        limit), built again from it: a worker process gets a windower of its own."""
        configuration = (self.strategy, self.budget, self.counter, self._distribution)
        return (_rebuilt, (*configuration, self._seconds, self._on_timeout))

    def __copy__(self) -> Windower:
        """A shallow copy: the same strategy (and its per-conversation state) and
        counter, as :func:`ctxwindow.cached_windower` hands out."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin

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


#: Up to this many messages, :meth:`Windower.aselect` of a strategy without ``achoose``
#: runs on the event loop (a thread hop costs about 0.1 ms, more than such a visit
#: warm); past it, in a worker thread.
ASYNC_ON_LOOP_UP_TO = 1_000


async def _finished(visit: Visit, selection: object, long: bool) -> Window[Any]:
    """The visit's window, laid out in a worker thread for a long history unless the
    selection carried an earlier one: a fresh one is checked and laid out unit by unit
    (about 0.05 s at 50,000 messages), which would hold the event loop."""
    if long and not (isinstance(selection, Selection) and selection._carried is not None):
        import asyncio  # here: `import ctxwindow` stays free of asyncio

        return await asyncio.to_thread(visit.finish, selection)
    return visit.finish(selection)


def _length(messages: object) -> int:
    """How many messages ``messages`` holds, when it says (0 when it does not)."""
    try:
        return len(messages)  # type: ignore[arg-type]
    except TypeError:
        return 0


def _rebuilt(
    strategy: Strategy,
    budget: int,
    counter: TokenCounter,
    distribution: str | None,
    time_limit: float | None,
    on_timeout: str | None,
) -> Windower:
    """A Windower built again from its configuration (see ``Windower.__reduce__``)."""
    return Windower(
        strategy, budget, counter, distribution, time_limit=time_limit, on_timeout=on_timeout
    )


class _StrategyCode:
    """:meth:`Windower._strategy_code`: a class, not a generator, as every visit enters
    one (a generator-based context manager costs each visit about a microsecond)."""

    __slots__ = ("windower",)

    def __init__(self, windower: Windower) -> None:
        self.windower = windower

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: object, error: BaseException | None, traceback: object
    ) -> Literal[False]:
        if not isinstance(error, Exception):
            return False  # no error, or an interrupt: raised as it is
        made = _built_by_strategy(error)
        if (
            isinstance(error, CtxWindowError)
            and made is None
            and not isinstance(error, InvalidSelection)
        ):
            return False  # about the caller's input, or already named: as it is
        windower = self.windower
        if isinstance(error, InvalidSelection):
            raise windower.violation([str(error)]) from error
        strategy = windower.strategy
        source = f" from distribution {windower.distribution!r}" if windower.distribution else ""
        what = (
            f"a message it built is invalid (InvalidMessage: {made})"
            if made is not None
            else f"{type(error).__name__}: {error}"
        )
        raise PluginError(f"strategy {strategy.name!r}{source} failed: {what}") from error


def _built_by_strategy(error: Exception) -> str | None:
    """The problem, when ``error`` is an InvalidMessage about a message the strategy
    built (``Message(...)``, ``dataclasses.replace``, ``Message.from_dict``): the
    caller's messages are always read with their index, so one without an index was
    made in the strategy's code (or handed by it, not a list, to a nested visit). An
    error naming an index is about the caller's messages, read by the strategy or by a
    visit nested in it: the caller's to fix. None for any other error."""
    if isinstance(error, InvalidMessage) and error.index is None:
        return error.problem
    return None


def _awaitable(made: Any) -> Awaitable[Selection]:
    """What ``achoose`` returned, if it can be awaited; else a TypeError (the strategy's
    failure, as a PluginError) saying how to write it: an ``achoose`` without ``async``
    returns its Selection at once."""
    if not inspect.isawaitable(made):
        raise TypeError(
            f"achoose() returned a {type(made).__name__}, not an awaitable: write it as "
            f"`async def achoose(self, history)` (or leave it out: the runner then calls "
            f"choose() in a worker thread)"
        )
    awaitable: Awaitable[Selection] = made
    return awaitable
