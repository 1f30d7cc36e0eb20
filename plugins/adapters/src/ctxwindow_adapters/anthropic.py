"""Anthropic Messages: window the ``messages`` (and ``system``) of ``client.messages.create``.

``system`` is outside the list and always kept (it counts toward the budget). An
assistant message's ``tool_use`` blocks and the ``tool_result`` blocks that answer them
in the next user message form one unit; consecutive assistant messages are one turn, as
the API joins them. A user message's tool results go with their calls, and its text
beside them (an agent's reminder) with its last result, wherever the message stands:
as a unit of its own, the text would become the newest user message once more messages
follow and move the current turn past the user's instruction; with the exchange it
answers, it is kept, dropped or cut to fit with it. If only some of its results are
kept, the message comes back as a copy holding their blocks, tool results first, as
the API requires; kept whole, it is the very dict you passed. A ``system`` message
inside the list is kept like the ``system`` parameter. A summary a strategy writes
comes as a user message (a message it makes as the assistant's, as an assistant
message).

Needs no anthropic package: messages are dicts, their blocks dicts or SDK objects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ctxwindow import ContentPart, Message, Strategy, TokenCounter, ToolCall, Window, Windower
from ctxwindow.errors import InvalidMessage
from ctxwindow.kit import snapshot
from ctxwindow_adapters._bridge import (
    Converted,
    HostCut,
    Shape,
    Trim,
    budget_in_items,
    get,
    prepare,
    text_of,
)
from ctxwindow_adapters._reads import Piece, ReadFrom, RecentReads, lay_cut

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


def _reading(pieces: Callable[[Any, int], list[Piece]]) -> ReadFrom:
    """A reader of each message on its own, but for consecutive assistant messages,
    one turn as the API reads them (:func:`_one_turn`), read again once more messages
    follow (the next may continue the turn), and a message holding tool results and
    words, whose words go with its last result (:func:`_joined`) wherever it stands, so
    it reads the same whether or not more follow."""

    def read_from(items: Sequence[Any], start: int, into: Converted[Any]) -> int:
        settled = position = start
        size = len(items)
        while position < size:
            read, stop = pieces(items[position], position), position + 1
            turn = _said_by_assistant(items[position])
            while turn and stop < size and _said_by_assistant(items[stop]):
                read, stop = _one_turn(read, pieces(items[stop], stop)), stop + 1
            if _answers_with_words(read):
                read = _joined(read)
            settled = position if stop == size and turn else stop
            for message, sources, parts in read:
                into.add(message, sources, parts)
            position = stop
        return settled if start < size else size

    return read_from


def _after_system(read_from: ReadFrom) -> ReadFrom:
    """``read_from`` over the list led by the ``system`` stand-in, its start and what it
    returns counted in the caller's positions, as the pieces' sources are: the remembered
    reads compare the two, and a read one item ahead would keep the Messages of the
    first item read again, which the next call then adds a second time. A start of 0
    reads the stand-in too; -1, returned when only the stand-in is read for good (its
    Message names no item, so it counts as read), reads from the caller's first on."""

    def read_after(items: Sequence[Any], start: int, into: Converted[Any]) -> int:
        settled = read_from(items, max(start, 0) + 1 if start else 0, into) - 1
        return settled if settled else -1

    return read_after


def _said_by_assistant(item: Any) -> bool:
    return isinstance(item, Mapping) and item.get("role") == "assistant"


def _one_turn(turn: list[Piece], more: list[Piece]) -> list[Piece]:
    """Consecutive assistant messages (parallel tool_use blocks an app stored apart) as
    one assistant Message, as the API joins consecutive turns of a role: their calls
    answered by the next user message's results, kept or dropped as one."""
    (first, sources, _), (then, also, _) = turn[0], more[0]
    content = (*_as_parts(first.content), *_as_parts(then.content))
    calls = (*first.tool_calls, *then.tool_calls)
    joined = Message("assistant", content or (None if calls else ""), tool_calls=calls)
    return [(joined, (*sources, *also), None)]


def _answers_with_words(pieces: list[Piece]) -> bool:
    """Whether a user message's pieces are its tool results and then its words."""
    return len(pieces) > 1 and pieces[-1][0].role == "user" and pieces[-2][0].role == "tool"


def _joined(pieces: list[Piece]) -> list[Piece]:
    """A message's words beside its tool results (a reminder an agent adds, "please
    hurry") read as part of its last tool result: as a user Message of their own they
    would be the newest user message once more messages follow, moving the current turn
    past the user's instruction (which could then be dropped), or, in the newest
    message, leaving the exchange it answers to be dropped whole. The results and words
    are kept, dropped or cut to fit together (:func:`_rebuild`)."""
    *results, (result, sources, parts), (words, _, others) = pieces
    content = (*_as_parts(result.content), *_as_parts(words.content))
    joined = Message("tool", content, tool_call_id=result.tool_call_id)
    return [*results, (joined, sources, (parts or frozenset()) | (others or frozenset()))]


def _as_parts(content: str | tuple[ContentPart, ...] | None) -> tuple[ContentPart, ...]:
    if isinstance(content, str):
        return (ContentPart("text", content),)
    return content or ()


#: The conversions made before, without and with a ``system`` parameter.
_READS: RecentReads[Any] = RecentReads(_reading(_pieces), _content_of)
_READS_WITH_SYSTEM: RecentReads[Any] = RecentReads(
    _after_system(_reading(_pieces_after_system)), _content_of
)


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
    redacted = 0
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
        elif kind == "redacted_thinking":
            redacted += 1  # encrypted: what it costs cannot be read from its data
        else:  # server tools and their results live in this message: count them as JSON
            texts.append(_dump(block))
    text = "\n".join(texts)
    content: str | tuple[ContentPart, ...] | None = text if text or not calls else None
    if redacted:  # a non-text part each, a fixed amount, never its data's length
        words = (ContentPart("text", text),) if text else ()
        content = (*words, *[ContentPart("redacted_thinking")] * redacted)
    try:
        return Message("assistant", content, tool_calls=tuple(calls))
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
    """The blocks as parts: the text blocks' words first, then the other blocks' (a
    document's, a search result's), so that the host's cut of the newest user message,
    which keeps the head of its text, cuts an attached document before the question
    (:func:`_cut_words`); images and files as non-text parts."""
    texts: list[ContentPart] = []
    rest: list[ContentPart] = []
    for number, block in enumerate(blocks):
        kind = _type(block, index, number)
        if kind == "text":
            texts.append(ContentPart("text", str(get(block, "text", ""))))
            continue
        words = _words(block)
        if words is None:
            rest.append(ContentPart(kind))
        else:
            rest.append(ContentPart("text", "\n".join([*words[0], *words[1]])))
            rest.extend(ContentPart(str(get(inner, "type"))) for inner in _inner_others(block))
    return (*texts, *rest)


def _words(block: Any) -> tuple[list[str], list[str]] | None:
    """What a block other than a text block gives the model as words: its heading (a
    document's title and context, a search result's title and source) and its body (a
    plain-text document's data, the text blocks of a search result or of a custom-content
    document); None for a block that holds no words (an image, a PDF's or a file's
    bytes, which the model reads as pages)."""
    kind = get(block, "type")
    if kind == "search_result":
        heading = [get(block, "title"), get(block, "source")]
        body = _texts_in(get(block, "content"))
    elif kind == "document":
        source = get(block, "source")
        if _plain_text(source):
            body = [get(source, "data")]
        elif get(source, "type") == "content":
            body = _texts_in(get(source, "content"))
        else:
            return None
        heading = [get(block, "title"), get(block, "context")]
    else:
        return None
    return [line for line in heading if isinstance(line, str) and line], body


def _texts_in(content: Any) -> list[str]:
    """The words of a block's own ``content``: a string, or its text blocks' texts."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, (list, tuple)):
        return []
    return [str(get(inner, "text", "")) for inner in content if get(inner, "type") == "text"]


def _inner_others(block: Any) -> list[Any]:
    """The blocks inside a custom-content document that are not words (its images)."""
    source = get(block, "source")
    content = get(source, "content") if get(block, "type") == "document" else None
    if not isinstance(content, (list, tuple)):
        return []
    return [inner for inner in content if get(inner, "type") != "text"]


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
    parts = tuple(part for block in content for part in _result_parts(block))
    if all(part.text is not None for part in parts):
        return "\n".join(part.text or "" for part in parts)
    return parts


def _result_parts(block: Any) -> list[ContentPart]:
    kind = get(block, "type")
    if kind == "text":
        return [ContentPart("text", str(get(block, "text")))]
    words = _words(block)
    if words is not None:
        inner = [ContentPart(str(get(other, "type"))) for other in _inner_others(block)]
        return [ContentPart("text", "\n".join([*words[0], *words[1]])), *inner]
    if kind in ("image", "document"):
        return [ContentPart(kind)]
    return [ContentPart("text", _dump(block))]


def _dump(block: Any) -> str:
    if hasattr(block, "model_dump"):
        block = block.model_dump(exclude_none=True)
    return json.dumps(block, sort_keys=True, default=str)


def _rebuild(
    message: Mapping[str, Any],
    kept: Sequence[int] | None,
    cut: tuple[frozenset[int] | None, str] | None,
) -> dict[str, Any] | None:
    """A copy holding the kept blocks (in their order): the newest user message's words
    cut (:func:`_cut_words`), a tool result's content or an assistant turn given a
    stand-in (:func:`_assistant_stand_in`)."""
    content = message.get("content")
    if not isinstance(content, (list, tuple)):
        return {**message, "content": str(cut[1]) if cut else content}
    numbers = range(len(content)) if kept is None else kept
    if cut is None:
        return {**message, "content": [content[number] for number in numbers]}
    if message.get("role") == "assistant":  # None: nothing left to send (see Rebuild)
        blocks = _assistant_stand_in(content, numbers, str(cut[1]))
        return {**message, "content": blocks} if blocks else None
    cutting = [number for number in numbers if cut[0] is None or number in cut[0]]
    if len(cutting) > 1 and get(content[cutting[0]], "type") == "tool_result":
        laid = _result_with_words(content, cutting[0], cutting[1:], cut[1])
        blocks = [block for number in numbers for block in laid.get(number, [content[number]])]
        return {**message, "content": blocks}
    sent: dict[int, list[Any]] = {}  # by block number: the blocks sent in its place
    words = []
    for number in cutting:
        block = content[number]
        if get(block, "type") == "tool_result":
            new = _result_cut(get(block, "content"), cut[1])
            sent[number] = [{**_as_dict(block), "content": new}]
        else:
            words.append(number)
    if words:
        sent.update(_cut_words(content, words, str(cut[1])))
    blocks = [block for number in numbers for block in sent.get(number, [content[number]])]
    return {**message, "content": blocks}


def _result_with_words(
    content: Sequence[Any], result: int, words: Sequence[int], cut: str
) -> dict[int, list[Any]]:
    """The blocks sent for a tool result read with the words after it (:func:`_joined`),
    by number: the host's cut laid back on the result's words and theirs (those kept
    as they were when the cut spares them, else one text block in their place beside
    their images); a strategy's stand-in in the result alone, the words gone with what
    it stands for. Either way, what the record counts."""
    block = content[result]
    rest = [content[n] for n in words]
    texts = [_text_of(_result_content(get(block, "content"))), _text_of(_parts(rest, None))]
    host = isinstance(cut, HostCut)  # its cut Message keeps the images, a stand-in none
    shares = lay_cut(texts, cut) if host and all(texts) else None
    if shares is not None and shares[1] == texts[1]:  # the cut spared the words
        new = _result_cut(get(block, "content"), HostCut(shares[0]))
        return {result: [{**_as_dict(block), "content": new}]}
    sent = {n: [content[n]] if host and not _holds_words(content[n]) else [] for n in words}
    if shares is None:  # a stand-in, or a cut not laid back: all of it in the result
        sent[result] = [{**_as_dict(block), "content": _result_cut(get(block, "content"), cut)}]
        return sent
    sent[words[0]] = [{"type": "text", "text": shares[1]}, *sent[words[0]]]
    new = _result_cut(get(block, "content"), HostCut(shares[0]))
    sent[result] = [{**_as_dict(block), "content": new}]
    return sent


def _holds_words(block: Any) -> bool:
    return get(block, "type") == "text" or _words(block) is not None


def _text_of(content: str | tuple[ContentPart, ...]) -> str:
    """A Message content's text, as :attr:`Message.text` reads it."""
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content if part.text is not None)


def _assistant_stand_in(content: Sequence[Any], numbers: Sequence[int], text: str) -> list[Any]:
    """An assistant turn given a strategy's stand-in (an excerpt): the stand-in as its
    one text block, then its tool_use blocks, which the stand-in keeps as calls. Its
    thinking, redacted_thinking and server-tool blocks go: the stand-in Message the
    record counts holds none of them, and the API needs thinking only in the latest
    assistant turn of a tool loop, which a strategy never replaces."""
    calls = [content[n] for n in numbers if get(content[n], "type") == "tool_use"]
    words = [{"type": "text", "text": text}] if text else []  # none: a later message's
    return [*words, *calls]


def _cut_words(content: Sequence[Any], numbers: Sequence[int], cut: str) -> dict[int, list[Any]]:
    """The blocks the host's cut of the newest user message changes, by number, with
    the blocks sent in their place. Its text is the head of the blocks' words as
    :func:`_parts` reads them, the text blocks' first, then each document's and search
    result's, and a marker: the text blocks are kept as they were when the cut spares
    them all (else the cut text is the first one's, the others gone), each other block
    is kept, cut in its own shape, or gone, as the cut left its words. Images and files
    stay where they were (those inside a document gone, in its place), as the cut
    Message the record counts keeps them."""
    texts = [n for n in numbers if get(content[n], "type") == "text"]
    others = [(n, w) for n in numbers if n not in texts and (w := _words(content[n])) is not None]
    fields = ["\n".join(str(get(content[n], "text", "")) for n in texts)] if texts else []
    fields += ["\n".join([*heading, *body]) for _, (heading, body) in others]
    if not fields:
        return {}
    whole, left = _split_cut(fields, cut)
    sent: dict[int, list[Any]] = {}
    if texts and not whole:  # the cut falls in the text blocks: the other blocks go
        sent[texts[0]] = [{**_as_dict(content[texts[0]]), "text": left}]
        sent.update((n, []) for n in texts[1:])
        gone = others
    else:
        first = whole - (1 if texts else 0)  # the other block the cut falls in
        number, (heading, body) = others[first]
        sent[number] = _cut_block(content[number], heading, body, left)
        gone = others[first + 1 :]
    sent.update((n, _inner_others(content[n])) for n, _ in gone)
    return sent


def _split_cut(fields: Sequence[str], cut: str) -> tuple[int, str]:
    """Where the host's cut of ``fields`` (joined by newlines, as a Message's text is:
    their head and a marker) falls: how many of them it keeps whole, and what it leaves
    of the next one (the last keeps the rest)."""
    offset = 0
    for number, field in enumerate(fields[:-1]):
        end = offset + len(field)
        if not cut.startswith(field, offset) or cut[end : end + 1] != "\n":
            return number, cut[offset:]
        offset = end + 1
    return len(fields) - 1, cut[offset:]


def _cut_block(block: Any, heading: list[str], body: list[str], left: str) -> list[Any]:
    """A document or search result holding ``left`` of its words (their head and the
    marker): its heading as it was, its body cut, its images kept; a text block holding
    ``left`` (then its images) when the cut falls in its heading."""
    whole, rest = _split_cut([*heading, *body], left) if heading or body else (0, left)
    if whole < len(heading) or not body:
        return [{"type": "text", "text": left}, *_inner_others(block)]
    copy = _as_dict(block)
    if get(block, "type") == "search_result":
        copy["content"] = _cut_texts(get(block, "content"), whole - len(heading), rest)
        return [copy]
    source = _as_dict(get(block, "source"))
    if _plain_text(source):
        source["data"] = rest
    elif isinstance(source.get("content"), str):
        source["content"] = rest
    else:
        source["content"] = _cut_texts(source.get("content"), whole - len(heading), rest)
    copy["source"] = source
    return [copy]


def _cut_texts(content: Any, whole: int, rest: str) -> list[Any]:
    """A block's own content (a list: it holds the words cut) with its first ``whole``
    text blocks, the next holding ``rest``, and the later ones gone; its other blocks
    (images) as they were."""
    out: list[Any] = []
    seen = 0
    for inner in content:
        if get(inner, "type") != "text":
            out.append(inner)
            continue
        seen += 1
        if seen <= whole:
            out.append(inner)
        elif seen == whole + 1:
            out.append({**_as_dict(inner), "text": rest})
    return out


def _result_cut(content: Any, text: str) -> Any:
    """A tool result's new content: a strategy's stand-in alone (it stands for the whole
    result), or the host's cut (:class:`HostCut`) in place of the result's words, beside
    its images and files in their order, as the cut message the record counts holds them."""
    if not isinstance(text, HostCut) or not isinstance(content, (list, tuple)):
        return str(text)
    blocks: list[Any] = []
    placed = False
    for block in content:
        kind = get(block, "type")
        if kind == "image" or (kind == "document" and _words(block) is None):
            blocks.append(block)
            continue
        if not placed:  # the cut text where the result's words began
            start = _as_dict(block) if kind == "text" else {"type": "text"}
            blocks.append({**start, "text": str(text)})
            placed = True
        blocks.extend(_inner_others(block))
    if len(blocks) == int(placed):  # words alone: the cut text as the content, as before
        return str(text)
    if not placed:  # no words to cut: the marker still says what went
        blocks.append({"type": "text", "text": str(text)})
    return blocks


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
    otherwise drag in front of it. A message the strategy made (a summary) is sent as a
    user message (:func:`_made`), so it opens the window as well. None when no user
    message has words."""
    first = next((i for i, m in enumerate(messages) if _sent_as_user(m)), None)
    if first is None:
        return set()
    return {i for i in range(first) if messages[i].role not in ("system", "developer")}


def _sent_as_user(message: Message) -> bool:
    """Whether ``message`` goes to the API as a user message with words: the user's, or
    one the strategy made that is not the assistant's (:func:`_made` sends a summary,
    a ``system`` message to the strategy, as the user's). A stand-in keeps its role
    (the host marks it ``stands_in_for`` or ``truncated``)."""
    if message.role == "user":
        return True
    metadata = message.metadata
    made = message.synthetic and "stands_in_for" not in metadata and not metadata.get("truncated")
    return made and message.role != "assistant"


SHAPE: Shape[Any] = Shape("anthropic", _rebuild, _made, host_cuts=True)
USER_FIRST = Trim(
    _before_first_user,
    "a request starts with a user message (user_first)",
    before=_units_before_first_words,
)
