"""Messages as apps really hold them (issue 15): every OpenAI chat-completions input
shape, the SDK's own message objects, whole-number budgets of any numeric type, and a
Conversation whose dicts the app edits in place. Each through the public API."""

from __future__ import annotations

import math
from typing import Any

import pytest

import ctxwindow
from ctxwindow import (
    ApproxCounter,
    Conversation,
    History,
    InvalidBudget,
    InvalidMessage,
    Message,
    Selection,
    Window,
    Windower,
)
from ctxwindow.testing.strategies import Newest, newest

openai_chat = pytest.importorskip(
    "openai.types.chat", reason="the openai SDK is not installed: its real types are needed"
)
numpy = pytest.importorskip("numpy", reason="numpy is not installed: its integer type is needed")

REFUSAL = "I'm sorry, but I can't help with that request."
COUNTER = ApproxCounter()


def cost(messages: list[Any]) -> int:
    """What ``messages`` really cost now, read afresh (nothing cached)."""
    return sum(COUNTER.count_message(Message.from_dict(m)) for m in messages)


def chat(turns: int, words: str = "a few words about the trip") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You plan trips."}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn}: {words}"})
        messages.append({"role": "assistant", "content": f"answer {turn}: {words}"})
    return messages


def sdk_refusal() -> Any:
    return openai_chat.ChatCompletionMessage(role="assistant", content=None, refusal=REFUSAL)


def sdk_audio() -> Any:
    audio = openai_chat.ChatCompletionAudio(
        id="audio_abc123", data="UklGRg==", expires_at=1_900_000_000, transcript="Hello there."
    )
    return openai_chat.ChatCompletionMessage(role="assistant", content=None, audio=audio)


def sdk_function_call() -> Any:
    call = openai_chat.chat_completion_message.FunctionCall(
        name="get_weather", arguments='{"city": "Lisbon"}'
    )
    return openai_chat.ChatCompletionMessage(role="assistant", content=None, function_call=call)


# -- the SDK's refusal, audio and legacy function shapes -------------------------------
def test_sdk_refusal_dump_is_accepted_and_given_back_unchanged() -> None:
    refusal = sdk_refusal().model_dump()
    assert refusal["content"] is None and refusal["refusal"] == REFUSAL
    messages = [*chat(2), {"role": "user", "content": "how do I pick a lock?"}, refusal]
    window = ctxwindow.select(messages, budget=4000, strategy="newest")
    assert window.messages[-1] is refusal
    assert window.messages[-1] == sdk_refusal().model_dump()  # not changed either
    assert window.record.tokens_before == cost(messages)


def test_refusal_text_is_counted_and_read() -> None:
    message = Message.from_dict(sdk_refusal().model_dump())
    assert message.refusal == REFUSAL and message.content is None
    assert message.text == REFUSAL  # what strategies score
    assert COUNTER.count_message(message) == 3 + math.ceil(len(REFUSAL) / 4)
    assert message.to_dict() == {"role": "assistant", "content": None, "refusal": REFUSAL}


def test_refusal_content_part_is_text_that_round_trips() -> None:
    part = {"type": "refusal", "refusal": REFUSAL}
    message = Message.from_dict({"role": "assistant", "content": [part]})
    assert message.text == REFUSAL
    assert COUNTER.count_message(message) == 3 + math.ceil(len(REFUSAL) / 4)
    assert message.to_dict()["content"] == [part]


def test_refusal_part_without_its_text_is_named() -> None:
    with pytest.raises(InvalidMessage, match="refusal part without 'refusal'"):
        Message.from_dict({"role": "assistant", "content": [{"type": "refusal"}]})


def test_audio_only_assistant_message_is_accepted() -> None:
    reply = {"role": "assistant", "content": None, "audio": {"id": "audio_abc123"}}
    messages = [*chat(1), {"role": "user", "content": "say hello"}, reply]
    window = ctxwindow.select(messages, budget=4000, strategy="newest")
    assert window.messages[-1] is reply
    message = Message.from_dict(reply)
    assert message.audio == "audio_abc123"
    assert COUNTER.count_message(message) == 3 + 85  # an earlier reply's audio: a part


@pytest.mark.parametrize(
    "reply",
    [
        {"role": "assistant", "content": None, "audio": {"data": "no id"}},
        {"role": "assistant", "content": None, "audio": "audio_abc123"},
    ],
)
def test_audio_without_an_id_is_named(reply: dict[str, Any]) -> None:
    with pytest.raises(InvalidMessage, match="'audio' must be a dict with the 'id'"):
        ctxwindow.select([reply], budget=100, strategy="newest")


def test_assistant_without_anything_to_say_is_still_rejected() -> None:
    with pytest.raises(InvalidMessage, match=r"message 0: 'content' is missing \(or None\)"):
        ctxwindow.select([{"role": "assistant", "content": None}], budget=100, strategy="newest")


def test_refusal_on_a_user_message_is_named() -> None:
    with pytest.raises(InvalidMessage, match="belong on assistant messages, not on 'user'"):
        Message(role="user", content="x", refusal="no")


def test_legacy_function_call_and_its_result_form_one_unit() -> None:
    call = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'},
    }
    result = {"role": "function", "name": "get_weather", "content": '{"temp_c": 21}'}
    messages = [*chat(3), {"role": "user", "content": "weather in Lisbon?"}, call, result]
    window = ctxwindow.select(messages, budget=4000, strategy="newest")
    assert window.messages[-2:] == [call, result] and window.messages[-1] is result
    spans = [d.positions for d in window.record.decisions]
    assert (len(messages) - 2, len(messages) - 1) in spans  # call and result together
    # the call costs its name and arguments
    read = Message.from_dict(call)
    assert read.function_call is not None and read.function_call.name == "get_weather"
    chars = len("get_weather") + len('{"city": "Lisbon"}')
    assert COUNTER.count_message(read) == 3 + math.ceil(chars / 4)
    assert ctxwindow.to_openai([call])[0]["function_call"] == call["function_call"]


def test_an_older_legacy_exchange_is_dropped_whole() -> None:
    call = {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": ""}}
    result = {"role": "function", "name": "f", "content": "x" * 400}
    messages = [chat(0)[0], {"role": "user", "content": "go"}, call, result, *chat(8)[1:]]
    window = ctxwindow.select(messages, budget=200, strategy="newest")
    kept = [m for m in window.messages if m is call or m is result]
    assert kept in ([], [call, result])
    assert window.record.tokens_after <= 200


def test_function_message_needs_a_name_and_may_stand_alone() -> None:
    with pytest.raises(InvalidMessage, match="a function message needs the 'name'"):
        Message.from_dict({"role": "function", "content": "21"})
    lone = {"role": "function", "name": "f", "content": "21"}  # the legacy API took it
    window = ctxwindow.select([*chat(2), lone], budget=4000, strategy="newest")
    assert window.messages[-1] is lone


def test_sdk_message_objects_are_read_and_given_back_as_they_are() -> None:
    """``messages.append(resp.choices[0].message)``, as the SDK's docs continue a chat."""
    refusal, audio, called = sdk_refusal(), sdk_audio(), sdk_function_call()
    result = {"role": "function", "name": "get_weather", "content": '{"temp_c": 21}'}
    messages: list[Any] = [
        *chat(2),
        {"role": "user", "content": "pick a lock"},
        refusal,
        {"role": "user", "content": "say hi"},
        audio,
        {"role": "user", "content": "weather?"},
        called,
        result,
    ]
    window = ctxwindow.select(messages, budget=4000, strategy="newest")
    assert window.messages == messages
    assert all(a is b for a, b in zip(window.messages, messages, strict=True))
    request = ctxwindow.to_openai(window.messages)
    assert request[6] == {"role": "assistant", "content": None, "refusal": REFUSAL}
    assert request[8] == {"role": "assistant", "content": None, "audio": {"id": "audio_abc123"}}
    assert request[10]["function_call"] == {
        "name": "get_weather",
        "arguments": '{"city": "Lisbon"}',
    }


def test_sdk_tool_call_reply_groups_with_its_results_and_stays_an_object() -> None:
    function = openai_chat.chat_completion_message_function_tool_call.Function(
        name="search", arguments='{"q": "flights"}'
    )
    custom = openai_chat.chat_completion_message_custom_tool_call.Custom(
        name="sql", input="select 1"
    )
    reply = openai_chat.ChatCompletionMessage(
        role="assistant",
        content=None,
        tool_calls=[
            openai_chat.ChatCompletionMessageFunctionToolCall(
                id="call_1", type="function", function=function
            ),
            openai_chat.ChatCompletionMessageCustomToolCall(
                id="call_2", type="custom", custom=custom
            ),
        ],
    )
    results = [
        {"role": "tool", "tool_call_id": "call_2", "content": "1"},
        {"role": "tool", "tool_call_id": "call_1", "content": "TP123"},
    ]
    older = chat(30, "a much longer sentence about hotels, trains and museums " * 3)
    messages: list[Any] = [*older, {"role": "user", "content": "find flights"}, reply, *results]
    window = ctxwindow.select(messages, budget=300, strategy="newest")
    assert window.messages[-3] is reply and window.messages[-2:] == results
    assert window.record.tokens_after <= 300
    read = Message.from_dict(reply)
    assert [(c.name, c.arguments, c.type) for c in read.tool_calls] == [
        ("search", '{"q": "flights"}', "function"),
        ("sql", "select 1", "custom"),
    ]
    assert read.tool_calls[1].to_dict() == {
        "id": "call_2",
        "type": "custom",
        "custom": {"name": "sql", "input": "select 1"},
    }


def test_sdk_objects_in_a_conversation_and_a_grown_list() -> None:
    messages: list[Any] = chat(20)
    conversation = Conversation(messages)
    windower = Windower(Newest(), 4000, "approx")
    for turn in range(3):
        messages.append({"role": "user", "content": f"more {turn}"})
        messages.append(sdk_refusal())
        conversation.extend(messages[-2:])
        from_list = ctxwindow.select(messages, budget=4000, strategy="newest")
        from_conversation = windower.select(conversation)
        assert from_list.messages[-1] is messages[-1]
        assert from_conversation.messages[-1] is messages[-1]
        assert from_list.record.tokens_before == cost(messages)


def test_an_object_that_is_no_message_is_named() -> None:
    class Note:
        def model_dump(self, **_: Any) -> dict[str, Any]:
            return {"type": "human", "content": "hi"}

    with pytest.raises(InvalidMessage, match=r"message 1: .*got Note; for a framework's messages"):
        ctxwindow.select([chat(0)[0], Note()], budget=100, strategy="newest")


# -- budgets of any numeric type -------------------------------------------------------
@pytest.mark.parametrize(
    "budget",
    [numpy.int64(400), numpy.int32(400), 400.0, numpy.float64(400.0), 400],
    ids=["numpy.int64", "numpy.int32", "float", "numpy.float64", "int"],
)
def test_whole_number_budgets_are_taken_as_ints(budget: Any) -> None:
    messages = chat(20)
    window = ctxwindow.select(messages, budget=budget, strategy="newest")
    assert window.record.budget == 400 and type(window.record.budget) is int
    assert window.record.tokens_after <= 400 < window.record.tokens_before
    assert Windower(Newest(), budget).budget == 400
    windower = ctxwindow.from_config({"strategy": "newest", "budget": budget})
    assert type(windower.budget) is int
    assert type(windower.select(messages, budget=budget).record.budget) is int


@pytest.mark.parametrize(
    ("budget", "shown"),
    [
        (400.5, "got float 400.5"),
        (float("nan"), "got float nan"),
        (float("inf"), "got float inf"),
        (2.0**60, "got float"),
        (True, "got bool True"),
        (numpy.bool_(True), "got bool"),
        ("4000", "got str '4000'"),
        (None, "got NoneType None"),
    ],
)
def test_other_budgets_still_raise(budget: Any, shown: str) -> None:
    with pytest.raises(InvalidBudget, match="budget must be a positive int") as raised:
        ctxwindow.select(chat(1), budget=budget, strategy="newest")
    assert shown in str(raised.value)
    with pytest.raises(InvalidBudget, match=shown):
        Windower(Newest(), budget)


@pytest.mark.parametrize("budget", [0, 0.0, -5.0, numpy.int64(-1)])
def test_whole_but_not_positive_budgets_raise(budget: Any) -> None:
    with pytest.raises(InvalidBudget, match="budget must be a positive int"):
        Windower(Newest(), budget)


# -- a dict edited in place after Conversation.append ----------------------------------
def test_a_reply_edited_in_place_is_counted_again() -> None:
    """The issue's case: the record said 18 tokens while the window cost 2,113."""
    messages = chat(12)
    conversation = Conversation(messages)
    windower = Windower(Newest(), 500, "approx")
    reply = {"role": "assistant", "content": "short"}
    conversation.append({"role": "user", "content": "tell me everything"})
    conversation.append(reply)
    assert windower.select(conversation).record.tokens_after <= 500
    reply["content"] = "a long, streamed answer " * 300  # filled in after it was appended
    window = windower.select(conversation)
    assert window.record.tokens_before == cost(messages) + cost(conversation.originals[-2:])
    assert cost(window.messages) == window.record.tokens_after <= 500
    assert window.messages[-1] is not reply or cost([reply]) <= 500


def test_an_edit_deep_in_the_tail_and_an_old_system_prompt_are_seen() -> None:
    messages = chat(300)  # 601 messages: the system prompt is far past the checked tail
    conversation = Conversation(messages)
    windower = Windower(Newest(), 2000, "approx")
    windower.select(conversation)
    messages[0]["content"] = "You plan trips. " * 200  # a refreshed system prompt
    messages[-100]["content"] = "x" * 8000
    window = windower.select(conversation)
    assert window.messages[0] is messages[0]
    assert cost(window.messages) == window.record.tokens_after <= 2000
    assert window.record.tokens_before == cost(messages)


def test_a_conversation_read_again_goes_on_growing() -> None:
    messages = chat(40)
    conversation = Conversation(messages)
    windower = Windower(Newest(), 300, "approx")
    conversation.append({"role": "user", "content": "first"})
    windower.select(conversation)
    conversation.originals[-1]["content"] = "first, edited " * 40
    edited = windower.select(conversation)
    conversation.append({"role": "user", "content": "second"})
    grown = windower.select(conversation)
    assert len(conversation) == len(messages) + 2 == grown.record.messages_before
    assert list(conversation)[-1]["content"] == "second"
    assert cost(grown.messages) == grown.record.tokens_after <= 300
    assert edited.record.tokens_before == cost(conversation.originals[:-1])
    assert len(edited.record.decisions) == len(messages) + 1  # its record still reads


class Recording:
    """A strategy that notes the conversation each visit's history was taken of."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[Conversation] = []

    def choose(self, history: History) -> Selection:
        self.seen.append(history.conversation)
        return newest(history)


def test_strategies_state_starts_afresh_after_an_edit() -> None:
    """A strategy may key per-conversation state (an index of unit texts) on the
    conversation; after an edit it is given a new one, so no stale index is used."""
    messages = chat(40)
    conversation = Conversation(messages)
    strategy = Recording()
    windower = Windower(strategy, 200, "approx")
    windower.select(conversation)
    windower.select(conversation)
    messages[-1]["content"] = "changed " * 10
    windower.select(conversation)
    windower.select(conversation)
    first, again, edited, after = strategy.seen
    assert first is again and edited is after and edited is not first


@pytest.mark.parametrize("through", ["conversation", "list"])
def test_content_parts_edited_in_place_are_seen_and_unedited_ones_are_not(through: str) -> None:
    """A chat's string contents are compared as they are (no snapshot taken), a list of
    content parts by its parts: text streamed into a part, or a part appended to the
    list, is seen; the same parts untouched are not taken for an edit."""
    messages = chat(20)
    reply: dict[str, Any] = {"role": "assistant", "content": [{"type": "text", "text": "so"}]}
    messages.append(reply)
    conversation = Conversation(messages)
    strategy = Recording()
    windower = Windower(strategy, 300, "approx")

    def select() -> Window[Any]:
        return windower.select(conversation if through == "conversation" else messages)

    select()
    select()
    assert strategy.seen[-1] is strategy.seen[-2]  # unedited parts: the same conversation
    reply["content"][0]["text"] = "so, streamed on " * 20
    grown = select()
    assert strategy.seen[-1] is not strategy.seen[-2]
    assert grown.record.tokens_before == cost(messages)
    reply["content"].append({"type": "text", "text": "and a part more " * 20})
    grown = select()
    assert grown.record.tokens_before == cost(messages)


def test_a_reply_streamed_in_place_is_read_again_from_where_it_was_edited(
    counting: Any,
) -> None:
    """Only the newest messages edited: the conversation read again is a branch of the
    one before, from the first edited message on; strategies' state starts from it. An
    older instruction edited: read again whole."""
    messages = chat(200)
    conversation = Conversation(messages)
    strategy = Recording()
    windower = Windower(strategy, 400, counting)
    windower.select(conversation)
    messages[-3]["content"] = "streamed " * 30
    messages[-1]["content"] = "and more " * 30
    before = counting.calls
    window = windower.select(conversation)
    assert counting.calls - before <= 3  # the edited message and those after it, not 401
    edited = strategy.seen[-1]
    assert edited.branched_from is not None
    assert edited.branched_from.messages == len(messages) - 3
    assert window.record.tokens_before == cost(messages)
    messages[0]["content"] = "You plan trips now. " * 20  # an older instruction
    windower.select(conversation)
    assert strategy.seen[-1] is not edited and strategy.seen[-1].branched_from is None
    assert windower.select(conversation).record.tokens_before == cost(messages)


def test_an_edit_that_breaks_a_message_is_named() -> None:
    messages = chat(5)
    conversation = Conversation(messages)
    windower = Windower(Newest(), 100, "approx")
    windower.select(conversation)
    messages[-1]["content"] = None
    with pytest.raises(InvalidMessage, match=r"message 10: 'content' is missing"):
        windower.select(conversation)
    messages[-1]["content"] = "fixed"
    assert windower.select(conversation).messages[-1] is messages[-1]
