"""The per-visit time limit: ``time_limit`` and ``on_timeout`` on every BaseStrategy and
on the Windower. Calls that could hang run under a thread join with a generous timeout,
so a broken limit fails the test instead of hanging the run; nothing asserts speed."""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
import time
from typing import Any

import pytest

import ctxwindow
from ctxwindow import (
    ContractViolation,
    History,
    InvalidOption,
    Message,
    PluginError,
    Selection,
    Windower,
)
from ctxwindow import _workers as workers
from ctxwindow.errors import VisitTimeout
from ctxwindow.testing import assistant, bounded, calls, result, user
from ctxwindow.testing.strategies import Newest

LIMIT = 0.2
GUARD = 60.0
RELEASE = threading.Event()
CALLER = contextvars.ContextVar("CALLER", default="nobody")


@pytest.fixture(autouse=True, scope="module")
def _release_hung_threads() -> Any:
    yield
    RELEASE.set()


def chat(turns: int = 12) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for turn in range(turns):
        out.append(user(f"q{turn} " * 10))
        out.append(assistant(f"a{turn} " * 10))
    return out


def positions(window: ctxwindow.Window[Any], messages: list[Any]) -> list[int]:
    where = {id(m): i for i, m in enumerate(messages)}
    return [where[id(m)] for m in window.messages]


class Hangs(Newest):
    """Newest, after waiting until the module's tests are done."""

    name = "hangs"

    def choose(self, history: History) -> Selection:
        RELEASE.wait()
        return super().choose(history)


class BlocksTheLoop(Newest):
    """An async choose that blocks the event loop instead of awaiting."""

    name = "blocks-the-loop"

    async def achoose(self, history: History) -> Selection:
        time.sleep(LIMIT * 3)
        return self.choose(history)


class OwnTimeout(Newest):
    """Fails at once with a TimeoutError of its own (an HTTP client's, say)."""

    name = "own-timeout"

    def choose(self, history: History) -> Selection:
        raise TimeoutError("upstream read timed out")


class ReadsContext(Newest):
    """Keeps what Newest keeps, with the caller's context variable in each reason."""

    name = "reads-context"

    def choose(self, history: History) -> Selection:
        selection = super().choose(history)
        for unit in selection.kept:
            selection.keep(unit, f"kept for {CALLER.get()}")
        return selection


# -- options ----------------------------------------------------------------------------
def test_every_base_strategy_has_the_options_with_no_limit_by_default() -> None:
    strategy = Newest()
    assert strategy.options["time_limit"] is None
    assert strategy.options["on_timeout"] == "raise"
    assert repr(Newest(time_limit=2, on_timeout="recent")) == (
        "Newest(time_limit=2.0, on_timeout='recent')"
    )
    described = {entry["name"]: entry for entry in ctxwindow.describe_strategies()}
    names = {option["name"] for option in described["newest"]["options"]}
    assert {"time_limit", "on_timeout"} <= names


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"time_limit": 0}, "must be a positive, finite number of seconds, got 0.0"),
        ({"time_limit": -1.5}, "must be a positive, finite number of seconds, got -1.5"),
        ({"time_limit": math.nan}, "got nan"),
        ({"time_limit": math.inf}, "got inf"),
        ({"time_limit": 1e300}, "got 1e+300"),
        ({"time_limit": "2s"}, "expects float | None, got str '2s'"),
        ({"time_limit": True}, "expects float | None, got bool True"),
        ({"on_timeout": "ignore"}, "must be one of 'raise', 'recent', got 'ignore'"),
    ],
)
def test_bad_limits_are_clear_errors_in_python_config_and_windower(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidOption, match=r"option '(time_limit|on_timeout)'") as caught:
        Newest(**options)
    assert message in str(caught.value)
    with pytest.raises(InvalidOption) as caught:
        ctxwindow.from_config({"strategy": "newest", "budget": 100, **options})
    assert message in str(caught.value)
    with pytest.raises(InvalidOption) as caught:
        Windower(Newest(), 100, "approx", **options)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_the_limit_comes_from_config_as_a_strategy_option() -> None:
    windower = ctxwindow.from_config(
        {"strategy": "newest", "budget": 100, "time_limit": 1.5, "on_timeout": "recent"}
    )
    assert windower.strategy.options["time_limit"] == 1.5  # type: ignore[attr-defined]
    assert windower.strategy.options["on_timeout"] == "recent"  # type: ignore[attr-defined]


# -- a strategy that answers in time --------------------------------------------------------
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_answer_in_time_is_the_strategys_own_window(asynchronous: bool) -> None:
    messages = chat()
    plain = Newest().select(messages, 100)
    timed = Newest(time_limit=30.0)
    if asynchronous:
        window = bounded(lambda: asyncio.run(timed.aselect(messages, 100)))
    else:
        window = bounded(lambda: timed.select(messages, 100))
    assert positions(window, messages) == positions(plain, messages)
    assert [d.to_dict() for d in window.record.decisions] == [
        d.to_dict() for d in plain.record.decisions
    ]
    assert window.record.notes == plain.record.notes


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_the_callers_context_reaches_the_worker_thread(asynchronous: bool) -> None:
    messages = chat()

    def visit() -> ctxwindow.Window[Any]:
        CALLER.set("request-42")
        strategy = ReadsContext(time_limit=30.0)
        if asynchronous:
            return asyncio.run(strategy.aselect(messages, 100))
        return strategy.select(messages, 100)

    window = bounded(visit)
    kept = [d.reason for d in window.record.decisions if d.action == "kept"]
    assert kept
    assert set(kept) == {"kept for request-42"}


def test_a_strategys_own_timeout_error_is_its_failure_not_the_limit() -> None:
    strategy = OwnTimeout(time_limit=30.0)
    with pytest.raises(PluginError, match="TimeoutError: upstream read timed out") as caught:
        bounded(lambda: strategy.select(chat(), 100))
    assert not isinstance(caught.value, VisitTimeout)
    assert isinstance(caught.value.__cause__, TimeoutError)  # the strategy's own, kept
    windower = Windower(strategy, 100, "approx", "my-dist")  # type: ignore[arg-type]
    with pytest.raises(PluginError, match="TimeoutError: upstream read timed out") as wrapped:
        bounded(lambda: windower.select(chat()))
    assert not isinstance(wrapped.value, VisitTimeout)
    with pytest.raises(PluginError, match="TimeoutError"):
        bounded(lambda: asyncio.run(windower.aselect(chat())))


def test_a_bad_selection_made_in_the_worker_is_still_a_contract_violation() -> None:
    class BadUnit(Newest):
        name = "bad-unit"

        def choose(self, history: History) -> Selection:
            selection = history.selection()
            selection.keep(999, "no such unit")
            return selection

    with pytest.raises(ContractViolation, match="unit 999 is not a unit"):
        bounded(lambda: BadUnit(time_limit=30.0).select(chat(), 100))


# -- running out of time ---------------------------------------------------------------------
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_running_out_raises_visit_timeout(asynchronous: bool) -> None:
    strategy = Hangs(time_limit=LIMIT)

    def visit() -> ctxwindow.Window[Any]:
        if asynchronous:
            return asyncio.run(strategy.aselect(chat(), 100))
        return strategy.select(chat(), 100)

    with pytest.raises(VisitTimeout) as caught:
        bounded(visit)
    assert caught.value.strategy == "hangs"
    assert caught.value.seconds == LIMIT
    assert "time limit of 0.2 s" in str(caught.value)
    assert "on_timeout='recent'" in str(caught.value), "the error says what else to do"


def test_an_async_choose_that_blocks_the_loop_is_late_even_if_it_answers() -> None:
    """The loop cannot be interrupted, but the late answer is not used."""
    with pytest.raises(VisitTimeout):
        bounded(lambda: asyncio.run(BlocksTheLoop(time_limit=LIMIT).aselect(chat(), 100)))
    window = bounded(
        lambda: asyncio.run(
            BlocksTheLoop(time_limit=LIMIT, on_timeout="recent").aselect(chat(), 100)
        )
    )
    assert any("ran out of its time limit" in note for note in window.record.notes)


def test_cancelling_the_caller_cancels_the_strategys_task() -> None:
    seen: list[str] = []

    class Waits(Newest):
        name = "waits"

        async def achoose(self, history: History) -> Selection:
            try:
                await asyncio.sleep(GUARD)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise
            return self.choose(history)  # pragma: no cover

    async def caller() -> None:
        task = asyncio.ensure_future(Waits(time_limit=GUARD).aselect(chat(), 100))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # let the strategy's task see its cancellation

    bounded(lambda: asyncio.run(caller()))
    assert seen == ["cancelled"]


def test_the_fallback_keeps_the_visits_own_policies() -> None:
    """The host's recent window still applies oversize='truncate' and orphans='drop'."""
    messages = [
        {"role": "system", "content": "S" * 200},
        result("ghost", "a result whose call is gone"),
        *chat(4)[1:],
        calls("c1"),
        result("c1", "r" * 40),
        user("x" * 2000),
    ]
    strategy = Hangs(time_limit=LIMIT, on_timeout="recent", oversize="truncate", orphans="drop")
    window = bounded(lambda: strategy.select(messages, 200))
    assert window.tokens <= 200
    newest = window.messages[-1]
    assert newest is not messages[-1], "the newest user message was cut, as a copy"
    assert newest["content"].endswith("characters cut by ctxwindow to fit the token budget]")
    actions = {d.positions: d.action for d in window.record.decisions}
    assert actions[(1,)] == "dropped", "the orphan result is dropped as the options say"
    assert actions[(len(messages) - 1,)] == "truncated"
    notes = " ".join(window.record.notes)
    assert "ran out of its time limit" in notes
    assert "truncated message" in notes
    assert "dropped message 1" in notes


def test_the_windower_limit_wins_over_the_strategys_own() -> None:
    windower = Windower(Hangs(time_limit=GUARD), 100, "approx", time_limit=LIMIT)  # type: ignore[arg-type]
    with pytest.raises(VisitTimeout, match=r"time limit of 0\.2 s"):
        bounded(lambda: windower.select(chat()))
    recent = Windower(Hangs(), 100, "approx", time_limit=LIMIT, on_timeout="recent")  # type: ignore[arg-type]
    messages = chat()
    window = bounded(lambda: recent.select(messages))
    assert positions(window, messages) == positions(Newest().select(messages, 100), messages)


# -- workers left running ----------------------------------------------------------------
def test_a_strategy_with_many_workers_still_running_gets_no_new_one() -> None:
    """A backend that hangs on every call must not leave one thread per request: past
    MAX_RUNNING running workers, the strategy's visits run out of time at once."""
    release = threading.Event()

    class HangsUntilReleased(Newest):
        name = "hangs-until-released"

        def choose(self, history: History) -> Selection:
            release.wait(GUARD)
            return super().choose(history)

    strategy = HangsUntilReleased(time_limit=0.01, on_timeout="recent")
    messages = chat()
    try:
        for _ in range(workers.MAX_RUNNING + 5):
            window = strategy.select(messages, 120)
            assert "time limit" in " ".join(window.record.notes)
        assert workers.saturated(strategy)
        assert sum(t.name == "ctxwindow-hangs-until-released" for t in workers.running()) == (
            workers.MAX_RUNNING
        )
    finally:
        release.set()
    for thread in workers.running():
        if thread.name == "ctxwindow-hangs-until-released":
            thread.join(GUARD)
    assert not workers.saturated(strategy)
    fresh = strategy.select(messages, 120)  # a worker again, and it answers in time
    assert not any("time limit" in note for note in fresh.record.notes)


@pytest.mark.parametrize("entry", ["select", "aselect"])
def test_many_visits_at_once_within_their_limit_all_get_their_window(entry: str) -> None:
    """Found by a server engineer's review: a shared Windower with a time limit gave
    visits past the 8th in flight no worker, and so a VisitTimeout at once ("did not
    choose within 30 s" after no time at all). Only workers their visits gave up on
    count against the bound; these all answer in time, once all are running."""
    visits = workers.MAX_RUNNING + 4
    together = threading.Barrier(visits, timeout=GUARD / 4)

    class WaitsForTheOthers(Newest):
        name = "waits-for-the-others"

        def choose(self, history: History) -> Selection:
            together.wait()  # every visit's worker running at once
            return super().choose(history)

    windower = Windower(WaitsForTheOthers(), 120, "approx", time_limit=GUARD / 2)
    messages = chat()
    windows: list[Any] = []

    def visit() -> None:
        if entry == "select":
            windows.append(windower.select(messages))
        else:
            windows.append(asyncio.run(windower.aselect(messages)))

    threads = [threading.Thread(target=visit) for _ in range(visits)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GUARD)
    assert len(windows) == visits  # none raised VisitTimeout
    expected = positions(Newest().select(messages, 120), messages)
    assert all(positions(window, messages) == expected for window in windows)


def test_the_interpreter_waits_for_a_worker_still_running_at_exit(tmp_path: Any) -> None:
    """A worker abandoned by its visit finishes before the process exits (a worker
    still in native code at exit can abort the process), and the exit status is kept."""
    import subprocess
    import sys

    done = tmp_path / "done"
    script = f"""
import time
from ctxwindow.testing.strategies import Newest

class Slow(Newest):
    name = "slow"
    def choose(self, history):
        time.sleep(1.0)
        open({str(done)!r}, "w").write("finished")
        return super().choose(history)

history = [{{"role": "user", "content": f"question {{i}} " * 20}} for i in range(30)]
window = Slow(time_limit=0.05, on_timeout="recent").select(history, 100)
print(len(window.messages), "time limit" in " ".join(window.record.notes))
raise SystemExit(3)
"""
    finished = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=GUARD
    )
    assert finished.returncode == 3, finished.stderr
    assert finished.stdout.split() == ["1", "True"]
    assert done.read_text() == "finished"


def test_the_fallback_for_a_bare_strategy_keeps_its_overhead_off_the_budget() -> None:
    """A strategy not built on BaseStrategy that declares an overhead (its own prompt)
    gets a fallback window within the budget less that overhead, as its own would be."""
    release = threading.Event()

    class BareWithOverhead:
        name = "bare-overhead"
        overhead_tokens = 200

        def choose(self, history: History) -> Selection:
            release.wait(GUARD)
            raise RuntimeError("never answers in time")

    windower = Windower(BareWithOverhead(), 400, "approx", time_limit=0.05, on_timeout="recent")
    try:
        window = windower.select(chat(20))
    finally:
        release.set()
    counter = ctxwindow.get_counter("approx")
    assert window.record.tokens_after <= 200
    assert sum(counter.count_message(Message.from_dict(m)) for m in window.messages) <= 200


def test_the_windower_says_what_each_common_option_is_on_its_visits() -> None:
    """What a host reads before a visit: the windower's own limit, else the strategy's
    option, else the default; a name that is not a common option is a clear error."""
    own = Windower(Newest(orphans="drop", time_limit=5.0), 100, "approx")
    assert own.common_option("orphans") == "drop"
    assert own.common_option("time_limit") == 5.0
    assert own.common_option("oversize") == "cut", "the default"
    assert own.common_option("task_statement") is True
    limited = Windower(Newest(time_limit=5.0), 100, "approx", time_limit=LIMIT, on_timeout="recent")
    assert (limited.common_option("time_limit"), limited.common_option("on_timeout")) == (
        LIMIT,
        "recent",
    )

    class Bare:  # a protocol strategy: no options of its own
        name = "bare"

        def choose(self, history: History) -> Selection:
            return history.selection()

    bare = Windower(Bare(), 100, "approx")
    assert bare.common_option("orphans") == "raise"
    assert bare.common_option("time_limit") is None
    with pytest.raises(InvalidOption, match=r"'budget'.*one of oversize, orphans"):
        own.common_option("budget")


# -- naming the distribution ------------------------------------------------------------------
def test_running_out_does_not_wait_on_naming_the_distribution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Naming the distribution of a class no plugin registered reads every installed
    distribution's metadata (a second or more): the error looks it up when read, not
    when raised after the limit, and still names it."""
    scans: list[str] = []

    def installed() -> dict[str, list[str]]:
        scans.append("scan")
        return {Hangs.__module__.split(".")[0]: ["my-app"]}

    monkeypatch.setattr(ctxwindow._plugins, "_installed_by_module", installed)
    with pytest.raises(VisitTimeout) as caught:
        bounded(lambda: Hangs(time_limit=LIMIT).select(chat(), 100))
    assert scans == [], "raised without the scan"
    assert "'hangs' from distribution 'my-app' did not choose" in str(caught.value)
    assert caught.value.distribution == "my-app"
    assert scans == ["scan"], "looked up once"

    class Script(Newest):
        name = "script"

    Script.__module__ = "__main__"
    assert Windower(Script(), 100, "approx").distribution is None
    assert scans == ["scan"], "a class of the running script is no distribution's"


def test_a_contract_violation_names_the_distribution_when_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scans: list[str] = []

    def installed() -> dict[str, list[str]]:
        scans.append("scan")
        return {Hangs.__module__.split(".")[0]: ["my-app"]}

    class BadUnit(Newest):
        name = "bad-unit"

        def choose(self, history: History) -> Selection:
            return "not a selection"  # type: ignore[return-value]

    monkeypatch.setattr(ctxwindow._plugins, "_installed_by_module", installed)
    with pytest.raises(ContractViolation) as caught:
        BadUnit().select(chat(), 100)
    assert scans == []
    assert "'bad-unit' (from distribution 'my-app') broke the contract" in str(caught.value)
    assert caught.value.distribution == "my-app"


def test_an_on_timeout_given_alone_goes_with_the_strategys_own_limit() -> None:
    """Given to the Windower, on_timeout wins over the strategy's even when the limit
    is the strategy's own: it is not dropped for want of a Windower time_limit."""
    windower = Windower(Hangs(time_limit=LIMIT), 100, "approx", on_timeout="recent")  # type: ignore[arg-type]
    assert windower.common_option("on_timeout") == "recent"
    assert windower.common_option("time_limit") == LIMIT
    messages = chat()
    window = bounded(lambda: windower.select(messages))
    assert any("ran out of its time limit of 0.2 s" in note for note in window.record.notes)
    assert "on_timeout='recent'" in repr(windower)
    given_limit = Windower(Hangs(on_timeout="recent"), 100, "approx", time_limit=LIMIT)  # type: ignore[arg-type]
    assert given_limit.common_option("on_timeout") == "recent", "the strategy's own"
    unlimited = Windower(Newest(), 100, "approx", on_timeout="recent")
    assert unlimited.common_option("on_timeout") == "recent"
    assert unlimited.common_option("time_limit") is None
