"""Anthropic Messages: window the ``messages`` (and ``system``) of ``client.messages.create``.

``system`` is outside the list and always kept (it counts toward the budget). An
assistant message's ``tool_use`` blocks and the ``tool_result`` blocks that answer them
in the next user message form one unit. A user message holding tool results and text is
split in two for windowing: its tool results go with their calls, its text is a unit of
its own (it may be the newest user message). If only one half is kept, the message comes
back as a copy holding that half, tool results first, as the API requires; kept whole,
it is the very dict you passed. A ``system`` message inside the list is kept like the
``system`` parameter. A summary a strategy writes comes as a user message (a message it
makes as the assistant's, as an assistant message).

Needs no anthropic package: messages are dicts, their blocks dicts or SDK objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ctxwindow import ContentPart, Message, Strategy, TokenCounter, ToolCall, Window, Windower
from ctxwindow.errors import InvalidMessage
from ctxwindow.kit import snapshot
from ctxwindow_adapters._bridge import (
    Converted,
    Shape,
    Trim,
    budget_in_items,
    get,
    prepare,
    text_of,
)
from ctxwindow_adapters._reads import Piece, RecentReads, each_item

__all__ = ["AnthropicWindow", "aselect", "read_messages", "select"]

_ROLES = frozenset({"user", "assistant", "system"})


@dataclass(frozen=True)
class AnthropicWindow(Window[Any]):
    """A window of Anthropic messages, and the ``system`` to send with them (unchanged)."""

    system: Any = None

    def request(self) -> dict[str, Any]:
        """``messages`` and ``system`` (when set), for ``client.messages.create(**...)``."""
        out: dict[str, Any] = {"messages": self.messages}
        if self.system is not None:
            out["system"] = self.system
        return out


def select(
    messages: Sequence[Mapping[str, Any]],
    budget: int | None = None,
    strategy: str | Strategy | None = None,
    *,
    system: str | Sequence[Any] | None = None,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    windower: Windower | None = None,
    user_first: bool = True,
    **options: Any,
) -> AnthropicWindow:
    """The window of Anthropic ``messages`` with ``system`` counted and kept.

    ``user_first`` (the default) removes assistant turns that would open the window, as
    Amazon Bedrock and Vertex AI reject a request whose first message is not the user's
    (Anthropic's own API accepts it); the record says what was removed.
    """
    read = partial(read_messages, messages, system)
    trim = USER_FIRST if user_first else None
    call = prepare(
        read, SHAPE, windower, strategy, budget, counter, options, query=query, trim=trim
    )
    with budget_in_items(call):
        window = call.select()
    return AnthropicWindow(window.messages, window.record, system)


async def aselect(
    messages: Sequence[Mapping[str, Any]],
    budget: int | None = None,
    strategy: str | Strategy | None = None,
    *,
    system: str | Sequence[Any] | None = None,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    windower: Windower | None = None,
    user_first: bool = True,
    **options: Any,
) -> AnthropicWindow:
    """Async :func:`select`."""
    read = partial(read_messages, messages, system)
    trim = USER_FIRST if user_first else None
    call = prepare(
        read, SHAPE, windower, strategy, budget, counter, options, query=query, trim=trim
    )
    with budget_in_items(call):
        window = await call.aselect()
    return AnthropicWindow(window.messages, window.record, system)


def read_messages(messages: Sequence[Any], system: Any = None) -> Converted[Any]:
    """The messages as ctxwindow Messages (``system`` first, standing for no item). A
    list that grew since a call before costs reading what it added."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidMessage(None, f"expected a list of messages, got {type(messages).__name__}")
    if system is None:
        return _READS.read(messages)
    return _READS_WITH_SYSTEM.read([_System(system), *messages], messages)


@dataclass(frozen=True)
class _System:
    """The ``system`` parameter, read as if it opened the list (it stands for no item)."""

    value: Any


def _pieces(message: Any, index: int) -> list[Piece]:
    """One message's Messages: most make one; a user message with tool results, one per
    result and one for the rest."""
    if not isinstance(message, Mapping):
        raise InvalidMessage(
            index, f"expected a dict with 'role' and 'content', got {type(message).__name__}"
        )
    role = message.get("role")
    if role not in _ROLES:
        raise InvalidMessage(index, f"unknown role {role!r}; expected user or assistant")
    content = message.get("content")
    if isinstance(content, str):
        return [(Message(role, content), (index,), None)]
    if not isinstance(content, (list, tuple)):
        raise InvalidMessage(
            index, f"'content' must be a string or a list of blocks, got "
            f"{type(content).__name__}"
        )  # fmt: skip
    if role == "assistant":
        return [(_assistant(content, index), (index,), None)]
    if role == "user":
        return _user(content, index)
    return [(Message("system", _parts(content, index)), (index,), None)]


def _pieces_after_system(item: Any, position: int) -> list[Piece]:
    if position == 0:
        return [(Message("system", _system_content(item.value)), (), None)]
    return _pieces(item, position - 1)


def _content_of(item: Any) -> Any:
    """What an app may change in place: a message's ``content`` (the system's value), a
    list of blocks as it is now, down to an SDK block's text (see :func:`snapshot`)."""
    return snapshot(item.value if isinstance(item, _System) else item.get("content"))


#: The conversions made before, without and with a ``system`` parameter.
_READS: RecentReads[Any] = RecentReads(each_item(_pieces), _content_of)
_READS_WITH_SYSTEM: RecentReads[Any] = RecentReads(each_item(_pieces_after_system), _content_of)


def _system_content(system: Any) -> str | tuple[ContentPart, ...]:
    if isinstance(system, str):
        return system
    if isinstance(system, (list, tuple)):
        return _parts(system, None)
    raise InvalidMessage(
        None, f"system must be a string or a list of text blocks, got {type(system).__name__}"
    )


def _type(block: Any, index: int | None, number: int) -> str:
    kind = get(block, "type")
    if not isinstance(kind, str):
        raise InvalidMessage(index, f"content block {number} needs a 'type'")
    return kind


def _assistant(blocks: Sequence[Any], index: int) -> Message:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for number, block in enumerate(blocks):
        kind = _type(block, index, number)
        if kind == "tool_use":
            call_id, name = get(block, "id"), get(block, "name")
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str):
                raise InvalidMessage(index, f"tool_use block {number} needs an 'id' and a 'name'")
            calls.append(ToolCall(call_id, name, text_of(get(block, "input", {}))))
        elif kind == "text":
            texts.append(str(get(block, "text", "")))
        elif kind == "thinking":
            texts.append(str(get(block, "thinking", "")))
        else:  # server tools and their results live in this message: count them as JSON
            texts.append(_dump(block))
    text = "\n".join(texts)
    try:
        return Message("assistant", text if text or not calls else None, tool_calls=tuple(calls))
    except InvalidMessage as error:
        raise InvalidMessage(index, error.problem) from None


def _user(blocks: Sequence[Any], index: int) -> list[Piece]:
    """Tool results as tool Messages first (each one part), then the rest as one user
    Message; a message without tool results stays whole."""
    results: list[int] = []
    others: list[int] = []
    for number, block in enumerate(blocks):
        if _type(block, index, number) == "tool_result":
            if others:
                raise InvalidMessage(
                    index,
                    f"content block {number} is a tool_result after other blocks; the API "
                    f"needs a user message's tool_result blocks first",
                )
            results.append(number)
        else:
            others.append(number)
    if not results:
        return [(Message("user", _parts(blocks, index)), (index,), None)]
    pieces: list[Piece] = []
    for number in results:
        block = blocks[number]
        call_id = get(block, "tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessage(index, f"tool_result block {number} needs a 'tool_use_id'")
        result = Message("tool", _result_content(get(block, "content")), tool_call_id=call_id)
        pieces.append((result, (index,), frozenset({number})))
    if others:
        rest = _parts([blocks[n] for n in others], index)
        pieces.append((Message("user", rest), (index,), frozenset(others)))
    return pieces


def _parts(blocks: Sequence[Any], index: int | None) -> tuple[ContentPart, ...]:
    parts = []
    for number, block in enumerate(blocks):
        kind = _type(block, index, number)
        if kind == "text":
            parts.append(ContentPart("text", str(get(block, "text", ""))))
        elif kind == "document" and _plain_text(get(block, "source")):
            parts.append(ContentPart("text", get(get(block, "source"), "data")))
        else:
            parts.append(ContentPart(kind))
    return tuple(parts)


def _plain_text(source: Any) -> bool:
    """Whether a document's source is words (a plain-text document), not a file's bytes
    (a base64 PDF), which the model reads as pages and so counts as a non-text part."""
    return get(source, "type") == "text" and isinstance(get(source, "data"), str)


def _result_content(content: Any) -> str | tuple[ContentPart, ...]:
    """A tool_result's content: its text, or parts when it holds images or documents
    (a screenshot counts a fixed amount as a non-text part, never as its base64)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, (list, tuple)):
        return text_of(content)
    parts = tuple(_result_part(block) for block in content)
    if all(part.text is not None for part in parts):
        return "\n".join(part.text or "" for part in parts)
    return parts


def _result_part(block: Any) -> ContentPart:
    kind = get(block, "type")
    if kind == "text":
        return ContentPart("text", str(get(block, "text")))
    if kind == "image" or (kind == "document" and not _plain_text(get(block, "source"))):
        return ContentPart(kind)
    return ContentPart("text", _dump(block))


def _dump(block: Any) -> str:
    if hasattr(block, "model_dump"):
        block = block.model_dump(exclude_none=True)
    return json.dumps(block, sort_keys=True, default=str)


def _rebuild(
    message: Mapping[str, Any],
    kept: Sequence[int] | None,
    cut: tuple[frozenset[int] | None, str] | None,
) -> dict[str, Any]:
    """A copy holding the kept blocks (in their order), the newest user text cut."""
    content = message.get("content")
    if not isinstance(content, (list, tuple)):
        return {**message, "content": cut[1] if cut else content}
    numbers = range(len(content)) if kept is None else kept
    blocks = []
    cut_done = False
    for number in numbers:
        block = content[number]
        cutting = cut is not None and (cut[0] is None or number in cut[0])
        if cut is not None and cutting and get(block, "type") == "tool_result":
            blocks.append({**_as_dict(block), "content": cut[1]})  # a stand-in for a result
            continue
        if cutting and get(block, "type") == "text":
            if not cut_done:
                blocks.append({"type": "text", "text": cut[1]} if cut else block)
                cut_done = True
            continue
        blocks.append(block)
    return {**message, "content": blocks}


def _as_dict(block: Any) -> dict[str, Any]:
    if hasattr(block, "model_dump"):
        return dict(block.model_dump(exclude_none=True))
    return dict(block)


def _made(message: Message, before: Sequence[Any]) -> dict[str, Any]:
    """A made message (a summary, a note) as a user message, or an assistant one if the
    strategy made it the assistant's: valid anywhere (next to a message of its role, the
    API joins the two into one turn)."""
    role = "assistant" if message.role == "assistant" else "user"
    return {"role": role, "content": [{"type": "text", "text": message.text}]}


def _opens_a_turn(message: Mapping[str, Any]) -> bool:
    """A user message that does not answer tool calls: a request may start with it."""
    content = message.get("content")
    if message.get("role") != "user":
        return False
    return isinstance(content, str) or not content or get(content[0], "type") != "tool_result"


def _before_first_user(window: list[Any]) -> set[int]:
    """The assistant turns (with the tool results answering them) before the first
    user message; none when no user message could open the window."""
    first = next((i for i, m in enumerate(window) if _opens_a_turn(m)), None)
    if first is None:
        return set()
    return {i for i in range(first) if window[i].get("role") != "system"}


def _units_before_first_words(messages: Sequence[Message]) -> set[int]:
    """The window's messages before its first user message in words (not a tool
    result), instructions aside: the assistant turns and the tool results answering
    them, which a user turn that also carries words (results, then a new request) would
    otherwise drag in front of it. None when no user message has words."""
    first = next((i for i, m in enumerate(messages) if m.role == "user"), None)
    if first is None:
        return set()
    return {i for i in range(first) if messages[i].role not in ("system", "developer")}


SHAPE: Shape[Any] = Shape("anthropic", _rebuild, _made)
USER_FIRST = Trim(
    _before_first_user,
    "a request starts with a user message (user_first)",
    before=_units_before_first_words,
)
