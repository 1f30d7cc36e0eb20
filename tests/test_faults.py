"""Faults injected into the host: strategies that crash, break the contract or hang.

The strategies are the testing kit's misbehaving ones (``ctxwindow.testing.strategies``),
registered here by hand under the name of the fixture distribution
``tests/fixtures/ctxwindow-faulty`` (``tests/test_ecosystem.py`` installs that package as
a wheel and loads the same strategies through its entry point). After every fault,
``fixed`` must still give its usual window in the same process.

Every call that could hang runs under :func:`bounded`: a hang fails the test after a
generous timeout instead of hanging the run. No assertion is about speed.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

import ctxwindow
from ctxwindow import ContractViolation, PluginError, Windower
from ctxwindow.errors import VisitTimeout
from ctxwindow.testing import assistant, bounded, calls, result, strategies, user
from ctxwindow.testing.servers import Reply, Request, local_server
from ctxwindow.testing.threads import HANG_GUARD

DISTRIBUTION = "ctxwindow-faulty"
BUDGET = 120
#: Long enough for any machine to start a thread; a hang still fails within a minute.
LIMIT = 0.3
T = TypeVar("T")


def run_async(call: Coroutine[Any, Any, T]) -> T:
    """``call`` on a new event loop, closed without waiting for its default executor.

    ``asyncio.run`` would wait, at its exit, for every thread of the loop's default
    executor, and semantic and summarize choose in one (``asyncio.to_thread``): one that
    hangs there holds ``asyncio.run`` after aselect has returned on time. A long-lived
    loop (a server) never gets there; a script that uses asyncio.run per call would.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(call)
    finally:
        loop.close()  # shuts the executor down without waiting


def conversation() -> list[dict[str, Any]]:
    """A system prompt, ten turns, a parallel tool exchange near the end, a new question."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You help with travel."}]
    for turn in range(10):
        out.append(user(f"question {turn}: " + "words " * 12))
        out.append(assistant(f"answer {turn}: " + "reply " * 12))
    out += [
        user("Weather in Paris and Rome?"),
        calls("c1", "c2"),
        result("c1", "Paris: 18C"),
        result("c2", "Rome: 24C"),
        assistant("Paris is 18C and Rome 24C."),
        user("Which one is warmer?"),
    ]
    return out


def positions(window: ctxwindow.Window[Any], messages: list[Any]) -> list[int]:
    where = {id(message): index for index, message in enumerate(messages)}
    return [where[id(message)] for message in window.messages]


class _Faulty:
    @ctxwindow.hookimpl
    def register_strategies(self, register: Any) -> None:
        for strategy in strategies.FAULTY:
            register(strategy)


@pytest.fixture(scope="module")
def faulty() -> Iterator[Any]:
    """The testing kit's misbehaving strategies, registered as ``ctxwindow-faulty``."""
    ctxwindow.register_plugin(_Faulty(), "faulty", distribution=DISTRIBUTION)
    try:
        yield strategies
    finally:
        strategies.release()
        ctxwindow.unregister_plugin("faulty")


@pytest.fixture
def expected_fixed() -> list[int]:
    messages = conversation()
    return positions(ctxwindow.select(messages, BUDGET, strategy="fixed"), messages)


def assert_fixed_still_works(expected: list[int]) -> None:
    """The other plugins keep working in the same process, sync and async."""
    messages = conversation()
    assert positions(ctxwindow.select(messages, BUDGET, strategy="fixed"), messages) == expected
    window = bounded(lambda: asyncio.run(ctxwindow.aselect(messages, BUDGET, strategy="fixed")))
    assert positions(window, messages) == expected


Select = Callable[..., ctxwindow.Window[Any]]


def sync_select(messages: Any, strategy: str, **options: Any) -> ctxwindow.Window[Any]:
    return ctxwindow.select(messages, BUDGET, strategy=strategy, **options)


def async_select(messages: Any, strategy: str, **options: Any) -> ctxwindow.Window[Any]:
    return asyncio.run(ctxwindow.aselect(messages, BUDGET, strategy=strategy, **options))


BOTH = pytest.mark.parametrize("run", [sync_select, async_select], ids=["sync", "async"])

# Faults counted for the report: kind x strategy, each run sync and async.
RAISES = [
    ("faulty-raises", "ValueError: faulty: the scoring table is empty"),
    ("faulty-recursion", "RecursionError"),
    ("faulty-memory", "MemoryError: faulty: cannot allocate the similarity matrix"),
]
VIOLATIONS = [
    ("faulty-over-budget", "over the limit of 120"),
    ("faulty-drops-system", "unit 0 (system message) must be kept but was dropped"),
    ("faulty-bad-unit", "is not a unit of this history"),
    ("faulty-returns-none", "choose() returned NoneType, not a Selection"),
    ("faulty-foreign-selection", "choose() returned Selection, not a Selection of its history"),
    ("faulty-half-exchange", "a made message carries tool_calls"),
    ("faulty-unmarked", "a message not in the input is not marked synthetic"),
]
HANGS = ["faulty-sleeps", "faulty-blocks-io", "faulty-async-hangs"]


# -- raising inside choose/select --------------------------------------------------------
@BOTH
@pytest.mark.parametrize(("name", "error"), RAISES)
@pytest.mark.usefixtures("faulty")
def test_a_strategy_that_raises_is_reported_by_distribution(
    run: Select, name: str, error: str, expected_fixed: list[int]
) -> None:
    messages = conversation()
    before = copy.deepcopy(messages)
    with pytest.raises(PluginError) as caught:
        bounded(lambda: run(messages, name))
    text = str(caught.value)
    assert f"strategy {name!r} from distribution {DISTRIBUTION!r} failed" in text
    assert error in text
    assert type(caught.value.__cause__).__name__ == error.split(":", maxsplit=1)[0]
    assert messages == before, "the input is unchanged"
    assert_fixed_still_works(expected_fixed)


@BOTH
@pytest.mark.usefixtures("faulty")
def test_keyboard_interrupt_is_not_turned_into_a_plugin_error(
    run: Select, expected_fixed: list[int]
) -> None:
    with pytest.raises(KeyboardInterrupt):
        bounded(lambda: run(conversation(), "faulty-interrupt"))
    assert_fixed_still_works(expected_fixed)


# -- breaking the contract ---------------------------------------------------------------
@BOTH
@pytest.mark.parametrize(("name", "problem"), VIOLATIONS)
@pytest.mark.usefixtures("faulty")
def test_a_broken_window_is_a_contract_violation_naming_the_distribution(
    run: Select, name: str, problem: str, expected_fixed: list[int]
) -> None:
    messages = conversation()
    before = copy.deepcopy(messages)
    with pytest.raises(ContractViolation) as caught:
        bounded(lambda: run(messages, name))
    assert caught.value.strategy == name
    assert caught.value.distribution == DISTRIBUTION
    assert f"(from distribution {DISTRIBUTION!r})" in str(caught.value)
    assert problem in str(caught.value)
    assert messages == before
    assert_fixed_still_works(expected_fixed)


@pytest.mark.usefixtures("faulty")
def test_a_selection_changed_after_the_visit_changes_nothing(expected_fixed: list[int]) -> None:
    messages = conversation()
    strategies.SPOIL.clear()
    strategies.SPOILED.clear()
    window = sync_select(messages, "faulty-mutates-later")
    kept = positions(window, messages)
    assert kept == expected_fixed, "the same rule as fixed"
    strategies.SPOIL.set()  # the strategy's own thread spoils its Selection now
    assert strategies.SPOILED.wait(60), "the strategy's thread did not spoil its selection"
    # decisions are built on first read: they must come from the host's copy
    assert positions(window, messages) == kept
    assert window.tokens <= BUDGET
    assert {d.reason for d in window.record.decisions}.isdisjoint({"changed after the visit"})
    assert "changed after the visit" not in window.record.notes
    assert sum(len(d.positions) for d in window.record.decisions if d.action == "kept") == len(kept)


# -- hanging -------------------------------------------------------------------------------
@BOTH
@pytest.mark.parametrize("name", HANGS)
@pytest.mark.usefixtures("faulty")
def test_a_hanging_strategy_raises_visit_timeout_naming_its_distribution(
    run: Select, name: str, expected_fixed: list[int]
) -> None:
    with pytest.raises(VisitTimeout) as caught:
        bounded(lambda: run(conversation(), name, time_limit=LIMIT))
    error = caught.value
    assert isinstance(error, PluginError)
    assert isinstance(error, TimeoutError)
    assert (error.strategy, error.distribution, error.seconds) == (name, DISTRIBUTION, LIMIT)
    assert f"{name!r} from distribution {DISTRIBUTION!r}" in str(error)
    assert "time limit of 0.3 s" in str(error)
    assert_fixed_still_works(expected_fixed)


@BOTH
@pytest.mark.parametrize("name", HANGS)
@pytest.mark.usefixtures("faulty")
def test_a_hanging_strategy_falls_back_to_the_hosts_recent_window(
    run: Select, name: str, expected_fixed: list[int]
) -> None:
    messages = conversation()
    before = copy.deepcopy(messages)
    window = bounded(lambda: run(messages, name, time_limit=LIMIT, on_timeout="recent"))
    # the host's fallback is the rule fixed follows: must-keep plus the newest run that fits
    assert positions(window, messages) == expected_fixed
    record = window.record
    assert record.strategy == name
    assert record.engaged is True
    assert record.tokens_after <= BUDGET
    assert any(f"{name!r} ran out of its time limit of 0.3 s" in note for note in record.notes)
    reasons = {d.reason for d in record.decisions}
    assert "among the newest units that fit (the strategy ran out of time)" in reasons
    assert "outside the newest units that fit (the strategy ran out of time)" in reasons
    assert messages == before
    assert_fixed_still_works(expected_fixed)


@pytest.mark.parametrize("on_timeout", ["raise", "recent"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_strategy_not_built_on_base_strategy_is_bounded_by_the_windower(
    faulty: Any, on_timeout: str, asynchronous: bool, expected_fixed: list[int]
) -> None:
    windower = Windower(
        faulty.BareHangs(),
        BUDGET,
        "approx",
        DISTRIBUTION,
        time_limit=LIMIT,
        on_timeout=on_timeout,
    )
    assert "time_limit=0.3, on_timeout=" in repr(windower)
    messages = conversation()

    def visit() -> ctxwindow.Window[Any]:
        if asynchronous:
            return asyncio.run(windower.aselect(messages))
        return windower.select(messages)

    if on_timeout == "raise":
        with pytest.raises(VisitTimeout, match="'faulty-bare-hangs' from distribution"):
            bounded(visit)
    else:
        window = bounded(visit)
        assert positions(window, messages) == expected_fixed
        assert window.record.strategy == "faulty-bare-hangs"
        assert any("ran out of its time limit" in note for note in window.record.notes)
    assert_fixed_still_works(expected_fixed)


def test_the_windower_limit_still_checks_a_bare_strategys_window(faulty: Any) -> None:
    """A bare strategy that answers in time is checked as without a limit."""

    class BareOverBudget:
        name = "bare-over-budget"

        def choose(self, history: ctxwindow.History) -> ctxwindow.Selection:
            selection = history.selection()
            for unit in range(len(history.units)):
                selection.keep(unit, "all of it")
            return selection

    windower = Windower(BareOverBudget(), BUDGET, "approx", DISTRIBUTION, time_limit=5.0)
    with pytest.raises(ContractViolation, match="over the limit"):
        bounded(lambda: windower.select(conversation()))
    with pytest.raises(ContractViolation, match="over the limit"):
        bounded(lambda: asyncio.run(windower.aselect(conversation())))


def test_abandoned_threads_end_once_released_and_change_nothing(faulty: Any) -> None:
    """What a timed-out strategy does after the host gave up cannot reach the window."""
    messages = conversation()
    window = bounded(
        lambda: sync_select(messages, "faulty-sleeps", time_limit=LIMIT, on_timeout="recent")
    )
    kept = positions(window, messages)
    decisions = [d.to_dict() for d in window.record.decisions]
    waiting = [t for t in threading.enumerate() if t.name == "ctxwindow-faulty-sleeps"]
    assert waiting, "the abandoned choosing still runs in its own daemon thread"
    assert all(t.daemon for t in waiting)
    faulty.release()
    try:
        for thread in waiting:
            thread.join(HANG_GUARD)
            assert not thread.is_alive()
        assert positions(window, messages) == kept
        assert [d.to_dict() for d in window.record.decisions] == decisions
    finally:
        faulty.RELEASE.clear()


# -- embedders and summarizers that fail, through the first-party strategies ------------------
class FailingEmbedder:
    """An embedder plugin in trouble: raises, returns NaN, or hangs (by ``mode``)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.name = f"failing-{mode}"
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        if self.mode == "raises":
            raise ConnectionError("embedding service unreachable")
        if self.mode == "hangs":
            self.release.wait()
        if self.mode == "nan":
            return np.full((len(texts), 8), np.nan, dtype=np.float32)
        return np.eye(len(texts), 8, dtype=np.float32) + 0.01


EMBEDDERS = {mode: FailingEmbedder(mode) for mode in ("raises", "nan", "hangs")}


class _EmbedderPlugin:
    @ctxwindow.hookimpl
    def register_embedders(self, register: Any) -> None:
        for mode, embedder in EMBEDDERS.items():
            register(f"failing-{mode}", lambda argument, embedder=embedder: embedder)


@pytest.fixture
def failing_embedders(ctxwindow_register: Any) -> Iterator[dict[str, FailingEmbedder]]:
    EMBEDDERS["hangs"].release.clear()
    ctxwindow_register(
        _EmbedderPlugin(), name="failing-embedders", distribution="ctxwindow-failing"
    )
    try:
        yield EMBEDDERS
    finally:
        EMBEDDERS["hangs"].release.set()


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        ("raises", "ConnectionError: embedding service unreachable"),
        ("nan", "returned a non-finite vector"),
    ],
)
@pytest.mark.usefixtures("failing_embedders")
def test_a_failing_embedder_fails_the_visit_naming_semantic(
    mode: str, problem: str, expected_fixed: list[int]
) -> None:
    """No documented fallback for an embedder that fails at run time: the visit fails,
    named by the strategy's distribution, and nothing wrong is cached or kept."""
    messages = conversation()
    options = {"embedder": f"failing-{mode}", "cache": "memory"}
    windower = ctxwindow.from_config({"strategy": "semantic", "budget": BUDGET, **options})
    with pytest.raises(PluginError) as caught:
        bounded(lambda: windower.select(messages))
    assert "'semantic' from distribution 'ctxwindow-semantic' failed" in str(caught.value)
    assert problem in str(caught.value)
    assert windower.strategy.cache.store.get_many(["any"]) == {}  # type: ignore[attr-defined]
    assert_fixed_still_works(expected_fixed)


def test_an_embedder_that_cannot_load_fails_at_configuration(tmp_path: Path) -> None:
    with pytest.raises(ctxwindow.EmbedderUnavailable):
        ctxwindow.from_config(
            {
                "strategy": "semantic",
                "budget": BUDGET,
                "embedder": f"sentence-transformers:{tmp_path / 'no-such-model'}",
                "cache": "memory",
            }
        )


@pytest.mark.usefixtures("failing_embedders")
def test_a_hanging_embedder_is_bounded_by_the_time_limit(expected_fixed: list[int]) -> None:
    messages = conversation()
    base = {"strategy": "semantic", "budget": BUDGET, "embedder": "failing-hangs"}
    windower = ctxwindow.from_config({**base, "cache": "memory", "time_limit": LIMIT})
    with pytest.raises(VisitTimeout, match="'semantic' from distribution 'ctxwindow-semantic'"):
        bounded(lambda: windower.select(messages))
    recent = ctxwindow.from_config(
        {**base, "cache": "memory", "time_limit": LIMIT, "on_timeout": "recent"}
    )
    window = bounded(lambda: run_async(recent.aselect(messages)))
    assert positions(window, messages) == expected_fixed


#: Set when the module's tests end: a slow answer still waiting then gives up.
RELEASE = threading.Event()


def slow_answer(request: Request) -> Reply:
    """An OpenAI-compatible endpoint that answers 500, or only after a long wait."""
    if request.path.startswith("/slow"):
        RELEASE.wait(HANG_GUARD)
    return Reply({"error": {"message": "internal error"}}, 500)


@pytest.fixture(scope="module")
def slow_provider() -> Iterator[str]:
    try:
        with local_server(slow_answer) as running:
            yield running.url
    finally:
        RELEASE.set()


def llm_options(url: str, **more: Any) -> dict[str, Any]:
    return {
        "strategy": "summarize",
        "budget": 200,
        "summarizer": "openai",
        "llm_model": "m",
        "llm_base_url": url,
        "llm_retries": 0,
        "llm_timeout": 120.0,
        **more,
    }


def long_chat() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You plan trips."}]
    for turn in range(30):
        out.append(user(f"Turn {turn}: Ann flies to Lisbon on 14 May, booking LX-{turn}."))
        out.append(assistant(f"Turn {turn}: booked LX-{turn} for Ann."))
    return out


def test_a_failing_llm_falls_back_to_extractive_and_loses_nothing(slow_provider: str) -> None:
    """As the summarize README says: the fallback chain runs, the record says why, and
    every older message is in the summary's covers."""
    messages = long_chat()
    window = bounded(
        lambda: ctxwindow.from_config(llm_options(f"{slow_provider}/v1")).select(messages)
    )
    notes = " ".join(window.record.notes)
    assert "InternalServerError (HTTP 500)" in notes
    (summary,) = [m for m in window.messages if m.get("metadata", {}).get("synthetic")]
    assert summary["metadata"]["summarizer"] == "extractive"
    kept = {id(m) for m in window.messages}
    covered = set(summary["metadata"]["covers"])
    for position, message in enumerate(messages):
        assert id(message) in kept or f"#{position}" in covered, position


def test_a_slow_llm_is_bounded_by_the_time_limit(slow_provider: str) -> None:
    """A real summarizer waiting on a server that does not answer (its own timeout far
    off): the visit's time limit decides, and the host's recent window goes out."""
    messages = long_chat()
    url = f"{slow_provider}/slow/v1"
    with pytest.raises(VisitTimeout, match="'summarize' from distribution 'ctxwindow-summarize'"):
        bounded(lambda: ctxwindow.from_config(llm_options(url, time_limit=LIMIT)).select(messages))
    windower = ctxwindow.from_config(llm_options(url, time_limit=LIMIT, on_timeout="recent"))
    window = bounded(lambda: run_async(windower.aselect(messages)))
    expected = ctxwindow.select(messages, 200, strategy="fixed")
    assert positions(window, messages) == positions(expected, messages)
    assert any("ran out of its time limit" in note for note in window.record.notes)


@pytest.mark.usefixtures("faulty")
def test_a_bare_strategy_takes_its_time_limit_from_config(expected_fixed: list[int]) -> None:
    messages = conversation()
    windower = ctxwindow.from_config(
        {
            "strategy": "faulty-bare-hangs",
            "budget": BUDGET,
            "time_limit": LIMIT,
            "on_timeout": "recent",
        }
    )
    assert windower.distribution == DISTRIBUTION
    window = bounded(lambda: windower.select(messages))
    assert positions(window, messages) == expected_fixed
