"""The strategy author's kit: what strategies share instead of copying it.

- :func:`recent_units`: the newest run of units that fits a room of tokens, unit by
  unit (``sliding``'s recent run); :func:`recent_run` finds the same run by bisection,
  and :func:`keep_run` keeps it at the cost of a few calls, one per :func:`stretches`
  between must-keep units (``fixed``'s whole choice, the runner's fallback when a
  strategy runs out of time, ``summarize``'s verbatim part and summarized runs);
- :func:`terms` and :func:`stem`: one tokenizer for the keyword scorers (``sliding``'s
  ``keywords``, ``semantic``'s BM25), so that "paintings" meets "paint" the same way
  in both; :func:`query_terms`: a query's distinct terms, read in time linear in what
  changed since the last query (an agent's query is its whole current turn);
- :func:`unit_text`: a unit as text for matching or summarizing: who said what, and
  which tools were called with what;
- :func:`identifiers`, :class:`Coverage` and :func:`best_first`: what an agent's next
  step needs from older units (the ids, numbers and paths a unit adds to the window),
  and the older units taken in that order;
- :func:`excerpt_text`, :func:`excerpt_unit` and :func:`keep_best`: an older tool
  result or assistant message as an excerpt of its identifiers (marked as such), and
  the older units taken best first, each whole or as that excerpt (``sliding``'s and
  ``semantic``'s choice in an agent's history, with the options of
  :func:`excerpt_options`); :mod:`ctxwindow.kit.ranking` makes the same choice
  valuing only the units that can make the window, from figures read once per unit
  and bounds computed in numpy (the ``ranking`` extra), as both strategies do;
- :func:`redact`: a URL without its secrets, for messages, records and reprs;
- :func:`covers_position`: the position a summary's ``covers`` reference names
  (``#3``, as ``History.covers_ref`` writes it), for code that maps covers;
- :func:`unit_anchors`, :func:`spans_in`, :func:`query_spans` and :func:`time_match`:
  time as a signal: when each unit was said (a timestamp, or the date line before it),
  the days its words point at ("yesterday", "last week", "May 3, 2023"), and whether
  they meet the days a question names;
- :class:`RecentLists` and :func:`starts_with`: lists read before, recognised by content
  when a new list starts with one, so that reading a grown history costs what it adds
  (the runner's remembered histories; an adapter's remembered conversions);
- :class:`PerConversation`: a strategy's state for each conversation (an index of its
  units), held weakly, and started from the state of the conversation a branch came
  from (a pipeline stage's input, which parts from the last turn's near its end).

Stores for caches (memory, SQLite, Redis) need more than the core has, so they come in
a distribution of their own (see the caches page of the documentation).
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxwindow._history import History
    from ctxwindow._selection import Selection

from ctxwindow._refs import covers_position
from ctxwindow._units import between
from ctxwindow.kit._coverage import (
    NOVELTY_TOKENS,
    Coverage,
    best_first,
    identifier_weight_option,
    identifiers,
)
from ctxwindow.kit._excerpt import (
    Excerpt,
    excerpt_options,
    excerpt_text,
    excerpt_unit,
    keep_best,
)
from ctxwindow.kit._memo import PerConversation
from ctxwindow.kit._prefixes import (
    REMEMBER_FROM,
    RecentLists,
    Remembered,
    as_now,
    snapshot,
    starts_with,
)
from ctxwindow.kit._text import unit_text
from ctxwindow.kit._time import (
    A_YEAR,
    TIME_WORDS,
    Span,
    date_line,
    query_spans,
    spans_in,
    time_match,
    time_words,
    timestamp_date,
    unit_anchor,
    unit_anchors,
)
from ctxwindow.kit._words import STOPWORDS, query_terms, stem, terms, words

__all__ = [
    "A_YEAR",
    "NOVELTY_TOKENS",
    "REMEMBER_FROM",
    "STOPWORDS",
    "TIME_WORDS",
    "Coverage",
    "Excerpt",
    "PerConversation",
    "RecentLists",
    "Remembered",
    "Span",
    "as_now",
    "best_first",
    "covers_position",
    "date_line",
    "excerpt_options",
    "excerpt_text",
    "excerpt_unit",
    "identifier_weight_option",
    "identifiers",
    "keep_best",
    "keep_run",
    "query_spans",
    "query_terms",
    "recent_run",
    "recent_units",
    "redact",
    "snapshot",
    "spans_in",
    "starts_with",
    "stem",
    "stretches",
    "terms",
    "time_match",
    "time_words",
    "timestamp_date",
    "unit_anchor",
    "unit_anchors",
    "unit_text",
    "words",
]


def recent_units(
    history: History, room: int, *, before: int | None = None, skip: Container[int] = ()
) -> Iterator[int]:
    """The newest units that fit in ``room`` tokens, newest first: a contiguous run
    from the unit before ``before`` (default: the newest) back to the first that does
    not fit. Must-keep units, and those in ``skip``, are passed over at no cost (they
    are kept already). The caller keeps what it takes; stopping early is allowed."""
    start = len(history.units) if before is None else before
    must_keep, unit_tokens = history.must_keep, history.unit_tokens
    for unit in range(start - 1, -1, -1):
        if unit in must_keep or unit in skip:
            continue
        tokens = unit_tokens(unit)
        if tokens > room:
            return
        room -= tokens
        yield unit


def recent_run(history: History, room: int, *, before: int | None = None) -> range:
    """The units :func:`recent_units` yields, as one range from the oldest it yields to
    ``before`` (must-keep units within included; empty when it yields none).

    Found by bisection over the history's running totals (:meth:`History.fitting_start`),
    a stretch between must-keep units at a time, so a turn costs O(log n) however many
    units fit: an agent's window of hundreds of units, every turn."""
    stop = len(history.units) if before is None else before
    must_keep = history.must_keep
    if history.defects:  # units do not lie end to end: walk
        walked = list(recent_units(history, room, before=before))
        return range(walked[-1] if walked else stop, stop)
    low = stop  # the first start whose run fits, must-keep units free
    for free in [*sorted((unit for unit in must_keep if unit < stop), reverse=True), -1]:
        first = history.fitting_start(range(free + 1, low), room)
        if first > free + 1 or free < 0:  # the stretch does not fit whole, or is the oldest
            low = first
            break
        room -= history.run_tokens(range(free + 1, low))
        low = free
    while low < stop and low in must_keep:  # the oldest unit it yields comes first
        low += 1
    return range(low, stop)


def stretches(history: History, units: range) -> list[range]:
    """The stretches of ``units`` (a step-1 range) between must-keep units, which a
    strategy does not decide: what keeps, drops or summarizes a run a call each."""
    return between(units, history.must_keep)  # sorted by unit


def keep_run(selection: Selection, units: range, reason: str) -> None:
    """Keep every unit of ``units`` (a step-1 range) with ``reason``, but the must-keep
    ones, which keep their own reason: one call per stretch between them."""
    for part in stretches(selection.history, units):
        selection.keep(part, reason)


def redact(url: str) -> str:
    """``url`` with what may be a secret masked (``***``), for messages, records and
    reprs: the password in its user info (the whole user info when it has no
    password: a token is often passed as the user), every value of its query string
    (an API key as ``?key=...``) and its fragment. A password holding an unencoded
    ``/``, ``#`` or ``?`` (which ends a parser's host part early) is masked whole too,
    when what comes before it is no host (see :func:`_user_info_span`)."""
    from urllib.parse import urlsplit, urlunsplit  # here: `import ctxwindow` does without

    start, end = _user_info_span(url)
    if end:  # masked here, then the rest as a URL without it
        rest = redact(url[:start] + url[end + 1 :])
        name, colon, _ = url[start:end].partition(":")
        return f"{rest[:start]}{name + ':' if colon else ''}***@{rest[start:]}"
    parts = urlsplit(url)
    query = "&".join(map(_masked_parameter, filter(None, parts.query.split("&"))))
    fragment = "***" if parts.fragment else ""
    out = urlunsplit(parts._replace(query=query, fragment=fragment))
    slashes = f"{parts.scheme}://"
    if url.lower().startswith(slashes) and not out.startswith(slashes):  # unix:///path
        out = slashes + out[len(parts.scheme) + 1 :]
    return out


#: A host part: a name or an address (``cache``, ``10.0.0.5``, ``[::1]``), maybe with a
#: port; ``host?`` for what may follow a user info (``unix://:password@/path``: none).
_HOST = r"(?:\[[0-9A-Fa-f:.]+\]|[\w.\-~%]+)(?::\d*)?"
_HOST_OR_NONE = re.compile(f"(?:{_HOST})?")
_NETLOC_HOST = re.compile(_HOST)


def _user_info_span(url: str) -> tuple[int, int]:
    """Where the user info of ``url`` starts and where its ``@`` is ((0, 0): none). A
    parser's host part ends at the first ``/``, ``?`` or ``#``: when what it reads there
    is no host (``:abc`` of ``redis://:abc/SECRET@cache:6379``), the user info holds
    one of those unencoded and runs to the first ``@`` followed by a host. A host read
    there is taken as the host (an ``@`` in a path or query is no user info's): a user
    alone (no password) holding one of those cannot be told from a host and a path,
    and must be percent-encoded, as RFC 3986 asks."""
    slashes = url.find("//")
    if slashes < 0 or not re.match(r"(?:[A-Za-z][\w+.\-]*:)?$", url[:slashes]):
        return 0, 0
    start = slashes + 2
    end = re.search(r"[/?#]|$", url[start:])
    netloc_end = start + (end.start() if end else 0)
    netloc = url[start:netloc_end]
    if "@" in netloc:
        return start, start + netloc.rindex("@")
    if not netloc or _NETLOC_HOST.fullmatch(netloc):
        return 0, 0
    at = url.find("@", netloc_end)
    while at >= 0:
        if _HOST_OR_NONE.fullmatch(re.split(r"[/?#]", url[at + 1 :], maxsplit=1)[0]):
            return start, at
        at = url.find("@", at + 1)
    return 0, 0


def _masked_parameter(pair: str) -> str:
    """A query parameter with its value masked: its name says what was passed."""
    name, equals, _ = pair.partition("=")
    return f"{name}=***" if equals else "***"
