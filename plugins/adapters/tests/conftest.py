"""Shared by the adapter tests: a local server that records what a real SDK client sends,
and the ways a strategy sends stand-ins (cleared tool outputs) through an adapter."""

from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest

from ctxwindow.testing.servers import Request, local_server

#: What a local recording server gets: (path, JSON body) per request, in order.
Bodies = list[tuple[str, Any]]


@pytest.fixture
def recording_server() -> Iterator[Callable[..., tuple[str, Bodies]]]:
    """``recording_server(reply, prefix="")``: a local HTTP server that records each JSON
    body with its path and answers ``reply(path)`` as the API would, so a real SDK
    client's request is seen as sent; its base URL (``prefix`` appended) and the bodies.
    Stopped after the test."""
    with contextlib.ExitStack() as running:

        def start(reply: Callable[[str], Any], prefix: str = "") -> tuple[str, Bodies]:
            bodies: Bodies = []

            def answer(request: Request) -> Any:
                bodies.append((request.path, request.body))
                return reply(request.path)

            server = running.enter_context(local_server(answer))
            return f"{server.url}{prefix}", bodies

        yield start


CLEARING = {"strategy": "clear_tool_outputs", "keep_recent": 1, "min_tokens": 10, "when": "always"}


class StandInRun(NamedTuple):
    """A strategy that sends stand-ins for tool results through an adapter, its options
    and a budget."""

    strategy: str
    options: dict[str, Any]
    budget: int
    #: A cleared tool output's text; its groups: the tool's name and the call id.
    stub = re.compile(r"\[tool output of (\w+) \((\w+)\) cleared by ctxwindow: [\d,]+ tokens\]")

    def select(self, select: Callable[..., Any], messages: Any, **more: Any) -> Any:
        """``select(messages, budget, strategy, **options, **more)`` (an adapter's), its
        window, checking that nothing passed in was changed."""
        before = copy.deepcopy(messages)
        window = select(messages, self.budget, self.strategy, **self.options, **more)
        assert messages == before  # nothing passed in was changed
        return window


#: clear_tool_outputs on its own (everything fits, it clears anyway), and as a pipeline's
#: first stage before fixed (which then drops the oldest turns to fit).
STAND_IN_RUNS = {
    "clear_tool_outputs": StandInRun(
        "clear_tool_outputs", {k: v for k, v in CLEARING.items() if k != "strategy"}, 10_000
    ),
    "pipeline": StandInRun("pipeline", {"stages": [CLEARING, "fixed"]}, 700),
}


@pytest.fixture(params=sorted(STAND_IN_RUNS))
def stand_in_run(request: pytest.FixtureRequest) -> StandInRun:
    """Each way of sending stand-ins (the test runs once per way); needs the pipeline
    distribution, which provides clear_tool_outputs."""
    pytest.importorskip("ctxwindow_pipeline")
    return STAND_IN_RUNS[request.param]


@pytest.fixture
def clearing_run() -> StandInRun:
    """clear_tool_outputs on its own (see :data:`STAND_IN_RUNS`)."""
    pytest.importorskip("ctxwindow_pipeline")
    return STAND_IN_RUNS["clear_tool_outputs"]


class CountedReads:
    """An adapter (openai_responses or pydantic_ai) whose remembered reads are counted:
    ``starts`` holds (first item read, items in the list) per read. Starts with nothing
    remembered."""

    def __init__(self, module: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        from ctxwindow_adapters._reads import RecentReads

        self.module = module
        self.starts: list[tuple[int, int]] = []
        reader = module._read_from

        def counting(items: Any, start: int, into: Any) -> int:
            self.starts.append((start, len(items)))
            settled: int = reader(items, start, into)
            return settled

        monkeypatch.setattr(module, "_READS", RecentReads(counting, module._content_of))

    def read(self, items: list[Any]) -> Any:
        """The adapter's conversion of ``items``."""
        module = self.module
        return (getattr(module, "read_items", None) or module.read_messages)(items)

    def first(self, work: Callable[[], Any]) -> Any:
        """``work()`` with nothing remembered (and nothing counted)."""
        from ctxwindow_adapters._reads import RecentReads

        module = self.module
        saved = module._READS
        module._READS = RecentReads(module._read_from, module._content_of)
        try:
            return work()
        finally:
            module._READS = saved

    def check_as_first(self, items: list[Any], budget: int, strategy: str) -> None:
        """The remembered conversion and window (or error: a list that ends on a call
        has an orphan) are exactly a first read's."""
        converted = self.read(items)
        first = self.first(lambda: self.read(copy.deepcopy(items)))
        assert converted.messages == first.messages
        assert (converted.sources, converted.parts) == (first.sources, first.parts)
        assert converted.split == first.split
        assert converted.breaks == first.breaks  # kept as the items grew, and read again
        window = _outcome(lambda: self.module.select(items, budget, strategy))
        again = self.first(
            lambda: _outcome(lambda: self.module.select(copy.deepcopy(items), budget, strategy))
        )
        assert window == again

    def check_growth(self, full: list[Any], budget: int, strategy: str, most: int) -> None:
        """``full`` read from its first 40 items on, one item more each call: each
        call gives a first read's conversion and window, and reads at most ``most``
        items (the new one, and those whose reading it changes)."""
        self.read(full[:40])
        assert self.starts == [(0, 40)]
        for size in range(41, len(full) + 1):
            del self.starts[:]
            self.check_as_first(full[:size], budget, strategy)
            start, length = self.starts[0]
            assert length == size and size - start <= most, (size, start)


def _outcome(select: Callable[[], Any]) -> tuple[Any, ...]:
    """A window's messages, decided positions and runs of decisions, or the error
    raised instead."""
    try:
        window = select()
    except Exception as error:
        return type(error), str(error)
    record = window.record
    runs = [(run.units, list(run.positions), run.action) for run in record.decision_runs]
    return window.messages, [d.positions for d in record.decisions], runs


@pytest.fixture
def counted_reads(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], CountedReads]:
    """``counted_reads(adapter_module)``: see :class:`CountedReads`."""
    return lambda module: CountedReads(module, monkeypatch)
