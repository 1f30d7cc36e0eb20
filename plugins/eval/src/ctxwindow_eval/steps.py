"""What one step of an agent loop costs, as the history grows: ``ctxwindow bench
--agent-steps``.

The main bench's warm turn appends one user message to a history of made-up words: its
query shares no word with the history and its tool results hold no identifier, so a
strategy's scoring has nothing to rank and its warm cost looks flat. An agent's step is
not like that. Here the history's tool results are records with identifiers (a
reservation id, a flight, a date, a price) and each step appends what a loop appends:
the user's request naming one of those ids in the history's own words, the agent's
tool call for it and the call's result. The step, appending those messages and
windowing the history, is timed through ``Windower`` + ``Conversation`` (the warm path,
as the main bench's warm turn times its append and its window); the steps run back to
back with the collector paused for the whole series (one full collection before it, as
:mod:`timeit` runs), and the history lengths take their steps turn about.

With ``--one-task`` the history is an agent's run from one task (a coding or auditing
agent's): one request, then tool rounds only, and a step appends a round. The current
turn is then the whole history, and the query of a strategy that reads the turn its
newest 32,000 characters, read anew on every step.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ctxwindow import Conversation, from_config
from ctxwindow.errors import ConfigError
from ctxwindow_eval.bench import (
    BUDGET,
    WORDS,
    agent_history,
    collector_paused,
    extremes,
    to_json_machine,
)
from ctxwindow_eval.runner import StrategySpec

SIZES = (1_000, 10_000)
#: The shortest history that holds a tool result, for a step to name its record.
MIN_SIZE = 8
#: Steps timed per row (after one untimed step): medians of this many.
STEPS = 15


def identified_history(size: int, seed: int = 7) -> tuple[list[dict[str, Any]], list[str]]:
    """The main bench's history (:func:`~ctxwindow_eval.bench.agent_history`) with each
    tool result a record holding identifiers, as search and lookup tools return; and the
    reservation ids it holds, for the steps to ask about."""
    _check_size(size)
    rng = random.Random(seed + 1)
    history = agent_history(size, seed)
    ids: list[str] = []
    for message in history:
        if message["role"] == "tool":
            record = _record(rng, message["content"])
            ids.append(record["reservation_id"])
            message["content"] = json.dumps(record)
    return history, ids


def _check_size(size: int) -> None:
    """A step names a record the history holds: it needs one tool result at least."""
    if size < MIN_SIZE:
        raise ConfigError(
            f"an agent step needs a history of at least {MIN_SIZE} messages (one tool "
            f"result to ask about), got {size}"
        )


def _record(rng: random.Random, notes: str) -> dict[str, Any]:
    return {
        "reservation_id": f"R{rng.randrange(100_000):05d}",
        "flight": f"HAT{rng.randrange(1_000):03d}",
        "date": f"2024-05-{rng.randint(1, 28):02d}",
        "price": rng.randint(50, 2_000),
        "notes": notes,
    }


def task_history(size: int, seed: int = 7) -> tuple[list[dict[str, Any]], list[str]]:
    """An agent's run from one task: the system prompt and one request, then tool rounds
    only (a call and its result, a record with identifiers and notes of 60 to 600
    words, as :func:`identified_history`'s), as a coding or auditing agent runs. Its
    current turn is the whole history, and so the query of a strategy that reads the
    turn (the newest 32,000 characters of it). With the reservation ids it holds."""
    _check_size(size)
    rng = random.Random(seed + 3)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an auditing agent."},
        {"role": "user", "content": "Audit every reservation: check its flight and price."},
    ]
    ids: list[str] = []
    while len(history) < size - 1:
        record = _record(rng, _notes(rng))
        ids.append(record["reservation_id"])
        history += _round(f"call_{len(ids)}", record["reservation_id"], record)
    if len(history) < size:  # an odd length: a word of the agent's between the rounds
        history.insert(2, {"role": "assistant", "content": "Starting the audit."})
    return history, ids


def _notes(rng: random.Random) -> str:
    """What a record of a run from one task says besides its identifiers: 60 to 600
    words."""
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 600)))


def _round(call_id: str, wanted: str, record: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent's call looking ``wanted`` up, and its result."""
    arguments = json.dumps({"reservation_id": wanted})
    function = {"name": "lookup", "arguments": arguments}
    call = {"id": call_id, "type": "function", "function": function}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(record)},
    ]


def agent_steps(
    ids: Sequence[str], seed: int = 7, requests: bool = True
) -> Iterator[list[dict[str, Any]]]:
    """Steps of an agent loop, each unlike any before: a request naming an id of the
    history, the tool call it leads to and the call's result. Unless ``requests`` is
    False: a run from one task, whose step is a round like those of
    :func:`task_history` (notes of 60 to 600 words)."""
    rng = random.Random(seed + 2)
    number = 0
    while True:
        number += 1
        wanted = rng.choice(ids)
        notes = f"the plan for reservation {wanted}, step {number}"
        asked: list[dict[str, Any]] = []
        if requests:
            request = f"Check the flight plan and price of {wanted}, step {number}."
            asked.append({"role": "user", "content": request})
        else:
            notes += " " + _notes(rng)
        record = _record(rng, notes)
        yield asked + _round(f"step_{number}", wanted, record)


@dataclass
class StepRow:
    """One strategy at one history length: the median step, in milliseconds."""

    strategy: str
    messages: int
    step_ms: float
    window_tokens: int

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["step_ms"] = round(self.step_ms, 4)
        return out


class _Loop:
    """One strategy's agent loop on a history of one length, read cold (untimed)."""

    def __init__(self, name: str, size: int, budget: int, one_task: bool = False) -> None:
        spec = StrategySpec.parse(name)
        options = spec.run_options
        config = {"strategy": spec.name, "budget": budget, "counter": "approx", **options}
        self.name = name
        self.size = size
        self.windower = from_config(config)
        history, ids = task_history(size) if one_task else identified_history(size)
        self.conversation = Conversation(history)
        self.windower.select(self.conversation)  # the cold read, not timed
        self.made = agent_steps(ids, requests=not one_task)
        self.times: list[float] = []
        self.tokens = 0

    def step(self, timed: bool) -> None:
        """Append the next step and window it, both timed or not (the step's messages
        are made before the clock starts: a loop holds them already)."""
        messages = next(self.made)
        started = time.perf_counter()
        self.conversation.extend(messages)
        window = self.windower.select(self.conversation)
        if timed:
            self.times.append(time.perf_counter() - started)
        self.tokens = window.tokens

    def row(self) -> StepRow:
        return StepRow(self.name, self.size, statistics.median(self.times) * 1000, self.tokens)


def measure(
    name: str,
    sizes: Sequence[int],
    steps: int = STEPS,
    budget: int = BUDGET,
    one_task: bool = False,
) -> list[StepRow]:
    """The median step of ``name`` at each history length in ``sizes``. The lengths'
    steps run turn about (after one untimed step each, which settles what the cold read
    left), so a step at one length and at another are made under the same load of a
    shared machine, and their ratio (the growth) compares like with like. The steps run
    back to back with the collector paused, as the bench's warm turns do. ``one_task``:
    the history is a run from one task (:func:`task_history`) and a step appends a
    tool round alone."""
    loops = [_Loop(name, size, budget, one_task) for size in sizes]
    with collector_paused():
        for number in range(steps + 1):
            for loop in loops:
                loop.step(timed=number > 0)
    return [loop.row() for loop in loops]


def bench_steps(name: str, size: int, steps: int = STEPS, budget: int = BUDGET) -> StepRow:
    """The median cost of one agent step on a history of ``size`` messages."""
    (row,) = measure(name, [size], steps, budget)
    return row


def run(
    strategies: Sequence[str],
    sizes: Sequence[int] = SIZES,
    progress: Callable[[str], None] | None = None,
    steps: int = STEPS,
    one_task: bool = False,
) -> list[StepRow]:
    rows = []
    for name in strategies:
        if progress:
            progress(f"{name} at {', '.join(f'{size:,}' for size in sizes)} messages")
        rows.extend(measure(name, sizes, steps, one_task=one_task))
    return rows


def growth(rows: Sequence[StepRow]) -> dict[str, dict[str, Any]]:
    """Per strategy, the step at the largest length over the step at the smallest
    (1.0 is flat: a step costs what it adds)."""
    out: dict[str, dict[str, Any]] = {}
    for name, small, large in extremes(rows):
        out[name] = {
            "smallest": small.messages,
            "largest": large.messages,
            "step_growth": round(large.step_ms / small.step_ms, 2) if small.step_ms else None,
        }
    return out


def to_json(rows: Sequence[StepRow], budget: int = BUDGET, one_task: bool = False) -> str:
    return json.dumps(
        {
            "budget": budget,
            "counter": "approx",
            "one_task": one_task,
            "machine": to_json_machine(),
            "rows": [row.to_dict() for row in rows],
            "summary": growth(rows),
        },
        indent=2,
    )
