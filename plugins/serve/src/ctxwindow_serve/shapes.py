"""The three request bodies the proxy windows, each routed by its path: OpenAI chat
completions, OpenAI Responses and Anthropic Messages.

A shape knows where a body keeps its history, how many output tokens it asks for, what
else in it takes room in the context (tool schemas, a response format, instructions),
how to window it (the core's Windower for chat, the adapters for the other two, each
recognising a history it has seen, so a turn costs its new messages) and how to put the
window back into a copy of the body with every other key as it came.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ctxwindow import Window, Windower, sendable
from ctxwindow_adapters import anthropic as anthropic_adapter
from ctxwindow_adapters import openai_responses


class Shape(Protocol):
    """One API's request body, as the proxy reads and rebuilds it."""

    @property
    def name(self) -> str:
        """The route's name in logs and metrics."""

    @property
    def provider(self) -> str:
        """The GenAI semantic conventions' provider name (for spans)."""

    @property
    def history_key(self) -> str:
        """The key of the body that holds the history."""

    def untouched_reason(self, body: Mapping[str, Any]) -> str | None:
        """Why this body is forwarded as it came (None: window it)."""

    def output_tokens(self, body: Mapping[str, Any]) -> int | None:
        """The output tokens the request asks for (None: it names none)."""

    def fixed_parts(self, body: Mapping[str, Any]) -> list[Any]:
        """What else takes room in the context, counted once as JSON or text."""

    async def window(self, body: Mapping[str, Any], windower: Windower, budget: int) -> Window[Any]:
        """The window of the body's history at ``budget`` tokens."""

    def select(self, body: Mapping[str, Any], windower: Windower, budget: int) -> Window[Any]:
        """:meth:`window`, synchronously: for a worker thread (a big body, whose reading
        and counting would hold the event loop)."""

    def sent(self, window: Sequence[Any], history: Sequence[Any]) -> list[Any]:
        """The window's items as the upstream gets them (ctxwindow's own fields left out
        of the messages it made)."""

    def error_body(self, kind: str, message: str) -> dict[str, Any]:
        """An error in this API's own shape, for errors the proxy answers itself."""


def _openai_error(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def _list_history(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if not isinstance(value, list):
        return f"{key!r} is not a list"
    if not value:
        return f"{key!r} is empty"
    return None


def _first(body: Mapping[str, Any], *keys: str) -> int | None:
    """The first of ``keys`` the body gives a positive whole number of tokens: an int,
    or a float with no fraction (``1900.0``, which lenient servers take as 1900)."""
    for key in keys:
        value = body.get(key)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


@dataclass(frozen=True)
class ChatShape:
    """``POST /v1/chat/completions``: ``messages`` are the core's own message shape."""

    name: str = "chat"
    provider: str = "openai"
    history_key: str = "messages"

    def untouched_reason(self, body: Mapping[str, Any]) -> str | None:
        return _list_history(body, self.history_key)

    def output_tokens(self, body: Mapping[str, Any]) -> int | None:
        return _first(body, "max_completion_tokens", "max_tokens")

    def fixed_parts(self, body: Mapping[str, Any]) -> list[Any]:
        return [body[key] for key in ("tools", "functions", "response_format") if body.get(key)]

    async def window(self, body: Mapping[str, Any], windower: Windower, budget: int) -> Window[Any]:
        window: Window[Any] = await windower.aselect(body[self.history_key], budget=budget)
        return window

    def select(self, body: Mapping[str, Any], windower: Windower, budget: int) -> Window[Any]:
        window: Window[Any] = windower.select(body[self.history_key], budget=budget)
        return window

    def sent(self, window: Sequence[Any], history: Sequence[Any]) -> list[Any]:
        """The client's messages as they came; a message the window made (a summary, a
        cut or cleared copy, an excerpt: each carries ``metadata``) with the API's
        fields only, as ``ctxwindow.to_openai`` gives them: the API knows no
        ``metadata`` on a message, and ctxwindow's record is not the upstream's
        (:func:`ctxwindow.sendable`, as ``ctxwindow select`` writes a body)."""
        return sendable(window, history)

    def error_body(self, kind: str, message: str) -> dict[str, Any]:
        return _openai_error(kind, message)


@dataclass(frozen=True)
class ResponsesShape:
    """``POST /v1/responses``: a list ``input`` is windowed (reasoning kept with its
    calls, outputs with their ``call_id``); a string ``input``, or state kept by the
    server (``previous_response_id``, ``conversation``), is forwarded as it came."""

    name: str = "responses"
    provider: str = "openai"
    history_key: str = "input"

    def untouched_reason(self, body: Mapping[str, Any]) -> str | None:
        for key in ("previous_response_id", "conversation"):
            if body.get(key):
                return f"the history is kept by the upstream ({key!r})"
        return _list_history(body, self.history_key)

    def output_tokens(self, body: Mapping[str, Any]) -> int | None:
        return _first(body, "max_output_tokens")

    def fixed_parts(self, body: Mapping[str, Any]) -> list[Any]:
        parts = [body[key] for key in ("tools", "instructions") if body.get(key)]
        text = body.get("text")
        if isinstance(text, Mapping) and text.get("format"):
            parts.append(text["format"])
        return parts

    async def window(self, body: Mapping[str, Any], windower: Windower, budget: int) -> Window[Any]:
        return await openai_responses.aselect(
            body[self.history_key], budget=budget, windower=windower
        )

    def select(self, body: Mapping[str, Any], windower: Windower, budget: int) -> Window[Any]:
        return openai_responses.select(body[self.history_key], budget=budget, windower=windower)

    def sent(self, window: Sequence[Any], history: Sequence[Any]) -> list[Any]:
        return list(window)  # the adapter gives back the API's own items

    def error_body(self, kind: str, message: str) -> dict[str, Any]:
        return _openai_error(kind, message)


@dataclass(frozen=True)
class AnthropicShape:
    """``POST /v1/messages``: ``system`` is counted and kept; the window opens on a user
    turn, as Bedrock and Vertex AI require."""

    name: str = "anthropic"
    provider: str = "anthropic"
    history_key: str = "messages"

    def untouched_reason(self, body: Mapping[str, Any]) -> str | None:
        return _list_history(body, self.history_key)

    def output_tokens(self, body: Mapping[str, Any]) -> int | None:
        return _first(body, "max_tokens")

    def fixed_parts(self, body: Mapping[str, Any]) -> list[Any]:
        return [body["tools"]] if body.get("tools") else []

    async def window(self, body: Mapping[str, Any], windower: Windower, budget: int) -> Window[Any]:
        return await anthropic_adapter.aselect(
            body[self.history_key], budget=budget, system=body.get("system"), windower=windower
        )

    def select(self, body: Mapping[str, Any], windower: Windower, budget: int) -> Window[Any]:
        return anthropic_adapter.select(
            body[self.history_key], budget=budget, system=body.get("system"), windower=windower
        )

    def sent(self, window: Sequence[Any], history: Sequence[Any]) -> list[Any]:
        return list(window)  # the adapter gives back the API's own items

    def error_body(self, kind: str, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": message}}


CHAT = ChatShape()
RESPONSES = ResponsesShape()
ANTHROPIC = AnthropicShape()

#: The windowed routes (POST); any other request passes through untouched.
ROUTES: dict[str, Shape] = {
    "/v1/chat/completions": CHAT,
    "/chat/completions": CHAT,
    "/v1/responses": RESPONSES,
    "/responses": RESPONSES,
    "/v1/messages": ANTHROPIC,
}


def same_items(window: Sequence[Any], history: Sequence[Any]) -> bool:
    """Whether the window is the history itself: every item, the very same objects."""
    return len(window) == len(history) and all(a is b for a, b in zip(window, history, strict=True))
