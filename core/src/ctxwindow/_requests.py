"""Reading what ``ctxwindow select`` is given (a messages file, or a saved request body
holding its messages) and windowing it in the shape it came in: one reader for the CLI
and for every tool a plugin adds (``ctxwindow inspect``)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxwindow._files import (
    FORMAT_HINT,
    NonFiniteNumber,
    load_json,
    non_finite_error,
    parse_messages,
    read_messages_file,
)
from ctxwindow._messages import to_openai
from ctxwindow._plugins import install_hint, request_formats
from ctxwindow.errors import InvalidMessage

if TYPE_CHECKING:
    from ctxwindow._window import Window
    from ctxwindow._windower import Windower
    from ctxwindow.hookspecs import RequestFormat

logger = logging.getLogger("ctxwindow.cli")

#: Content blocks only Anthropic's Messages API has.
ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})


@dataclass(frozen=True)
class SavedRequest:
    """A conversation as a file holds it: its ``messages``; the request ``body`` they
    came in (None for a plain messages file); the plugin ``format`` that reads that
    body (None for an OpenAI chat body, which the core reads itself)."""

    messages: list[Any]
    body: dict[str, Any] | None = None
    format: RequestFormat | None = None

    def select(self, windower: Windower, query: str | None = None) -> tuple[Any, Window[Any]]:
        """(the input windowed in its own shape: a message list, or the body with its
        messages windowed, those the window made with the API's fields only
        (:func:`sendable`), and every other key kept; the window, whose record counts
        positions in :attr:`messages`)."""
        if self.body is not None and self.format is not None:
            return self.format.select(self.body, windower, query)
        window = windower.select(self.messages, query=query)
        if self.body is None:
            return window.messages, window
        return {**self.body, "messages": sendable(window.messages, self.messages)}, window


def sendable(window: Sequence[Any], history: Sequence[Any]) -> list[Any]:
    """A window's items as a request sends them: the caller's own messages (those of
    ``history``) as they came; each message the window made (a summary, a cut or
    cleared copy: each carries ctxwindow's ``metadata``) with the API's fields only
    (:func:`ctxwindow.to_openai`), since the API knows no ``metadata`` on a message.
    ``ctxwindow select`` writes a body's messages so, and the proxy sends them so."""
    made = [index for index, item in enumerate(window) if _has_metadata(item)]
    if not made:
        return list(window)
    originals = set(map(id, history))  # only for a window with a made message
    out = list(window)
    for index in made:
        if id(out[index]) not in originals:
            (out[index],) = to_openai([out[index]])
    return out


def _has_metadata(item: Any) -> bool:
    return isinstance(item, Mapping) and "metadata" in item


def read_request(path: str) -> SavedRequest:
    """The conversation in ``path`` ('-' for stdin): a JSON array or JSONL of messages,
    or a saved request body with a ``messages`` list (OpenAI's, or one a plugin's
    request format reads, such as Anthropic's). An unreadable file is one
    InvalidMessage naming it and the problem."""
    if path == "-":
        raw: bytes | None = sys.stdin.buffer.read()
    else:
        try:
            with open(path, "rb") as file:
                raw = file.read()
        except OSError:  # read_messages_file says what is wrong with the file
            raw = None
    source = "stdin" if path == "-" else path
    body = _request_body(raw, source) if raw is not None else None
    if body is not None:
        return SavedRequest(body["messages"], body, _request_format(body))
    if raw is None:
        return SavedRequest(read_messages_file(path))
    return SavedRequest(parse_messages(raw, source))


def _request_body(raw: bytes, source: str) -> dict[str, Any] | None:
    """The request body ``raw`` holds (a JSON object with a ``messages`` list and no
    ``role``), else None (a message list, or one message). A JSON object with neither
    ``role`` nor a ``messages`` list is an InvalidMessage saying what each would need."""
    text = raw.decode("utf-8-sig", errors="replace").strip()
    if not text.startswith("{"):
        return None
    try:
        body = load_json(text)
    except NonFiniteNumber as error:
        raise non_finite_error(source, "", error) from None
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or "role" in body:
        return None
    messages = body.get("messages")
    if not isinstance(messages, list):
        found = (
            "no 'messages'"
            if "messages" not in body
            else "a 'messages' that is null"
            if messages is None
            else f"a {type(messages).__name__} 'messages'"
        )
        raise InvalidMessage(
            None,
            f"{source} holds a JSON object with no 'role' (not a message) and {found} "
            f"(not a request body, whose 'messages' is a list); {FORMAT_HINT}, or a "
            f"request body holding such a list",
        )
    return body


def _request_format(body: dict[str, Any]) -> RequestFormat | None:
    """The plugin format that recognises ``body``, or None for an OpenAI body. An
    Anthropic body that no plugin reads is an error naming what reads it."""
    for entry in request_formats():
        try:
            recognised = entry.target.recognises(body)
        except Exception as error:  # one plugin's broken format must not stop the others
            logger.warning(
                "request format %r from %s raised %s: %s; skipped",
                entry.name,
                entry.distribution,
                type(error).__name__,
                error,
            )
            continue
        if recognised:
            found: RequestFormat = entry.target
            return found
    if "system" in body or any(_anthropic(message) for message in body["messages"]):
        hint = install_hint("adapter", "anthropic")
        raise InvalidMessage(
            None,
            "this is an Anthropic Messages request body ('system' beside 'messages', or "
            "tool_use / tool_result blocks); the core reads OpenAI-format bodies, and a "
            "plugin reads this one: "
            + (f"`{hint}`" if hint else "see 'Framework adapters' in the docs"),
        )
    return None


def _anthropic(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") in ANTHROPIC_BLOCKS for block in content
    )
