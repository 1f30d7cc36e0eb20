"""The contract check the host runs after every strategy call, always on.

It is linear in the window, not the history: cheap enough to never switch off.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxwindow.history import History
from ctxwindow.messages import Message


def check_window(
    history: History,
    positions: Sequence[int | None],
    synthetic: Sequence[Message],
    limit: int,
) -> tuple[list[str], int]:
    """Problems with a window, and its token count.

    ``positions`` lists, in output order, each window message's index in the caller's
    list, or None for a message the strategy made (taken in turn from ``synthetic``).
    ``limit`` is the budget less the strategy's declared overhead.
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
            tokens += history.counter.count_message(message)
            if not message.synthetic:
                problems.append("a message not in the input is not marked synthetic")
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
    for unit, reason in history.must_keep.items():
        if unit not in kept_units:
            problems.append(f"unit {unit} ({reason}) must be kept but was dropped")
    if tokens > limit:
        problems.append(f"window has {tokens} tokens, over the limit of {limit}")
    return problems, tokens
