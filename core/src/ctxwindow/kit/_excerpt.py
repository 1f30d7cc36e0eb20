"""Excerpts: an older tool result, or an assistant's message, cut to the parts an
agent may pass on.

An agent re-passes ids, codes, dates and amounts it read in a tool result (a payment id
from a profile, a flight number from a search), or that it wrote to the user itself
(the options it listed), rarely the prose around them. When a whole message is too dear
to keep, an excerpt of it may still be worth its tokens: for a JSON tool result, the
leaves that hold identifiers, with their keys (lists of records as tables); for any
other text, the lines that hold identifiers. It stands in for the message
(``Selection.replace``), headed by a marker that says it is an excerpt and what it kept.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ctxwindow._options import Option
from ctxwindow.kit._coverage import Coverage, best_first, has_identifier, identifiers
from ctxwindow.kit._memo import MISSING, PerConversation, SpanMemo

if TYPE_CHECKING:
    from ctxwindow._history import Branch, Conversation, History
    from ctxwindow._messages import Message
    from ctxwindow._selection import Selection
    from ctxwindow._tokens import TokenCounter

#: Results smaller than this are not excerpted: the marker would eat the saving.
MIN_TOKENS = 60
#: An excerpt is made only when it keeps at most this share of the result's tokens.
MAX_SHARE = 0.75
#: A string leaf longer than this is prose, not a value an agent passes on.
MAX_LEAF_CHARS = 40
#: The marker of a tool result's excerpt. It names neither the tool nor the message: the
#: excerpt stands where the result was, after the call that names the tool (the two are
#: kept together), and in a window of a few hundred tokens every token of a marker is
#: one an identifier could have had.
HEADER = "[excerpt: {kept} of {tokens} tokens kept; identifiers only]"
#: The marker of an assistant message's excerpt: its lines that hold identifiers.
ASSISTANT_HEADER = "[excerpt: {kept} of {tokens} tokens kept; lines with identifiers]"
#: The head of a table's first column when its rows are keyed by ids (a map's keys).
ID_COLUMN = "id"
#: A table's cell for a column its row has no kept value in.
NO_CELL = "-"
#: The tokens :func:`~ctxwindow.kit.identifiers` reads, so that a leaf holding an
#: identifier is always kept.
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-./@:]*[A-Za-z0-9]")
#: Counters whose excerpts a conversation remembers (the most recently used).
COUNTERS_KEPT = 4


# -- what a leaf is worth ----------------------------------------------------------


def _coded(token: str) -> bool:
    """Whether a token is an identifier that is not a bare number: letters with digits,
    ``_ / . @ - :``, or capitals (an id, a code, a date, an email)."""
    if len(token) < 3 or token.isdigit():
        return False
    return token.isupper() or any(c.isdigit() or c in "_/.@-:" for c in token)


def _coded_number(value: float) -> bool:
    """Numbers of three or more digits (amounts, ids), not counts and flags."""
    return sum(c.isdigit() for c in str(value)) >= 3


def _coded_string(value: str) -> bool:
    """A short string holding a coded token; a longer one is prose."""
    return len(value) <= MAX_LEAF_CHARS and any(map(_coded, _TOKEN.findall(value)))


def _keep_leaf(value: Any, ids: frozenset[str]) -> bool:
    """Whether a JSON leaf is worth keeping: a coded number or string, other than one of
    the ``ids`` it is filed under (``{"card_1": {"id": "card_1"}}`` says it once)."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return _coded_number(value)
    return isinstance(value, str) and value not in ids and _coded_string(value)


def _is_id_key(name: str) -> bool:
    """A map key that is an id (``card_1``, ``HAT001``), not a field name."""
    return name.isupper() or any(c.isdigit() for c in name)


def _is_id_map(value: dict[str, Any]) -> bool:
    """A map of records keyed by their ids: a table with the keys as first column."""
    return bool(value) and all(
        _is_id_key(key) and isinstance(item, dict) for key, item in value.items()
    )


# -- rendering -----------------------------------------------------------------------


def _render(value: Any, ids: frozenset[str]) -> str | None:
    """The kept parts of a JSON value as compact text, or None when none is kept:
    ``key: value; key: {..}; key: [..]``, a list of records or a map keyed by ids as a
    table ``(key key) v v | v v``."""
    if isinstance(value, dict):
        return _render_map(value, ids)
    if isinstance(value, list):
        return _render_list(value, ids)
    return str(value) if _keep_leaf(value, ids) else None


def _render_map(value: dict[str, Any], ids: frozenset[str]) -> str | None:
    if _is_id_map(value):
        return _table(list(value.values()), ids | set(value), list(value))
    parts = [
        f"{key}: {text}" for key, item in value.items() if (text := _field(item, ids)) is not None
    ]
    return "; ".join(parts) or None


def _render_list(value: list[Any], ids: frozenset[str]) -> str | None:
    if value and all(isinstance(item, dict) for item in value):
        return _table(value, ids)
    items = [text for item in value if (text := _field(item, ids)) is not None]
    return "[" + ", ".join(items) + "]" if items else None


def _field(value: Any, ids: frozenset[str]) -> str | None:
    """A value as it reads inside another: a record (not a table) in braces."""
    text = _render(value, ids)
    if text is not None and isinstance(value, dict) and not _is_id_map(value):
        return "{" + text + "}"
    return text


def _table(
    records: list[dict[str, Any]], ids: frozenset[str], keys: list[str] | None = None
) -> str | None:
    """Records as ``(column column) v v | v v``: one column per field kept in any
    record, in the order the records first name them (after the records' ``keys``, when
    they are a map's), ``-`` where a record has none; None when no field is kept."""
    rows = [_row(record, ids) for record in records]
    named = {key: None for record in records for key in record}  # first-seen order
    columns = [key for key in named if any(key in row for row in rows)]
    if keys is not None:
        head = " ".join([ID_COLUMN, *columns])
        pairs = zip(keys, rows, strict=True)
        lines = [[key, *(row.get(c, NO_CELL) for c in columns)] for key, row in pairs]
    elif columns:
        head = " ".join(columns)
        lines = [[row.get(c, NO_CELL) for c in columns] for row in rows if row]
    else:
        return None
    return f"({head}) " + " | ".join(" ".join(line) for line in lines)


def _row(record: dict[str, Any], ids: frozenset[str]) -> dict[str, str]:
    """A record's kept fields, as text by key."""
    fields = ((key, _field(item, ids)) for key, item in record.items())
    return {key: text for key, text in fields if text is not None}


def _lines_with_identifiers(text: str) -> str | None:
    lines = (line.strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line and has_identifier(line)) or None


def excerpt_text(text: str) -> str | None:
    """The identifier-bearing parts of a tool result's text (see :func:`_render` for
    JSON; the lines holding identifiers for any other text), or None when it has none."""
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        import json  # here: `import ctxwindow` does without it; a second import is a lookup

        try:
            parsed = json.loads(stripped)
            if isinstance(parsed, (dict, list)):
                return _render(parsed, frozenset())
        except (ValueError, RecursionError):  # not JSON, or nested past reading: as text
            pass
    return _lines_with_identifiers(text)


# -- a unit's excerpt ------------------------------------------------------------------


@dataclass(frozen=True)
class Excerpt:
    """A unit with its larger tool results cut to excerpts."""

    unit: int
    #: The excerpts, by position, each a stand-in for the tool result there.
    stand_ins: dict[int, Message]
    #: The unit's tokens with the stand-ins.
    tokens: int
    #: What the unit says with them (text, call arguments, excerpts without their
    #: markers), for identifiers.
    text: str
    reason: str

    @cached_property
    def identifiers(self) -> frozenset[str]:
        """The identifiers of :attr:`text`, read once (an excerpt is memoised with its
        conversation, and valued on every visit that offers it)."""
        return identifiers(self.text)


class _Memo:
    """A conversation's excerpts by unit span, for each of the counters last used:
    units never change once made, so each is cut once per counter."""

    def __init__(self) -> None:
        self.by_counter: dict[int, tuple[object, SpanMemo[Excerpt | None]]] = {}
        self.lock = threading.Lock()

    def spans(self, counter: TokenCounter) -> SpanMemo[Excerpt | None]:
        exact = getattr(counter, "inner", counter)  # a cache's counts are its counter's
        with self.lock:
            entry = self.by_counter.pop(id(exact), None)
            if entry is None or entry[0] is not exact:
                entry = (exact, SpanMemo())
            self.by_counter[id(exact)] = entry  # last: the most recently used
            while len(self.by_counter) > COUNTERS_KEPT:
                del self.by_counter[next(iter(self.by_counter))]
            return entry[1]

    def branch(self, conversation: Conversation, origin: Branch) -> _Memo:
        """What a branch of the conversation keeps: the excerpts of the units the two share."""
        twin = _Memo()
        cut = origin.messages
        with self.lock:
            twin.by_counter = {
                key: (counter, spans.branch(cut))
                for key, (counter, spans) in self.by_counter.items()
            }
        return twin


_MEMO: PerConversation[_Memo] = PerConversation(_Memo, _Memo.branch)


def excerpt_unit(history: History, unit: int) -> Excerpt | None:
    """``unit`` with each tool result of :data:`MIN_TOKENS` or more that cuts to at most
    :data:`MAX_SHARE` of its tokens replaced by its excerpt; None when none does, or
    when the unit holds a stand-in of the host's (it is not what the conversation
    holds). Cut once per unit of a conversation and counter."""
    return _Cuts(history).excerpt(unit)


class _Cuts:
    """The excerpts of one visit's history, read from (and added to) its conversation's
    memo, which is looked up once per visit rather than once per unit."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.memo = memo = _MEMO.of(history.conversation)
        self.spans = memo.spans(history.counter)

    def excerpt(self, unit: int) -> Excerpt | None:
        """:func:`excerpt_unit`."""
        history = self.history
        span = history.span(unit)
        replaced = history.replacements
        if replaced and any(position in replaced for position in span):
            return None
        key = (span.start, span.stop)
        found = self.spans.get(key, MISSING)
        if found is MISSING:
            found = _cut(history, unit)
            with self.memo.lock:
                self.spans[key] = found
        if found is None or found.unit == unit:
            return found
        return replace(found, unit=unit)


def _cut(history: History, unit: int) -> Excerpt | None:
    """:func:`excerpt_unit`, without the memo."""
    tools: dict[str | None, str] = {}  # tool names by call id, for the header
    stand_ins: dict[int, Message] = {}
    parts: list[str] = []
    named: list[str] = []
    tokens = 0
    for position in history.span(unit):
        message = history.messages[position]
        tools.update((call.id, call.name) for call in message.tool_calls)
        original = history.tokens(position)
        tool = message.name or tools.get(message.tool_call_id) or "a tool"
        stand_in = _excerpt_of(message, tool, original, history.counter)
        if stand_in is not None:
            kept = history.counter.count_message(stand_in)
            stand_ins[position] = stand_in
            # what it keeps, not its marker, whose token counts are no identifiers
            parts.append(stand_in.text.partition("\n")[2])
            parts.extend(call.arguments for call in stand_in.tool_calls)
            what = f"{tool} result" if message.role == "tool" else "assistant message"
            named.append(f"{what} {original:,} -> {kept:,} tokens")
            tokens += kept
            continue
        parts.append(message.text)
        parts.extend(call.arguments for call in message.tool_calls)
        tokens += original
    if not stand_ins:
        return None
    return Excerpt(unit, stand_ins, tokens, "\n".join(parts), "excerpt: " + "; ".join(named))


def _excerpt_of(message: Message, tool: str, tokens: int, counter: TokenCounter) -> Message | None:
    """The stand-in for a tool result or an assistant's text of ``tokens`` tokens, or
    None when it is too small to cut, has no identifiers, or would not save enough. An
    assistant message's tool calls stay whole: only its text is cut."""
    if tokens < MIN_TOKENS:
        return None
    if message.role == "tool":
        body = excerpt_text(message.text)
        header = HEADER
    elif message.role == "assistant" and message.text:
        body = _lines_with_identifiers(message.text)
        header = ASSISTANT_HEADER
    else:
        return None
    if body is None:
        return None
    stand_in = _stand_in(message, tool, header, body, tokens, counter)
    return stand_in if counter.count_message(stand_in) <= tokens * MAX_SHARE else None


def _stand_in(
    message: Message, tool: str, header: str, body: str, tokens: int, counter: TokenCounter
) -> Message:
    """``message`` with ``body`` as its content under the ``header`` marker (its
    ``{kept}`` and ``{tokens}`` filled in), marked synthetic, with the ``tool`` in its
    metadata; its role, call id, name and tool calls stay, so the tool exchange stays
    valid."""

    def made(kept: int) -> Message:
        marker = header.format(kept=kept, tokens=tokens)
        return replace(
            message,
            content=f"{marker}\n{body}",
            metadata={
                **message.metadata,
                "synthetic": True,
                "excerpt": {"tokens": tokens, "kept_tokens": kept}
                | ({"tool": tool} if message.role == "tool" else {}),
            },
        )

    guess = made(0)
    for _ in range(3):  # the header names its own size: settle it
        kept = counter.count_message(guess)
        again = made(kept)
        if counter.count_message(again) == kept:
            return again
        guess = again
    return guess


# -- choosing between whole units and excerpts -----------------------------------------


def _excerpt_key(unit: int) -> int:
    """The key :func:`keep_best` offers a unit's excerpt under (a whole unit's is the
    unit): negative, so that both forms go through one :func:`best_first`."""
    return ~unit


def _form(key: int) -> tuple[int, bool]:
    """The unit a :func:`keep_best` key stands for, and whether it is its excerpt."""
    return (~key, True) if key < 0 else (key, False)


#: An order over :func:`keep_best`'s keys (a unit, or ``~unit`` for its excerpt), given
#: ``value(key)``, ``first_value(key)`` (its value before any key was taken) and
#: ``size(key)``: the keys :func:`best_first` would yield, in its order.
Order = Callable[
    [Callable[[int], float], Callable[[int], float], Callable[[int], int]], Iterator[int]
]


def keep_best(
    history: History,
    selection: Selection,
    candidates: list[int],
    room: int,
    score: Callable[[int], float],
    coverage: Coverage | None,
    reason: Callable[[int, int, int], str],
    *,
    excerpts: bool = True,
    above: float | None = None,
    order: Order | None = None,
) -> int:
    """Keep the candidates best first while any fits ``room`` (see :func:`best_first`),
    each whole or, where it holds a tool result worth more per token cut
    (:func:`excerpt_unit`), as its excerpt; the room left. A unit's value is
    ``score(unit)`` plus its identifier novelty (``coverage``); an excerpt's, the score
    scaled by the share of tokens it keeps plus its own novelty. Room left over at the
    end restores excerpted units whole, newest first. ``reason(rank, unit, added)``
    says why a unit was kept (``added``: the identifiers it brought). Excerpts are
    offered only with ``coverage`` (an agent's history, where identifiers count).

    ``order`` stands in for :func:`best_first` over every candidate and excerpt (which
    values each of them on every visit): a caller that can bound the values of all keys
    at once values only those that can come first (``semantic``'s numpy ranking). With
    it, ``candidates`` is not read and ``above`` is the order's to apply; an excerpt is
    cut when its key is first valued or sized."""
    forms = _Forms(history, score, coverage, excerpts=coverage is not None and excerpts)
    if order is None:
        keys = [*candidates, *(_excerpt_key(u) for u in candidates if forms.excerpt(u))]
        chosen = best_first(
            history, keys, room, forms.value, above=above, size=forms.size, bound=forms.bound
        )
    else:
        chosen = order(forms.value, forms.first_value, forms.size)
    excerpted: list[int] = []
    taken = forms.taken
    for rank, key in enumerate(chosen):
        excerpt = key < 0
        unit = ~key if excerpt else key  # _form(key), inline: a call per key kept
        if unit in taken:  # its other form, valued -inf: offered only without ``above``
            continue
        taken.add(unit)
        if excerpt:
            found = forms.excerpt(unit)
            assert found is not None
            added = len(found.identifiers - coverage.covered) if coverage else 0
            why = reason(rank, unit, added)
            room -= _keep_excerpt(selection, found, coverage, score, why)
            excerpted.append(unit)
            continue
        added = coverage.add(unit) if coverage is not None else 0
        selection.keep(unit, reason(rank, unit, added), _finite(score(unit)))
        room -= history.unit_tokens(unit)
    return _restore_whole(history, selection, sorted(excerpted), forms, room, score, reason)


class _Forms:
    """:func:`keep_best`'s keys: each unit whole, or its excerpt (``~unit``), valued and
    sized; excerpts cut on first need (and memoised with the conversation)."""

    def __init__(
        self,
        history: History,
        score: Callable[[int], float],
        coverage: Coverage | None,
        *,
        excerpts: bool,
    ) -> None:
        self.history = history
        self.score = score
        self.coverage = coverage
        #: What the window covered before any key was taken, for ``first_value``.
        self.covered_at_start = frozenset(coverage.covered) if coverage else frozenset()
        self.taken: set[int] = set()
        self._cut: dict[int, Excerpt | None] = {}
        #: None when excerpts are not offered (no coverage, or the option is off).
        self._cuts = _Cuts(history) if excerpts else None

    def excerpt(self, unit: int) -> Excerpt | None:
        cuts = self._cuts
        if cuts is None:
            return None
        if unit not in self._cut:
            self._cut[unit] = cuts.excerpt(unit)
        return self._cut[unit]

    def size(self, key: int) -> int:
        unit, excerpt = _form(key)
        if not excerpt:
            return self.history.unit_tokens(unit)
        found = self.excerpt(unit)
        assert found is not None, "an excerpt key for a unit without an excerpt"
        return found.tokens

    def value(self, key: int) -> float:
        # _form(key), inline here and in _value: called for each key valued, often
        if (~key if key < 0 else key) in self.taken:  # the other form of it was taken
            return -math.inf
        return self._value(key, None)

    def bound(self, key: int) -> float:
        """At least :meth:`value`, before any key is taken, without what the window
        covers: the score as it is, the novelty as if every identifier were new."""
        unit, excerpt = _form(key)
        coverage = self.coverage
        if coverage is None:
            return self.score(unit)
        if not excerpt:
            tokens = self.history.unit_tokens(unit)
            return self.score(unit) + coverage.novelty_bound(coverage.of(unit), tokens)
        found = self.excerpt(unit)
        assert found is not None, "an excerpt key for a unit without an excerpt"
        share = found.tokens / max(self.history.unit_tokens(unit), 1)
        return self.score(unit) * share + coverage.novelty_bound(found.identifiers, found.tokens)

    def first_value(self, key: int) -> float:
        return self._value(key, self.covered_at_start)

    def _value(self, key: int, covered: frozenset[str] | None) -> float:
        """The key's value with what ``covered`` holds covered (None: the coverage now)."""
        coverage = self.coverage
        if key >= 0:  # the unit whole
            if coverage is None:
                return self.score(key)
            return self.score(key) + coverage.novelty(key, covered)
        unit = ~key
        assert coverage is not None
        found = self.excerpt(unit)
        assert found is not None, "an excerpt key for a unit without an excerpt"
        share = found.tokens / max(self.history.unit_tokens(unit), 1)
        novelty = coverage.novelty_of(found.identifiers, found.tokens, covered)
        return self.score(unit) * share + novelty


def _keep_excerpt(
    selection: Selection,
    found: Excerpt,
    coverage: Coverage | None,
    score: Callable[[int], float],
    why: str,
) -> int:
    """Keep a unit as its excerpt; its tokens."""
    if coverage is not None:
        coverage.covered.update(found.identifiers)
    for position, stand_in in found.stand_ins.items():
        selection.replace(position, stand_in, f"{why}; {found.reason}")
    if _finite(score(found.unit)) is not None:
        selection.scores[found.unit] = score(found.unit)
    return found.tokens


def _restore_whole(
    history: History,
    selection: Selection,
    excerpted: list[int],
    forms: _Forms,
    room: int,
    score: Callable[[int], float],
    reason: Callable[[int, int, int], str],
) -> int:
    """Keep excerpted units whole instead, newest first, while the room left allows;
    the room left then."""
    for unit in reversed(excerpted):
        found = forms.excerpt(unit)
        assert found is not None
        extra = history.unit_tokens(unit) - found.tokens
        if extra > room or any(p not in selection.stand_ins for p in found.stand_ins):
            continue
        for position in found.stand_ins:
            del selection.stand_ins[position]
        why = reason(-1, unit, 0) + "; whole, in room left over"
        selection.keep(unit, why, _finite(score(unit)))
        room -= extra
    return room


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def excerpt_options() -> tuple[Option, ...]:
    """The ``spoken_weight`` and ``excerpts`` options of a strategy that keeps older
    units with :func:`keep_best`."""
    return (
        Option(
            "spoken_weight",
            float,
            2.0,
            "In an agent's history: what an identifier that a user or assistant wrote "
            "(text or call arguments, not only a tool result) is worth over 1.",
            minimum=0.0,
        ),
        Option(
            "excerpts",
            bool,
            True,
            "In an agent's history: an older tool result may be kept as an excerpt (its "
            "ids, codes, dates and amounts, marked as an excerpt) where that is worth "
            "more per token than the whole result.",
        ),
    )
