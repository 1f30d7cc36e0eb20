"""A unit as text, for matching, scoring and summarizing."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxwindow._history import History


def unit_text(history: History, unit: int, *, roles: bool = False) -> str:
    """What a unit says: each message's speaker (``name``) and text, and for tool calls
    the function names and arguments, one message a line.

    With ``roles`` (for a summarizer, which must tell the user's instructions from tool
    output), a message without a name is headed by its role, each tool call gets a line
    of its own (``assistant called search({...})``) and a tool result reads
    ``search result: ...``; a message's own line breaks are indented by two spaces, so
    every line that is not indented starts a message (a line of tool output reading
    ``user: ...`` is not the user's)."""
    parts = []
    called: dict[str | None, str] = {}  # call id -> function, to name the results
    for position in history.span(unit):
        message = history.messages[position]
        text = message.text
        called.update((call.id, call.name) for call in message.tool_calls)
        if not roles:
            if message.tool_calls:
                calls = "; ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
                text = f"{text} {calls}".strip()
            parts.append(f"{message.name}: {text}" if message.name else text)
            continue
        if message.role == "tool":
            function = message.name or called.get(message.tool_call_id) or "tool"
            parts.append(f"{function} result: {_indented(text)}")
            continue
        speaker = message.name or message.role
        if text.strip() and text.strip() != "None":  # some agents write "None" for no text
            parts.append(f"{speaker}: {_indented(text)}")
        parts.extend(
            f"{speaker} called {c.name}({_indented(c.arguments)})" for c in message.tool_calls
        )
    return "\n".join(parts)


def _indented(text: str) -> str:
    """``text`` with its later lines indented: continuation, not a message of its own.
    Lines as ``str.splitlines`` finds them (a form feed from a PDF ends one too), which
    is how a reader of the unit's text splits it."""
    lines = text.splitlines()
    return "\n  ".join(lines) if len(lines) > 1 else text
