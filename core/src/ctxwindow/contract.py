"""The contract check the host runs after every strategy call, always on.

It is linear in the window, not the history: cheap enough to never switch off. It
takes what must be kept and the counter from the host, never from state a strategy
could have changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ctxwindow.history import History
from ctxwindow.messages import Message
from ctxwindow.tokens import TokenCounter


def overhead_problem(overhead: object) -> str | None:
    """Why a strategy's ``overhead_tokens`` is unusable, or None."""
    if isinstance(overhead, bool) or not isinstance(overhead, int) or overhead < 0:
        return f"overhead_tokens must be an int >= 0 (tokens), got {overhead!r}"
    return None


def check_window(
    history: History,
    positions: Sequence[int | None],
    synthetic: Sequence[Message],
    limit: int,
    must_keep: Mapping[int, str],
    counter: TokenCounter,
) -> tuple[list[str], int]:
    """Problems with a window, and its token count.

    ``positions`` lists, in output order, each window message's index in the caller's
    list, or None for a message the strategy made (taken in turn from ``synthetic``).
    ``limit`` is the budget less the strategy's declared overhead; ``must_keep`` maps
    the units that must stay to why, as the host found them before the strategy ran.
    """
    problems: list[str] = []
    tokens = 0
    previous = -1
    kept_units: set[int] = set()
    open_unit: int | None = None
    expected_next = -1
    made = iter(synthetic)
    for position in positions:
        if position is None:
            message = next(made)
            tokens += counter.count_message(message)
            problems.extend(_made_problems(message))
            if open_unit is not None:
                problems.append(
                    f"unit {open_unit} is split: a made message sits before its "
                    f"message {expected_next}"
                )
            continue
        if position <= previous:
            problems.append(f"message {position} is out of order (after {previous})")
        previous = position
        tokens += history.tokens(position)
        if open_unit is not None and position != expected_next:
            problems.append(f"unit {open_unit} is split: message {expected_next} is missing")
            open_unit = None
        unit = history.unit_of(position)
        if unit is None:
            problems.append(f"message {position} is a defective tool message and cannot be sent")
            continue
        span = history.span(unit)
        if open_unit is None:
            if position != span.start:
                problems.append(f"unit {unit} is split: message {span.start} is missing")
            kept_units.add(unit)
        if position + 1 < span.stop:
            open_unit, expected_next = unit, position + 1
        else:
            open_unit = None
    if open_unit is not None:
        problems.append(f"unit {open_unit} is split: message {expected_next} is missing")
    for unit, reason in must_keep.items():
        if unit not in kept_units:
            problems.append(f"unit {unit} ({reason}) must be kept but was dropped")
    if tokens > limit:
        problems.append(f"window has {tokens} tokens, over the limit of {limit}")
    return problems, tokens


def _made_problems(message: Message) -> list[str]:
    """A made message must say it was made, and cannot be half of a tool exchange."""
    problems = []
    if not message.synthetic:
        problems.append("a message not in the input is not marked synthetic")
    if message.role == "tool":
        problems.append(
            "a made message has role 'tool': a tool result cannot be sent without its call"
        )
    if message.tool_calls:
        problems.append(
            "a made message carries tool_calls: a tool call cannot be sent without its results"
        )
    return problems


def stand_in_problems(position: int, original: Message, stand_in: object) -> list[str]:
    """Why ``stand_in`` cannot be sent in place of ``original``: it must say it was made,
    and keep the role, tool_call_id and tool calls (ids and names) that pair a tool
    exchange, so the unit stays valid with it."""
    if not isinstance(stand_in, Message):
        kind = type(stand_in).__name__
        return [f"the stand-in for message {position} is a {kind}, not a Message"]
    problems = []
    if not stand_in.synthetic:
        problems.append(f"the stand-in for message {position} is not marked synthetic")
    if stand_in.role != original.role:
        problems.append(
            f"the stand-in for message {position} has role {stand_in.role!r}, "
            f"the original {original.role!r}"
        )
    if stand_in.tool_call_id != original.tool_call_id:
        problems.append(
            f"the stand-in for message {position} answers {stand_in.tool_call_id!r}, "
            f"the original {original.tool_call_id!r}"
        )
    # Exactly the same calls, arguments included: a dict input's stand-in is sent as the
    # original's fields with only the content swapped, so only the content may differ.
    if list(stand_in.tool_calls) != list(original.tool_calls):
        problems.append(f"the stand-in for message {position} changes its tool calls")
    if stand_in.name != original.name:
        problems.append(f"the stand-in for message {position} changes its name")
    return problems
