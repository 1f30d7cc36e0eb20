"""pydantic-ai: a history processor that windows ``list[ModelMessage]``.

    from pydantic_ai.capabilities import ProcessHistory

    agent = Agent(model, capabilities=[ProcessHistory(ctxwindow_processor(budget=4000))])

(or ``history_processors=[...]`` on versions of pydantic-ai that still take it; the
processor is an async callable of the message list, without RunContext).

A ``ModelResponse`` is one assistant message: its ``ToolCallPart`` calls, and the
``ToolReturnPart`` (or tool ``RetryPromptPart``) parts answering them in the next
``ModelRequest``, are one unit. A request is split by its parts: system prompt parts
(always kept), tool returns (with their call), user prompts and retry feedback (units of
their own); parts of any other kind go with a neighbouring part of the same request. A
request partly kept comes back as a copy (``dataclasses.replace``) holding its kept
parts; kept whole, it is the very object passed in, as is every kept response. The
last request is always kept, since pydantic-ai requires the processed history to end
with one. A summary a strategy writes comes as a ``ModelRequest`` holding a
``UserPromptPart`` (a note it makes as the assistant's, as a ``ModelResponse``).

pydantic-ai stores what a processor returns as the run's history, so what is dropped
(or summarized) here is gone from the run's messages too.

Needs ``pip install 'ctxwindow-adapters[pydantic-ai]'`` (pydantic-ai-slim).
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any, cast

try:
    from pydantic_ai.messages import (
        AudioUrl,
        BinaryContent,
        DocumentUrl,
        ImageUrl,
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
        VideoUrl,
    )
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "ctxwindow_adapters.pydantic_ai needs pydantic-ai: "
        "pip install 'ctxwindow-adapters[pydantic-ai]'"
    ) from error

from ctxwindow import ContentPart, Message, Strategy, TokenCounter, ToolCall, Window, Windower
from ctxwindow.errors import BudgetTooSmall, InvalidMessage
from ctxwindow.kit import snapshot
from ctxwindow_adapters._bridge import (
    Call,
    Converted,
    HostCut,
    Shape,
    prepare,
    text_of,
    windower_for,
)
from ctxwindow_adapters._reads import RecentReads, beside_media

__all__ = ["HistoryProcessor", "aselect", "ctxwindow_processor", "read_messages", "select"]


def select(
    messages: Sequence[ModelMessage],
    budget: int | None = None,
    strategy: str | Strategy | None = None,
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    windower: Windower | None = None,
    **options: Any,
) -> Window[ModelMessage]:
    """The window of pydantic-ai ``messages``: the same objects, those that fit."""
    read = partial(read_messages, messages)
    call = prepare(read, SHAPE, windower, strategy, budget, counter, options, query=query)
    seeing = _Seeing(call.windower)
    call = dataclasses.replace(call, windower=cast(Windower, seeing))
    with _biggest_in_items(call), _made_here() as made:
        window = call.select()
    return _remembering_made(window, seeing, call.converted, made)


async def aselect(
    messages: Sequence[ModelMessage],
    budget: int | None = None,
    strategy: str | Strategy | None = None,
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    windower: Windower | None = None,
    **options: Any,
) -> Window[ModelMessage]:
    """Async :func:`select`: a strategy that waits (an LLM summary) runs off the loop."""
    read = partial(read_messages, messages)
    call = prepare(read, SHAPE, windower, strategy, budget, counter, options, query=query)
    return await _awindowed(call)


async def _awindowed(call: Call) -> Window[ModelMessage]:
    """``call``'s window, the messages it made remembered (see :class:`_Expansion`)."""
    seeing = _Seeing(call.windower)
    call = dataclasses.replace(call, windower=cast(Windower, seeing))
    with _biggest_in_items(call), _made_here() as made:
        window = await call.aselect()
    return _remembering_made(window, seeing, call.converted, made)


class HistoryProcessor:
    """An async pydantic-ai history processor (no RunContext) bound to one Windower,
    built once so that a strategy's caches (a rolling summary) last across requests.

    ``last`` is the most recent window, with its record.
    """

    def __init__(self, windower: Windower, query: str | None = None) -> None:
        self.windower = windower
        self.query = query
        self.last: Window[ModelMessage] | None = None

    async def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        call = Call(self.windower, read_messages(messages), SHAPE, self.query)
        window = await _awindowed(call)
        self.last = window
        return list(window.messages)

    def capability(self) -> Any:
        """This processor as pydantic-ai's ``ProcessHistory`` capability."""
        from pydantic_ai.capabilities import ProcessHistory

        return ProcessHistory(self)

    def __repr__(self) -> str:
        return f"HistoryProcessor({self.windower!r})"


def ctxwindow_processor(
    budget: int | None = None,
    strategy: str | Strategy | None = None,
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    windower: Windower | None = None,
    **options: Any,
) -> HistoryProcessor:
    """A history processor for ``Agent(history_processors=[...])``: a strategy by name
    (with its options) or instance, a budget and a counter, or a configured Windower."""
    chosen = windower_for(windower, strategy, budget, counter, options)
    if windower is not None and budget is not None:
        chosen = _with_budget(chosen, budget)
    return HistoryProcessor(chosen, query)


def _with_budget(windower: Windower, budget: int) -> Windower:
    """``windower`` with another budget, its time limit kept: an app that bounds a
    visit's time means it whatever the budget."""
    limit = windower.time_limit
    if limit is None:
        return Windower(windower.strategy, budget, windower.counter, windower.distribution)
    return Windower(
        windower.strategy,
        budget,
        windower.counter,
        windower.distribution,
        time_limit=limit.seconds,
        on_timeout=limit.on_timeout,
    )


# -- errors ---------------------------------------------------------------------------
@contextmanager
def _biggest_in_items(call: Call) -> Iterator[None]:
    """BudgetTooSmall naming the caller's message that is too big (its index in the list
    passed, the part and tool), with advice that can help for that kind of part."""
    try:
        yield
    except BudgetTooSmall as error:
        raise _budget_error(error, call) from None


def _budget_error(error: BudgetTooSmall, call: Call) -> BudgetTooSmall:
    converted = call.converted
    position, size = error.position, error.biggest_tokens
    if position is None or size is None or position >= len(converted.messages):
        return error
    tokens = f"{size:,}"
    message = converted.messages[position]
    index = converted.sources[position][0]
    item = converted.items[index]
    part = _part_of(item, message, converted.parts[position])
    kind = type(part).__name__ if part is not None else type(item).__name__
    tool = getattr(part, "tool_name", None)
    what = f"{kind} of tool {tool!r} (call {message.tool_call_id!r})" if tool else kind
    biggest = f"message {index} of the messages passed, its {what}, {tokens} tokens"
    options = getattr(call.windower.strategy, "options", None)
    policy = options.get("oversize") if isinstance(options, Mapping) else None
    advice = _advice(message.role, part, tool, policy)
    if advice is None:  # the core's own, for a part this adapter has no words of its own for
        text = str(error).replace(error.biggest or "", biggest)
        return _with_text(error, text, biggest, index)
    text = (
        f"the messages that must be kept need {error.needed:,} tokens but the budget "
        f"leaves {error.budget:,}; the biggest is {biggest}; {advice}"
    )
    return _with_text(error, text, biggest, index)


def _advice(role: str, part: Any, tool: Any, policy: Any) -> str | None:
    """What can help, in pydantic-ai's terms: the parts an app sees in its history and
    the options ``select`` and ``ctxwindow_processor`` take (None: the core's advice)."""
    if role == "tool" and isinstance(part, RetryPromptPart):
        return f"raise the budget, or have tool {tool!r} raise ModelRetry with a shorter message"
    if role == "tool" and policy == "raise":
        return (
            "pass oversize='cut' (the default) to ctxwindow_processor or select, which "
            "cuts the largest ToolReturnParts of the last request to fit, their head and "
            "tail kept, or raise the budget"
        )
    if role == "tool":
        returning = f"have tool {tool!r} return less" if tool else "have the tool return less"
        return (
            f"raise the budget (even cut to their head and tail, the last request's "
            f"ToolReturnParts do not fit), or {returning}; truncating the UserPromptPart "
            f"cannot help"
        )
    if role == "system":
        return "raise the budget, or shorten the agent's system_prompt (this SystemPromptPart)"
    if isinstance(part, UserPromptPart):
        return (
            "raise the budget, or pass oversize='truncate' to ctxwindow_processor or select "
            "to cut the last request's UserPromptPart text (and its ToolReturnParts) with "
            "a marker"
        )
    return None


def _with_text(error: BudgetTooSmall, text: str, biggest: str, index: int) -> BudgetTooSmall:
    """The error restated for the caller's list: ``position`` is the item's index in it."""
    named = BudgetTooSmall(
        error.needed,
        error.budget,
        biggest=biggest,
        position=index,
        biggest_tokens=error.biggest_tokens,
    )
    named.args = (text,)
    return named


def _part_of(item: Any, message: Message, parts: frozenset[int] | None) -> Any:
    """The part of a request that a converted Message holds (None for a response)."""
    if not isinstance(item, ModelRequest):
        return None
    numbers = sorted(parts) if parts is not None else range(len(item.parts))
    candidates = [item.parts[n] for n in numbers]
    if message.role == "tool":
        call = message.tool_call_id
        candidates = [p for p in candidates if getattr(p, "tool_call_id", None) == call]
    kinds: dict[str, type | tuple[type, ...]] = {
        "system": SystemPromptPart,
        "user": (UserPromptPart, RetryPromptPart),
    }
    wanted = kinds.get(message.role)
    if wanted is not None:
        candidates = [p for p in candidates if isinstance(p, wanted)]
    return candidates[0] if candidates else None


# -- reading --------------------------------------------------------------------------
def read_messages(messages: Sequence[Any]) -> Converted[ModelMessage]:
    """The messages as ctxwindow Messages: one per response, one or more per request. A
    list that grew since a call before costs reading what it added."""
    if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, Sequence):
        raise InvalidMessage(
            None, f"expected a list of ModelMessage, got {type(messages).__name__}"
        )
    return _READS.read(messages)


def _read_from(messages: Sequence[Any], start: int, converted: Converted[ModelMessage]) -> int:
    """Read ``messages[start:]`` into ``converted``. The last request needs no pin to
    stay: what it holds is what the core always keeps (the newest user message, the
    current turn's tool returns, system prompts), and a Message that read differently
    once it is no longer last would make every turn a history the core reads whole."""
    for index in range(start, len(messages)):
        message = messages[index]
        made = _made_metadata(message)
        if made is not None and _read_made(converted, message, made, index):
            continue
        if isinstance(message, ModelResponse):
            converted.add(_response(message, index), (index,))
        elif isinstance(message, ModelRequest):
            _request(converted, message, index)
        else:
            raise InvalidMessage(
                index, f"expected a ModelRequest or ModelResponse, got {type(message).__name__}"
            )
    return len(messages)


def _content_of(message: Any) -> Any:
    """What an app may change in place on a message it keeps: its parts, and what each
    holds, down to a tool return's nested fields (see :func:`snapshot`)."""
    return snapshot(list(getattr(message, "parts", ())))


def _response(response: ModelResponse, index: int) -> Message:
    """A response as one assistant Message: its words, its calls, and a file the model
    made (a ``FilePart``: an image) as a non-text part counting a fixed amount, as the
    same image sent by the user does, never as the characters of its bytes."""
    texts: list[str | ContentPart] = []
    calls: list[ToolCall] = []
    for part in response.parts:
        if isinstance(part, ToolCallPart):
            calls.append(ToolCall(part.tool_call_id, part.tool_name, part.args_as_json_str()))
        elif isinstance(part, (TextPart, ThinkingPart)):
            texts.append(part.content)
        elif isinstance(file := getattr(part, "content", None), _MEDIA):  # a FilePart
            texts.append(ContentPart(str(getattr(file, "kind", "file"))))
        else:  # built-in tool calls and returns: counted by what they hold
            texts.append(text_of(getattr(part, "content", getattr(part, "args", None))))
    content: str | tuple[ContentPart, ...] | None
    if any(isinstance(t, ContentPart) for t in texts):
        content = tuple(t if isinstance(t, ContentPart) else ContentPart("text", t)
                        for t in texts if t)  # fmt: skip
    else:
        text = "\n".join(t for t in texts if isinstance(t, str) and t)
        content = text if text or not calls else None
    try:
        return Message("assistant", content, tool_calls=tuple(calls))
    except InvalidMessage as error:
        raise InvalidMessage(index, error.problem) from None


def _answers(part: Any) -> bool:
    """Whether a request part answers a tool call of the previous response."""
    if isinstance(part, ToolReturnPart):
        return True
    return isinstance(part, RetryPromptPart) and part.tool_name is not None


def _request(converted: Converted[ModelMessage], request: ModelRequest, index: int) -> None:
    """Tool answers first (each its own Message), then the request's other parts;
    parts of no known kind ride with a neighbour."""
    pieces: list[tuple[Message, list[int]]] = []
    riders: list[int] = []
    answers = [k for k, part in enumerate(request.parts) if _answers(part)]
    for number in answers:
        answer: Any = request.parts[number]
        text = answer.model_response() if isinstance(answer, RetryPromptPart) else None
        result = Message(
            "tool",
            _return_content(answer) if text is None else text,
            tool_call_id=answer.tool_call_id,
        )
        pieces.append((result, [number]))
    for number, part in enumerate(request.parts):
        if number in answers:
            continue
        expansion = _MADE_PARTS.get(part)
        if expansion is not None:  # a summary this adapter made, in a merged request
            for read in expansion.messages():
                pieces.append((read, [number, *riders] if not pieces else [number]))
                riders = []
            continue
        message = _other(part)
        if message is None:
            riders.append(number)
            if pieces:
                pieces[-1][1].append(number)
            continue
        pieces.append((message, [number, *riders] if not pieces else [number]))
        riders = []
    if not pieces:  # only parts of other kinds: the request is one (empty) user message
        converted.add(Message("user", ""), (index,))
        return
    if len(pieces) == 1:
        converted.add(pieces[0][0], (index,))
        return
    for message, numbers in pieces:
        converted.add(message, (index,), frozenset(numbers))


def _return_content(part: ToolReturnPart) -> str | tuple[ContentPart, ...]:
    """A tool return's content: its text, or parts when it holds images or files (each
    a non-text part counting a fixed amount, as in a UserPromptPart, never as the few
    characters pydantic-ai renders it as, nor as its bytes)."""
    content = part.content
    held = content if isinstance(content, (list, tuple)) else [content]
    if not any(isinstance(item, _MEDIA) for item in held):
        return _return_text(part)
    return tuple(_return_piece(item) for item in held)


#: What a model reads as media (pydantic-ai's MultiModalContent, in every version).
_MEDIA = (ImageUrl, AudioUrl, DocumentUrl, VideoUrl, BinaryContent)


def _return_piece(item: Any) -> ContentPart:
    if isinstance(item, _MEDIA):
        return ContentPart(str(getattr(item, "kind", "file")))
    return ContentPart("text", item if isinstance(item, str) else text_of(item))


def _return_text(part: ToolReturnPart) -> str:
    try:
        return part.model_response_str()
    except Exception:  # a content the library cannot render: count what it holds
        return text_of(part.content)


def _other(part: Any) -> Message | None:
    if isinstance(part, SystemPromptPart):
        return Message("system", part.content)
    if isinstance(part, UserPromptPart):
        return Message("user", _user_content(part.content))
    if isinstance(part, RetryPromptPart) or getattr(part, "part_kind", "") == "retry-feedback":
        text = part.model_response() if hasattr(part, "model_response") else text_of(part.content)
        return Message("user", text)
    return None


def _user_content(content: Any) -> str | tuple[ContentPart, ...]:
    """A user prompt's text and media parts; a ``CachePoint`` marks where a provider
    caches the prompt up to, and is sent as no content: it counts nothing."""
    if isinstance(content, str):
        return content
    parts = []
    for item in content:
        if _is_marker(item):
            continue
        if isinstance(item, str):
            parts.append(ContentPart("text", item))
        elif isinstance(getattr(item, "content", None), str):  # TextContent and the like
            parts.append(ContentPart("text", item.content))
        else:
            parts.append(ContentPart(str(getattr(item, "kind", "file"))))
    return tuple(parts)


def _is_marker(item: Any) -> bool:
    """Whether a content item is a marker sent as no content (a ``CachePoint``)."""
    return getattr(item, "kind", None) == "cache-point"


def _made_metadata(message: Any) -> dict[str, Any] | None:
    """The ctxwindow metadata of a message this adapter made (a summary), passed back:
    pydantic-ai keeps what a processor returns as the run's history."""
    metadata = getattr(message, "metadata", None)
    made = metadata.get("ctxwindow") if isinstance(metadata, dict) else None
    return made if isinstance(made, dict) and made.get("synthetic") else None


def _read_made(
    converted: Converted[ModelMessage], message: Any, made: dict[str, Any], index: int
) -> bool:
    """A message this adapter made, passed back, read as the Messages it stands for
    where they are remembered (see :class:`_Expansion`): the strategy then sees the
    history it summarized before and rolls that summary on. Else, unless a part of it
    is remembered (read with the request's parts), as a made message, never the user's
    words: a summary, a system message marked ``synthetic`` (content, not an
    instruction); a note, the assistant's. False: read it as any message."""
    expansion = _EXPANSIONS.get(made.get(_MADE_KEY))
    if expansion is not None:
        for read in expansion.messages():
            converted.add(read, (index,))
        return True
    if any(_MADE_PARTS.get(part) is not None for part in message.parts):
        return False
    texts = [p.content for p in message.parts if isinstance(getattr(p, "content", None), str)]
    metadata = {key: value for key, value in made.items() if key != _MADE_KEY}
    text = "\n".join(texts)
    assistant = isinstance(message, ModelResponse)
    read = Message("assistant" if assistant else "system", text, metadata=metadata)
    converted.add(read, (index,))
    return True


#: Under ``metadata["ctxwindow"]`` of a message this adapter made: the key of what it
#: stands for, in this process (see :class:`_Expansion`).
_MADE_KEY = "made"


class _Expansion:
    """The Messages a window left out where a message it made (a summary) stands, so
    that the message passed back is read as them: pydantic-ai keeps a processor's
    output as the run's history, and a summary read as words would be summarized
    again on a later turn, nested in the next ("Summary of ...: Summary of ..."). An
    earlier expansion the window left out whole is held, not copied: each turn's costs
    what that turn left out."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: Sequence[Message | _Expansion]) -> None:
        self.pieces = tuple(pieces)
        self.size: int = sum(p.size if isinstance(p, _Expansion) else 1 for p in self.pieces)

    def messages(self) -> list[Message]:
        """The Messages, in order (without recursion: a chain as long as the chat)."""
        out: list[Message] = []
        stack = [iter(self.pieces)]
        while stack:
            for piece in stack[-1]:
                if isinstance(piece, _Expansion):
                    stack.append(iter(piece.pieces))
                    break
                out.append(piece)
            else:
                stack.pop()
        return out


class _Expansions:
    """The newest expansions by key, the least recently used forgotten first (a made
    message passed back after that is read as a made message). Thread-safe."""

    def __init__(self, kept: int = 256) -> None:
        self._lock = threading.Lock()
        self._held: OrderedDict[str, _Expansion] = OrderedDict()
        self._kept = kept

    def get(self, key: Any) -> _Expansion | None:
        if not isinstance(key, str):
            return None
        with self._lock:
            found = self._held.get(key)
            if found is not None:
                self._held.move_to_end(key)
            return found

    def put(self, expansion: _Expansion) -> str:
        key = uuid.uuid4().hex
        with self._lock:
            self._held[key] = expansion
            while len(self._held) > self._kept:
                self._held.popitem(last=False)
        return key


_EXPANSIONS = _Expansions()


class _MadeParts:
    """The expansion of each part this adapter made (a summary's ``UserPromptPart``),
    by identity, held weakly: pydantic-ai merges consecutive requests before a history
    processor sees them, keeping their parts but not their metadata. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, tuple[weakref.ref[Any], _Expansion]] = {}

    def get(self, part: Any) -> _Expansion | None:
        found = self._held.get(id(part))
        return found[1] if found is not None and found[0]() is part else None

    def put(self, part: Any, expansion: _Expansion) -> None:
        key = id(part)

        def forget(_: Any) -> None:
            with self._lock:
                if self._held.get(key, (None,))[0] is reference:
                    del self._held[key]

        reference = weakref.ref(part, forget)
        with self._lock:
            self._held[key] = (reference, expansion)


_MADE_PARTS = _MadeParts()


class _Seeing:
    """A Windower that keeps the last window the core gave (in Messages): what the
    messages it made stand in place of is read from it. Anything else is the
    windower's."""

    def __init__(self, windower: Windower) -> None:
        self.windower = windower
        self.seen: Window[Any] | None = None

    def select(self, *args: Any, **kwargs: Any) -> Window[Any]:
        self.seen = self.windower.select(*args, **kwargs)
        return self.seen

    async def aselect(self, *args: Any, **kwargs: Any) -> Window[Any]:
        self.seen = await self.windower.aselect(*args, **kwargs)
        return self.seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self.windower, name)


#: The ctxwindow metadata of each message :func:`_made` made in this call, in order.
_MADE: ContextVar[list[tuple[dict[str, Any], Any]] | None] = ContextVar(
    "ctxwindow_pai_made", default=None
)


@contextmanager
def _made_here() -> Iterator[list[tuple[dict[str, Any], Any]]]:
    made: list[tuple[dict[str, Any], Any]] = []
    token = _MADE.set(made)
    try:
        yield made
    finally:
        _MADE.reset(token)


def _remembering_made(
    window: Window[ModelMessage],
    seeing: _Seeing,
    converted: Converted[ModelMessage],
    made: list[tuple[dict[str, Any], Any]],
) -> Window[ModelMessage]:
    """``window``, each message it made keyed to the Messages left out where it stands
    (see :class:`_Expansion`): those after the one made before it (or the start) and
    before the first Message the core window keeps after it."""
    core = seeing.seen
    if not made or core is None:
        return window
    position_of, size = converted.positions(), len(converted.messages)
    kept: set[int] = set()
    places: list[int] = []  # where each made message stands, in converted positions
    pending = 0
    for message in core.messages:
        position = position_of(message)
        if position is None:
            stood = message.metadata.get("stands_in_for")
            position = stood if type(stood) is int and 0 <= stood < size else None
        if position is None:
            pending += 1
            continue
        kept.add(position)
        places.extend([position] * pending)
        pending = 0
    places.extend([size] * pending)
    if len(places) != len(made):  # not one made message each: nothing is remembered
        return window
    start = 0
    for (metadata, part), place in zip(made, places, strict=True):
        pieces = _left_out(converted, range(start, place), kept)
        if pieces:
            expansion = _Expansion(pieces)
            metadata[_MADE_KEY] = _EXPANSIONS.put(expansion)
            _MADE_PARTS.put(part, expansion)
        start = max(start, place)
    return window


def _left_out(
    converted: Converted[ModelMessage], positions: range, kept: set[int]
) -> list[Message | _Expansion]:
    """The Messages at ``positions`` the window left out, in order; those read from a
    made message passed back, when all are left out, as its expansion itself."""
    pieces: list[Message | _Expansion] = []
    messages, sources = converted.messages, converted.sources
    position = positions.start
    while position < positions.stop:
        expansion = _expansion_at(converted, position)
        if expansion is not None:
            end = min(positions.stop, position + expansion.size)
            run = range(position, end)
            same = (sources[position], converted.parts[position])
            if (
                len(run) == expansion.size
                and not kept.intersection(run)
                and all((sources[p], converted.parts[p]) == same for p in run)
            ):
                pieces.append(expansion)
                position = end
                continue
        if position not in kept:
            pieces.append(messages[position])
        position += 1
    return pieces


def _expansion_at(converted: Converted[ModelMessage], position: int) -> _Expansion | None:
    """The expansion the Message at ``position`` was read from, if any: a made message's
    passed back whole, or a made part's in a merged request."""
    sources = converted.sources[position]
    if len(sources) != 1:
        return None
    item = converted.items[sources[0]]
    parts = converted.parts[position]
    if parts is None:
        made = _made_metadata(item)
        return _EXPANSIONS.get(made.get(_MADE_KEY)) if made is not None else None
    if len(parts) != 1:
        return None
    (number,) = parts
    held = getattr(item, "parts", ())
    return _MADE_PARTS.get(held[number]) if number < len(held) else None


# -- writing --------------------------------------------------------------------------
def _rebuild(
    message: Any, kept: Sequence[int] | None, cut: tuple[frozenset[int] | None, str] | None
) -> Any:
    """A copy of a request with its kept parts; the newest user prompt cut, or a tool
    return given a stand-in: the core's cut of one keeps its images where they were (as
    it counts them), a strategy's stand-in (a cleared output) is its text alone."""
    numbers = range(len(message.parts)) if kept is None else kept
    parts = []
    for number in numbers:
        part = message.parts[number]
        cutting = cut is not None and (cut[0] is None or number in cut[0])
        text = None if cut is None else str(cut[1])  # never a HostCut in the output
        if cut is not None and text is not None and cutting and isinstance(part, UserPromptPart):
            part = dataclasses.replace(part, content=_cut_content(part.content, text))
        elif cut is not None and text is not None and cutting and _answers(part):
            content: Any = text  # a stand-in for a result
            if isinstance(part, ToolReturnPart) and isinstance(cut[1], HostCut):
                held = part.content if isinstance(part.content, (list, tuple)) else [part.content]
                content = beside_media(held, text, _is_media) or text
            part = dataclasses.replace(part, content=content)
        parts.append(part)
    return dataclasses.replace(message, parts=parts)


def _cut_content(content: Any, text: str) -> Any:
    """A user prompt's content cut to ``text``, its media and markers where they were."""
    if isinstance(content, str):
        return text
    return beside_media(content, text, _not_text) or [text]


def _not_text(item: Any) -> bool:
    """Whether a user prompt's item is no text (media, a marker): kept beside a cut."""
    return not isinstance(item, str) and not isinstance(getattr(item, "content", None), str)


def _is_media(item: Any) -> bool:
    """Whether a tool return's item is media (each other item is read as its text)."""
    return isinstance(item, _MEDIA)


def _made(message: Message, before: Sequence[Any]) -> ModelMessage:
    """A summary as a request, or a note the strategy made as the assistant's as a
    response; its metadata (``synthetic``, ``covers``) in the message's ``metadata``,
    which pydantic-ai never sends to the model."""
    metadata = {"ctxwindow": dict(message.metadata)}
    part: TextPart | UserPromptPart
    made: ModelMessage
    if message.role == "assistant":
        part = TextPart(message.text)
        made = ModelResponse(parts=[part], metadata=metadata)
    else:
        part = UserPromptPart(message.text)
        made = ModelRequest(parts=[part], metadata=metadata)
    held = _MADE.get()
    if held is not None:  # keyed to what it stands for once the window is made
        held.append((metadata["ctxwindow"], part))
    return made


SHAPE: Shape[ModelMessage] = Shape("pydantic-ai", _rebuild, _made, host_cuts=True)


#: The conversions made before: a history that grew costs converting what it added.
_READS: RecentReads[ModelMessage] = RecentReads(_read_from, _content_of)
