"""Agent trajectories: an agent's whole conversation, OpenAI messages with tool calls.

Every assistant message that calls tools is a step: the history before it is what a
context window had to be made of, and the arguments the agent then passed say what
the window needed to hold (see :mod:`ctxwindow_eval.agent_metrics`).

Accepted files: a JSON list of trajectories, or JSONL with one trajectory a line. A
trajectory is a list of messages, or an object holding it under ``traj`` (tau-bench's
historical trajectories), ``messages`` or ``trajectory``, with an optional ``id``
(else ``task_id`` and ``trial``, else its place in the file; a ``task_id`` also groups
the runs of one task, see :mod:`.spread`); or one such object. A
file whose entries are all messages (a JSONL log of one run) is one trajectory.

:func:`find_faults` says which trajectories ctxwindow cannot window (a message it cannot
read, a broken tool exchange), each by its place in the file: ``ctxwindow eval`` checks
them all before it runs anything.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ctxwindow import Conversation, Message, get_counter
from ctxwindow.errors import ConfigError, InvalidMessage

MESSAGE_KEYS = ("traj", "messages", "trajectory")


@dataclass(frozen=True)
class Trajectory:
    """One agent run: its id and its messages, as OpenAI-format dicts."""

    id: str
    messages: list[dict[str, Any]]
    #: The task it ran (tau-bench's ``task_id``), when the file says: runs of one task
    #: are one sample when the spread of a figure is estimated (see :mod:`.spread`).
    task: str | None = None
    #: Where the file holds it, for errors: ``line 3`` (JSONL) or ``trajectory 2`` (a
    #: JSON list's index), with the file's id for it: ``line 3 (task 12 trial 1)``;
    #: empty when the file is this one trajectory.
    place: str = ""
    #: The file it was read from (empty when it was not).
    source: str = ""
    #: The file line of each message, for a JSONL log of one run (one message a line).
    lines: tuple[int, ...] = ()

    @property
    def sample(self) -> str:
        """What the spread draws it with: its task's runs, else this run alone."""
        return f"task {self.task}" if self.task is not None else f"run {self.id}"

    def actions(self) -> Iterator[int]:
        """Positions of the assistant messages that call tools (never the first)."""
        for position, message in enumerate(self.messages):
            if position and message.get("role") == "assistant" and message.get("tool_calls"):
                yield position

    def where(self, position: int | None = None) -> str:
        """Where it, or its message at ``position``, is in its file: ``line 3 (id 'r7'),
        message 5``; ``line 9 (message 8)`` in a log of one run."""
        if position is None:
            return self.place or f"trajectory {self.id!r}"
        if 0 <= position < len(self.lines):
            return f"line {self.lines[position]} (message {position})"
        return f"{self.place}, message {position}" if self.place else f"message {position}"


@dataclass(frozen=True)
class Fault:
    """Why ctxwindow cannot window a trajectory: its first message at fault."""

    trajectory: Trajectory
    position: int | None
    problem: str
    #: A broken tool exchange (a result without its call, calls without their results),
    #: which a strategy with ``orphans='drop'`` drops instead of raising OrphanToolResult.
    exchange: bool = False

    def __str__(self) -> str:
        return f"{self.trajectory.where(self.position)}: {self.problem}"


def find_faults(trajectories: Sequence[Trajectory], *, exchanges: bool = True) -> list[Fault]:
    """The first fault of each trajectory that has one: a message ctxwindow cannot read
    (InvalidMessage), or, with ``exchanges``, a broken tool exchange in the history
    before its last action, which a strategy with ``orphans='raise'`` (the default)
    raises OrphanToolResult on; none is missed for want of a step over the budget."""
    counter = get_counter("approx")
    faults = []
    for trajectory in trajectories:
        fault = _fault_of(trajectory, counter if exchanges else None)
        if fault is not None:
            faults.append(fault)
    return faults


def _fault_of(trajectory: Trajectory, counter: Any) -> Fault | None:
    messages = trajectory.messages
    for position, message in enumerate(messages):
        try:
            Message.from_dict(message, position)
        except InvalidMessage as error:
            return Fault(trajectory, error.index, error.problem)
    last = max(trajectory.actions(), default=None)
    if counter is None or last is None:
        return None
    conversation = Conversation()
    conversation.extend(messages[:last])  # the longest history a strategy is given
    defects = conversation.view(counter, 1).defects
    if not defects:
        return None
    more = f" (and {len(defects) - 1} more after it)" if len(defects) > 1 else ""
    return Fault(trajectory, defects[0].start, defects[0].problem + more, exchange=True)


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Read a JSON list or JSONL of trajectories; a file of another shape is a
    ConfigError naming the entry at fault (its line in JSONL)."""
    source = Path(path)
    entries, lines, single = _entries(source)
    message_lines: tuple[int, ...] = ()
    if _all_messages(entries):  # a log of one run: each entry a message
        entries, single = [{"id": source.stem, "messages": list(entries)}], True
        message_lines, lines = tuple(lines or ()), None
    out = []
    places = []  # each trajectory's place in the file, bare: to tell shared ids apart
    for number, entry in enumerate(entries):
        line = f"line {lines[number]}" if lines else None
        places.append(line or f"trajectory {number}")
        messages = messages_of(entry)
        if messages is None:
            raise ConfigError(
                f"{source}: {line or f'entry {number}'} is not a trajectory: give a list of "
                f"OpenAI messages, or an object with it under one of {', '.join(MESSAGE_KEYS)}"
            )
        label = _label_of(entry)
        place = "" if single else line or f"trajectory {number}"
        if place and label:
            place += f" ({label})"
        trajectory = Trajectory(
            _id_of(entry, number),
            messages,
            _task_of(entry),
            place=place,
            source=str(source),
            lines=message_lines,
        )
        for position, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise ConfigError(
                    f"{source}: {trajectory.where(position)} is not an OpenAI message (an "
                    "object with a 'role')"
                )
        out.append(trajectory)
    if not out:
        raise ConfigError(f"{source} holds no trajectories")
    return _distinct_ids(out, places, source)


def _distinct_ids(runs: list[Trajectory], places: list[str], source: Path) -> list[Trajectory]:
    """The trajectories with an id of their own each: an id several share is followed
    by each one's place (``run (line 3)``), with a warning. Pooled under one id, runs
    without a ``task_id`` would be drawn as one sample, and the interval be wrong."""
    counts = Counter(run.id for run in runs)
    shared = [name for name, count in counts.items() if count > 1]
    if not shared:
        return runs
    named = ", ".join(repr(name) for name in shared[:3])
    more = f" and {len(shared) - 3} more" if len(shared) > 3 else ""
    warnings.warn(
        f"{source}: trajectories share the id {named}{more}; each is kept as a run of its "
        "own, its id followed by its place in the file: give each run its own id (and "
        "the runs of one task a task_id)",
        UserWarning,
        stacklevel=3,
    )
    return [
        replace(run, id=f"{run.id} ({place})") if counts[run.id] > 1 else run
        for run, place in zip(runs, places, strict=True)
    ]


def looks_like_trajectories(path: str | Path) -> bool:
    """Whether ``path`` holds agent trajectories, so ``ctxwindow eval`` can pick the kind
    of benchmark by itself: any JSONL (LoCoMo is one JSON document; a broken line is
    the trajectory loader's to name), or a JSON list of trajectories or of messages,
    or one trajectory object (a trajectory need not call tools: a chat before the
    agent's first tool call is one too)."""
    try:
        text = _read(Path(path))
    except ConfigError:
        return False  # the loader of either kind says why
    try:
        whole = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return _is_jsonl(text)
    if isinstance(whole, dict):
        return _holds_messages(whole)
    if not isinstance(whole, list) or not whole:
        return False
    return _all_messages(whole) or _holds_messages(whole[0])


def _holds_messages(entry: Any) -> bool:
    """Whether ``entry`` is a trajectory: a non-empty list of OpenAI messages (objects
    with a 'role'), or an object holding one."""
    messages = messages_of(entry)
    return bool(messages) and all(isinstance(m.get("role"), str) for m in messages or ())


def _is_jsonl(text: str) -> bool:
    """Whether ``text``, not one JSON document, has a line that is a JSON object or list
    on its own: JSONL, maybe with broken lines (a JSON document cut short has none)."""
    for line in text.split("\n"):  # not splitlines(): U+2028 may sit in a JSON string
        if not line.strip():
            continue
        try:
            if isinstance(json.loads(line), (dict, list)):
                return True
        except (json.JSONDecodeError, RecursionError):
            continue
    return False


def messages_of(entry: Any) -> list[dict[str, Any]] | None:
    """The messages of one trajectory entry, or None when it holds none."""
    if isinstance(entry, dict):
        entry = next((entry[key] for key in MESSAGE_KEYS if key in entry), None)
    if isinstance(entry, list) and all(isinstance(m, dict) for m in entry):
        return entry
    return None


def _all_messages(entries: Sequence[Any]) -> bool:
    return bool(entries) and all(isinstance(e, dict) and "role" in e for e in entries)


def _id_of(entry: Any, number: int) -> str:
    if isinstance(entry, dict):
        if "id" in entry:
            return str(entry["id"])
        if "task_id" in entry:
            trial = entry.get("trial")
            return f"task {entry['task_id']}" + (f" trial {trial}" if trial is not None else "")
    return f"trajectory {number}"


def _label_of(entry: Any) -> str | None:
    """What the file calls a trajectory, for errors: ``id 'r7'``, ``task 12 trial 1``."""
    if isinstance(entry, dict):
        if "id" in entry:
            return f"id {entry['id']!r}"
        if "task_id" in entry:
            return _id_of(entry, 0)
    return None


def _task_of(entry: Any) -> str | None:
    task = entry.get("task_id") if isinstance(entry, dict) else None
    return None if task is None else str(task)


def _read(source: Path) -> str:
    try:
        return source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"trajectory file {str(source)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"trajectory file {str(source)!r} is a directory") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"trajectory file {str(source)!r} cannot be read: {error}") from None


def _entries(source: Path) -> tuple[Sequence[Any], list[int] | None, bool]:
    """The file's entries; the line of each in a JSONL file (else None); and whether
    the file is one trajectory object."""
    text = _read(source)
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    except RecursionError as error:
        raise ConfigError(f"trajectory file {str(source)!r} is not JSON: {error}") from None
    if isinstance(whole, list):
        return whole, None, False
    if isinstance(whole, dict) and messages_of(whole) is not None:
        return [whole], None, True  # one trajectory object, also when written over many lines
    entries, lines = [], []
    for line_number, line in enumerate(text.split("\n"), 1):  # as an editor numbers them
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError) as error:
            raise ConfigError(
                f"{source}: line {line_number} is not JSON ({error}); give a JSON list of "
                "trajectories or JSONL with one trajectory a line"
            ) from None
        lines.append(line_number)
    return entries, lines, False
