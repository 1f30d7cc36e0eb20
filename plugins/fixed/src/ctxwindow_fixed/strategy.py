"""The fixed window: keep the newest units that fit, plus what must always stay."""

from __future__ import annotations

from typing import ClassVar

from ctxwindow import BaseStrategy, History, Option, Selection
from ctxwindow.kit import keep_run, recent_run, recent_units

OLDER = "outside the most recent units that fit the budget"
KEPT = "among the most recent units that fit"
#: The must-keep reasons of the messages max_messages does not count.
UNCOUNTED = ("system message", "developer message", "pinned")


class FixedWindow(BaseStrategy):
    """Keeps the most recent units that fit the budget, plus system and pinned messages.

    The window is a contiguous run of the newest units: at the first unit that does not
    fit, older ones are dropped too, even smaller ones, so the model never sees a gap in
    the recent conversation. Once counts are cached, a turn finds that run by bisection
    and keeps it whole, in time logarithmic in the history.
    """

    name = "fixed"
    option_specs: ClassVar[tuple[Option, ...]] = (
        Option(
            "max_messages",
            int,
            None,
            "At most this many messages besides the system and pinned ones (whole units "
            "only); the newest user message, the current turn and the task statement are "
            "kept whatever the cap (when they fit) and count toward it. Applies even when "
            "everything fits the budget. None: no cap.",
            minimum=0,
            nullable=True,
        ),
    )

    def choose(self, history: History) -> Selection:
        selection = history.selection()
        selection.default_reason = OLDER
        room = history.budget - history.must_keep_tokens
        messages_left = self.options["max_messages"]
        if messages_left is None:  # the common case: the run found by bisection
            keep_run(selection, recent_run(history, room), KEPT)
            return selection
        messages_left -= _counted(history)
        for unit in recent_units(history, room):
            span = history.span(unit)
            if len(span) > messages_left:
                selection.default_reason = f"beyond max_messages={self.options['max_messages']}"
                break
            messages_left -= len(span)
            selection.keep(unit, KEPT)
        return selection

    def engages_within_budget(self, history: History) -> bool:
        """With a cap, engage when more messages than the cap lie outside the always-kept ones."""
        cap: int | None = self.options["max_messages"]
        if cap is None:
            return False
        uncounted = sum(
            len(history.span(unit)) for unit, why in history.must_keep.items() if why in UNCOUNTED
        )
        return len(history) - uncounted > cap


def _counted(history: History) -> int:
    """The must-keep messages that count toward max_messages."""
    return sum(
        len(history.span(unit)) for unit, why in history.must_keep.items() if why not in UNCOUNTED
    )
