"""Units: the atoms every strategy keeps or drops whole.

An assistant message with tool_calls and the tool results that answer it form one
unit, because a provider rejects a call without its results and a result without its
call. Every other message is a unit of its own. Results must directly follow their
call (in any order among themselves), as the OpenAI and Anthropic APIs require.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Unit:
    """Messages ``start`` to ``stop`` (exclusive) of a history, kept or dropped together."""

    index: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def positions(self) -> range:
        return range(self.start, self.stop)


@dataclass(frozen=True, slots=True)
class Defect:
    """Messages that cannot be sent as they are: an orphan result or an unanswered call."""

    start: int
    stop: int
    problem: str


def orphan_result(position: int, tool_call_id: str | None) -> Defect:
    return Defect(
        position,
        position + 1,
        f"tool result for call {tool_call_id!r} does not follow an assistant message "
        f"that made that call",
    )


def unanswered_calls(start: int, stop: int, call_ids: set[str]) -> Defect:
    return Defect(
        start,
        stop,
        f"the assistant's tool call(s) {', '.join(map(repr, sorted(call_ids)))} have no "
        f"tool result right after them",
    )


def answered_twice(start: int, stop: int, call_id: str, pending: set[str]) -> Defect:
    """An exchange a result repeating one of its answered calls broke (a retried step
    appended twice inside a parallel round): the repeat named as the cause."""
    waiting = ", ".join(map(repr, sorted(pending)))
    return Defect(
        start,
        stop,
        f"the tool result for call {call_id!r} at message {stop} repeats one this exchange "
        f"already holds (a call is answered once), so the assistant's tool call(s) "
        f"{waiting} have no tool result right after them",
    )


def between(units: range, taken: Iterable[int]) -> list[range]:
    """The runs of ``units`` (a step-1 range) around ``taken`` (ascending; units
    outside ``units`` before it are passed over), in time linear in ``taken`` up to
    the range's end, not in the range."""
    runs: list[range] = []
    start = units.start
    for unit in taken:
        if unit >= units.stop:
            break
        if unit >= start:
            if unit > start:
                runs.append(range(start, unit))
            start = unit + 1
    if start < units.stop:
        runs.append(range(start, units.stop))
    return runs
