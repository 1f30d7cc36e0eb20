"""Running a check over generated histories (hypothesis), for the conformance suite.

Why not hypothesis's own shrinking: drawing a history (thirty messages of up to 3,000
characters) is most of what a call costs, and the shrinker draws again on every
attempt, hundreds of them: a broken strategy's failure took minutes to report. The
suite stops at the first failure instead and reduces it itself, with a bounded number
of checks of small candidates, to an example short enough to read.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import pprint
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ctxwindow._messages import Message, read_message
from ctxwindow._plugins import get_counter
from ctxwindow.errors import CtxWindowError

if TYPE_CHECKING:
    from hypothesis import settings

#: What installs hypothesis with the rest of the test kit.
INSTALL = "pip install 'ctxwindow[testing]'"

#: The most checks a failure's reduction runs: a few seconds at worst.
REDUCE_CHECKS = 80

#: A text longer than this is tried cut to it when a failure is reduced.
SHORT_TEXT = 20

Check = Callable[[list[Any], int], None]


def require_hypothesis() -> ModuleType:
    """hypothesis, or a ModuleNotFoundError that says which extra installs it (the
    generated-history tests need it; the rest of ctxwindow does not)."""
    try:
        import hypothesis
    except ModuleNotFoundError as error:
        if error.name != "hypothesis":
            raise  # installed, but something it needs is not: its own error says what
        raise ModuleNotFoundError(
            "ctxwindow's generated-history tests need hypothesis, which the 'testing' "
            f"extra installs: {INSTALL}",
            name="hypothesis",
        ) from error
    return hypothesis


def generated_settings(examples: int) -> settings:
    """The suite's hypothesis settings: ``examples`` histories, the same on every run,
    no time limit per example (a strategy may be slow on a big one), and no shrinking
    phase (see the module's docstring): :func:`holds_on` reduces a failure itself."""
    require_hypothesis()
    from hypothesis import HealthCheck, Phase, Verbosity, settings

    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        report_multiple_bugs=False,
        # the example hypothesis prints is the one drawn, often tens of KB: the reduced
        # one is in the failure's notes
        verbosity=Verbosity.quiet,
    )


def holds_on(check: Check, generated: Any, examples: int) -> None:
    """Run ``check(messages, budget)`` on ``examples`` histories from ``generated`` (a
    hypothesis strategy) at budgets from 1 to 6,000. The first failure is reduced
    (:func:`reduced`) and raised with the reduced example in its notes: the error the
    check raises on that example, so that what it says (positions, counts) is about the
    example shown, not the longer history drawn."""
    require_hypothesis()
    from hypothesis import given
    from hypothesis import strategies as st

    #: The failure reduced last: what was drawn, the note, the error on the reduced example.
    last: list[tuple[list[Any], int, str, Exception]] = []

    @generated_settings(examples)
    @given(messages=generated, budget=st.integers(1, 6000))
    def contract_holds(messages: list[Any], budget: int) -> None:
        drawn = copy.deepcopy(messages)  # the check may change what it is given
        try:
            check(messages, budget)
        except Exception as error:
            if not last or last[0][:2] != (drawn, budget):  # hypothesis runs it again
                example = reduced(check, drawn, budget, error)
                again = _failure_on(check, example[0], example[1], error)
                last[:] = [(drawn, budget, _note(*example), again)]
            shown = last[0][3]
            _add_note(shown, last[0][2])
            if shown is error:
                raise
            raise shown from None

    contract_holds()


def reduced(
    check: Check, messages: list[Any], budget: int, error: Exception
) -> tuple[list[Any], int, int]:
    """A smaller history on which ``check`` still fails with an error of ``error``'s
    type: runs of messages left out (halves, then quarters, down to single messages),
    then long texts cut short; at most :data:`REDUCE_CHECKS` checks. Also the number of
    messages it started from."""
    kind = type(error)
    left = REDUCE_CHECKS
    current, drawn = list(messages), len(messages)

    def fails(candidate: list[Any], at: int) -> bool:
        nonlocal left
        left -= 1
        try:
            check(copy.deepcopy(candidate), at)
        except kind:
            return True
        except Exception:  # another failure: not the one being reduced
            return False
        return False

    def smaller(candidate: list[Any]) -> bool:
        """Whether ``candidate`` fails too, at the budget less what it no longer holds
        (so that it is as far over the budget as before), else at the same budget."""
        nonlocal current, budget
        less = max(1, budget - (_tokens(current) - _tokens(candidate)))
        for at in dict.fromkeys((less, budget)):
            if left > 0 and fails(candidate, at):
                current, budget = candidate, at
                return True
        return False

    size = len(current) // 2
    while size >= 1 and left > 0:
        start = 0
        while start < len(current) and left > 0:
            if not smaller(current[:start] + current[start + size :]):
                start += size
        size //= 2
    for index in range(len(current)):
        short = _shortened(current[index])
        if short is not None:
            smaller([*current[:index], short, *current[index + 1 :]])
    return current, budget, drawn


def _failure_on(check: Check, messages: list[Any], budget: int, error: Exception) -> Exception:
    """The error ``check`` raises on the reduced example (of ``error``'s type), whose
    message speaks of that example; ``error`` itself if it no longer fails so."""
    try:
        check(copy.deepcopy(messages), budget)
    except type(error) as again:
        return again
    except Exception:  # another failure: the one reduced is the one to show
        return error
    return error


def _tokens(messages: list[Any]) -> int:
    """What ``messages`` cost by the approximate counter (0 for one it cannot read)."""
    counter = get_counter("approx")
    total = 0
    for message in messages:
        with contextlib.suppress(CtxWindowError):
            total += counter.count_message(read_message(message, None))
    return total


def _shortened(message: Any) -> Any:
    """``message`` with its text content cut to :data:`SHORT_TEXT` characters; None when
    it has no longer text."""
    if isinstance(message, Message):
        if isinstance(message.content, str) and len(message.content) > SHORT_TEXT:
            return dataclasses.replace(message, content=message.content[:SHORT_TEXT])
        return None
    if isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, str) and len(content) > SHORT_TEXT:
            return {**message, "content": content[:SHORT_TEXT]}
    return None


def _note(messages: list[Any], budget: int, drawn: int) -> str:
    """The reduced example, as a note on the failure."""
    shown = pprint.pformat(messages, width=100, compact=True)
    return (
        f"Falsifying example (reduced from {drawn} generated messages to {len(messages)}; "
        f"the same check fails on it):\n  budget={budget},\n  messages={shown}"
    )


def _add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, on Python 3.10 too (pytest shows ``__notes__``)."""
    notes = getattr(error, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
        error.__notes__ = notes  # type: ignore[attr-defined]
    if note not in notes:
        notes.append(note)
