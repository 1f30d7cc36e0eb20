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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

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
    Shape,
    prepare,
    text_of,
    windower_for,
)
from ctxwindow_adapters._reads import RecentReads

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
    with _biggest_in_items(call):
        return call.select()


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
    with _biggest_in_items(call):
        return await call.aselect()


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
        with _biggest_in_items(call):
            window = await call.aselect()
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
    texts: list[str] = []
    calls: list[ToolCall] = []
    for part in response.parts:
        if isinstance(part, ToolCallPart):
            calls.append(ToolCall(part.tool_call_id, part.tool_name, part.args_as_json_str()))
        elif isinstance(part, (TextPart, ThinkingPart)):
            texts.append(part.content)
        else:  # built-in tool calls and returns, files: counted by what they hold
            texts.append(text_of(getattr(part, "content", getattr(part, "args", None))))
    text = "\n".join(t for t in texts if t)
    try:
        return Message("assistant", text if text or not calls else None, tool_calls=tuple(calls))
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
    if isinstance(content, str):
        return content
    parts = []
    for item in content:
        if isinstance(item, str):
            parts.append(ContentPart("text", item))
        elif isinstance(getattr(item, "content", None), str):  # TextContent and the like
            parts.append(ContentPart("text", item.content))
        else:
            parts.append(ContentPart(str(getattr(item, "kind", "file"))))
    return tuple(parts)


# -- writing --------------------------------------------------------------------------
def _rebuild(
    message: Any, kept: Sequence[int] | None, cut: tuple[frozenset[int] | None, str] | None
) -> Any:
    numbers = range(len(message.parts)) if kept is None else kept
    parts = []
    for number in numbers:
        part = message.parts[number]
        cutting = cut is not None and (cut[0] is None or number in cut[0])
        if cut is not None and cutting and isinstance(part, UserPromptPart):
            part = dataclasses.replace(part, content=_cut_content(part.content, cut[1]))
        elif cut is not None and cutting and _answers(part):  # a stand-in for a result
            part = dataclasses.replace(part, content=cut[1])
        parts.append(part)
    return dataclasses.replace(message, parts=parts)


def _cut_content(content: Any, text: str) -> Any:
    if isinstance(content, str):
        return text
    others = [item for item in content if not isinstance(item, str)
              and not isinstance(getattr(item, "content", None), str)]  # fmt: skip
    return [text, *others]


def _made(message: Message, before: Sequence[Any]) -> ModelMessage:
    """A summary as a request, or a note the strategy made as the assistant's as a
    response; its metadata (``synthetic``, ``covers``) in the message's ``metadata``,
    which pydantic-ai never sends to the model."""
    metadata = {"ctxwindow": dict(message.metadata)}
    if message.role == "assistant":
        return ModelResponse(parts=[TextPart(message.text)], metadata=metadata)
    return ModelRequest(parts=[UserPromptPart(message.text)], metadata=metadata)


SHAPE: Shape[ModelMessage] = Shape("pydantic-ai", _rebuild, _made)


#: The conversions made before: a history that grew costs converting what it added.
_READS: RecentReads[ModelMessage] = RecentReads(_read_from, _content_of)
