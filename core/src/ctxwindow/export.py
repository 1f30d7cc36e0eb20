"""Turning a window into exactly what a chat-completions request accepts.

ctxwindow reads two keys of its own on message dicts (``id`` and ``metadata``) and puts
``metadata`` on the messages a strategy makes (a summary's ``covers``). A provider that
validates its input strictly rejects such keys, so send ``to_openai(window.messages)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ctxwindow.messages import Message, read_message

#: The message fields of OpenAI's chat-completions API.
OPENAI_FIELDS = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "audio"}
)


def to_openai(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """New dicts with only the API's fields; the caller's objects are left as they are."""
    out = []
    for index, message in enumerate(messages):
        if isinstance(message, Message):
            data: Mapping[str, Any] = message.to_dict()
        else:
            read_message(message, index)  # the same clear error for a malformed entry
            data = message
        out.append({key: value for key, value in data.items() if key in OPENAI_FIELDS})
    return out
