"""What an agent's window must hold for its next step, and how much of it a window kept.

As ``shared/bench/tau-airline/README.md`` defines them, at every assistant message that
calls tools (the action at position t), on the window of messages 0..t-1:

- **needed values**: the string leaves of the action's arguments (three or more
  characters) and its numbers of three or more digits that occur in messages 0..t-1
  past the leading system (or developer) messages, if any: not only in the system
  prompt (tau-bench's trajectories open with one, so there messages 1..t-1);
- **next-action recall**: the share of needed values found in the window's messages
  (content or tool-call arguments, a summary included);
- **pending exchange kept**: when the history ends in tool results (the model is
  waiting on them), whether that call and all its results are in the window (a result
  cut to fit counts: it stands in the window for the original, marked);
- **task statement kept**: whether the first user message is in the window, whole (a
  copy cut to fit is not kept, as evidence recall counts only turns sent whole; only
  the pending exchange counts a cut result, and says so in its own count).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIN_CHARACTERS = 3
MIN_DIGITS = 3
#: Roles of the instructions a log may open with: values found only there are not needed.
INSTRUCTION_ROLES = ("system", "developer")


@dataclass(frozen=True)
class StepScore:
    """One step in one window; None where the step has nothing to measure."""

    recall: float | None
    pending_kept: bool | None
    task_kept: bool | None
    pending_cut: bool = False  # kept, with a result cut to fit


def message_text(message: Any) -> str:
    """A message's content (text parts of a list joined) and its tool-call arguments."""
    get = message.get if isinstance(message, Mapping) else None
    if get is None:  # a ctxwindow.Message
        parts = [message.text, *(call.arguments for call in message.tool_calls)]
        return "\n".join(part for part in parts if part)
    content = get("content")
    if isinstance(content, list):
        content = "\n".join(
            str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
            for part in content
        )
    parts = [str(content) if content is not None else ""]
    for call in get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            parts.append(str(function.get("arguments") or ""))
    return "\n".join(part for part in parts if part)


def _leaves(value: Any) -> Iterator[str]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str):
        if len(value) >= MIN_CHARACTERS:
            yield value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        text = str(value)
        if sum(character.isdigit() for character in text) >= MIN_DIGITS:
            yield text


def needed_values(action: Mapping[str, Any], history: Sequence[Any]) -> set[str]:
    """The values of the action's arguments that the history (past the system prompt it
    opens with, if any) holds: what the window had to keep for this step."""
    start = _after_instructions(history)
    body = "\n".join(message_text(message) for message in history[start:])
    needed: set[str] = set()
    for call in action.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        raw = function.get("arguments") if isinstance(function, Mapping) else None
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            continue  # arguments the model garbled name no values
        needed.update(value for value in _leaves(arguments) if value in body)
    return needed


def _after_instructions(history: Sequence[Any]) -> int:
    """Where the history's leading system (or developer) messages end: a log without
    them starts with the task statement, whose values count."""
    start = 0
    while start < len(history) and _role(history[start]) in INSTRUCTION_ROLES:
        start += 1
    return start


def _role(message: Any) -> str | None:
    role = message.get("role") if isinstance(message, Mapping) else getattr(message, "role", None)
    return role if isinstance(role, str) else None


def pending_exchange(history: Sequence[Mapping[str, Any]]) -> range | None:
    """Positions of the exchange the model is waiting on (the last call and its
    results), when the history ends in tool results."""
    if not history or history[-1].get("role") != "tool":
        return None
    start = len(history) - 1
    while start > 0 and history[start].get("role") == "tool":
        start -= 1
    if not history[start].get("tool_calls"):
        return None
    return range(start, len(history))


def first_user(history: Sequence[Mapping[str, Any]]) -> int | None:
    return next((i for i, m in enumerate(history) if m.get("role") == "user"), None)


def score_step(
    history: Sequence[Mapping[str, Any]],
    action: Mapping[str, Any],
    window: Sequence[Any],
    needed: set[str] | None = None,
) -> StepScore:
    """How well ``window`` (the messages a strategy sent for ``history``) serves the
    step ``action``; an empty window stands for a strategy that raised."""
    needed = needed_values(action, history) if needed is None else needed
    kept_text = "\n".join(message_text(message) for message in window)
    recall = sum(value in kept_text for value in needed) / len(needed) if needed else None
    present, cut = _present(history, window)
    pending = pending_exchange(history)
    task = first_user(history)
    return StepScore(
        recall,
        None if pending is None else all(position in present for position in pending),
        None if task is None else task in present and task not in cut,
        pending is not None and any(position in cut for position in pending),
    )


def _present(history: Sequence[Any], window: Sequence[Any]) -> tuple[set[int], set[int]]:
    """Positions of the history in the window: the same objects, or stand-ins for them
    (``metadata.stands_in_for``, a tool result cut to fit); and those of the stand-ins."""
    by_identity = {id(message): position for position, message in enumerate(history)}
    present: set[int] = set()
    stand_ins: set[int] = set()
    for message in window:
        position = by_identity.get(id(message))
        if position is None and isinstance(message, Mapping):
            metadata = message.get("metadata")
            if isinstance(metadata, Mapping) and isinstance(metadata.get("stands_in_for"), int):
                position = metadata["stands_in_for"]
                stand_ins.add(position)
        if position is not None:
            present.add(position)
    return present, stand_ins
