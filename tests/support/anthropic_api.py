"""What the Anthropic Messages API accepts, for tests that send windows through the real
``anthropic`` client: a minimal reply a local server can answer with, and one check of a
message list (the SDK's own types plus the rules the types cannot express).

Test infrastructure of this repository, on pytest's ``pythonpath``; it needs the
``anthropic`` and ``pydantic`` packages (import it after ``pytest.importorskip``)."""

from __future__ import annotations

from typing import Any

import anthropic
import pydantic

#: A Messages API reply, as small as the SDK parses.
REPLY: dict[str, Any] = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
    "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
}  # fmt: skip

#: Module level so that it outlives the lazily validated content iterables it returns.
MESSAGE_PARAMS = pydantic.TypeAdapter(list[anthropic.types.MessageParam])


def check_messages(messages: list[dict[str, Any]], *, user_first: bool = False) -> None:
    """Assert the list is a valid ``messages`` parameter: the SDK's types (content
    iterables consumed, as pydantic validates them lazily), each tool_result block first
    in its message and answering exactly the tool_use blocks of the message before, no
    tool_use left unanswered at the end; with ``user_first``, the user speaks first."""
    for message in MESSAGE_PARAMS.validate_python(messages):
        if not isinstance(message["content"], str):
            list(message["content"])
    if user_first:
        assert messages[0]["role"] == "user", "the first message is not the user's"
    for index, message in enumerate(messages):
        blocks = message["content"] if isinstance(message["content"], list) else []
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        if results:
            before = messages[index - 1]["content"] if index else []
            calls = {b["id"] for b in before if isinstance(b, dict) and b["type"] == "tool_use"}
            assert set(results) == calls, f"message {index} answers {results}, not {calls}"
            assert [b["type"] for b in blocks[: len(results)]] == ["tool_result"] * len(results)
        if message["role"] == "assistant" and any(b["type"] == "tool_use" for b in blocks):
            assert index + 1 < len(messages), "a tool_use at the end has no result"
