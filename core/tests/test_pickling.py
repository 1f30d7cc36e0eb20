"""Errors, windows and records cross a process boundary: they pickle and copy.

An error raised in a worker process (``ProcessPoolExecutor``) is pickled there and
unpickled in the caller; one that cannot be unpickled breaks the pool instead of
reaching the caller as itself. A window returned from a worker, or kept in a cache,
is pickled with its record.
"""

from __future__ import annotations

import copy
import inspect
import pickle
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

import ctxwindow
from ctxwindow import BaseStrategy, History, Selection, Window, WindowRecord, errors
from ctxwindow.testing.strategies import Newest

#: What each parameter of an error's ``__init__`` is given, by its annotation: an
#: error whose parameter has another annotation fails the test until one is added here.
SAMPLES: dict[str, Any] = {
    "int": 1_200,
    "int | None": 7,
    "float": 2.5,
    "bool": True,
    "str": "text",
    "str | None": "pip install 'ctxwindow-x[extra]'",
    "Sequence[str]": ("first", "second"),
    "BaseException | str": ZeroDivisionError("division by zero"),
    "object": {"calls": 1},
    "Distribution": lambda: "ctxwindow-lazy",  # a lookup: pickled as what it finds
}


def public_errors() -> list[type[BaseException]]:
    """Every exception class ``ctxwindow.errors`` defines and exports."""
    return [
        value
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
        and not name.startswith("_")
    ]


def sample(cls: type[BaseException]) -> BaseException:
    """An instance of ``cls``, each ``__init__`` parameter given a sample of its kind."""
    own = [klass for klass in cls.__mro__ if klass.__module__ == errors.__name__]
    if not any("__init__" in vars(klass) for klass in own):
        return cls("what went wrong; what to do")
    arguments: dict[str, Any] = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name == "self":
            continue
        annotation = str(parameter.annotation)
        assert annotation in SAMPLES, f"{cls.__name__}({name}: {annotation}): add a sample"
        arguments[name] = SAMPLES[annotation]
    return cls(**arguments)


def attributes(error: BaseException) -> dict[str, Any]:
    """An error's attributes, an error among them as its type and arguments (errors
    compare by identity)."""
    return {
        name: (type(value), value.args) if isinstance(value, BaseException) else value
        for name, value in vars(error).items()
    }


def test_every_public_error_is_found() -> None:
    found = {cls.__name__ for cls in public_errors()}
    assert {"CtxWindowError", "BudgetTooSmall", "VisitTimeout", "ContractViolation"} <= found
    assert len(found) >= 20


@pytest.mark.parametrize("cls", public_errors(), ids=lambda cls: cls.__name__)
def test_every_public_error_pickles_as_itself(cls: type[BaseException]) -> None:
    error = sample(cls)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert str(back) == str(error)
    assert repr(back) == repr(error)
    assert back.args == error.args
    assert attributes(back) == attributes(error)
    assert not any(callable(value) for value in vars(back).values())
    copied = copy.copy(error)
    assert type(copied) is cls and str(copied) == str(error)


@pytest.mark.parametrize("cls", [errors.ContractViolation, errors.VisitTimeout])
def test_a_lazy_distribution_is_looked_up_when_pickled(cls: type[Any]) -> None:
    calls: list[int] = []

    def lookup() -> str:
        calls.append(1)
        return "ctxwindow-looked-up"

    error = cls("s", lookup, ["p"]) if cls is errors.ContractViolation else cls("s", lookup, 1.0)
    back = pickle.loads(pickle.dumps(error))
    assert back.distribution == "ctxwindow-looked-up" and calls == [1]
    assert "'ctxwindow-looked-up'" in str(back)
    assert str(back) == str(error)
    if cls is errors.VisitTimeout:
        assert isinstance(back, TimeoutError) and back.seconds == 1.0


def test_attributes_and_notes_survive() -> None:
    error = errors.BudgetTooSmall(900, 50, biggest="message 1", position=1, biggest_tokens=880)
    if sys.version_info >= (3, 11):
        error.add_note("while windowing chat 7")
    back = pickle.loads(pickle.dumps(error))
    assert (back.needed, back.budget, back.position, back.biggest_tokens) == (900, 50, 1, 880)
    assert getattr(back, "__notes__", None) == getattr(error, "__notes__", None)


HISTORY = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "a long question " * 200},
]


def too_small() -> int:
    """A visit whose must-keep messages exceed the budget: BudgetTooSmall, in a worker."""
    return Newest(oversize="raise").select(HISTORY, 50).tokens


def windows(count: int) -> Window[dict[str, Any]]:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 30}
        for i in range(count)
    ]
    return Newest().select(messages, 300)


def test_an_error_in_a_worker_process_reaches_the_caller_as_itself() -> None:
    with ProcessPoolExecutor(1) as pool:
        with pytest.raises(ctxwindow.BudgetTooSmall) as raised:
            pool.submit(too_small).result(timeout=60)
        assert raised.value.needed > raised.value.budget
        assert "raise the budget" in str(raised.value)
        assert pool.submit(len, "pool still works").result(timeout=60) == 16  # not broken


def test_windows_come_back_from_worker_processes() -> None:
    with ProcessPoolExecutor(1) as pool:
        back = list(pool.map(windows, [11, 21], timeout=60))
    for window, count in zip(back, [11, 21], strict=True):
        here = windows(count)
        assert window == here
        assert window.record.to_dict()["decisions"] == here.record.to_dict()["decisions"]
        assert window.record.count("dropped") == here.record.count("dropped") > 0


def test_a_window_pickles_before_and_after_its_decisions_are_read() -> None:
    for read in (False, True):
        window = windows(21)
        if read:
            assert window.record.decisions
        back = pickle.loads(pickle.dumps(window))
        assert back == window and back.messages == window.messages
        assert back.record.elapsed_ms == window.record.elapsed_ms
        assert back.record.decisions == window.record.decisions
        assert back.record.decision_runs == window.record.decision_runs
        assert back.record.to_dict() == window.record.to_dict()
        assert back.record.explain() == window.record.explain()


def test_an_untouched_window_and_one_with_defects_pickle() -> None:
    fits = Newest().select(HISTORY, 10_000)
    assert not fits.record.engaged
    assert pickle.loads(pickle.dumps(fits.record)) == fits.record
    orphan = [*HISTORY, {"role": "tool", "tool_call_id": "x", "content": "late"}]
    dropped = Newest(orphans="drop").select(orphan, 10_000)
    back = pickle.loads(pickle.dumps(dropped.record))
    assert back == dropped.record and back.decisions[-1].unit == -1


class Stages(BaseStrategy):
    """Runs :class:`Newest` twice and keeps both records, as a pipeline does."""

    name = "two-stages"

    def choose(self, history: History) -> Selection:
        first = Newest().select(history.originals, history.budget * 2)
        second = Newest().select(history.originals, history.budget)
        selection = Newest().choose(history)
        selection.stages.extend([first.record, second.record])
        return selection


def test_a_record_with_stages_pickles_each_stage() -> None:
    messages = [HISTORY[0], *windows(31).messages, *windows(11).messages]
    window = Stages().select(messages, 200)
    assert window.record.engaged
    back = pickle.loads(pickle.dumps(window.record))
    assert len(back.stages) == 2
    assert back == window.record
    assert [s.decisions for s in back.stages] == [s.decisions for s in window.record.stages]


def test_a_record_copies_and_deep_copies() -> None:
    window = windows(21)
    shallow = copy.copy(window.record)
    assert "_decisions" not in vars(shallow)  # as lazy as the record
    assert shallow == window.record
    deep = copy.deepcopy(window)
    assert deep == window and deep.messages is not window.messages
    assert deep.record.decisions == window.record.decisions
    assert deep.record.decisions is not window.record.decisions
    again = copy.copy(window)
    assert again == window and again.record is window.record


def test_a_record_made_by_hand_pickles_once_its_decisions_are_built() -> None:
    decision = ctxwindow.Decision(0, (0,), (None,), "kept", "fits", 5, 0.5)
    record = WindowRecord(
        "given", 100, "approx", 5, 5, True, 1.0, 1, 1, _decide=lambda: (decision,)
    )
    back = pickle.loads(pickle.dumps(record))
    assert back.decisions == (decision,) and back.count("kept") == 1
    assert isinstance(back, WindowRecord)
