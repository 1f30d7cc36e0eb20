"""The message type, and the reading of OpenAI chat-format dicts into it.

Messages are frozen so that a strategy can never change what the caller passed, and
hashable so that token counts can be cached by content.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from types import MappingProxyType
from typing import Any, Literal

from ctxwindow.errors import InvalidMessage

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
#: ``function`` is the legacy role of a ``function_call``'s result (it names the function).
ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
#: Roles whose messages are always kept: instructions to the model.
INSTRUCTION_ROLES: frozenset[str] = frozenset({"system", "developer"})

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ContentPart:
    """One part of a multi-part content list: text, or anything else kept as JSON."""

    type: str
    text: str | None = None
    data_json: str | None = None  # the part's other fields, canonical JSON

    def __post_init__(self) -> None:
        if not isinstance(self.type, str):
            raise InvalidMessage(None, f"a content part's type must be a string, not {self.type!r}")
        for key in ("text", "data_json"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, str):
                raise InvalidMessage(
                    None, f"a content part's {key} must be a string, got {type(value).__name__}"
                )

    def to_dict(self) -> dict[str, Any]:
        import json  # here: `import ctxwindow` does without it; a second import is a lookup

        out: dict[str, Any] = json.loads(self.data_json) if self.data_json else {}
        out["type"] = self.type
        if self.text is not None:
            out[_text_key(self.type)] = self.text
        return out


def _text_key(part_type: str) -> str:
    """Where a part holds its words: ``text``, or ``refusal`` for an assistant's refusal
    part (read as text so that it is counted and scored like any words)."""
    return "refusal" if part_type == "refusal" else "text"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call requested by the assistant."""

    id: str
    name: str
    arguments: str = ""
    type: str = "function"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidMessage(
                None, f"a tool call's id must be a non-empty string, not {self.id!r}"
            )
        for key in ("name", "arguments", "type"):
            value = getattr(self, key)
            if not isinstance(value, str):
                raise InvalidMessage(
                    None,
                    f"tool call {self.id!r}: {key} must be a string, got {type(value).__name__}",
                )

    def to_dict(self) -> dict[str, Any]:
        if self.type == "custom":  # a custom tool's call: free-form input, not JSON arguments
            custom = {"name": self.name, "input": self.arguments}
            return {"id": self.id, "type": "custom", "custom": custom}
        return {
            "id": self.id,
            "type": self.type,
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """The legacy ``function_call`` of an assistant message: one call, no id; the
    ``function`` message after it answers it by name."""

    name: str
    arguments: str = ""

    def __post_init__(self) -> None:
        for key in ("name", "arguments"):
            value = getattr(self, key)
            if not isinstance(value, str):
                raise InvalidMessage(
                    None, f"function_call: {key} must be a string, got {type(value).__name__}"
                )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


Content = str | tuple[ContentPart, ...] | None


@dataclass(frozen=True, slots=True)
class Message:
    """A chat message: the OpenAI chat format's fields plus an id and metadata.

    ``metadata`` is free-form; ctxwindow reads ``pinned`` (always keep this message),
    ``synthetic`` (made by a strategy, such as a summary) and ``importance``. An
    assistant message may also carry a ``refusal`` (the model declined), a legacy
    ``function_call``, or ``audio`` (the id of an earlier audio reply); each lets it go
    without ``content``.
    """

    role: Role
    content: Content = None
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, hash=False)
    refusal: str | None = None
    function_call: FunctionCall | None = None
    audio: str | None = None

    def __post_init__(self) -> None:
        """Validate and normalize the fields as :func:`read_message` does for a dict."""
        _check_fields(self)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle and deep-copy support (the metadata proxy cannot be pickled itself)."""
        fields = (self.role, self.content, self.name, self.tool_calls, self.tool_call_id, self.id)
        extras = (self.refusal, self.function_call, self.audio)
        return (_rebuild, (*fields, dict(self.metadata), *extras))

    @property
    def pinned(self) -> bool:
        return bool(self.metadata.get("pinned", False))

    @property
    def synthetic(self) -> bool:
        return bool(self.metadata.get("synthetic", False))

    @property
    def text(self) -> str:
        """The message's text: its string content, or its text parts joined; without
        content, its refusal (what the model said instead)."""
        if self.content is None:
            return self.refusal or ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content if part.text is not None)

    def to_dict(self) -> dict[str, Any]:
        """This message as an OpenAI chat-format dict (plus ``id`` and ``metadata`` if set)."""
        out: dict[str, Any] = {"role": self.role, "content": content_as_sent(self)}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.refusal is not None:
            out["refusal"] = self.refusal
        if self.function_call is not None:
            out["function_call"] = self.function_call.to_dict()
        if self.audio is not None:
            out["audio"] = {"id": self.audio}
        if self.id is not None:
            out["id"] = self.id
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], index: int | None = None) -> Message:
        """Read an OpenAI chat-format dict; unknown keys are ignored, never an error."""
        return read_message(data, index)


def content_as_sent(message: Message) -> Any:
    """``message``'s content as :meth:`Message.to_dict` writes it (parts as dicts), with
    none of the rest: what a window sends in place of a dict's content, each visit."""
    content = message.content
    return [part.to_dict() for part in content] if isinstance(content, tuple) else content


def _check_fields(message: Message) -> None:
    """Check a directly built Message's fields; lists become tuples, dicts become parts
    and calls. Raises InvalidMessage (index None) for anything read_message rejects."""
    put = object.__setattr__
    content = message.content
    if content is not None and not isinstance(content, str):
        if not isinstance(content, (list, tuple)):
            raise InvalidMessage(
                None,
                f"'content' must be a string or a list of parts, got {type(content).__name__}",
            )
        if type(content) is not tuple or not all(type(p) is ContentPart for p in content):
            put(message, "content", tuple(_read_parts(None, content)))
    calls = message.tool_calls
    if calls is None:
        put(message, "tool_calls", ())
    elif type(calls) is not tuple or not all(type(c) is ToolCall for c in calls):
        put(message, "tool_calls", _read_tool_calls(None, calls))
    _read_extras_given(message)
    for key in ("name", "tool_call_id", "refusal", "audio"):
        value = getattr(message, key)
        if value is not None and not isinstance(value, str):
            raise InvalidMessage(None, f"{key!r} must be a string, got {type(value).__name__}")
    message_id = message.id
    if message_id is not None and not isinstance(message_id, str):
        if isinstance(message_id, bool) or not isinstance(message_id, int):
            raise InvalidMessage(None, f"'id' must be a string, got {type(message_id).__name__}")
        put(message, "id", str(message_id))
    metadata = message.metadata
    if not isinstance(metadata, MappingProxyType):
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidMessage(None, f"'metadata' must be a dict, got {type(metadata).__name__}")
        metadata = MappingProxyType(dict(metadata)) if metadata else _EMPTY
        put(message, "metadata", metadata)
    pinned = metadata.get("pinned", False)
    if not isinstance(pinned, bool):
        raise InvalidMessage(None, f"metadata 'pinned' must be true or false, got {pinned!r}")
    extras = (message.refusal, message.function_call, message.audio)
    problem = _role_problem(
        message.role, message.tool_calls, message.tool_call_id, message.content, message.name
    ) or _reply_problem(message.role, message.content, message.tool_calls, extras)
    if problem:
        raise InvalidMessage(None, problem)


def _read_extras_given(message: Message) -> None:
    """A directly built Message's audio and function_call as the API spells them
    (``{"id": ...}``, ``{"name": ..., "arguments": ...}``) become an id and a FunctionCall."""
    audio = message.audio
    if isinstance(audio, Mapping):
        object.__setattr__(message, "audio", audio.get("id"))
    call = message.function_call
    if call is not None and not isinstance(call, FunctionCall):
        object.__setattr__(message, "function_call", _read_function_call(None, call))


def _rebuild(*fields: Any) -> Message:
    return Message(*fields)


def read_message(data: object, index: int | None) -> Message:
    """Validate one entry of a message list and return it as a :class:`Message`."""
    if isinstance(data, Message):
        return data
    if not isinstance(data, Mapping):
        data = _dumped(data, index)
    role = data.get("role")
    if not isinstance(role, str) or role not in ROLES:  # a list role is unhashable
        raise InvalidMessage(
            index, f"unknown role {role!r}; expected one of {', '.join(sorted(ROLES))}"
        )
    content = _read_content(index, data.get("content"))
    name = _optional_str(index, data, "name")
    tool_call_id = _optional_str(index, data, "tool_call_id")
    message_id = data.get("id")
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidMessage(index, f"'metadata' must be a dict, got {type(metadata).__name__}")
    metadata = metadata or _EMPTY
    if message_id is None:
        message_id = metadata.get("id")
    if message_id is not None and (
        isinstance(message_id, bool) or not isinstance(message_id, (str, int))
    ):
        raise InvalidMessage(index, f"'id' must be a string, got {type(message_id).__name__}")
    pinned = metadata.get("pinned", False)
    if not isinstance(pinned, bool):
        raise InvalidMessage(index, f"metadata 'pinned' must be true or false, got {pinned!r}")
    tool_calls = _read_tool_calls(index, data.get("tool_calls"))
    extras = _read_extras(index, data) if role == "assistant" else _NO_EXTRAS
    problem = _role_problem(role, tool_calls, tool_call_id, content, name) or _reply_problem(
        role, content, tool_calls, extras
    )
    if problem:
        raise InvalidMessage(index, problem)
    return _validated(
        role,
        content,
        name,
        tool_calls,
        tool_call_id,
        None if message_id is None else str(message_id),
        MappingProxyType(dict(metadata)) if metadata else _EMPTY,
        extras,
    )


def _dumped(data: object, index: int | None) -> Mapping[str, Any]:
    """A message object's fields, read through its ``model_dump`` (the openai SDK's
    ``ChatCompletionMessage``, or any pydantic model of the chat format): duck-typed, so
    the core never imports the SDK."""
    dump = getattr(data, "model_dump", None)
    fields = None
    if callable(dump):
        try:
            fields = dump(exclude_none=True)
        except Exception as error:  # a model_dump that is not pydantic's
            raise InvalidMessage(
                index, f"{type(data).__name__}.model_dump() failed: {error}"
            ) from None
    if not isinstance(fields, Mapping) or "role" not in fields:
        raise InvalidMessage(
            index,
            f"expected a dict with 'role' and 'content', a ctxwindow.Message or a message "
            f"object with model_dump() (the openai SDK's), got {type(data).__name__}; "
            f"for a framework's messages (LangChain, pydantic-ai) use its adapter",
        )
    return fields


#: An assistant message's refusal, legacy function_call and audio id: none.
_NO_EXTRAS: tuple[None, None, None] = (None, None, None)


def _read_extras(
    index: int | None, data: Mapping[str, Any]
) -> tuple[str | None, FunctionCall | None, str | None]:
    """An assistant message's refusal, legacy function_call and audio id (from
    ``audio: {"id": ...}``), each None when absent."""
    refusal = _optional_str(index, data, "refusal")
    call = data.get("function_call")
    audio = data.get("audio")
    if refusal is None and call is None and audio is None:
        return _NO_EXTRAS
    audio_id = None
    if audio is not None:
        audio_id = audio.get("id") if isinstance(audio, Mapping) else None
        if not isinstance(audio_id, str) or not audio_id:
            raise InvalidMessage(index, "'audio' must be a dict with the 'id' of an audio reply")
    return refusal, None if call is None else _read_function_call(index, call), audio_id


def _read_function_call(index: int | None, call: object) -> FunctionCall:
    if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
        raise InvalidMessage(index, "'function_call' must be a dict with a function 'name'")
    return FunctionCall(call["name"], _arguments(index, call.get("arguments", ""), "function_call"))


def _reply_problem(
    role: str,
    content: Content,
    tool_calls: tuple[ToolCall, ...],
    extras: tuple[str | None, FunctionCall | None, str | None],
) -> str | None:
    """What is wrong with an assistant message's way of replying, or None: it says
    something (content), calls, refuses or refers to audio."""
    said = extras != _NO_EXTRAS
    if said and role != "assistant":
        return f"refusal, function_call and audio belong on assistant messages, not on {role!r}"
    if content is None and role == "assistant" and not (tool_calls or said):
        return _MISSING_CONTENT
    return None


def _slot_setter(name: str) -> Any:
    return Message.__dict__[name].__set__


_new = object.__new__
_set_role, _set_content, _set_name, _set_calls, _set_call_id, _set_id, _set_meta = map(
    _slot_setter, ("role", "content", "name", "tool_calls", "tool_call_id", "id", "metadata")
)
_set_refusal, _set_function_call, _set_audio = map(
    _slot_setter, ("refusal", "function_call", "audio")
)
_set_call_id_field, _set_call_name, _set_call_arguments, _set_call_type = (
    ToolCall.__dict__[name].__set__ for name in ("id", "name", "arguments", "type")
)


def _validated(
    role: Any,
    content: Content,
    name: str | None,
    tool_calls: tuple[ToolCall, ...],
    tool_call_id: str | None,
    message_id: str | None,
    metadata: Mapping[str, Any],
    extras: tuple[str | None, FunctionCall | None, str | None],
) -> Message:
    """A Message from fields read_message has already checked, without checking again.

    Reading is most of a cold visit's cost, so skipping ``__post_init__`` and the
    frozen ``__setattr__`` (by writing the slots directly) is worth it.
    """
    message = _new(Message)
    _set_role(message, role)
    _set_content(message, content)
    _set_name(message, name)
    _set_calls(message, tool_calls)
    _set_call_id(message, tool_call_id)
    _set_id(message, message_id)
    _set_meta(message, metadata)
    _set_refusal(message, extras[0])
    _set_function_call(message, extras[1])
    _set_audio(message, extras[2])
    return message


#: A message read but not yet built: ``(role, content, tool_call_id, characters)``,
#: for the shapes nearly every history is made of (see :func:`read_common`). The
#: characters are those of its text (content and call id), which counting needs, taken
#: while the strings are at hand.
Simple = tuple[str, str, str | None, int]
#: An assistant's plain function calls read but not yet built: ``("assistant", content,
#: None, characters, ids, names, arguments)``, the characters of its text (content,
#: names, arguments) and the calls' fields in order.
CallFields = tuple[str, str | None, None, int, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
#: Either kind of message read but not yet built (see :func:`simple_message`).
Lazy = Simple | CallFields
#: The roles whose ``{"role": ..., "content": "..."}`` dict is valid as it is.
SIMPLE_ROLES = ("user", "assistant", "system", "developer")


def read_common(data: object) -> Lazy | Message | None:
    """A dict of one of the shapes nearly every history is made of, read with a few
    lookups (reading is most of a cold visit's cost); None for any other entry, which
    :func:`read_message` reads and checks in full.

    Exactly ``{"role", "content"}`` with string content (a tool result: with its
    ``tool_call_id`` too) is valid as it is, and its Message would hold nothing more:
    its fields are returned, and :func:`simple_message` builds the Message when
    something asks for it. So is an assistant's ``{"role", "content", "tool_calls"}``
    with plain function calls: its :data:`CallFields`. :func:`simple_entries` and
    :func:`batch_entries` apply these rules to a whole batch.
    """
    if type(data) is not dict:
        return None
    size = len(data)
    if size == 2:
        role = data.get("role")
        content = data.get("content")
        # a tuple, not a set: a role that is not a string (a list) is unhashable
        if type(content) is str and role in SIMPLE_ROLES:
            return role, content, None, len(content)
    elif size == 3:
        role = data.get("role")
        if role == "tool":
            content = data.get("content")
            call_id = data.get("tool_call_id")
            if type(content) is str and type(call_id) is str and call_id:
                return "tool", content, call_id, len(content) + len(call_id)
        elif role == "assistant":
            return read_calls(data)
    return None


def read_calls(data: dict[str, Any]) -> CallFields | None:
    """The fields of an assistant's ``{"role", "content", "tool_calls"}`` (``content``
    None or a string) whose calls are all plain function calls (``{"id", "type":
    "function", "function": {"name", "arguments"}}``, all strings, ids distinct); None
    for anything else. No ToolCall is built: a cold visit seldom asks for one."""
    content = data.get("content", data)  # ``data``: the key is missing
    calls = data.get("tool_calls")
    if (content is not None and type(content) is not str) or type(calls) is not list or not calls:
        return None
    ids: list[str] = []
    names: list[str] = []
    arguments: list[str] = []
    chars = 0 if content is None else len(content)
    for call in calls:
        if type(call) is not dict or len(call) != 3 or call.get("type") != "function":
            return None
        call_id = call.get("id")
        body = call.get("function")
        if type(call_id) is not str or not call_id or type(body) is not dict or len(body) != 2:
            return None
        name, given = body.get("name"), body.get("arguments")
        if type(name) is not str or type(given) is not str:
            return None
        ids.append(call_id)
        names.append(name)
        arguments.append(given)
        chars += len(name) + len(given)
    if len(set(ids)) != len(ids):
        return None  # read_message says which id repeats
    return "assistant", content, None, chars, tuple(ids), tuple(names), tuple(arguments)


def simple_entries(entries: list[Any], contents: list[Any]) -> list[Lazy | None]:
    """:func:`read_common` of each dict of a batch that it reads as ``(role, content,
    None, ...)`` (``contents``: each one's ``content``): the simple dicts, their roles
    and sizes looked up for the whole batch at C speed, not a call per message, and the
    assistants' calls; None for every other entry (read it one by one). Raises
    TypeError when not all entries are dicts."""
    roles = map(dict.get, entries, repeat("role"))
    return [
        (role, content, None, len(content))
        if size == 2 and type(content) is str and role in SIMPLE_ROLES
        else read_calls(entry)
        if size == 3 and role == "assistant"
        else None
        for entry, role, content, size in zip(
            entries, roles, contents, map(len, entries), strict=True
        )
    ]


def batch_entries(entries: list[Any], contents: list[Any], roles: list[Any]) -> list[Any]:
    """:func:`read_common` of each dict of a batch that it reads as a simple dict or a
    tool result (``contents``, ``roles``: each one's ``content`` and ``role``), in one
    pass with no call per message; None for every other entry (an assistant's calls,
    any other shape), read one by one. For a batch of dicts only."""
    get = dict.get
    return [
        (role, content, None, len(content))
        if size == 2 and type(content) is str and role in SIMPLE_ROLES
        else ("tool", content, call_id, len(content) + len(call_id))
        if size == 3
        and role == "tool"
        and type(content) is str
        and type(call_id := get(entry, "tool_call_id")) is str
        and call_id
        else None
        for entry, role, content, size in zip(
            entries, roles, contents, map(len, entries), strict=True
        )
    ]


def simple_message(fields: Lazy) -> Message:
    """The Message of fields :func:`read_common` read (valid, so not checked again)."""
    if len(fields) == 4:
        role, content, call_id, _ = fields
        return _validated(role, content, None, (), call_id, None, _EMPTY, _NO_EXTRAS)
    calls = []
    for call_id, name, arguments in zip(fields[4], fields[5], fields[6], strict=True):
        made = _new(ToolCall)
        _set_call_id_field(made, call_id)
        _set_call_name(made, name)
        _set_call_arguments(made, arguments)
        _set_call_type(made, "function")
        calls.append(made)
    return _validated("assistant", fields[1], None, tuple(calls), None, None, _EMPTY, _NO_EXTRAS)


def check_message_list(messages: object) -> Iterable[object]:
    """``messages`` if it is a list (or other iterable) of messages, else InvalidMessage."""
    if type(messages) is list or type(messages) is tuple:  # the common case, no ABC checks
        return messages
    if messages is None:
        raise InvalidMessage(None, "got None; pass a list of messages (it may be empty)")
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        raise InvalidMessage(None, f"expected a list of messages, got {type(messages).__name__}")
    return messages


def read_messages(messages: object) -> list[Message]:
    """Validate a whole message list; the first bad entry raises, naming its index."""
    entries = check_message_list(messages)
    return [read_message(entry, index) for index, entry in enumerate(entries)]


def _role_problem(
    role: str,
    tool_calls: tuple[ToolCall, ...],
    tool_call_id: str | None,
    content: Content,
    name: str | None = None,
) -> str | None:
    if not isinstance(role, str) or role not in ROLES:
        return f"unknown role {role!r}; expected one of {', '.join(sorted(ROLES))}"
    problem = _tool_problem(role, tool_calls, tool_call_id)
    if problem:
        return problem
    if role == "function" and not name:
        return "a function message needs the 'name' of the function whose result it holds"
    if content is None and role not in _MAY_OMIT_CONTENT:
        return _MISSING_CONTENT
    return _duplicate_call(tool_calls) if len(tool_calls) > 1 else None


def _tool_problem(
    role: str, tool_calls: tuple[ToolCall, ...], tool_call_id: str | None
) -> str | None:
    if tool_calls and role != "assistant":
        return f"only assistant messages may carry tool_calls, not {role!r}"
    if role == "tool" and not tool_call_id:
        return "a tool message needs the 'tool_call_id' of the call it answers"
    if role != "tool" and tool_call_id is not None:
        return f"'tool_call_id' belongs on tool messages, not on {role!r}"
    return None


#: Roles whose messages the API takes without content: an assistant's (when it calls,
#: refuses or refers to audio: checked by :func:`_reply_problem`) and a function result.
_MAY_OMIT_CONTENT = frozenset({"assistant", "function"})
_MISSING_CONTENT = (
    "'content' is missing (or None); only an assistant message with tool_calls, "
    "function_call, refusal or audio, or a function message, may go without it"
)


def _duplicate_call(tool_calls: tuple[ToolCall, ...]) -> str | None:
    seen: set[str] = set()
    for call in tool_calls:
        if call.id in seen:
            return (
                f"tool call id {call.id!r} appears twice in one message; each call "
                f"needs its own id so that its result can answer it"
            )
        seen.add(call.id)
    return None


def _optional_str(index: int | None, data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidMessage(index, f"{key!r} must be a string, got {type(value).__name__}")
    return value


def _read_content(index: int | None, content: object) -> Content:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return tuple(_read_parts(index, content))
    raise InvalidMessage(
        index, f"'content' must be a string or a list of parts, got {type(content).__name__}"
    )


def _read_parts(index: int | None, parts: Sequence[object]) -> list[ContentPart]:
    import json  # here: `import ctxwindow` does without it; a second import is a lookup

    read: list[ContentPart] = []
    for number, part in enumerate(parts):
        if isinstance(part, ContentPart):
            read.append(part)
            continue
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            raise InvalidMessage(index, f"content part {number} must be a dict with a 'type'")
        if part["type"] in _PAIRED_BLOCKS:
            raise InvalidMessage(index, _paired_block_problem(number, part["type"]))
        key = _text_key(part["type"])
        text = part.get(key)
        if (key != "text" or part["type"] == "text") and not isinstance(text, str):
            raise InvalidMessage(
                index, f"content part {number} is a {part['type']} part without {key!r}"
            )
        rest = {k: v for k, v in part.items() if k not in ("type", key)}
        try:
            data_json = json.dumps(rest, sort_keys=True) if rest else None
        except (TypeError, ValueError, RecursionError) as error:
            raise InvalidMessage(
                index, f"content part {number} is not JSON data: {error}"
            ) from None
        read.append(ContentPart(part["type"], text if isinstance(text, str) else None, data_json))
    return read


#: Anthropic's tool blocks: a call and its result as content parts, which the core
#: (reading OpenAI's shape: ``tool_calls``, then ``tool`` messages) cannot pair, so a
#: window could send one without the other.
_PAIRED_BLOCKS = frozenset({"tool_use", "tool_result"})


def _paired_block_problem(number: int, kind: str) -> str:
    """Why a message holding a ``tool_use`` or ``tool_result`` block is refused, and
    what reads it (the install hint of the plugin that does, as data)."""
    from ctxwindow._plugins import install_hint  # here: only this error needs the table

    hint = install_hint("adapter", "anthropic")
    return (
        f"content part {number} is an Anthropic {kind!r} block: the core reads OpenAI's "
        f"shape (calls in 'tool_calls', results as 'tool' messages) and could not keep a "
        f"tool_use with its tool_result; Anthropic messages are read by the anthropic "
        f"adapter" + (f" (`{hint}`)" if hint else "")
    )


def _read_tool_calls(index: int | None, calls: object) -> tuple[ToolCall, ...]:
    if calls is None:
        return ()
    if not isinstance(calls, (list, tuple)):
        raise InvalidMessage(index, f"'tool_calls' must be a list, got {type(calls).__name__}")
    return tuple(_read_tool_call(index, number, call) for number, call in enumerate(calls))


def _read_tool_call(index: int | None, number: int, call: object) -> ToolCall:
    """One tool call: a function's (``function: {name, arguments}``) or a custom
    tool's (``type: "custom"``, ``custom: {name, input}``)."""
    if isinstance(call, ToolCall):
        return call
    kind = call.get("type") if isinstance(call, Mapping) else None
    body_key = "custom" if kind == "custom" else "function"
    body = call.get(body_key) if isinstance(call, Mapping) else None
    if not isinstance(call, Mapping) or not isinstance(body, Mapping):
        raise InvalidMessage(index, f"tool call {number} must be a dict with a {body_key!r}")
    call_id, name = call.get("id"), body.get("name")
    if call_id is not None and not isinstance(call_id, str):
        raise InvalidMessage(
            index, f"tool call {number}'s 'id' must be a string, got {type(call_id).__name__}"
        )
    if not call_id:
        raise InvalidMessage(index, f"tool call {number} has no 'id'")
    if not isinstance(name, str):
        raise InvalidMessage(index, f"tool call {number} has no {body_key} 'name'")
    if kind is not None and not isinstance(kind, str):
        raise InvalidMessage(
            index, f"tool call {number}'s 'type' must be a string, got {type(kind).__name__}"
        )
    given = body.get("input" if body_key == "custom" else "arguments", "")
    arguments = _arguments(index, given, f"tool call {number}'s")
    # every field checked above, as ToolCall's own check would: built without it
    made = _new(ToolCall)
    _set_call_id_field(made, call_id)
    _set_call_name(made, name)
    _set_call_arguments(made, arguments)
    _set_call_type(made, kind or "function")
    return made


def _arguments(index: int | None, arguments: object, owner: str) -> str:
    """A call's arguments as the string the model reads (JSON text for a structure)."""
    if isinstance(arguments, str):
        return arguments
    import json  # here: `import ctxwindow` does without it; a second import is a lookup

    try:
        return json.dumps(arguments, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as error:
        raise InvalidMessage(index, f"{owner} arguments are not JSON data: {error}") from None


#: The message fields of OpenAI's chat-completions API.
OPENAI_FIELDS = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "audio", "function_call"}
)


def to_openai(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """New dicts with only the API's fields; the caller's objects are left as they are.
    A message object (the openai SDK's) gives its fields as the API takes them back:
    ``content`` present (None when it has none) and ``audio`` as ``{"id": ...}``."""
    out = []
    for index, message in enumerate(messages):
        if isinstance(message, Message):
            data: Mapping[str, Any] = message.to_dict()
        else:
            read_message(message, index)  # the same clear error for a malformed entry
            data = fields_of(message, index)
        out.append({key: value for key, value in data.items() if key in OPENAI_FIELDS})
    return out


def fields_of(message: object, index: int | None = None) -> Mapping[str, Any]:
    """The fields of a caller's message read as a dict (not a ctxwindow Message): a dict
    as it is; any other object (the openai SDK's) through its ``model_dump``, as the API
    takes them back, so that a copy made of it (a stand-in) can be sent."""
    if isinstance(message, Mapping):
        return message
    return _as_request(_dumped(message, index))


def _as_request(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A response message's fields as a request's: the API refers to an audio reply by
    its id alone, and wants an assistant's ``content`` key even when it is None."""
    request = {"content": None, **fields}
    audio = request.get("audio")
    if isinstance(audio, Mapping):
        request["audio"] = {"id": audio["id"]}
    return request
