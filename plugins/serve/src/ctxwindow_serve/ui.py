"""``/ui``: the inspector's picture of the proxy's most recent visits.

Off unless ``[serve] ui = true``; it keeps the last ``ui_visits`` visits (the history
each read and the window it chose, by reference: nothing is copied), newest first on
the page. Only what the request body held is shown, never a header, so never a
credential; the page is served with a policy that forbids scripts and fetches."""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from html import escape
from typing import Any

from ctxwindow import Window
from ctxwindow_serve.inspector import render_document, render_section

logger = logging.getLogger("ctxwindow.serve")

#: What the page may load: nothing but its own inline styles.
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'"


@dataclass(frozen=True)
class Visit:
    when: float
    visit: str
    route: str
    model: str | None
    history: list[Any]
    window: Window[Any]


class RecentVisits:
    """The last ``kept`` windowed visits, for the page."""

    def __init__(self, kept: int) -> None:
        self._visits: deque[Visit] = deque(maxlen=kept)
        #: Visits whose failure to draw was logged: once each, not on every page.
        self._undrawable: set[str] = set()

    def add(self, visit: Visit) -> None:
        self._visits.append(visit)  # one append: safe from any thread

    def __len__(self) -> int:
        return len(self._visits)

    def page(self) -> str:
        """The page, newest visit first. A visit the inspector cannot draw (a body
        shape it does not know) gets a line saying so instead of failing the page."""
        sections = []
        for visit in reversed(list(self._visits)):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(visit.when))
            heading = f"{when} · {visit.route} · model {visit.model} · visit {visit.visit}"
            label = visit.window.record.strategy
            try:
                sections.append(
                    render_section(visit.history, [(label, visit.window)], heading=heading)
                )
            except Exception as error:  # one odd body must not hide the others
                sections.append(self._undrawn(visit, heading, error))
        return render_document(sections, "ctxwindow serve: recent visits")

    def _undrawn(self, visit: Visit, heading: str, error: Exception) -> str:
        """The line a visit the inspector cannot draw gets, its failure logged once."""
        kind = type(error).__name__
        if visit.visit not in self._undrawable:
            kept = {kept.visit for kept in self._visits}
            self._undrawable = {*(self._undrawable & kept), visit.visit}  # only those kept
            logger.warning("/ui cannot draw visit %s: %s: %s", visit.visit, kind, error)
        return (
            f'<section class="visit"><h2>{escape(heading)}</h2>'
            f'<p class="facts">cannot draw this visit ({escape(kind)}); the proxy\'s log '
            "says why</p></section>"
        )
