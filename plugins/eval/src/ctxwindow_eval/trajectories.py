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
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxwindow.errors import ConfigError

MESSAGE_KEYS = ("traj", "messages", "trajectory")


@dataclass(frozen=True)
class Trajectory:
    """One agent run: its id and its messages, as OpenAI-format dicts."""

    id: str
    messages: list[dict[str, Any]]
    #: The task it ran (tau-bench's ``task_id``), when the file says: runs of one task
    #: are one sample when the spread of a figure is estimated (see :mod:`.spread`).
    task: str | None = None

    @property
    def sample(self) -> str:
        """What the spread draws it with: its task's runs, else this run alone."""
        return f"task {self.task}" if self.task is not None else f"run {self.id}"

    def actions(self) -> Iterator[int]:
        """Positions of the assistant messages that call tools (never the first)."""
        for position, message in enumerate(self.messages):
            if position and message.get("role") == "assistant" and message.get("tool_calls"):
                yield position


def load_trajectories(path: str | Path) -> list[Trajectory]:
    """Read a JSON list or JSONL of trajectories; a file of another shape is a
    ConfigError naming the entry at fault."""
    source = Path(path)
    entries = _entries(source)
    if _all_messages(entries):
        entries = [{"id": source.stem, "messages": list(entries)}]
    out = []
    for number, entry in enumerate(entries):
        messages = messages_of(entry)
        if messages is None:
            raise ConfigError(
                f"{source}: entry {number} is not a trajectory: give a list of OpenAI "
                f"messages, or an object with it under one of {', '.join(MESSAGE_KEYS)}"
            )
        for position, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise ConfigError(
                    f"{source}: trajectory {number}, message {position} is not an OpenAI "
                    "message (an object with a 'role')"
                )
        out.append(Trajectory(_id_of(entry, number), messages, _task_of(entry)))
    if not out:
        raise ConfigError(f"{source} holds no trajectories")
    return out


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
    for line in text.splitlines():
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


def _entries(source: Path) -> Sequence[Any]:
    text = _read(source)
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    except RecursionError as error:
        raise ConfigError(f"trajectory file {str(source)!r} is not JSON: {error}") from None
    if isinstance(whole, list):
        return whole
    if isinstance(whole, dict) and messages_of(whole) is not None:
        return [whole]  # one trajectory object, also when written over many lines
    entries = []
    for line_number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError) as error:
            raise ConfigError(
                f"{source}: line {line_number} is not JSON ({error}); give a JSON list of "
                "trajectories or JSONL with one trajectory a line"
            ) from None
    return entries
