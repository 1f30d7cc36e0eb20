"""What the header says a window left out: the history's items it does not hold, known
without the record's decisions when the window holds only items of the history."""

from __future__ import annotations

import pytest

from ctxwindow_serve.windowing import _picked_from

HISTORY = [{"n": n} for n in range(50)]


@pytest.mark.parametrize(
    "window",
    [
        HISTORY,
        HISTORY[-10:],
        HISTORY[:1] + HISTORY[-10:],
        HISTORY[:3] + HISTORY[20:22] + HISTORY[-5:],
        HISTORY[5:9],
        [],
    ],
)
def test_items_of_the_history_in_its_order_are_picked_from_it(window):
    assert _picked_from(window, HISTORY)


@pytest.mark.parametrize(
    "window",
    [
        [*HISTORY[:1], {"n": 30}, *HISTORY[-5:]],  # an equal copy is not the item
        [*HISTORY[:1], {"summary": "..."}, *HISTORY[-5:]],
        [HISTORY[10], HISTORY[5]],  # out of order
        [HISTORY[7], HISTORY[7]],  # one item twice
        [*HISTORY, HISTORY[-1]],
    ],
)
def test_anything_else_is_not(window):
    assert not _picked_from(window, HISTORY)
