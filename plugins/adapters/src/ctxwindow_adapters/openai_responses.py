"""OpenAI Responses API input items: window the ``input`` list you send to
``client.responses.create``, dicts or the SDK's output objects (``response.output``).

What forms a unit:

- a run of consecutive model-output items (``reasoning``, assistant ``message``, calls,
  built-in tool items such as ``web_search_call``) is one assistant turn: the API
  rejects a function call sent without the reasoning item it came with, so a reasoning
  item always goes with what follows it;
- a call (``function_call``, ``custom_tool_call``, ``computer_call``, ``shell_call``,
  ``apply_patch_call``, ``program``) and the outputs that answer its ``call_id`` (in any
  order, directly after the turn) are kept or dropped with that turn;
- user, system and developer ``message`` items are units of their own (system and
  developer always kept); any other item is kept whole as a unit of its own.

Needs no openai package: items are read as dicts or through their attributes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from typing import Any

from ctxwindow import ContentPart, Message, Strategy, TokenCounter, ToolCall, Window, Windower
from ctxwindow.errors import InvalidMessage
from ctxwindow.kit import snapshot
from ctxwindow_adapters._bridge import (
    Converted,
    HostCut,
    Shape,
    budget_in_items,
    get,
    prepare,
    text_of,
)
from ctxwindow_adapters._reads import RecentReads, beside_media, lay_cut

__all__ = ["CALL_TYPES", "OUTPUT_TYPES", "aselect", "read_items", "select"]

#: Item types that call a tool and are answered by an output item with the same call_id.
CALL_TYPES = frozenset(
    {"function_call", "custom_tool_call", "computer_call", "shell_call", "apply_patch_call",
     "program"}
)  # fmt: skip
#: Item types that answer a call by its call_id.
OUTPUT_TYPES = frozenset(
    {"function_call_output", "custom_tool_call_output", "computer_call_output",
     "shell_call_output", "apply_patch_call_output", "program_output"}
)  # fmt: skip
_INPUT_ROLES = frozenset({"user", "system", "developer"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})


def select(
    items: Sequence[Any],
    budget: int | None = None,
    strategy: str | Strategy | None = None,
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    windower: Windower | None = None,
    **options: Any,
) -> Window[Any]:
    """The window of a Responses API ``input`` list: the same item objects, those that
    fit, in order; a summary a strategy writes comes as a system ``message`` item."""
    read = partial(read_items, items)
    call = prepare(read, SHAPE, windower, strategy, budget, counter, options, query=query)
    with budget_in_items(call):
        return call.select()


async def aselect(
    items: Sequence[Any],
    budget: int | None = None,
    strategy: str | Strategy | None = None,
    *,
    counter: TokenCounter | str | None = None,
    query: str | None = None,
    windower: Windower | None = None,
    **options: Any,
) -> Window[Any]:
    """Async :func:`select`."""
    read = partial(read_items, items)
    call = prepare(read, SHAPE, windower, strategy, budget, counter, options, query=query)
    with budget_in_items(call):
        return await call.aselect()


def _kind(item: Any, index: int) -> str:
    """'input' (a user/system/developer message), 'output' (model side), 'answer' (a
    call's output) or 'other'."""
    if not isinstance(item, dict) and not hasattr(item, "type") and not hasattr(item, "role"):
        raise InvalidMessage(
            index, f"expected a Responses API item (a dict with 'type'), got {type(item).__name__}"
        )
    kind = get(item, "type")
    role = get(item, "role")
    if kind is None and role is None:
        raise InvalidMessage(index, "an input item needs a 'type' (or a 'role' for a message)")
    if kind in (None, "message"):
        return _message_kind(item, index, role)
    if not isinstance(kind, str):
        raise InvalidMessage(index, f"'type' must be a string, got {type(kind).__name__}")
    if kind in OUTPUT_TYPES:
        if not isinstance(get(item, "call_id"), str) or not get(item, "call_id"):
            raise InvalidMessage(index, f"a {kind} item needs the 'call_id' of the call it answers")
        return "answer"
    if kind == "item_reference":
        if not isinstance(get(item, "id"), str) or not get(item, "id"):
            raise InvalidMessage(
                index, "an item_reference needs the 'id' of the item it stands for"
            )
        return "output"  # an earlier response's item: pairs with the outputs after it
    if kind in CALL_TYPES:
        if not isinstance(get(item, "call_id"), str) or not get(item, "call_id"):
            raise InvalidMessage(
                index, f"a {kind} item needs its 'call_id': the output answering it names "
                f"the call by it, and the API rejects a call without one"
            )  # fmt: skip
        return "output"
    if kind == "reasoning" or kind.endswith("_call"):
        return "output"
    # any other type (mcp_list_tools, compaction, one the API adds later) is kept whole
    # as a unit of its own, counted as its JSON: refusing it would break an app on the
    # day the API ships a new item type
    return "other"


def _message_kind(item: Any, index: int, role: Any) -> str:
    """'input' or 'output' for a message item, whose content the API needs as text or
    a list of parts (a malformed one raises here, not where the request is sent)."""
    if role not in _INPUT_ROLES and role != "assistant":
        raise InvalidMessage(
            index, f"unknown message role {role!r}; expected user, system, developer or assistant"
        )
    content = get(item, "content")
    if not isinstance(content, (str, list, tuple)):
        raise InvalidMessage(
            index, f"a message's 'content' must be a string or a list of parts, got "
            f"{type(content).__name__}; fix the item or leave it out of the list windowed"
        )  # fmt: skip
    return "input" if role in _INPUT_ROLES else "output"


def read_items(items: Sequence[Any]) -> Converted[Any]:
    """The items as ctxwindow Messages: one per input message, answer or other item, and
    one assistant Message per run of model-output items. A list that grew since a call
    before costs reading what it added (and the run it may continue)."""
    if isinstance(items, (str, bytes, dict)) or not isinstance(items, Sequence):
        raise InvalidMessage(None, f"expected a list of input items, got {type(items).__name__}")
    return _READS.read(items)


def _read_from(items: Sequence[Any], start: int, converted: Converted[Any]) -> int:
    """Read ``items[start:]`` into ``converted``; the start of a run of model output at
    the end (the next items may continue it), else the number of items.

    A run that holds a reasoning item goes on past the outputs answering its calls to
    the calls after them, up to the next reasoning item or words (the next response's):
    an app that puts each output right after its call splits one response's parallel
    calls, and the API rejects a call sent without its response's reasoning item. Those
    outputs are read after the run's turn (the window gives the items back in the
    caller's order)."""
    run: list[int] = []
    held: list[int] = []  # outputs answering the run's calls, read after its turn
    unsettled: list[int] = []  # a referencing run whose outputs reach the end

    def close() -> None:
        referenced, to_end = _referenced_calls(items, run, held)
        if to_end:
            unsettled.append(run[0])
        converted.add(_turn(items, run, referenced), tuple(run))
        for index in held:
            converted.add(_answer(items[index], index), (index,))
        run.clear()
        held.clear()

    for index in range(start, len(items)):
        item = items[index]
        kind = _kind(item, index)
        if kind == "output":
            if held and not _calls(item):  # reasoning or words: the next response's
                close()
            run.append(index)
            continue
        if kind == "answer" and run and _reasoned(items, run):
            held.append(index)
            continue
        if run:
            close()
        if kind == "input":
            converted.add(_input_message(item, index), (index,))
        elif kind == "answer":
            converted.add(_answer(item, index), (index,))
        else:  # kept whole; assistant, so that it is never taken for the newest user message
            converted.add(Message("assistant", _dump(item), id=_item_id(item)), (index,))
    if run:
        first = run[0]
        close()
        return first
    return unsettled[-1] if unsettled else len(items)


def _referenced_calls(
    items: Sequence[Any], run: list[int], held: list[int]
) -> tuple[tuple[str, ...], bool]:
    """The call ids an ``item_reference`` in ``run`` stands for (the adapter cannot see
    the referenced call): those of the outputs right after the run (and ``held``) that
    no call in it makes, so that each output stays with its reference. And whether those
    outputs reach the end of ``items``: the next item may be one more output of it."""
    if not any(get(items[index], "type") == "item_reference" for index in run):
        return (), False
    made = {get(items[index], "call_id") for index in run}
    after = list(held)
    end = run[-1] + 1
    while end < len(items) and _is_answer(items[end]):
        after.append(end)
        end += 1
    ids = dict.fromkeys(get(items[index], "call_id") for index in after)
    return tuple(i for i in ids if i not in made), end == len(items)


def _is_answer(item: Any) -> bool:
    return get(item, "type") in OUTPUT_TYPES


def _calls(item: Any) -> bool:
    """Whether a model-output item is a call (of any tool kind)."""
    kind = get(item, "type")
    return isinstance(kind, str) and (kind in CALL_TYPES or kind.endswith("_call"))


def _reasoned(items: Sequence[Any], run: list[int]) -> bool:
    """Whether a run of model output holds a reasoning item."""
    return any(get(items[index], "type") == "reasoning" for index in run)


def _answer(item: Any, index: int) -> Message:
    """A call's output item as the tool message answering its call."""
    output = _output_content(item, index)
    return Message("tool", output, tool_call_id=get(item, "call_id"), id=_item_id(item))


#: Parts of an output a model sees as media: each counts a fixed amount, as the core
#: counts a non-text part, never as the characters of its data URL.
_MEDIA_PARTS = frozenset({"input_image", "input_file", "computer_screenshot", "image"})


def _output_content(item: Any, index: int) -> str | tuple[ContentPart, ...]:
    """An output item's content: a program's ``result``, a screenshot as a non-text part,
    a list holding images as parts, else its text."""
    if get(item, "type") == "program_output":
        return _text(get(item, "result", get(item, "output")), index)
    output = get(item, "output")
    if get(item, "type") == "shell_call_output" and isinstance(output, (list, tuple)):
        return "\n".join(text for _, _, text in _shell_texts(output))
    if get(output, "type") in _MEDIA_PARTS:
        return (ContentPart(str(get(output, "type"))),)
    if isinstance(output, (list, tuple)) and any(get(p, "type") in _MEDIA_PARTS for p in output):
        return tuple(_output_part(part, index) for part in output)
    return _text(output, index)


def _is_media_part(part: Any) -> bool:
    return get(part, "type") in _MEDIA_PARTS


def _output_part(part: Any, index: int) -> ContentPart:
    kind = get(part, "type")
    if kind in _MEDIA_PARTS:
        return ContentPart(str(kind))
    return ContentPart("text", _text([part], index))


def _content_of(item: Any) -> tuple[Any, ...]:
    """What an app may change in place on an item it keeps, down to a content part's
    text (see :func:`snapshot`): read again if it differs. (Checked for the newest
    items on every call: dicts, the common case, directly.)"""
    if type(item) is dict:
        return tuple([snapshot(item[key]) if key in item else None for key in _EDITABLE])
    return tuple([snapshot(get(item, key)) for key in _EDITABLE])


#: The fields compared: what an item holds, and the ``call_id`` that pairs a call with
#: the output answering it (edited, the pairing read before would be stale).
_EDITABLE = (
    "content", "output", "arguments", "summary", "result", "code", "input", "action", "call_id"
)  # fmt: skip


def _input_message(item: Any, index: int) -> Message:
    content = _content(get(item, "content"), index)  # a string or a list: see _message_kind
    return Message(get(item, "role"), content, id=_item_id(item))


def _turn(items: Sequence[Any], run: list[int], referenced: Sequence[str] = ()) -> Message:
    """One assistant Message for a run of model-output items: their text and calls, and
    a call for each of the ``referenced`` ids (made by an item_reference's item)."""
    texts: list[str] = []
    calls = [ToolCall(call_id, "item_reference", "") for call_id in referenced]
    for index in run:
        item = items[index]
        kind = get(item, "type") or "message"
        if kind == "message":
            texts.append(_text(get(item, "content"), index))
        elif kind == "reasoning":
            texts.extend(_text(get(item, key), index) for key in ("summary", "content"))
        elif kind in CALL_TYPES:  # its call_id checked by _kind
            call_id = get(item, "call_id")
            name = get(item, "name") or kind
            arguments = _call_input(item)
            calls.append(ToolCall(call_id, str(name), text_of(arguments)))
        else:
            texts.append(_dump(item))
    seen: set[str] = set()
    for call in calls:
        if call.id in seen:
            raise InvalidMessage(run[0], f"call_id {call.id!r} appears twice in one turn")
        seen.add(call.id)
    text = "\n".join(t for t in texts if t)
    return Message("assistant", text if text or not calls else None, tool_calls=tuple(calls))


#: Where a call item holds what it sends: a function's arguments, a custom tool's
#: input, a computer's or shell's action, a program's code.
_CALL_INPUTS = ("arguments", "input", "action", "code")


def _call_input(item: Any) -> Any:
    return next((v for key in _CALL_INPUTS if (v := get(item, key)) is not None), None)


def _content(content: Any, index: int) -> str | tuple[ContentPart, ...]:
    if isinstance(content, str):
        return content
    parts = []
    for number, part in enumerate(content):
        kind = get(part, "type")
        if not isinstance(kind, str):
            raise InvalidMessage(index, f"content part {number} needs a 'type'")
        text = get(part, "text", get(part, "refusal"))
        parts.append(ContentPart(kind, text if isinstance(text, str) else None))
    return tuple(parts)


def _text(value: Any, index: int) -> str:
    """The readable text of a content or output: a string, or its parts' texts."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, (list, tuple)):
        texts = []
        for part in value:
            text = get(part, "text", get(part, "refusal"))
            texts.append(text if isinstance(text, str) else _dump(part))
        return "\n".join(texts)
    return text_of(value)


def _dump(item: Any) -> str:
    """An item as JSON, for counting what it costs."""
    if hasattr(item, "model_dump"):
        item = item.model_dump(exclude_none=True)
    return json.dumps(item, sort_keys=True, default=str)


def _rebuild(item: Any, kept: Any, cut: tuple[frozenset[int] | None, str] | None) -> Any:
    """A copy of an item with its text replaced: the newest user message cut to fit, or a
    call's output given a stand-in (items are never split)."""
    if cut is None:
        return item
    kind = get(item, "type")
    if kind == "computer_call_output":  # its output must be a screenshot: kept as it is
        return item
    data = item.model_dump(exclude_none=True) if hasattr(item, "model_dump") else dict(item)
    if kind in OUTPUT_TYPES:  # a stand-in for a call's output, in the field its type needs
        data.update(_stand_in(data, cut[1]))
        return data
    content, words = data.get("content"), str(cut[1])  # never a HostCut in the output
    if isinstance(content, list):  # the cut text where the text began, the rest in place
        text = {"type": "input_text", "text": words}
        data["content"] = beside_media(content, text, _not_text) or [text]
    else:
        data["content"] = words
    return data


def _not_text(part: Any) -> bool:
    return get(part, "type") not in _TEXT_PARTS


def _stand_in(data: dict[str, Any], text: str) -> dict[str, Any]:
    """The fields an output item's stand-in text goes in, valid for its type: a
    program's ``result``; a shell's ``output`` list, one chunk of stdout with the last
    chunk's outcome; any other's ``output`` string."""
    kind = data.get("type")
    by_host, text = isinstance(text, HostCut), str(text)  # never a HostCut in the output
    if kind == "program_output":
        return {"result": text}
    output = data.get("output")
    if isinstance(output, list) and by_host:  # the core's cut kept its images
        held = beside_media(output, {"type": "input_text", "text": text}, _is_media_part)
        if held is not None:
            return {"output": held}
    if kind == "shell_call_output":
        chunks = data.get("output") or [{}]
        cut = _shell_cut(chunks, text) if by_host and isinstance(chunks, list) else None
        if cut is not None:
            return {"output": cut}
        outcome = get(chunks[-1], "outcome") or {"type": "exit", "exit_code": 0}
        return {"output": [{"stdout": text, "stderr": "", "outcome": outcome}]}
    return {"output": text}


#: A chunk's fields read as its text, in the order the text is counted.
_SHELL_STREAMS = ("stdout", "stderr")


def _shell_texts(chunks: Sequence[Any]) -> list[tuple[int, str, str]]:
    """A shell output's texts, (chunk number, stream, text) for each non-empty stdout
    and stderr: what a model reads of it and what is counted (joined by newlines), never
    the chunks' JSON, so that a cut falls in the words and not in the structure."""
    return [
        (number, stream, text)
        for number, chunk in enumerate(chunks)
        for stream in _SHELL_STREAMS
        if isinstance(text := get(chunk, stream), str) and text
    ]


def _shell_cut(chunks: list[Any], cut: str) -> list[dict[str, Any]] | None:
    """The chunks with the core's cut of their joined text laid back on their stdout and
    stderr, each chunk keeping its outcome: what is sent is what was counted. None when
    ``cut`` is not a cut of that text (then it is sent as one chunk)."""
    texts = _shell_texts(chunks)
    sent = lay_cut([text for _, _, text in texts], cut)
    if sent is None:
        return None
    out = [{**_as_dict(chunk), "stdout": "", "stderr": ""} for chunk in chunks]
    for (number, stream, _), text in zip(texts, sent, strict=True):
        out[number][stream] = text
    return out


def _as_dict(chunk: Any) -> dict[str, Any]:
    if hasattr(chunk, "model_dump"):
        return dict(chunk.model_dump(exclude_none=True))
    return dict(chunk) if isinstance(chunk, dict) else {}


def _made(message: Message, before: Sequence[Any]) -> dict[str, Any]:
    return {"type": "message", "role": message.role, "content": message.text}


def _item_id(item: Any) -> str | None:
    value = get(item, "id")
    return value if isinstance(value, str) else None


SHAPE: Shape[Any] = Shape("openai-responses", _rebuild, _made, _item_id, host_cuts=True)
#: The conversions made before: a list that grew costs converting what it added.
_READS: RecentReads[Any] = RecentReads(_read_from, _content_of)
