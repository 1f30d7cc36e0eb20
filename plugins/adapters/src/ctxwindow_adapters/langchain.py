"""LangChain ``BaseMessage`` lists, and :func:`trim_messages` for users of LangChain's.

The window holds the very message objects passed in (their ``id``,
``additional_kwargs`` and ``response_metadata`` untouched). An ``AIMessage`` with
``tool_calls`` and the ``ToolMessage`` objects answering it form one unit. A summary a
strategy writes comes as a ``SystemMessage`` when only system messages precede it in
the window (where every chat model accepts one), else as a ``HumanMessage`` (a message it
makes as the assistant's, as an ``AIMessage``).

Needs ``pip install 'ctxwindow-adapters[langchain]'`` (langchain-core).
"""

from __future__ import annotations

import inspect
import json
import numbers
import operator
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

try:
    from langchain_core.language_models import BaseLanguageModel
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        convert_to_messages,
    )
    from langchain_core.messages.utils import count_tokens_approximately
    from langchain_core.prompt_values import PromptValue
    from langchain_core.runnables import Runnable, RunnableLambda
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "ctxwindow_adapters.langchain needs langchain-core: "
        "pip install 'ctxwindow-adapters[langchain]'"
    ) from error

from ctxwindow import ContentPart, Message, Strategy, TokenCounter, ToolCall, Window, Windower
from ctxwindow.errors import InvalidMessage, InvalidOption
from ctxwindow_adapters._bridge import Call, Converted, Shape, Trim, prepare, text_of, windower_for
from ctxwindow_adapters._reads import RecentReads, one_each

__all__ = ["LangChainCounter", "aselect", "read_messages", "select", "trim_messages"]

_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}
_CHAT_ROLES = {"system", "developer", "user", "assistant", "tool"}


def select(
    messages: Sequence[BaseMessage],
    budget: int | None = None,
    strategy: str | Strategy | None = None,
    *,
    counter: TokenCounter | str | Any = None,
    query: str | None = None,
    windower: Windower | None = None,
    **options: Any,
) -> Window[BaseMessage]:
    """The window of LangChain ``messages``: the same objects, those that fit, in order.

    ``counter`` is a ctxwindow counter (a name or instance), or anything LangChain's
    ``trim_messages`` takes as ``token_counter``: a chat model, a function of a message
    list or of one message, or ``"approximate"``.
    """
    read = partial(read_messages, messages)
    counted = _counter(counter)
    return prepare(read, SHAPE, windower, strategy, budget, counted, options, query=query).select()


async def aselect(
    messages: Sequence[BaseMessage],
    budget: int | None = None,
    strategy: str | Strategy | None = None,
    *,
    counter: TokenCounter | str | Any = None,
    query: str | None = None,
    windower: Windower | None = None,
    **options: Any,
) -> Window[BaseMessage]:
    """Async :func:`select`."""
    read = partial(read_messages, messages)
    counted = _counter(counter)
    return await prepare(
        read, SHAPE, windower, strategy, budget, counted, options, query=query
    ).aselect()


def trim_messages(
    messages: Sequence[Any] | PromptValue | None = None,
    *,
    max_tokens: int,
    token_counter: TokenCounter | str | Any = "approx",
    strategy: str | Strategy = "last",
    include_system: bool = True,
    start_on: str | type[BaseMessage] | Sequence[str | type[BaseMessage]] | None = None,
    end_on: str | type[BaseMessage] | Sequence[str | type[BaseMessage]] | None = None,
    allow_partial: bool = False,
    text_splitter: Any = None,
    query: str | None = None,
    **options: Any,
) -> list[BaseMessage] | Runnable[Any, list[BaseMessage]]:
    """A stand-in for ``langchain_core.messages.trim_messages`` that windows with a
    ctxwindow strategy, keeping tool calls with their results.

    Accepted as in LangChain: ``max_tokens``, ``token_counter`` (also a ctxwindow counter
    name such as ``"tiktoken:cl100k_base"``), ``start_on``, ``end_on``, and
    ``strategy="last"`` (ctxwindow's ``fixed``); any other ``strategy`` is a ctxwindow
    strategy name or instance, with its options as keywords. Without ``messages``,
    returns a Runnable (built once, so a strategy's caches last across calls).

    Not accepted (InvalidOption): ``strategy="first"``, ``include_system=False`` (system
    messages are always kept), ``allow_partial=True`` and ``text_splitter`` (messages
    are kept or dropped whole; ``oversize="truncate"`` cuts only the newest user
    message when the must-keep messages alone exceed the budget).
    """
    if strategy == "first":
        raise InvalidOption(
            "trim_messages: strategy='first' is not supported; ctxwindow keeps the system "
            "messages and the newest turns (strategy='last', or a ctxwindow strategy name)"
        )
    if include_system is not True:
        raise InvalidOption(
            "trim_messages: include_system=False is not supported; ctxwindow always keeps "
            "system messages (drop them from the list yourself if you must)"
        )
    if allow_partial or text_splitter is not None:
        raise InvalidOption(
            "trim_messages: allow_partial and text_splitter are not supported; ctxwindow "
            "keeps or drops whole messages (oversize='truncate' cuts the newest user message "
            "when the system and newest messages alone exceed max_tokens)"
        )
    starts, ends = _types(start_on, "start_on"), _types(end_on, "end_on")
    name = "fixed" if strategy == "last" else strategy
    windower = windower_for(None, name, max_tokens, _counter(token_counter), options)
    run = partial(_trim, windower=windower, start_on=starts, end_on=ends, query=query)
    if messages is None:
        return RunnableLambda(run, name="trim_messages")
    return run(messages)


def _trim(
    messages: Any,
    *,
    windower: Windower,
    start_on: tuple[Any, ...],
    end_on: tuple[Any, ...],
    query: str | None,
) -> list[BaseMessage]:
    if isinstance(messages, PromptValue):
        messages = messages.to_messages()
    elif not all(isinstance(m, BaseMessage) for m in messages):
        messages = convert_to_messages(messages)
    trim = None
    if start_on or end_on:
        remove = partial(_bounds, start_on=start_on, end_on=end_on)
        trim = Trim(remove, "outside start_on/end_on")
    window = Call(windower, read_messages(messages), SHAPE, query, None, trim).select()
    return list(window.messages)


def _types(value: Any, name: str) -> tuple[Any, ...]:
    if value is None:
        return ()
    values = value if isinstance(value, (list, tuple)) else (value,)
    for entry in values:
        if not (isinstance(entry, str) or (isinstance(entry, type) and
                                            issubclass(entry, BaseMessage))):  # fmt: skip
            raise InvalidOption(
                f"trim_messages: {name} takes message type names ('human', 'ai', ...) or "
                f"BaseMessage classes, got {entry!r}"
            )
    return tuple(values)


def _matches(message: BaseMessage, types: tuple[Any, ...]) -> bool:
    return any(message.type == t if isinstance(t, str) else isinstance(message, t) for t in types)


def _bounds(
    window: list[BaseMessage], *, start_on: tuple[Any, ...], end_on: tuple[Any, ...]
) -> set[int]:
    """Which window entries start_on and end_on remove: those before the first
    ``start_on`` match after the leading system messages, and those after the last
    ``end_on`` match; a match inside a tool exchange does not count, so that a call
    and its results stay together. A system message is never removed, wherever it is
    (a developer message in the middle of the history holds policy too)."""
    gone: set[int] = set()
    lead = 0
    while lead < len(window) and window[lead].type == "system":
        lead += 1
    size = len(window)

    def starts_unit(i: int) -> bool:
        return not isinstance(window[i], ToolMessage)

    def ends_unit(i: int) -> bool:
        return i + 1 >= size or not isinstance(window[i + 1], ToolMessage)

    if start_on:
        first = next(
            (i for i in range(lead, size) if _matches(window[i], start_on) and starts_unit(i)),
            size,
        )
        gone.update(range(lead, first))
    if end_on:
        last = next(
            (i for i in range(size - 1, -1, -1) if _matches(window[i], end_on) and ends_unit(i)),
            lead - 1,
        )
        gone.update(range(max(last + 1, lead), size))
    return {i for i in gone if window[i].type != "system"}


# -- reading --------------------------------------------------------------------------
def read_messages(messages: Sequence[Any]) -> Converted[BaseMessage]:
    """The messages as ctxwindow Messages, one each."""
    if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Sequence):
        raise InvalidMessage(None, f"expected a list of messages, got {type(messages).__name__}")
    return _READS.read(messages)


def _read(message: Any, index: int) -> Message:
    if not isinstance(message, BaseMessage):
        raise InvalidMessage(
            index, f"expected a LangChain BaseMessage, got {type(message).__name__}"
        )
    role = _role(message)
    if role is None:
        raise InvalidMessage(
            index,
            f"a {type(message).__name__} cannot be windowed; use SystemMessage, HumanMessage, "
            f"AIMessage (with tool_calls) or ToolMessage",
        )
    calls = _calls(message, index) if isinstance(message, AIMessage) else ()
    content = _content(message.content, frozenset(call.id for call in calls))
    tool_call_id = message.tool_call_id if isinstance(message, ToolMessage) else None
    try:
        return Message(
            role,  # type: ignore[arg-type]
            content if content or not calls else None,
            name=message.name if isinstance(message.name, str) else None,
            tool_calls=calls,
            tool_call_id=tool_call_id,
            id=message.id if isinstance(message.id, str) else None,
        )
    except InvalidMessage as error:
        raise InvalidMessage(index, error.problem) from None


def _role(message: BaseMessage) -> str | None:
    """The ctxwindow role of a message, a streamed chunk's too (``AIMessageChunk`` is an
    ``AIMessage``: the accumulated reply an agent loop appends); None for one that has
    no place in a chat request (a ``RemoveMessage``, a legacy ``FunctionMessage``)."""
    role = _ROLES.get(message.type)
    if role is not None:
        return role
    for kind, name in _KINDS:
        if isinstance(message, kind):
            return name
    if message.type in ("chat", "ChatMessageChunk"):
        given = getattr(message, "role", None)
        return given if given in _CHAT_ROLES else "user"
    return None


_KINDS: tuple[tuple[type[BaseMessage], str], ...] = (
    (ToolMessage, "tool"),
    (AIMessage, "assistant"),
    (HumanMessage, "user"),
    (SystemMessage, "system"),
)


def _calls(message: AIMessage, index: int) -> tuple[ToolCall, ...]:
    """The message's tool calls, its ``invalid_tool_calls`` too (arguments the model
    garbled): providers' integrations send both, and a tool answers each (with an
    error), so each is a call its results must stay with, and costs its arguments."""
    read = []
    for number, call in enumerate(message.tool_calls):
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidMessage(index, f"tool call {number} has no 'id'")
        read.append(ToolCall(call_id, call["name"], text_of(call.get("args", {}))))
    for garbled in message.invalid_tool_calls:
        call_id, name, arguments = garbled.get("id"), garbled.get("name"), garbled.get("args")
        if isinstance(call_id, str) and call_id:  # without an id no result can answer it
            read.append(ToolCall(call_id, name if isinstance(name, str) else "",
                                 arguments if isinstance(arguments, str) else ""))  # fmt: skip
    return tuple(read)


def _fields(message: Any) -> tuple[Any, ...]:
    """What an app may change in place on a message it keeps: read again if it differs.
    A list (content blocks, tool calls) is copied as it is now, each dict in it too: a
    list kept by reference equals itself after a block was appended or text streamed
    into one, while a copy equals it only until it changes. So the fields as they are
    (:func:`_fields_now`) equal what was kept while the message is unchanged, and the
    newest CHECKED messages are compared on every call without a copy."""
    content, calls, name, message_id = _now(message)
    return (_copied(content), _copied(calls), name, message_id)


def _fields_now(messages: Sequence[Any]) -> list[tuple[Any, ...]]:
    """:func:`_fields` of each message, as they are (no copies): see :func:`_fields`.
    Read inline from each ``__dict__`` (a call per message costs a fifth more: this runs
    for the newest CHECKED messages on every call), by :func:`_now` when one lacks it."""
    try:
        return [
            (fields["content"], fields.get("tool_calls"), fields["name"], fields["id"])
            for fields in map(_DICT, messages)
        ]
    except (AttributeError, KeyError):
        return list(map(_now, messages))


_DICT = operator.attrgetter("__dict__")


def _now(message: Any) -> tuple[Any, ...]:
    """The content, tool calls (None: a message without), name and id, read from the
    ``__dict__`` where pydantic keeps a model's fields (by attribute for any other
    object): read for the newest CHECKED messages on every call, this way costs half."""
    try:
        fields = message.__dict__
        return (fields["content"], fields.get("tool_calls"), fields["name"], fields["id"])
    except (AttributeError, KeyError):
        calls = message.tool_calls if isinstance(message, AIMessage) else None
        return (message.content, calls, message.name, message.id)


def _copied(value: Any) -> Any:
    """A list as it is now, in a list of its own (each dict in it copied too)."""
    if type(value) is not list:
        return value
    return [dict(entry) if type(entry) is dict else entry for entry in value]


#: The conversions made before: a history that grew costs converting what it added.
_READS: RecentReads[BaseMessage] = RecentReads(one_each(_read), _fields, _fields_now)


def _content(content: Any, calls: frozenset[str] = frozenset()) -> str | tuple[ContentPart, ...]:
    """The content as parts, less the call blocks that repeat one of ``calls`` (the
    message's tool calls, counted once as calls: ChatAnthropic's replies hold both)."""
    if isinstance(content, str):
        return content
    return tuple(_part(block) for block in content if not _repeats_call(block, calls))


def _repeats_call(block: Any, calls: frozenset[str]) -> bool:
    return (
        bool(calls)
        and isinstance(block, dict)
        and block.get("type") in _CALL_BLOCKS
        and block.get("id") in calls
    )


#: Blocks a model sees as media or opaque data (counted as such, kept beside a cut text),
#: and blocks that repeat the message's tool calls (counted with the calls). Any other
#: block without text is data the model reads as words (a json block, a search result).
_MEDIA = frozenset(
    ("image", "image_url", "input_image", "audio", "input_audio", "video", "file",
     "input_file", "document", "image_generation_call", "redacted_thinking")
)  # fmt: skip
_CALL_BLOCKS = frozenset(
    ("tool_use", "tool_call", "tool_call_chunk", "invalid_tool_call", "function_call",
     "server_tool_use")
)  # fmt: skip


def _part(block: Any) -> ContentPart:
    """A content block as a ContentPart: its words as text; a block of data (a
    ``json`` block, a search result) as the JSON of its fields, which the model reads
    as words and so is counted as words; media and call blocks as parts without text,
    their fields kept, for a LangChain counter to count as it counts them."""
    if isinstance(block, str):
        return ContentPart("text", block)
    if not isinstance(block, dict):
        return ContentPart("unknown")
    kind = str(block.get("type", "text"))
    text = block.get("text", block.get("thinking", block.get("reasoning")))
    if isinstance(text, str):
        return ContentPart(kind, text)
    fields = {key: value for key, value in block.items() if key != "type"}
    data = json.dumps(fields, sort_keys=True, default=str) if fields else None
    if kind in _CALL_BLOCKS or _is_media(kind, fields):
        return ContentPart(kind, None, data)
    return ContentPart(kind, data or "")


def _is_media(kind: str, fields: dict[str, Any]) -> bool:
    """A media block by its type, or any block carrying base64 data (a ``source`` or
    ``data`` field): bytes, never words."""
    if kind in _MEDIA:
        return True
    source = fields.get("source")
    return isinstance(fields.get("data"), str) or (
        isinstance(source, dict) and source.get("type") == "base64"
    )


# -- writing --------------------------------------------------------------------------
def _rebuild(
    message: BaseMessage, kept: Any, cut: tuple[frozenset[int] | None, str] | None
) -> BaseMessage:
    """A copy of a message with its text replaced: the newest user message cut to fit, or
    a tool result given a stand-in (messages are never split)."""
    if cut is None:
        return message
    content = message.content
    new: Any = cut[1]
    if isinstance(content, list) and not isinstance(message, ToolMessage):
        # the newest user message cut to fit keeps its media, as the core's cut does; a
        # tool result's stand-in (cleared, or cut) is its text alone, as counted
        media = [b for b in content if isinstance(b, dict) and _part(b).text is None]
        new = [{"type": "text", "text": cut[1]}, *media] if media else cut[1]
    return message.model_copy(update={"content": new})


def _made(message: Message, before: Sequence[Any]) -> BaseMessage:
    """A summary: its metadata (``synthetic``, ``covers``) under ``response_metadata``,
    which LangChain never sends to a provider."""
    kind: type[BaseMessage] = HumanMessage
    if message.role == "assistant":
        kind = AIMessage
    elif all(isinstance(m, SystemMessage) for m in before):
        kind = SystemMessage
    return kind(message.text, response_metadata={"ctxwindow": dict(message.metadata)})


def _item_id(message: Any) -> str | None:
    return message.id if isinstance(getattr(message, "id", None), str) else None


SHAPE: Shape[BaseMessage] = Shape("langchain", _rebuild, _made, _item_id)


# -- counting -------------------------------------------------------------------------
class LangChainCounter:
    """A ctxwindow TokenCounter over a LangChain token counter: a chat model
    (``get_num_tokens_from_messages``), a function of a message list or of one message,
    or ``"approximate"`` (``count_tokens_approximately``)."""

    def __init__(self, token_counter: Any) -> None:
        if token_counter == "approximate":
            token_counter = count_tokens_approximately
        self.source = token_counter
        self.name = f"langchain:{getattr(token_counter, '__name__', type(token_counter).__name__)}"
        self._count: Callable[[list[BaseMessage]], int]
        if isinstance(token_counter, BaseLanguageModel) or hasattr(
            token_counter, "get_num_tokens_from_messages"
        ):
            self._count = token_counter.get_num_tokens_from_messages
        elif callable(token_counter):
            if _takes_one_message(token_counter):
                self._count = lambda messages: sum(token_counter(m) for m in messages)
            else:
                self._count = token_counter
        else:
            raise InvalidOption(
                "token_counter must be a ctxwindow counter name or instance, a chat model, a "
                f"function of LangChain messages, or 'approximate'; got {token_counter!r}"
            )

    def count_text(self, text: str) -> int:
        return self._checked(self._count([HumanMessage(text)]))

    def count_message(self, message: Message) -> int:
        return self._checked(self._count([_to_langchain(message)]))

    def _checked(self, count: Any) -> int:
        """The count as an int; a fraction or a string is the counter's mistake, named
        (rounded, 0.9 a message would count a long history as nothing)."""
        if not isinstance(count, bool):
            try:
                return operator.index(count)  # an int, numpy's too
            except TypeError:
                if isinstance(count, numbers.Real) and float(count).is_integer():
                    return int(float(count))  # a whole float (7.0), as LangChain's trim takes
        raise InvalidOption(
            f"token counter {self.name!r} returned {count!r}; a LangChain token counter "
            "must return a whole number of tokens (an int, or a float such as 7.0)"
        )


def _takes_one_message(function: Callable[..., Any]) -> bool:
    try:
        first = next(iter(inspect.signature(function).parameters.values()))
    except (TypeError, ValueError, StopIteration):
        return False
    return first.annotation is BaseMessage or first.annotation == "BaseMessage"


def _to_langchain(message: Message) -> BaseMessage:
    """A ctxwindow Message as the LangChain message a counter reads."""
    content: Any = message.content
    if isinstance(content, tuple):
        content = [part.to_dict() for part in content]
    if message.role == "tool":
        return ToolMessage(content or "", tool_call_id=message.tool_call_id or "")
    if message.role == "assistant":
        calls = [
            {"name": c.name, "args": _arguments(c.arguments), "id": c.id, "type": "tool_call"}
            for c in message.tool_calls
        ]
        return AIMessage(content or "", tool_calls=calls)
    if message.role in ("system", "developer"):
        return SystemMessage(content or "")
    return HumanMessage(content or "", name=message.name)


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}


def _counter(counter: Any) -> Any:
    """A ctxwindow counter spec as is; a LangChain token counter wrapped."""
    if counter is None or (isinstance(counter, str) and counter != "approximate"):
        return counter
    if callable(getattr(counter, "count_message", None)):
        return counter
    return LangChainCounter(counter)
