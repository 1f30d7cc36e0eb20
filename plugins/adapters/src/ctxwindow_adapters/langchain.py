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
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
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
from ctxwindow_adapters._bridge import (
    Call,
    Converted,
    HostCut,
    Shape,
    Trim,
    prepare,
    text_of,
    windower_for,
)
from ctxwindow_adapters._reads import RecentReads, beside_media, one_each

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
    call = prepare(read, SHAPE, windower, strategy, budget, counted, options, query=query)
    with _counting_originals(call.converted):
        return call.select()


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
    call = prepare(read, SHAPE, windower, strategy, budget, counted, options, query=query)
    with _counting_originals(call.converted):
        return await call.aselect()


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
    message when the must-keep messages alone exceed the budget), and a ``start_on``
    naming tool messages (a tool result cannot open a window without its call).
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
    if any(_names_a_tool_result(entry) for entry in starts):
        raise InvalidOption(
            "trim_messages: start_on cannot name a tool message ('tool', ToolMessage): a "
            "window that starts on a tool result sends it without the AIMessage that "
            "called the tool, which providers reject; ctxwindow keeps a call and its "
            "results together (use start_on='human' or 'ai')"
        )
    name = "fixed" if strategy == "last" else strategy
    counter = _counter(token_counter, lasting=messages is None)
    windower = windower_for(None, name, max_tokens, counter, options)
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
    converted = read_messages(messages)
    with _counting_originals(converted):
        window = Call(windower, converted, SHAPE, query, None, trim).select()
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


def _names_a_tool_result(entry: str | type[BaseMessage]) -> bool:
    """Whether a start_on entry names tool results only: none can open a window without
    the call it answers (LangChain's own trim starts there and so orphans it)."""
    if isinstance(entry, str):
        return entry in ("tool", "ToolMessageChunk")
    return issubclass(entry, ToolMessage)


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
    A list (content blocks, tool calls) is copied as it is now, down to each dict and
    list in it (a call's ``args``, a block's nested fields): one kept by reference
    equals itself after a block was appended, text streamed into one or an argument
    set, while a copy equals it only until it changes. So the fields as they are
    (:func:`_fields_now`) equal what was kept while the message is unchanged, and the
    newest CHECKED messages are compared on every call without a copy. A tool result's
    ``tool_call_id`` is compared too: it decides which call the result answers."""
    content, calls, name, message_id, answers = _now(message)
    return (_copied(content), _copied(calls), name, message_id, answers)


def _fields_now(messages: Sequence[Any]) -> list[tuple[Any, ...]]:
    """:func:`_fields` of each message, as they are (no copies): see :func:`_fields`.
    Read inline from each ``__dict__`` (a call per message costs a fifth more: this runs
    for the newest CHECKED messages on every call), by :func:`_now` when one lacks it."""
    try:
        return [
            (
                fields["content"],
                fields.get("tool_calls"),
                fields["name"],
                fields["id"],
                fields.get("tool_call_id"),
            )
            for fields in map(_DICT, messages)
        ]
    except (AttributeError, KeyError):
        return list(map(_now, messages))


_DICT = operator.attrgetter("__dict__")


def _now(message: Any) -> tuple[Any, ...]:
    """The content, tool calls (None: a message without), name, id and the call a tool
    result answers (None: not a tool result), read from the ``__dict__`` where pydantic
    keeps a model's fields (by attribute for any other object): read for the newest
    CHECKED messages on every call, this way costs half."""
    try:
        fields = message.__dict__
        return (fields["content"], fields.get("tool_calls"), fields["name"], fields["id"],
                fields.get("tool_call_id"))  # fmt: skip
    except (AttributeError, KeyError):
        calls = message.tool_calls if isinstance(message, AIMessage) else None
        answers = message.tool_call_id if isinstance(message, ToolMessage) else None
        return (message.content, calls, message.name, message.id, answers)


def _copied(value: Any, depth: int = 8) -> Any:
    """A list or dict as it is now, in one of its own, each dict and list in it copied
    too (to ``depth``: deeper values are kept as they are). Same types as the original,
    so that the original equals the copy while unchanged (see :func:`_fields`)."""
    kind = type(value)
    if depth <= 0 or (kind is not list and kind is not dict):
        return value
    deeper = depth - 1
    if kind is list:
        return [v if type(v) not in _NESTED else _copied(v, deeper) for v in value]
    return {k: v if type(v) not in _NESTED else _copied(v, deeper) for k, v in value.items()}


_NESTED = frozenset({list, dict})


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
    if kind == "reasoning":  # a Responses API reasoning item (ChatOpenAI's responses/v1)
        return ContentPart(kind, _reasoning_text(block))
    fields = {key: value for key, value in block.items() if key != "type"}
    data = json.dumps(fields, sort_keys=True, default=str) if fields else None
    if kind in _CALL_BLOCKS or _is_media(kind, fields):
        return ContentPart(kind, None, data)
    return ContentPart(kind, data or "")


def _reasoning_text(block: dict[str, Any]) -> str:
    """A reasoning block's summary and content texts, as the Responses adapter counts a
    reasoning item: its ``encrypted_content`` is opaque to the model's reader and
    costs what the provider decrypts, not its thousands of base64 characters."""
    texts = []
    for key in ("summary", "content"):
        value = block.get(key)
        for part in [value] if isinstance(value, (str, dict)) else value or ():
            text = part.get("text") if isinstance(part, dict) else part
            texts.append(text if isinstance(text, str) else json.dumps(part, default=str))
    return "\n".join(texts)


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
    """A copy of a message with its text replaced: the newest user message cut to fit,
    or a tool result given a stand-in (messages are never split). A cut keeps the
    message's media blocks where they were, as the core's cut counts them; a strategy's
    stand-in for a tool result (a cleared output) is its text alone, as counted."""
    if cut is None:
        return message
    content = message.content
    new: Any = str(cut[1])  # a HostCut is a str of its own: never one in the output
    cutting = not isinstance(message, ToolMessage) or isinstance(cut[1], HostCut)
    if isinstance(content, list) and cutting:
        new = beside_media(content, {"type": "text", "text": new}, _is_media_block) or new
    return message.model_copy(update={"content": new})


def _is_media_block(block: Any) -> bool:
    """Whether a block stays as it is beside a cut text (media, opaque data)."""
    return isinstance(block, dict) and _part(block).text is None


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


SHAPE: Shape[BaseMessage] = Shape("langchain", _rebuild, _made, _item_id, host_cuts=True)


# -- counting -------------------------------------------------------------------------
class LangChainCounter:
    """A ctxwindow TokenCounter over a LangChain token counter: a chat model
    (``get_num_tokens_from_messages``), a function of a message list or of one message,
    or ``"approximate"`` (``count_tokens_approximately``).

    Inside an adapter call a Message read from the caller's list is counted as the
    caller's own message (all its fields, as the counter would see them sent), and a
    copy of one with new text (a stand-in, a cut) as the copy the window sends; only a
    message a strategy made (a summary) is counted as rebuilt from its fields."""

    def __init__(self, token_counter: Any, *, _reference: Callable[[], Any] | None = None) -> None:
        if isinstance(token_counter, str) and token_counter == "approximate":
            token_counter = count_tokens_approximately
        self.name = f"langchain:{getattr(token_counter, '__name__', type(token_counter).__name__)}"
        self._kind = _kind_of(token_counter)
        # held weakly (through ``_reference``) only by the per-counter memo (_Wrappers)
        self._reference: Callable[[], Any] = _reference or partial(_itself, token_counter)

    @property
    def source(self) -> Any:
        """The LangChain token counter counted with."""
        return self._reference()

    def count_text(self, text: str) -> int:
        return self._checked(self._count([HumanMessage(text)]))

    def count_message(self, message: Message) -> int:
        return self._checked(self._count([_as_sent(message)]))

    def _count(self, messages: list[BaseMessage]) -> Any:
        source = self._reference()
        if source is None:  # pragma: no cover - the memo drops a wrapper with its counter
            raise InvalidOption(f"token counter {self.name!r} no longer exists")
        if self._kind == "model":
            return source.get_num_tokens_from_messages(messages)
        if self._kind == "one message":
            return sum(source(m) for m in messages)
        return source(messages)

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


def _itself(value: Any) -> Any:
    return value


def _kind_of(token_counter: Any) -> str:
    """How a token counter is asked: a chat model, a function of one message, or a
    function of a list."""
    if isinstance(token_counter, BaseLanguageModel) or hasattr(
        token_counter, "get_num_tokens_from_messages"
    ):
        return "model"
    if callable(token_counter):
        return "one message" if _takes_one_message(token_counter) else "list"
    raise InvalidOption(
        "token_counter must be a ctxwindow counter name or instance, a chat model, a "
        f"function of LangChain messages, or 'approximate'; got {token_counter!r}"
    )


#: The caller's messages read for the adapter call running in this context: what
#: :meth:`LangChainCounter.count_message` counts in place of a Message read from them.
_ORIGINALS: ContextVar[Converted[BaseMessage] | None] = ContextVar(
    "ctxwindow_langchain_originals", default=None
)


@contextmanager
def _counting_originals(converted: Converted[BaseMessage]) -> Iterator[None]:
    """Within: a LangChain counter counts the caller's own messages, not rebuilt ones
    (which lose what a counter may count: a ChatAnthropic reply's tool_use blocks)."""
    token = _ORIGINALS.set(converted)
    try:
        yield
    finally:
        _ORIGINALS.reset(token)


def _as_sent(message: Message) -> BaseMessage:
    """The LangChain message the window sends for ``message``: the caller's own, for a
    Message read from the caller's list; a copy of the caller's with the new text, for a
    copy of one (a strategy's stand-in for a tool result, the host's cut of a tool
    result or of the newest user message), as :func:`_rebuild` makes it; else (a
    summary, or outside an adapter call) the message rebuilt from its fields."""
    converted = _ORIGINALS.get()
    if converted is None:
        return _to_langchain(message)
    position = converted.position_of(message)
    if position is not None:
        return converted.items[converted.sources[position][0]]
    original = _copied_from(message, converted)
    if original is None:
        return _to_langchain(message)
    return _rebuild(original, None, (None, message.text))


def _copied_from(message: Message, converted: Converted[BaseMessage]) -> BaseMessage | None:
    """The caller's message ``message`` is a copy of, with new text: the one it says it
    stands in for, else for a tool result the newest answering its call, for the cut
    of the newest user message that message; None for a message a strategy made."""
    messages, size = converted.messages, len(converted.messages)
    stood = message.metadata.get("stands_in_for")
    if type(stood) is int and 0 <= stood < size:
        return converted.items[converted.sources[stood][0]]
    wanted: tuple[str, str | None]
    if message.role == "tool" and message.tool_call_id is not None:
        wanted = ("tool", message.tool_call_id)
    elif message.role == "user" and message.metadata.get("truncated"):
        wanted = ("user", None)
    else:
        return None
    for position in range(size - 1, -1, -1):  # the newest: where a cut or stand-in is
        read = messages[position]
        if read.role == wanted[0] and (wanted[1] is None or read.tool_call_id == wanted[1]):
            return converted.items[converted.sources[position][0]]
    return None


class _Wrappers:
    """One LangChainCounter per token counter object: the core caches counts per
    counter object, so a wrapper made afresh each call would have every message counted
    again, where a list grown by one message should cost that message's count.

    Weak where the token counter can be referred to weakly (a function, a chat model, a
    bound method's object): its entry, and the wrapper, hold it weakly, so a counter
    made per request is freed with it (an entry whose counter is gone is never found,
    and is swept out as entries grow). A counter that cannot be (an object whose class
    has no ``__weakref__`` slot) is held among the newest ``held`` such counters only.
    Thread-safe."""

    def __init__(self, held: int = 32) -> None:
        self._lock = threading.Lock()
        self._weak: dict[tuple[int, int], LangChainCounter] = {}
        self._sweep_at = 64
        self._strong: OrderedDict[tuple[int, int], LangChainCounter] = OrderedDict()
        self._held = held

    def get(self, token_counter: Any) -> LangChainCounter:
        """The wrapper of ``token_counter``, made on first use."""
        key = _identity(token_counter)
        with self._lock:
            known = self._weak.get(key) or self._strong.get(key)
            if known is not None and _same(known.source, token_counter):
                if key in self._strong:
                    self._strong.move_to_end(key)
                return known
            reference = _weak_reference(token_counter)
            if reference is None:
                made = self._strong[key] = LangChainCounter(token_counter)
                self._weak.pop(key, None)
                while len(self._strong) > self._held:
                    self._strong.popitem(last=False)
                return made
            made = self._weak[key] = LangChainCounter(token_counter, _reference=reference)
            self._strong.pop(key, None)
            if len(self._weak) > self._sweep_at:
                self._weak = {k: w for k, w in self._weak.items() if w.source is not None}
                self._sweep_at = max(64, 2 * len(self._weak))
            return made

    def __len__(self) -> int:
        return len(self._weak) + len(self._strong)


def _identity(token_counter: Any) -> tuple[int, int]:
    """What names a token counter: the object, or a bound method's object and function
    (``model.get_num_tokens_from_messages`` is a new object at each access)."""
    if inspect.ismethod(token_counter):
        return id(token_counter.__self__), id(token_counter.__func__)
    return id(token_counter), 0


def _same(held: Any, token_counter: Any) -> bool:
    if held is None:
        return False
    if inspect.ismethod(token_counter):
        return (
            inspect.ismethod(held)
            and held.__self__ is token_counter.__self__
            and held.__func__ is token_counter.__func__
        )
    return held is token_counter


def _weak_reference(token_counter: Any) -> Callable[[], Any] | None:
    """A weak reference to a token counter (to a bound method's object), or None when
    it cannot have one."""
    try:
        if inspect.ismethod(token_counter):
            return weakref.WeakMethod(token_counter)
        return weakref.ref(token_counter)
    except TypeError:
        return None


_WRAPPERS = _Wrappers()


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


def _counter(counter: Any, *, lasting: bool = False) -> Any:
    """A ctxwindow counter spec as is; a LangChain token counter wrapped, in the one
    wrapper kept for it (see :class:`_Wrappers`), or, when ``lasting`` (a Runnable's,
    built once and kept), in a wrapper of its own that holds it."""
    if counter is None or (isinstance(counter, str) and counter != "approximate"):
        return counter
    if callable(getattr(counter, "count_message", None)):
        return counter
    if isinstance(counter, str):  # "approximate"
        counter = count_tokens_approximately
    return LangChainCounter(counter) if lasting else _WRAPPERS.get(counter)
