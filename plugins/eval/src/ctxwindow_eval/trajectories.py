"""Agent trajectories: an agent's whole conversation, OpenAI messages with tool calls.

Every assistant message that calls tools is a step: the history before it is what a
context window had to be made of, and the arguments the agent then passed say what
the window needed to hold (see :mod:`ctxwindow_eval.agent_metrics`).

Accepted files: a JSON list of trajectories, or JSONL with one trajectory a line. A
trajectory is a list of messages, or an object holding it under ``traj`` (tau-bench's
historical trajectories), ``messages`` or ``trajectory``, with an optional ``id``
(else ``task_id`` and ``trial``, else its place in the file). A file whose entries are
all messages (a JSONL log of one run) is one trajectory.
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
        out.append(Trajectory(_id_of(entry, number), messages))
    if not out:
        raise ConfigError(f"{source} holds no trajectories")
    return out


def looks_like_trajectories(path: str | Path) -> bool:
    """Whether ``path`` holds agent trajectories (its first entry is one with a tool
    call), so ``ctxwindow eval`` can pick the kind of benchmark by itself."""
    try:
        entries = _entries(Path(path))
    except ConfigError:
        return False
    first = entries if _all_messages(entries) else entries[0] if entries else None
    messages = messages_of(first)
    return bool(messages) and any(
        isinstance(m, dict) and (m.get("tool_calls") or m.get("role") == "tool")
        for m in messages or ()
    )


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


def _entries(source: Path) -> Sequence[Any]:
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"trajectory file {str(source)!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"trajectory file {str(source)!r} is a directory") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"trajectory file {str(source)!r} cannot be read: {error}") from None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    except RecursionError as error:
        raise ConfigError(f"trajectory file {str(source)!r} is not JSON: {error}") from None
    if isinstance(whole, list):
        return whole
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
