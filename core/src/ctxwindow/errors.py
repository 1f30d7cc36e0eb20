"""Every error ctxwindow raises on purpose, so callers can catch exactly what they mean.

Each also subclasses the standard exception code written without ctxwindow in mind
catches: errors about bad arguments, config or input subclass :class:`ValueError`, a
wrong type as much as a wrong value (only :class:`InvalidQuery`, a query that is not a
string, is a :class:`TypeError`); an unknown name subclasses :class:`LookupError`; a
strategy, plugin, counter, embedder or summarizer that fails subclasses
:class:`RuntimeError` (:class:`VisitTimeout` is also a :class:`TimeoutError`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

#: A distribution's name (None: not known), or how to look it up: a lookup may read
#: every installed distribution's metadata, a second or more, so an error raised
#: where the caller waits (a visit past its time limit) looks it up only when read.
Distribution = str | Callable[[], str | None] | None


def _folded(name: str) -> str:
    return name.casefold().replace("-", "_").replace(" ", "_")


def closest(name: object, candidates: Iterable[object]) -> str | None:
    """The candidate ``name`` was most likely meant to be (a typo, another case, ``-``
    for ``_``), or None: for the "did you mean ...?" of an unknown name."""
    if not isinstance(name, str) or not name:
        return None
    names = sorted({c for c in candidates if isinstance(c, str) and c and c != name})
    folded = {_folded(c): c for c in names}
    if _folded(name) in folded:
        return folded[_folded(name)]
    import difflib  # only an unknown name needs it

    found = difflib.get_close_matches(_folded(name), list(folded), n=1, cutoff=0.75)
    return folded[found[0]] if found else None


def did_you_mean(name: object, candidates: Iterable[object]) -> str:
    """``"; did you mean 'x'?"`` for the closest candidate, else ``""``."""
    match = closest(name, candidates)
    return f"; did you mean {match!r}?" if match else ""


def _restored(cls: type[BaseException], args: tuple[object, ...]) -> BaseException:
    """An unpickled error: made without calling ``__init__``, whose arguments are not
    its ``args``; pickle then restores its attributes."""
    return cls.__new__(cls, *args)


class CtxWindowError(Exception):
    """Base class of every error raised by ctxwindow.

    Every one pickles, its attributes with it: an error raised in a worker process
    (``ProcessPoolExecutor``) reaches the caller as itself.
    """

    def __reduce__(self) -> str | tuple[Any, ...]:
        # Exception's own reduce calls the class with ``args``: most of these take others
        return _restored, (type(self), self.args), dict(self.__dict__)


class InvalidMessage(CtxWindowError, ValueError):
    """A message is malformed: names the message's index and what is wrong with it."""

    def __init__(self, index: int | None, problem: str) -> None:
        self.index = index
        self.problem = problem
        where = "messages" if index is None else f"message {index}"
        super().__init__(f"{where}: {problem}")


class OrphanToolResult(InvalidMessage):
    """A tool result whose call is absent, or a tool call with no result.

    Providers reject such a request, so ctxwindow reports it instead of passing it on.
    Set ``orphans="drop"`` to drop these messages (the record says so) instead.
    """


class InvalidBudget(CtxWindowError, ValueError):
    """The token budget is not a positive integer."""


class InvalidQuery(CtxWindowError, TypeError):
    """The query is not a string."""


class InvalidOption(CtxWindowError, ValueError):
    """An option or config key is unknown, or has the wrong type or value."""


class UnknownStrategy(CtxWindowError, LookupError):
    """No installed plugin registers a strategy of that name."""

    def __init__(
        self,
        name: str,
        installed: Sequence[str],
        install_hint: str | None,
        skipped: Sequence[str] = (),
        known: Sequence[str] = (),
        failed: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.installed = tuple(installed)
        self.install_hint = install_hint
        #: Installed plugins the environment kept from loading, "distribution (VARIABLE)".
        self.skipped = tuple(skipped)
        #: Installed plugins that failed to load or register, "name from distribution:
        #: error": the strategy asked for may be one of theirs.
        self.failed = tuple(failed)
        #: The installed name (else a first-party one from ``known``) closest to ``name``.
        self.suggestion = closest(name, self.installed) or closest(name, known)
        have = ", ".join(self.installed) if self.installed else "none"
        text = f"unknown strategy {name!r}; installed strategies: {have}"
        if self.suggestion:
            text += f"; did you mean {self.suggestion!r}?"
            if self.suggestion not in self.installed:
                text += " (not installed)"
        # the hint's last word: a distribution, perhaps quoted with its extras
        package = install_hint.split()[-1].strip("'\"").split("[")[0] if install_hint else None
        kept_out = any(item.split(" (")[0] == package for item in self.skipped)
        if install_hint and not kept_out:
            text += f". {name!r} is a first-party strategy: install it with `{install_hint}`"
        if self.skipped:
            text += f". Not loaded because of the environment: {', '.join(self.skipped)}"
        if self.failed:
            text += (
                f". Plugins that failed to load or register (details: `ctxwindow plugins`): "
                f"{'; '.join(self.failed)}"
            )
        super().__init__(text)


class UnknownCounter(CtxWindowError, LookupError):
    """No registered token counter matches the given spec."""


class UnknownEmbedder(CtxWindowError, LookupError):
    """No registered embedder matches the given spec."""


class CounterFailed(CtxWindowError, RuntimeError):
    """A token counter raised while counting, or returned what is not a count; names
    the counter and its error (None for a bad count: the text says what it returned)."""

    def __init__(self, counter: str, error: BaseException | str) -> None:
        self.counter = counter
        self.error = error if isinstance(error, BaseException) else None
        what = f"{type(error).__name__}: {error}" if self.error is not None else error
        super().__init__(f"token counter {counter!r} failed: {what}")


class EmbedderUnavailable(CtxWindowError, RuntimeError):
    """An embedder's model cannot be found or loaded; says how to install it."""


class DuplicateName(CtxWindowError, LookupError):
    """Two plugins registered the same name: names both distributions."""

    def __init__(self, kind: str, name: str, first: str, second: str) -> None:
        self.kind, self.name, self.first, self.second = kind, name, first, second
        if first == second:  # one distribution's own mistake: nothing to uninstall
            super().__init__(
                f"{kind} {name!r} is registered twice by {first!r}; a name is registered "
                f"once (give the other {kind} another name)"
            )
            return
        super().__init__(
            f"{kind} {name!r} is registered by both {first!r} and {second!r}; "
            f"uninstall one of them or block one with CTXWINDOW_DISABLE_PLUGINS"
        )


class BudgetTooSmall(CtxWindowError, ValueError):
    """The messages that must be kept (system, pinned, the newest user message, the
    current turn's newest exchange) exceed the budget; names the biggest of them.

    Besides the text, the biggest is given as data, so that a caller (an adapter
    naming the item in its own list, an app choosing what to shorten) never parses the
    message: ``position`` is its index in the visit's input messages and
    ``biggest_tokens`` its size (both None when the raiser did not say), ``biggest``
    the words that describe it; ``kept`` names the kinds of message that must be kept
    in this history (the runner names only those it has).
    """

    def __init__(
        self,
        needed: int,
        budget: int,
        detail: str = "",
        biggest: str | None = None,
        *,
        position: int | None = None,
        biggest_tokens: int | None = None,
        least: bool = False,
        kept: str = "system, pinned, newest user, the current turn's newest exchange",
    ) -> None:
        self.needed = needed
        self.budget = budget
        self.biggest = biggest
        self.position = position
        self.biggest_tokens = biggest_tokens
        advice = detail or (
            "pass oversize='truncate' to cut the newest user message's text with a marker"
        )
        named = f"; the biggest is {biggest}" if biggest else ""
        # ``least``: ``detail`` says how far to raise the budget, as nothing else helps
        remedy = f"the budget {advice}" if least else f"the budget, or {advice}"
        super().__init__(
            f"the messages that must be kept ({kept}) need {needed:,} tokens but the "
            f"budget leaves {budget:,}{named}; raise {remedy}"
        )


class LLMNotConfigured(CtxWindowError, ValueError):
    """A strategy that needs an LLM was configured without a usable one."""


class SummarizerFailed(CtxWindowError, RuntimeError):
    """A summarizer timed out, failed, or returned something that is not a summary.

    ``usage`` is what the failed attempt still cost (an LLM bills failed calls too).
    """

    def __init__(self, summarizer: str, problem: str, usage: object = None) -> None:
        self.summarizer = summarizer
        self.problem = problem
        self.usage = usage
        super().__init__(f"summarizer {summarizer!r} failed: {problem}")


class UnknownSummarizer(CtxWindowError, LookupError):
    """No registered summarizer matches the given spec."""


class UnknownScorer(CtxWindowError, LookupError):
    """No registered importance scorer matches the given spec."""


class _NamesDistribution(Exception):
    """An error that names a strategy's distribution, looked up (see
    :data:`Distribution`) when its text or ``distribution`` is first read."""

    _distribution: Distribution

    @property
    def distribution(self) -> str | None:
        found = self._distribution
        if callable(found):
            found = self._distribution = found()
        return found

    def _origin(self, template: str) -> str:
        """``template`` filled with the distribution's name, or "" when not known."""
        return template.format(repr(self.distribution)) if self.distribution else ""

    def _text(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self._text()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._text()!r})"

    def __reduce__(self) -> str | tuple[Any, ...]:
        self.distribution  # noqa: B018  # looked up now: a lookup (a function) cannot be pickled
        return super().__reduce__()


class ContractViolation(_NamesDistribution, CtxWindowError, RuntimeError):
    """A strategy returned a window that breaks the contract; names its distribution."""

    def __init__(self, strategy: str, distribution: Distribution, problems: Sequence[str]) -> None:
        self.strategy = strategy
        self._distribution = distribution
        self.problems = tuple(problems)
        super().__init__(strategy, *self.problems)

    def _text(self) -> str:
        origin = self._origin(" (from distribution {})")
        listed = "; ".join(self.problems)
        return f"strategy {self.strategy!r}{origin} broke the contract: {listed}"


class InvalidSelection(CtxWindowError, ValueError):
    """A strategy named a unit its history does not have, or gave a bad reason or score.

    Raised by :class:`~ctxwindow.Selection`; the host reports it as the strategy's
    ContractViolation.
    """


class ConfigError(CtxWindowError, ValueError):
    """A config file cannot be read or has the wrong shape."""


class PluginError(CtxWindowError, RuntimeError):
    """A plugin failed while registering or running; names its distribution."""


class VisitTimeout(_NamesDistribution, PluginError, TimeoutError):
    """A strategy ran past its ``time_limit`` while choosing; names its distribution.

    Raised with ``on_timeout="raise"``; with ``on_timeout="recent"`` the host builds a
    window itself instead. Also a :class:`TimeoutError`, so ``except TimeoutError``
    catches it. The strategy's abandoned work cannot change the visit's outcome.
    """

    def __init__(self, strategy: str, distribution: Distribution, seconds: float) -> None:
        self.strategy = strategy
        self._distribution = distribution
        self.seconds = seconds
        super().__init__()  # no args: two would be an OSError's errno and strerror

    def __reduce__(self) -> tuple[Any, ...]:
        # an OSError's kind is not made by ``__new__`` alone: unpickled by calling the class
        arguments = (self.strategy, self.distribution, self.seconds)  # the lookup done
        return type(self), arguments, dict(self.__dict__)

    def _text(self) -> str:
        origin = self._origin(" from distribution {}")
        return (
            f"strategy {self.strategy!r}{origin} did not choose within its time limit of "
            f"{self.seconds:g} s; raise time_limit, or pass on_timeout='recent' to fall "
            f"back to the newest messages that fit"
        )
