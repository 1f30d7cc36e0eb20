"""Windows as a picture: one self-contained HTML page with the conversation as a
timeline and one column per strategy, side by side.

People would rather look than read a table when a window drops the wrong thing. Each
message is a row; each strategy's column shows what its record decided for it (kept,
dropped, summarized, or cut: truncated or replaced by a stand-in), the unit's tokens as
a bar and the reason beside it. A unit (a tool call with its results) is one cell over
its rows, and a bracket beside the messages joins each call to its results; a message
in two units (an Anthropic user turn's tool results and its words) is one row, the
second unit's decision a part of the cell over it. A summary a strategy sent gets a row
of its own, where it sits in the window, saying which messages it covers.

The page is rendered on the server, with inline CSS and no script, so it opens
offline and its DOM is the same with or without JavaScript. Every text on it goes
through :func:`html.escape`; option values holding a URL are shown without their
password, and nothing else of a request (headers, keys) is ever passed in.

``ctxwindow inspect`` writes :func:`render_page`; the proxy's ``/ui`` renders its recent
visits with :func:`render_section` each, in one :func:`render_document`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from ctxwindow import Decision, Window, WindowRecord
from ctxwindow.kit import redact

#: The fates a cell can show, in the legend's order, with what each means.
LEGEND: tuple[tuple[str, str], ...] = (
    ("kept", "kept verbatim"),
    ("dropped", "dropped"),
    ("summarized", "in a summary"),
    ("truncated", "cut: a tool result of the current turn, or the newest user message, shortened"),
    ("replaced", "cut: replaced by a stand-in (a cleared or excerpted tool output)"),
)
#: Each fate's colour (the bar; the cell gets a light tint of it). Tests sample these.
COLOURS: dict[str, str] = {
    "kept": "#2f9e44",
    "dropped": "#e03131",
    "summarized": "#1971c2",
    "truncated": "#f08c00",
    "replaced": "#9c36b5",
}
#: A message's text shown in its row, and in its tooltip (a proxy's history may hold
#: messages of 100,000 tokens: the page stays small).
PREVIEW_CHARS = 280
TOOLTIP_CHARS = 2_000
#: A URL in a text, up to a space, a quote or a comma (which ends a spec's option).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\",<>]+")


@dataclass
class _Cell:
    """One strategy's cell: a decision over one or more consecutive rows."""

    decision: Decision
    first_row: int
    rows: int
    stand_ins: list[tuple[int, Any]] = field(default_factory=list)
    #: other units' decisions about its rows' messages: one message split in two units
    #: (an Anthropic user turn's tool results and its words) is one row, one cell
    parts: list[Decision] = field(default_factory=list)


@dataclass
class _Summary:
    """A summary one strategy sent, placed after the last message it stands for."""

    column: int
    message: Mapping[str, Any]
    covered: list[int]
    after: int


def render_page(
    messages: Sequence[Any],
    columns: Sequence[tuple[str, Window[Any]]],
    *,
    title: str = "ctxwindow inspect",
    heading: str | None = None,
) -> str:
    """The whole page for one history: ``columns`` are (label, window) pairs, each the
    window a strategy chose from ``messages`` (the same list, the same objects)."""
    return render_document([render_section(messages, columns, heading=heading or title)], title)


def render_document(sections: Sequence[str], title: str = "ctxwindow inspect") -> str:
    """A page holding ``sections`` (each from :func:`render_section`), the legend first."""
    legend = "".join(
        f'<li><span class="swatch {action}"></span><b>{action}</b> {escape(meaning)}</li>'
        for action, meaning in LEGEND
    )
    body = "\n".join(sections) or '<p class="empty">Nothing to show yet.</p>'
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n"
        f'<body><header><h1>{escape(title)}</h1><ul class="legend">{legend}</ul>'
        '<p class="hint">Hover a cell for the full reason, a message for its text. '
        "A bracket joins each tool call to its results.</p></header>\n"
        f"{body}\n</body></html>\n"
    )


def render_section(
    messages: Sequence[Any], columns: Sequence[tuple[str, Window[Any]]], *, heading: str = ""
) -> str:
    """One history's timeline as a ``<section>``: a row per message, a column per
    (label, window)."""
    shown = [_as_dict(message) for message in messages]
    position_of = {id(message): position for position, message in enumerate(messages)}
    refs = _refs(shown)
    summaries: list[_Summary] = []
    stand_ins: list[dict[int, Any]] = []
    for index, (_, window) in enumerate(columns):
        found, replaced = _window_extras(window, messages, position_of, refs)
        summaries.extend(_Summary(index, m, covered, after) for m, covered, after in found)
        stand_ins.append(replaced)
    rows = _row_order(len(messages), summaries)
    row_of = {entry: number for number, entry in enumerate(rows) if isinstance(entry, int)}
    scale = max([1, *(d.tokens for _, window in columns for d in window.record.decisions)])
    grids = [
        _cells(window.record, row_of, stand_ins[index]) for index, (_, window) in enumerate(columns)
    ]
    joins = _joins(shown)
    head = "".join(
        _header(index, label, window.record) for index, (label, window) in enumerate(columns)
    )
    body_rows = []
    for number, entry in enumerate(rows):
        if isinstance(entry, int):
            left = _message_cells(entry, shown[entry], joins.get(entry))
            attrs = f'class="msg" data-position="{entry}"{_id_attr(shown[entry])}'
            call = joins.get(entry)
            if call is not None:
                attrs += f' data-call="{call[0]}"'
        else:
            left = _summary_cells(entry, columns[entry.column][0])
            attrs = (
                f'class="summary-row" data-column="{entry.column}" '
                f'data-covers="{" ".join(map(str, entry.covered))}"'
            )
        cells = "".join(
            _cell_html(grid, number, index, columns[index][0], scale, entry)
            for index, grid in enumerate(grids)
        )
        body_rows.append(f"<tr {attrs}>{left}{cells}</tr>")
    total = columns[0][1].record.tokens_before if columns else 0
    title = (
        (f"<h2>{escape(heading)}</h2>" if heading else "")
        + f'<p class="facts">{len(messages)} messages · {total} tokens · {len(columns)} '
        + ("strategy" if len(columns) == 1 else "strategies")
        + "</p>"
    )
    return (
        f'<section class="visit">{title}<table class="timeline"><thead><tr>'
        '<th class="pos">#</th><th class="join"></th><th class="message">message</th>'
        f"{head}</tr></thead><tbody>{''.join(body_rows)}</tbody></table></section>"
    )


# -- reading the windows -----------------------------------------------------------------
def _as_dict(message: Any) -> Mapping[str, Any]:
    """A message as a mapping, for display: dicts as they are, other objects (a
    ctxwindow Message, a pydantic model) by their fields."""
    if isinstance(message, Mapping):
        return message
    for method in ("to_dict", "model_dump"):
        dump = getattr(message, method, None)
        if callable(dump):
            try:
                dumped = dump()
            except Exception:  # display only: a message that will not dump shows its repr
                break
            if isinstance(dumped, Mapping):
                return dumped
    return {"role": "?", "content": repr(message)}


def _refs(messages: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Where each message a summary's ``covers`` may name is: by id, and ``#position``."""
    refs = {f"#{position}": position for position in range(len(messages))}
    for position, message in enumerate(messages):
        metadata = message.get("metadata")
        found = message.get("id")
        if found is None and isinstance(metadata, Mapping):
            found = metadata.get("id")
        if isinstance(found, (str, int)) and not isinstance(found, bool):
            refs.setdefault(str(found), position)
    return refs


def _window_extras(
    window: Window[Any], messages: Sequence[Any], position_of: dict[int, int], refs: dict[str, int]
) -> tuple[list[tuple[Mapping[str, Any], list[int], int]], dict[int, Any]]:
    """What a window sends that is not one of the caller's messages: its summaries
    (with the positions they cover and the row they follow) and its stand-ins (by the
    position each stands for). A copy of a message holding the part of it that was kept
    (a message split in two units) is neither."""
    record = window.record
    sent = window.messages
    in_window = {position_of[id(m)] for m in sent if id(m) in position_of}
    cut = {
        p for d in record.decisions if d.action in ("replaced", "truncated") for p in d.positions
    }
    kept = {p for d in record.decisions if d.action == "kept" for p in d.positions}
    copies = sorted((cut | kept) - in_window)  # each sent as a copy: cut, or a part kept
    summarized = {p for d in record.decisions if d.action == "summarized" for p in d.positions}
    summaries: list[tuple[Mapping[str, Any], list[int], int]] = []
    stand_ins: dict[int, Any] = {}
    previous = -1
    for index, message in enumerate(sent):
        if id(message) in position_of:
            previous = position_of[id(message)]
            continue
        following = _next_position(sent, index, position_of, len(messages))
        gap = [p for p in copies if previous < p < following]
        target = _copy_target(message, gap, messages, _made_in_gap(sent, index, position_of))
        if target is not None:
            copies.remove(target)
            if target in cut:
                stand_ins[target] = _as_dict(message)
            previous = target
            continue
        covered = _covered(_as_dict(message), refs, summarized, previous, following)
        if covered is not None:
            mine = [p for p in covered if p in summarized]
            # after what it stands for, before what is verbatim (the newest it was
            # written from may be verbatim as well): its own covers, not another's
            after = max(mine or covered or [previous])
            summaries.append((_as_dict(message), covered, min(after, len(messages) - 1)))
    return summaries, stand_ins


def _next_position(sent: Sequence[Any], index: int, position_of: dict[int, int], size: int) -> int:
    """The position of the next of the caller's messages the window sends after
    ``sent[index]`` (``size`` when none does)."""
    return next((position_of[id(m)] for m in sent[index + 1 :] if id(m) in position_of), size)


def _made_in_gap(sent: Sequence[Any], index: int, position_of: dict[int, int]) -> int:
    """How many messages that are not the caller's the window sends from ``sent[index]``
    up to the next of the caller's."""
    count = 0
    for message in sent[index:]:
        if id(message) in position_of:
            break
        count += 1
    return count


def _copy_target(message: Any, gap: list[int], messages: Sequence[Any], others: int) -> int | None:
    """The position ``message`` is sent in place of (a stand-in, a cut, the kept part of
    a message split in two units), or None for a message the strategy made. ``gap``
    holds the positions still to be sent between the caller's messages around it,
    ``others`` how many of the window's messages are not the caller's there. A made
    message says so in its metadata where the shape keeps it; where it does not (an
    Anthropic summary), a copy is told by what it shares with its original."""
    metadata = _as_dict(message).get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("synthetic"):
        stands = "stands_in_for" in metadata or bool(metadata.get("truncated"))
        return gap[0] if stands and gap else None
    if not gap:
        return None
    if others <= len(gap) or _shares(message, messages[gap[0]]):
        return gap[0]  # no room for a made message here, or a copy of its original
    return None


def _shares(message: Any, original: Any) -> bool:
    """Whether ``message`` is a copy of ``original`` (or of part of it): it holds one of
    its content blocks, answers one of its tool calls, or begins with its words."""
    blocks = {id(block) for block in _blocks(original)}
    if any(id(block) in blocks for block in _blocks(message)):
        return True
    shown, source = _as_dict(message), _as_dict(original)
    if set(_result_ids(shown)) & set(_result_ids(source)):
        return True
    head, words = _text(shown)[:24], _text(source)[:24]
    return bool(words) and head == words


def _blocks(message: Any) -> list[Any]:
    """A message's content blocks (a pydantic-ai message's parts), as the objects they are."""
    content = message.get("content") if isinstance(message, Mapping) else None
    if content is None and not isinstance(message, Mapping):
        content = getattr(message, "parts", None) or getattr(message, "content", None)
    return list(content) if isinstance(content, (list, tuple)) else []


def _covered(
    shown: Mapping[str, Any],
    refs: dict[str, int],
    summarized: set[int],
    previous: int,
    following: int,
) -> list[int] | None:
    """The positions a summary the window sends stands for: those its ``covers`` name,
    or, where the shape sent it without them (an Anthropic summary), the summarized
    messages between the caller's messages around it; None for a made message that
    stands for none (a note)."""
    metadata = shown.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("synthetic") and "covers" in metadata:
        covers = metadata.get("covers") or ()
        return sorted({refs[str(r)] for r in covers if str(r) in refs})
    between = sorted(p for p in summarized if previous < p < following)
    return between or None


def _row_order(size: int, summaries: Sequence[_Summary]) -> list[int | _Summary]:
    """The rows top to bottom: each message's position, and each summary after the
    last message it covers (at the top when it covers none of these messages)."""
    rows: list[int | _Summary] = [s for s in summaries if s.after < 0]
    for position in range(size):
        rows.append(position)
        rows.extend(s for s in summaries if s.after == position)
    return rows


@dataclass
class _Grid:
    """One strategy's column: its cells by the row each starts on, and the rows that
    a cell started above spans."""

    cells: dict[int, _Cell] = field(default_factory=dict)
    spanned: set[int] = field(default_factory=set)
    #: each row a cell holds: the row that cell starts on
    owner: dict[int, int] = field(default_factory=dict)


def _cells(record: WindowRecord, row_of: dict[int, int], stand_ins: dict[int, Any]) -> _Grid:
    """One strategy's cells: one per decision over its consecutive rows (a decision
    over scattered positions gets a cell on each), never two on a row: a decision
    about a message another cell holds already (one message split in two units) starts
    below it, or is a part of that cell when none of its rows is free."""
    grid = _Grid()
    for decision in record.decisions:
        positions = [p for p in decision.positions if p in row_of]
        if not positions:
            continue
        consecutive = positions == list(range(positions[0], positions[-1] + 1))
        groups = [positions] if consecutive else [[p] for p in positions]
        for group in groups:
            first, last = row_of[group[0]], row_of[group[-1]]
            free = next((row for row in range(first, last + 1) if row not in grid.owner), None)
            if free is None:
                grid.cells[grid.owner[first]].parts.append(decision)
                continue
            held = [(p, stand_ins[p]) for p in group if p in stand_ins and row_of[p] >= free]
            grid.cells[free] = _Cell(decision, free, last - free + 1, held)
            grid.owner.update(dict.fromkeys(range(free, last + 1), free))
            grid.spanned.update(range(free + 1, last + 1))
    return grid


def _joins(messages: Sequence[Mapping[str, Any]]) -> dict[int, tuple[int, str]]:
    """Each tool exchange's rows: position -> (the calling message's position, its part:
    ``start``, ``through``, ``mid`` or ``end``). OpenAI's ``tool_calls`` and
    ``tool_call_id``, and Anthropic's ``tool_use`` and ``tool_result`` blocks."""
    caller: dict[str, int] = {}
    results: dict[int, list[int]] = {}
    for position, message in enumerate(messages):
        for call_id in _call_ids(message):
            caller[call_id] = position  # a reused id answers its latest call
        for answered in _result_ids(message):
            if answered in caller:
                results.setdefault(caller[answered], []).append(position)
    joins: dict[int, tuple[int, str]] = {}
    for call, answers in results.items():
        last = max(answers)
        for position in range(call, last + 1):
            part = "through"
            if position == call:
                part = "start"
            elif position == last:
                part = "end"
            elif position in answers:
                part = "mid"
            joins.setdefault(position, (call, part))
    return joins


def _call_ids(message: Mapping[str, Any]) -> list[str]:
    ids = [
        str(call.get("id"))
        for call in message.get("tool_calls") or ()
        if isinstance(call, Mapping) and call.get("id") is not None
    ]
    content = message.get("content")
    if isinstance(content, list):
        ids.extend(
            str(block.get("id"))
            for block in content
            if isinstance(block, Mapping) and block.get("type") == "tool_use"
        )
    return ids


def _result_ids(message: Mapping[str, Any]) -> list[str]:
    if message.get("role") == "tool" and message.get("tool_call_id") is not None:
        return [str(message["tool_call_id"])]
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [
        str(block.get("tool_use_id"))
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "tool_result"
    ]


# -- rendering ---------------------------------------------------------------------------
def _header(index: int, label: str, record: WindowRecord) -> str:
    tally: Counter[str] = Counter(decision.action for decision in record.decisions)
    counts = " · ".join(
        f'<span class="count {action}">{action} {tally[action]}</span>'
        for action, _ in LEGEND
        if tally[action]
    )
    outside = [d for d in record.decisions if not d.positions]
    extra = "".join(
        f'<div class="outside {d.action}">{escape(d.action)} outside the list: '
        f"{escape(d.reason)} ({d.tokens} tokens)</div>"
        for d in outside
    )
    notes = "".join(
        f'<div class="note">{escape(without_passwords(note))}</div>' for note in record.notes
    )
    llm = ""
    if record.llm is not None:
        usage = record.llm
        llm = (
            f'<div class="llm">LLM {escape(str(usage.model or usage.provider or ""))}: '
            f"{usage.calls} calls, {usage.prompt_tokens} + {usage.completion_tokens} tokens</div>"
        )
    state = "engaged" if record.engaged else "not engaged: everything fits"
    shown = escape(without_passwords(label))
    return (
        f'<th class="strategy" data-column="{index}" data-strategy="{shown}">'
        f'<div class="label">{shown}</div>'
        f'<div class="totals" data-tokens-before="{record.tokens_before}" '
        f'data-tokens-after="{record.tokens_after}" data-budget="{record.budget}">'
        f"tokens {record.tokens_before} → {record.tokens_after} of {record.budget} "
        f"({escape(record.counter)})</div>"
        f'<div class="totals">messages {record.messages_before} → {record.messages_after} · '
        f"{record.elapsed_ms:.1f} ms · {state}</div>"
        f'<div class="counts">{counts}</div>{extra}{llm}{notes}</th>'
    )


def without_passwords(text: str) -> str:
    """``text`` (a column's label, a note, an error) with every URL in it shown without
    its password: a store given as ``cache=redis://user:pass@host`` is named in the
    page's labels and notes and in the command's lines, never with its password."""
    return _URL.sub(lambda found: redact(found.group()), text)


def _message_cells(position: int, message: Mapping[str, Any], join: tuple[int, str] | None) -> str:
    role = str(message.get("role", "?"))
    full = _text(message)
    metadata = message.get("metadata")
    tags = []
    if isinstance(metadata, Mapping) and metadata.get("pinned"):
        tags.append('<span class="tag">pinned</span>')
    found = message.get("id") or (metadata.get("id") if isinstance(metadata, Mapping) else None)
    if found is not None:
        tags.append(f'<span class="tag id">{escape(str(found))}</span>')
    join_class = f"join {join[1]}" if join else "join"
    return (
        f'<td class="pos">{position}</td><td class="{join_class}"></td>'
        f'<td class="message" title="{escape(_clip(full, TOOLTIP_CHARS))}">'
        f'<span class="role {escape(role)}">{escape(role)}</span>{"".join(tags)} '
        f'<span class="text">{escape(_clip(full, PREVIEW_CHARS))}</span></td>'
    )


def _summary_cells(summary: _Summary, label: str) -> str:
    text = _text(summary.message)
    return (
        '<td class="pos">Σ</td><td class="join"></td>'
        f'<td class="message summary" title="{escape(_clip(text, TOOLTIP_CHARS))}">'
        f'<span class="role summary">summary</span> sent by {escape(without_passwords(label))}, '
        f"covering {escape(_spans(summary.covered))} "
        f'<span class="text">{escape(_clip(text, PREVIEW_CHARS))}</span></td>'
    )


def _cell_html(
    grid: _Grid,
    row: int,
    column: int,
    label: str,
    scale: int,
    entry: int | _Summary,
) -> str:
    shown = escape(without_passwords(label))
    cell = grid.cells.get(row)
    if cell is None:
        if row in grid.spanned:
            return ""  # inside a cell started above
        if isinstance(entry, _Summary):
            if entry.column != column:
                return f'<td class="gap" data-column="{column}"></td>'
            return (
                f'<td class="cell summary-cell" data-column="{column}" data-strategy="{shown}">'
                f"sent in the window; covers {escape(_spans(entry.covered))}</td>"
            )
        return (
            f'<td class="cell unrecorded" data-column="{column}" data-strategy="{shown}">'
            "no decision recorded</td>"
        )
    decision = cell.decision
    score = f" (score {decision.score:.3f})" if decision.score is not None else ""
    reason = f"{decision.action}: {decision.reason}{score}; {decision.tokens} tokens"
    width = max(2.0, 100.0 * decision.tokens / scale)
    span = f' rowspan="{cell.rows}"' if cell.rows > 1 else ""
    stand_ins = "".join(
        f'<div class="standin" data-position="{position}" '
        f'title="{escape(_clip(_text(message), TOOLTIP_CHARS))}">'
        f"#{position} sent as: {escape(_clip(_text(message), 120))}</div>"
        for position, message in cell.stand_ins
    )
    where = " ↓ summary" if decision.action == "summarized" else ""
    parts = "".join(_part_html(part) for part in cell.parts)
    return (
        f'<td class="cell {decision.action}"{span} data-column="{column}" '
        f'data-strategy="{shown}" data-unit="{decision.unit}" data-action="{decision.action}" '
        f'data-positions="{" ".join(map(str, decision.positions))}" '
        f'data-tokens="{decision.tokens}" title="{escape(reason)}">'
        f'<div class="bar" style="width:{width:.1f}%"></div>'
        f'<div class="why"><b>{decision.action}</b> {decision.tokens} tok{where} · '
        f"{escape(decision.reason)}</div>{stand_ins}{parts}</td>"
    )


def _part_html(decision: Decision) -> str:
    """Another unit's decision about a message of a cell (its other part: the words of a
    user turn whose tool results the cell's unit holds), in the cell, in its colour."""
    score = f" (score {decision.score:.3f})" if decision.score is not None else ""
    reason = f"{decision.action}: {decision.reason}{score}; {decision.tokens} tokens"
    return (
        f'<div class="part {decision.action}" data-unit="{decision.unit}" '
        f'data-action="{decision.action}" '
        f'data-positions="{" ".join(map(str, decision.positions))}" '
        f'data-tokens="{decision.tokens}" title="{escape(reason)}">'
        f"{escape(_spans(decision.positions))}, another part (unit {decision.unit}): "
        f"<b>{decision.action}</b> {decision.tokens} tok · {escape(decision.reason)}</div>"
    )


def _text(message: Mapping[str, Any]) -> str:
    """What a message says, on one line: its text, its tool calls and their results."""
    pieces: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        pieces.append(content)
    elif isinstance(content, list):
        pieces.extend(_block_text(block) for block in content)
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            function = call.get("function")
            if isinstance(function, Mapping):
                pieces.append(f"→ {function.get('name')}({function.get('arguments', '')})")
    if message.get("role") == "tool" and message.get("tool_call_id"):
        pieces.insert(0, f"← {message.get('tool_call_id')}:")
    return " ".join(" ".join(piece.split()) for piece in pieces if piece)


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, Mapping):
        return ""
    kind = block.get("type")
    if isinstance(block.get("text"), str):
        return str(block["text"])
    if kind == "tool_use":
        return f"→ {block.get('name')}({json.dumps(block.get('input'), default=str)})"
    if kind == "tool_result":
        inner = block.get("content")
        text = inner if isinstance(inner, str) else " ".join(map(_block_text, inner or ()))
        return f"← {block.get('tool_use_id')}: {text}"
    return f"[{kind}]"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _spans(positions: Sequence[int]) -> str:
    """Positions as ranges: "messages 2-19, 23" (or "no message of this list")."""
    if not positions:
        return "no message of this list"
    parts: list[str] = []
    start = previous = positions[0]
    for position in [*positions[1:], None]:
        if position is not None and position == previous + 1:
            previous = position
            continue
        parts.append(str(start) if start == previous else f"{start}–{previous}")
        if position is not None:
            start = previous = position
    return ("message " if len(positions) == 1 else "messages ") + ", ".join(parts)


def _id_attr(message: Mapping[str, Any]) -> str:
    metadata = message.get("metadata")
    found = message.get("id") or (metadata.get("id") if isinstance(metadata, Mapping) else None)
    return "" if found is None else f' data-id="{escape(str(found))}"'


_CSS = (
    ":root{"
    + "".join(f"--{action}:{colour};" for action, colour in COLOURS.items())
    + "--line:#d0d4da;--ink:#1f2328;--soft:#57606a}"
    """
*{box-sizing:border-box}
body{font:13px/1.35 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);
 margin:16px;background:#fff}
h1{font-size:18px;margin:0 0 6px}h2{font-size:15px;margin:18px 0 4px}
.legend{list-style:none;padding:0;margin:4px 0;display:flex;flex-wrap:wrap;gap:14px}
.legend li{display:flex;align-items:center;gap:5px}
.swatch{display:inline-block;width:14px;height:14px;border-radius:3px}
.swatch.kept{background:var(--kept)}.swatch.dropped{background:var(--dropped)}
.swatch.summarized{background:var(--summarized)}.swatch.truncated{background:var(--truncated)}
.swatch.replaced{background:var(--replaced)}
.hint,.facts{color:var(--soft);margin:2px 0 8px}
table.timeline{border-collapse:collapse;table-layout:fixed}
th,td{border:1px solid var(--line);padding:4px 6px;vertical-align:top;text-align:left}
thead th{position:sticky;top:0;background:#f6f8fa;z-index:1;font-weight:normal}
th.pos,td.pos{width:34px;text-align:right;color:var(--soft)}
th.join,td.join{width:18px;padding:0;border-left:none;border-right:none;position:relative}
th.message,td.message{width:440px}
th.strategy,td.cell,td.gap{width:260px}
th.strategy .label{font-weight:600;font-size:14px}
.totals{color:var(--soft)}
.count{white-space:nowrap}
.count.kept{color:var(--kept)}.count.dropped{color:var(--dropped)}
.count.summarized{color:var(--summarized)}.count.truncated{color:var(--truncated)}
.count.replaced{color:var(--replaced)}
.note,.outside,.llm{color:var(--soft);font-size:12px}
td.message .text{display:-webkit-box;-webkit-line-clamp:2;-webkit-box-orient:vertical;
 overflow:hidden}
.role{display:inline-block;font-size:11px;font-weight:600;padding:0 5px;border-radius:8px;
 background:#eaeef2;margin-right:4px}
.role.user{background:#dbe4ff}.role.assistant{background:#e6fcf5}.role.system{background:#fff3bf}
.role.tool{background:#f3d9fa}.role.summary{background:#d0ebff}
.tag{font-size:11px;color:var(--soft);margin-right:4px}
td.join::before,td.join::after{content:none;position:absolute;left:8px;border:0 solid #868e96}
td.join.start::after{content:"";top:50%;bottom:0;width:8px;border-width:3px 0 0 3px}
td.join.mid::before,td.join.through::before{content:"";top:0;bottom:0;border-left-width:3px}
td.join.mid::after{content:"";top:50%;width:8px;border-top-width:3px}
td.join.end::after{content:"";top:0;height:50%;width:8px;border-width:0 0 3px 3px}
td.cell.kept{background:#ebfbee}td.cell.dropped{background:#fff5f5}
td.cell.summarized{background:#e7f5ff}td.cell.truncated{background:#fff4e6}
td.cell.replaced{background:#f8f0fc}
td.cell.unrecorded{color:var(--soft);
 background:repeating-linear-gradient(45deg,#fff,#fff 4px,#f1f3f5 4px,#f1f3f5 8px)}
.bar{height:10px;border-radius:2px;margin:1px 0 3px}
td.kept .bar{background:var(--kept)}td.dropped .bar{background:var(--dropped)}
td.summarized .bar{background:var(--summarized)}td.truncated .bar{background:var(--truncated)}
td.replaced .bar{background:var(--replaced)}
.why{font-size:12px;color:var(--soft);overflow:hidden;text-overflow:ellipsis;
 display:-webkit-box;-webkit-line-clamp:2;-webkit-box-orient:vertical}
.why b{color:var(--ink);font-weight:600}
.standin{font-size:12px;border-left:3px solid var(--replaced);padding-left:4px;margin-top:3px}
.part{font-size:12px;border-left:3px solid var(--line);padding-left:4px;margin-top:3px}
.part.kept{border-color:var(--kept)}.part.dropped{border-color:var(--dropped)}
.part.summarized{border-color:var(--summarized)}.part.truncated{border-color:var(--truncated)}
.part.replaced{border-color:var(--replaced)}
tr.summary-row td{background:#e7f5ff}
td.cell.summary-cell{border:2px solid var(--summarized);color:var(--summarized);font-weight:600}
tr.msg:hover td.message,tr.msg:hover td.pos{background:#fff9db}
"""
)
