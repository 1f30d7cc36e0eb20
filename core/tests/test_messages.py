"""Reading OpenAI chat-format dicts into frozen, hashable Messages, and rejecting bad ones."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from types import MappingProxyType

import pytest

import ctxwindow
from ctxwindow import ApproxCounter, CachedCounter, ContentPart, Conversation, Message, ToolCall
from ctxwindow._messages import FunctionCall, read_message, read_messages
from ctxwindow.errors import CtxWindowError, InvalidMessage

IMAGE_PART = {
    "type": "image_url",
    "image_url": {"url": "https://example.com/cat.png", "detail": "low"},
}


# -- reading valid messages ----------------------------------------------------------
def test_string_content() -> None:
    message = Message.from_dict({"role": "user", "content": "hello"})
    assert message == Message(role="user", content="hello")
    assert message.role == "user"
    assert message.content == "hello"
    assert message.text == "hello"
    assert message.name is None
    assert message.tool_calls == ()
    assert message.tool_call_id is None
    assert message.id is None
    assert dict(message.metadata) == {}
    assert message.pinned is False


@pytest.mark.parametrize("role", ["system", "developer", "user", "assistant"])
def test_every_plain_role_reads(role: str) -> None:
    assert Message.from_dict({"role": role, "content": "x"}).role == role


@pytest.mark.parametrize(
    "part",
    [
        {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
        {"type": "tool_result", "tool_use_id": "t1", "content": "18C"},
    ],
)
def test_an_anthropic_tool_block_is_refused_with_what_reads_it(part: dict[str, object]) -> None:
    """The core cannot pair Anthropic's tool blocks, so a window could part a tool_use
    from its tool_result: refused, naming the adapter that reads them, before any
    window is made; the caller's list is left as it was."""
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [part]},
    ]
    before = copy.deepcopy(messages)
    with pytest.raises(ctxwindow.InvalidMessage) as raised:
        ctxwindow.select(messages, budget=120, strategy="newest")
    text = str(raised.value)
    assert text.startswith(f"message 1: content part 0 is an Anthropic {part['type']!r} block")
    assert "pip install 'ctxwindow-adapters[anthropic]'" in text
    assert messages == before


def test_content_part_list_with_image() -> None:
    data = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is"},
            IMAGE_PART,
            {"type": "text", "text": "in this picture?"},
        ],
    }
    message = Message.from_dict(data)
    assert isinstance(message.content, tuple)
    assert message.content == (
        ContentPart("text", "what is", None),
        ContentPart(
            "image_url",
            None,
            json.dumps({"image_url": IMAGE_PART["image_url"]}, sort_keys=True),
        ),
        ContentPart("text", "in this picture?", None),
    )
    # text joins the text parts only, in order
    assert message.text == "what is\nin this picture?"
    # the image part keeps all its data and round-trips
    assert message.content[1].to_dict() == IMAGE_PART
    assert message.to_dict() == {"role": "user", "content": data["content"]}


def test_content_parts_may_be_a_tuple() -> None:
    message = Message.from_dict({"role": "user", "content": ({"type": "text", "text": "a"},)})
    assert message.content == (ContentPart("text", "a"),)


def test_assistant_tool_calls_without_content() -> None:
    data = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_time", "arguments": "{}"},
            },
        ],
    }
    message = Message.from_dict(data)
    assert message.content is None
    assert message.text == ""
    assert message.tool_calls == (
        ToolCall("call_1", "get_weather", '{"city": "Paris"}', "function"),
        ToolCall("call_2", "get_time", "{}", "function"),
    )
    assert message.to_dict() == data


def test_tool_call_arguments_given_as_a_dict_become_canonical_json() -> None:
    message = Message.from_dict(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"b": 1, "a": [2]}}}],
        }
    )
    call = message.tool_calls[0]
    assert call.arguments == '{"a": [2], "b": 1}'
    assert call.type == "function"  # default when absent


def test_tool_call_without_arguments_defaults_to_empty() -> None:
    message = Message.from_dict(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "f"}}],
        }
    )
    assert message.tool_calls == (ToolCall("c", "f", ""),)


def test_tool_result() -> None:
    message = Message.from_dict({"role": "tool", "tool_call_id": "call_1", "content": "22 C"})
    assert message.role == "tool"
    assert message.tool_call_id == "call_1"
    assert message.text == "22 C"


def test_name_id_and_metadata() -> None:
    data = {
        "role": "user",
        "name": "alice",
        "content": "hi",
        "id": "m-1",
        "metadata": {"pinned": True, "importance": 0.5},
    }
    message = Message.from_dict(data)
    assert message.name == "alice"
    assert message.id == "m-1"
    assert message.pinned is True
    assert message.metadata["importance"] == 0.5
    assert message.to_dict() == data


def test_integer_id_becomes_a_string() -> None:
    assert Message.from_dict({"role": "user", "content": "x", "id": 7}).id == "7"


def test_id_may_come_from_metadata() -> None:
    message = Message.from_dict({"role": "user", "content": "x", "metadata": {"id": "meta-id"}})
    assert message.id == "meta-id"
    top = Message.from_dict(
        {"role": "user", "content": "x", "id": "top", "metadata": {"id": "meta"}}
    )
    assert top.id == "top"


def test_pinned_false_and_synthetic() -> None:
    message = Message.from_dict(
        {"role": "assistant", "content": "x", "metadata": {"pinned": False, "synthetic": True}}
    )
    assert message.pinned is False
    assert message.synthetic is True


def test_unknown_keys_are_ignored() -> None:
    data = {
        "role": "assistant",
        "content": "hi",
        "refusal": None,
        "annotations": [],
        "x-custom": [1, 2, 3],
    }
    message = Message.from_dict(data)
    assert message == Message(role="assistant", content="hi")
    assert "refusal" not in message.to_dict()


def test_audio_reference_is_read() -> None:
    message = Message.from_dict({"role": "assistant", "content": "hi", "audio": {"id": "a"}})
    assert message == Message(role="assistant", content="hi", audio="a")
    assert message.to_dict()["audio"] == {"id": "a"}


def test_read_message_passes_a_message_through() -> None:
    message = Message(role="user", content="x")
    assert read_message(message, 3) is message


def test_read_messages_reads_in_order() -> None:
    read = read_messages(
        [
            {"role": "system", "content": "s"},
            Message("user", "u"),
            {"role": "assistant", "content": "a"},
        ]
    )
    assert [m.role for m in read] == ["system", "user", "assistant"]
    assert read_messages([]) == []
    assert read_messages(({"role": "user", "content": "t"},))[0].text == "t"


# -- frozen and hashable -------------------------------------------------------------
def test_message_is_frozen() -> None:
    message = Message.from_dict({"role": "user", "content": "x", "metadata": {"pinned": True}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.content = "y"  # type: ignore[misc]
    with pytest.raises(TypeError):
        message.metadata["pinned"] = False  # type: ignore[index]
    assert isinstance(message.metadata, MappingProxyType)
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.role = "system"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del message.metadata
    assert isinstance(message.tool_calls, tuple)
    assert message.pinned is True


def test_metadata_is_copied_not_shared() -> None:
    metadata = {"pinned": True}
    data = {"role": "user", "content": "x", "metadata": metadata}
    message = Message.from_dict(data)
    metadata["pinned"] = False
    assert message.pinned is True


def test_message_is_hashable_by_content() -> None:
    parts = [{"type": "text", "text": "a"}, IMAGE_PART]
    calls = [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]
    first = Message.from_dict({"role": "user", "content": parts, "metadata": {"pinned": True}})
    second = Message.from_dict(
        {"role": "user", "content": list(parts), "metadata": {"pinned": True}}
    )
    assert first == second
    assert hash(first) == hash(second)
    assert len({first, second}) == 1
    caller = Message.from_dict({"role": "assistant", "content": None, "tool_calls": calls})
    assert hash(caller) == hash(
        Message.from_dict({"role": "assistant", "content": None, "tool_calls": calls})
    )
    assert Message("user", "a") != Message("user", "b")
    assert Message("user", "a") != Message("assistant", "a")


def test_message_survives_deepcopy_and_pickle() -> None:
    message = Message.from_dict(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "t"}, IMAGE_PART],
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
            "id": "m",
            "metadata": {"pinned": True, "tags": ["a"]},
        }
    )
    for copied in (copy.deepcopy(message), pickle.loads(pickle.dumps(message))):
        assert copied == message
        assert copied is not message
        assert hash(copied) == hash(message)
        assert copied.pinned is True
        assert isinstance(copied.metadata, MappingProxyType)


def test_direct_construction_normalizes_lists() -> None:
    message = Message(
        role="assistant",
        content=[{"type": "text", "text": "t"}],  # type: ignore[arg-type]
        tool_calls=[ToolCall("c", "f")],  # type: ignore[arg-type]
        metadata={"pinned": True},
    )
    assert message.content == (ContentPart("text", "t"),)
    assert message.tool_calls == (ToolCall("c", "f"),)
    assert isinstance(message.metadata, MappingProxyType)
    hash(message)


def test_direct_construction_is_validated() -> None:
    with pytest.raises(InvalidMessage) as raised:
        Message(role="robot", content="x")  # type: ignore[arg-type]
    assert raised.value.index is None
    assert str(raised.value).startswith("messages: unknown role 'robot'")
    with pytest.raises(InvalidMessage, match="tool message needs the 'tool_call_id'"):
        Message(role="tool", content="x")


CALL_DICT = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        pytest.param({"role": "user", "content": 123}, "'content' must be a string", id="int"),
        pytest.param(
            {"role": "user", "content": ("a", "b")}, "content part 0 must be a dict", id="strs"
        ),
        pytest.param(
            {"role": "assistant", "content": None, "tool_calls": ("a",)},
            "tool call 0 must be a dict",
            id="call-str",
        ),
        pytest.param(
            {"role": "assistant", "content": None, "tool_calls": "abc"},
            "'tool_calls' must be a list",
            id="calls-str",
        ),
        pytest.param(
            {"role": "user", "content": "q", "name": 5}, "'name' must be a string", id="name"
        ),
        pytest.param({"role": "user", "content": "q", "id": [1]}, "'id' must be a string", id="id"),
        pytest.param(
            {"role": "user", "content": "q", "metadata": {"pinned": "no"}},
            "metadata 'pinned' must be true or false",
            id="pinned",
        ),
        pytest.param(
            {"role": "user", "content": "q", "metadata": ["pinned"]},
            "'metadata' must be a dict",
            id="metadata",
        ),
        pytest.param(
            {"role": "tool", "content": "r", "tool_call_id": 7},
            "'tool_call_id' must be a string",
            id="call-id",
        ),
    ],
)
def test_direct_construction_checks_field_types(fields: dict[str, object], problem: str) -> None:
    with pytest.raises(InvalidMessage, match=problem) as raised:
        Message(**fields)  # type: ignore[arg-type]
    assert raised.value.index is None


def test_direct_construction_reads_tool_call_dicts_and_ids() -> None:
    caller = Message("assistant", None, tool_calls=[CALL_DICT])  # type: ignore[list-item]
    assert caller.tool_calls == (ToolCall("a", "f", "{}"),)
    assert Message("user", "q", id=7).id == "7"  # type: ignore[arg-type]
    assert Message("assistant", "x", tool_calls=None).tool_calls == ()  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="tool call's id must be a non-empty string"):
        ToolCall("", "f")
    with pytest.raises(InvalidMessage, match="name must be a string"):
        ToolCall("a", 5)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="content part's text must be a string"):
        ContentPart("text", 5)  # type: ignore[arg-type]


def test_directly_built_bad_messages_never_reach_a_strategy() -> None:
    # once a crash inside the strategy (TypeError, AttributeError) blamed on the plugin
    with pytest.raises(InvalidMessage):
        ctxwindow.select([Message("user", "q", name=5)], 50, "newest")  # type: ignore[arg-type]


def test_duplicate_tool_call_ids_in_one_message_are_invalid() -> None:
    entry = {"role": "assistant", "content": None, "tool_calls": [CALL_DICT, dict(CALL_DICT)]}
    with pytest.raises(InvalidMessage, match="tool call id 'a' appears twice") as raised:
        read_messages([OK, entry])
    assert raised.value.index == 1
    with pytest.raises(InvalidMessage, match="appears twice"):
        ctxwindow.select(
            [OK, entry, {"role": "tool", "tool_call_id": "a", "content": "r"}],
            1000,
            "newest",
            orphans="drop",
        )
    with pytest.raises(InvalidMessage, match="appears twice"):
        Message("assistant", None, tool_calls=(ToolCall("a", "f"), ToolCall("a", "g")))


# -- malformed messages ----------------------------------------------------------------
OK = {"role": "user", "content": "fine"}

MALFORMED = [
    pytest.param(
        "just text",
        "expected a dict with 'role' and 'content', a ctxwindow.Message or a message "
        "object with model_dump() (the openai SDK's), got str",
        id="str-entry",
    ),
    pytest.param(None, "got NoneType", id="none-entry"),
    pytest.param(["role", "user"], "got list", id="list-entry"),
    pytest.param(
        {"role": "robot", "content": "x"},
        "unknown role 'robot'; expected one of assistant, developer, function, system, tool, user",
        id="unknown-role",
    ),
    pytest.param({"content": "x"}, "unknown role None", id="missing-role"),
    pytest.param(
        {"role": "user", "content": 42},
        "'content' must be a string or a list of parts, got int",
        id="content-int",
    ),
    pytest.param(
        {"role": "user", "content": {"type": "text", "text": "x"}},
        "'content' must be a string or a list of parts, got dict",
        id="content-dict",
    ),
    pytest.param(
        {"role": "tool", "content": "42"},
        "a tool message needs the 'tool_call_id' of the call it answers",
        id="tool-no-id",
    ),
    pytest.param(
        {"role": "tool", "content": "42", "tool_call_id": ""},
        "a tool message needs the 'tool_call_id'",
        id="tool-empty-id",
    ),
    pytest.param(
        {"role": "user", "content": "x", "tool_calls": [{"id": "c", "function": {"name": "f"}}]},
        "only assistant messages may carry tool_calls, not 'user'",
        id="user-tool-calls",
    ),
    pytest.param(
        {"role": "user", "content": "x", "tool_call_id": "c"},
        "'tool_call_id' belongs on tool messages, not on 'user'",
        id="user-tool-call-id",
    ),
    pytest.param(
        {"role": "user"},
        "'content' is missing (or None); only an assistant message with tool_calls, "
        "function_call, refusal or audio, or a function message, may go without it",
        id="missing-content",
    ),
    pytest.param(
        {"role": "assistant", "content": None}, "'content' is missing", id="assistant-none-content"
    ),
    pytest.param(
        {"role": "user", "content": "x", "metadata": {"pinned": "yes"}},
        "metadata 'pinned' must be true or false, got 'yes'",
        id="pinned-str",
    ),
    pytest.param(
        {"role": "user", "content": "x", "metadata": {"pinned": 1}},
        "metadata 'pinned' must be true or false, got 1",
        id="pinned-int",
    ),
    pytest.param(
        {"role": "user", "content": "x", "metadata": ["pinned"]},
        "'metadata' must be a dict, got list",
        id="metadata-list",
    ),
    pytest.param(
        {"role": "user", "content": "x", "name": 5},
        "'name' must be a string, got int",
        id="name-int",
    ),
    pytest.param(
        {"role": "user", "content": "x", "id": [1]}, "'id' must be a string, got list", id="id-list"
    ),
    pytest.param(
        {"role": "user", "content": ["text"]},
        "content part 0 must be a dict with a 'type'",
        id="part-not-dict",
    ),
    pytest.param(
        {"role": "user", "content": [{"text": "x"}]},
        "content part 0 must be a dict with a 'type'",
        id="part-no-type",
    ),
    pytest.param(
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text"}]},
        "content part 1 is a text part without 'text'",
        id="text-part-no-text",
    ),
    pytest.param(
        {"role": "user", "content": [{"type": "image_url", "image_url": object()}]},
        "content part 0 is not JSON data",
        id="part-not-json",
    ),
    pytest.param(
        {"role": "assistant", "content": None, "tool_calls": {"id": "c"}},
        "'tool_calls' must be a list, got dict",
        id="tool-calls-dict",
    ),
    pytest.param(
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
        "tool call 0 must be a dict with a 'function'",
        id="tool-call-no-function",
    ),
    pytest.param(
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]},
        "tool call 0 has no 'id'",
        id="tool-call-no-id",
    ),
    pytest.param(
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": {}}]},
        "tool call 0 has no function 'name'",
        id="tool-call-no-name",
    ),
    pytest.param(
        {"role": ["user"], "content": "x"},
        "unknown role ['user']",
        id="role-unhashable",
    ),
    pytest.param(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"x": object()}}}],
        },
        "tool call 0's arguments are not JSON data",
        id="tool-arguments-not-json",
    ),
    pytest.param(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": 3, "function": {"name": "f"}}],
        },
        "tool call 0's 'type' must be a string, got int",
        id="tool-call-type-not-str",
    ),
    pytest.param(
        {"role": "user", "content": "x", "id": True},
        "'id' must be a string, got bool",
        id="id-bool",
    ),
    pytest.param(
        {"role": "user", "content": "x", "metadata": {"id": False}},
        "'id' must be a string, got bool",
        id="metadata-id-bool",
    ),
]


@pytest.mark.parametrize(("entry", "problem"), MALFORMED)
def test_malformed_entry_names_index_and_problem(entry: object, problem: str) -> None:
    with pytest.raises(InvalidMessage) as raised:
        read_messages([OK, OK, entry])
    error = raised.value
    assert error.index == 2
    assert problem in error.problem
    assert str(error).startswith(f"message 2: {error.problem}")
    assert isinstance(error, ValueError)
    assert isinstance(error, CtxWindowError)


@pytest.mark.parametrize(("entry", "problem"), MALFORMED)
def test_malformed_entry_is_rejected_by_conversation_and_select(
    entry: object, problem: str
) -> None:
    with pytest.raises(InvalidMessage) as raised:
        Conversation([OK, entry])
    assert raised.value.index == 1
    assert problem in str(raised.value)
    with pytest.raises(InvalidMessage) as raised:
        ctxwindow.select([entry, OK], 1000, "newest")
    assert raised.value.index == 0
    assert str(raised.value).startswith("message 0: ")
    assert problem in str(raised.value)


def test_first_bad_entry_is_reported() -> None:
    with pytest.raises(InvalidMessage) as raised:
        read_messages([OK, {"role": "robot", "content": "x"}, "also bad"])
    assert raised.value.index == 1


def test_none_as_message_list() -> None:
    with pytest.raises(InvalidMessage) as raised:
        read_messages(None)
    assert raised.value.index is None
    assert str(raised.value) == "messages: got None; pass a list of messages (it may be empty)"
    with pytest.raises(InvalidMessage, match="got None"):
        Conversation(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="got None"):
        ctxwindow.select(None, 100, "newest")


def test_dict_instead_of_list() -> None:
    with pytest.raises(InvalidMessage) as raised:
        read_messages(OK)
    assert raised.value.index is None
    assert str(raised.value) == "messages: expected a list of messages, got dict"
    with pytest.raises(InvalidMessage, match="expected a list of messages, got dict"):
        Conversation(OK)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="expected a list of messages, got dict"):
        ctxwindow.select(OK, 100, "newest")


def test_other_mapping_instead_of_list() -> None:
    # read_messages refuses any Mapping as the list; select and Conversation should too,
    # rather than iterating its keys and complaining about "message 0 ... got str"
    data = MappingProxyType({"role": "user", "content": "x"})
    with pytest.raises(InvalidMessage, match="expected a list of messages, got mappingproxy"):
        read_messages(data)
    with pytest.raises(InvalidMessage, match="expected a list of messages, got mappingproxy"):
        ctxwindow.select(data, 100, "newest")
    with pytest.raises(InvalidMessage, match="expected a list of messages, got mappingproxy"):
        Conversation(data)


@pytest.mark.parametrize("value", ["hello", b"hello", 42])
def test_other_non_lists(value: object) -> None:
    with pytest.raises(
        InvalidMessage, match=f"expected a list of messages, got {type(value).__name__}"
    ):
        read_messages(value)
    with pytest.raises(
        InvalidMessage, match=f"expected a list of messages, got {type(value).__name__}"
    ):
        ctxwindow.select(value, 100, "newest")


def test_directly_built_message_with_an_unhashable_role_or_bool_id() -> None:
    with pytest.raises(InvalidMessage, match=r"unknown role \['user'\]"):
        Message(role=["user"], content="x")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="'id' must be a string, got bool"):
        Message(role="user", content="x", id=True)  # type: ignore[arg-type]


def test_a_call_without_a_type_is_a_function_call() -> None:
    message = read_message(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "f"}}],
        },
        0,
    )
    assert message.tool_calls[0].type == "function"


# -- an assistant's refusal, legacy function call and audio reference ------------------
def test_refusal_function_call_and_audio_build_and_round_trip() -> None:
    message = Message(
        role="assistant",
        function_call={"name": "f", "arguments": {"x": 1}},  # type: ignore[arg-type]
        audio={"id": "audio_1"},  # type: ignore[arg-type]
        refusal="no",
    )
    assert message.function_call == FunctionCall("f", '{"x": 1}')
    assert message.audio == "audio_1"
    assert message.to_dict() == {
        "role": "assistant",
        "content": None,
        "refusal": "no",
        "function_call": {"name": "f", "arguments": '{"x": 1}'},
        "audio": {"id": "audio_1"},
    }
    assert Message.from_dict(message.to_dict()) == message
    assert pickle.loads(pickle.dumps(message)) == message
    assert copy.deepcopy(message) == message
    assert dataclasses.replace(message, refusal="still no").refusal == "still no"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"function_call": {"arguments": "{}"}}, "'function_call' must be a dict with"),
        ({"function_call": "f"}, "'function_call' must be a dict with"),
        ({"refusal": 3}, "'refusal' must be a string, got int"),
        ({"audio": 3}, "'audio' must be a string, got int"),
    ],
)
def test_bad_assistant_extras_are_named(fields: dict[str, object], problem: str) -> None:
    with pytest.raises(InvalidMessage, match=problem):
        Message(role="assistant", **fields)  # type: ignore[arg-type]


def test_counts_are_cached_by_refusal_and_function_call_too() -> None:
    counter = CachedCounter(ApproxCounter())
    short = Message(role="assistant", refusal="no")
    long = Message(role="assistant", refusal="no, and here is why " * 20)
    assert counter.count_message(short) < counter.count_message(long)
    called = [Message(role="assistant", function_call=FunctionCall("f", a)) for a in ("", "x" * 80)]
    assert counter.count_message(called[0]) < counter.count_message(called[1])
