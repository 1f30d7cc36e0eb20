"""A long agent run after one instruction, windowed through the Anthropic adapter: a
warm turn costs what the turn added and what the window keeps, not a look back over
the whole history.

Each user message holding tool results is split (one Message per result), so the
window is laid out slot by slot; that looked for the newest user Message on every
turn, from the newest back: in a run whose only user words open the history, back over
all of it. It is looked for only when a window holds a host's cut, which needs it."""

from __future__ import annotations

from typing import Any

import pytest

import ctxwindow
from ctxwindow.kit import REMEMBER_FROM
from ctxwindow_adapters import anthropic as adapter
from ctxwindow_adapters._bridge import Prefix

TASK = "Find the cheapest flight to Lisbon and book it. " * 4


def _round(number: int, words: int = 60) -> list[dict[str, Any]]:
    """One tool round: the assistant's call and the user message holding its result."""
    call = {"type": "tool_use", "id": f"t{number}", "name": "search", "input": {"q": number}}
    result = {"type": "tool_result", "tool_use_id": f"t{number}", "content": "fare " * words}
    return [
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]


def _agent_run(rounds: int, task: str = TASK) -> list[dict[str, Any]]:
    """One user message, then ``rounds`` tool rounds."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for number in range(rounds):
        messages += _round(number)
    return messages


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The positions of the remembered conversions' Messages read (``Prefix`` items)."""
    read: list[int] = []
    getitem = Prefix.__getitem__

    def counting(self: Prefix[Any], index: Any) -> Any:
        read.append(index)
        return getitem(self, index)

    monkeypatch.setattr(Prefix, "__getitem__", counting)
    return read


def _warm_reads(rounds: int, read: list[int]) -> int:
    """The Messages a warm turn reads at ``rounds`` rounds: the turn before windowed,
    then one more round added and windowed."""
    windower = ctxwindow.from_config({"strategy": "fixed", "budget": 3000})
    messages = _agent_run(rounds)
    assert len(messages) >= REMEMBER_FROM  # a remembered conversion: its Messages a Prefix
    adapter.select(messages, system="Be brief.", windower=windower)
    messages += _round(rounds)
    read.clear()
    window = adapter.select(messages, system="Be brief.", windower=windower)
    assert window.messages[0] is messages[0]  # the instruction kept, as it was
    assert window.messages[-1] is messages[-1]
    return len(read)


def test_a_warm_turn_of_a_long_agent_run_reads_no_more_of_a_longer_history(
    reads: list[int],
) -> None:
    short = _warm_reads(250, reads)
    long = _warm_reads(1000, reads)
    assert long <= short + 8, f"{short} Messages read at 250 rounds, {long} at 1,000"


def test_the_host_cut_of_the_one_instruction_still_lands_in_its_message() -> None:
    task = "Plan the whole trip, step by step. " + "detail " * 3000
    messages = _agent_run(300, task)
    windower = ctxwindow.from_config({"strategy": "fixed", "budget": 1500, "oversize": "truncate"})
    for turn in range(2):  # cold, then warm
        window = adapter.select(messages, system="Be brief.", windower=windower)
        first = window.messages[0]
        assert first["role"] == "user" and first is not messages[0]
        assert first["content"].startswith("Plan the whole trip")
        assert len(first["content"]) < len(task)
        assert window.messages[-1] is messages[-1]
        cut = [d for d in window.record.decisions if d.action == "truncated"]
        assert [d.positions for d in cut] == [(0,)]
        messages += _round(300 + turn)
