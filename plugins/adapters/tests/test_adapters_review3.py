"""A review's findings on the LangChain, Responses, pydantic-ai and chat adapters: a
cut keeps a result's images in their places, what a model made or marks is counted as
it costs, a message edited in place among the newest is read again (ids and nested
arguments too), and a pydantic-ai summary passed back is never summarized as the
user's words."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("pydantic_ai")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    CachePoint,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import ctxwindow
from ctxwindow import InvalidMessage, OrphanToolResult
from ctxwindow_adapters import langchain as lc
from ctxwindow_adapters import openai as chat
from ctxwindow_adapters import openai_responses as responses
from ctxwindow_adapters import pydantic_ai as pai

LOG = "log line " * 2000
LONG = "word " * 3000
PNG_URL = "data:image/png;base64,iVBORw0KGgo="
APPROX = ctxwindow.get_counter("approx")


@pytest.fixture
def nothing_remembered() -> Any:
    """A read with no remembered history: what a first call sees."""

    def fresh(select: Any, messages: Any, **options: Any) -> Any:
        before = ctxwindow.remembered_histories()
        ctxwindow.remember_histories(0, 0)
        try:
            return select(copy.deepcopy(messages), **options)
        finally:
            ctxwindow.remember_histories(*before)

    return fresh


# -- 2. a cut tool result keeps its images, in their places ------------------------------
def test_responses_cut_output_keeps_its_image_before_the_text() -> None:
    items = [
        {"role": "user", "content": "take a screenshot and read the log"},
        {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [
                {"type": "input_image", "image_url": PNG_URL},
                {"type": "input_text", "text": LOG},
            ],
        },
    ]
    window = responses.select(items, budget=600)
    output = window.messages[-1]["output"]
    assert [part["type"] for part in output] == ["input_image", "input_text"]
    assert output[0] is items[2]["output"][0]
    assert "characters cut by ctxwindow from this tool result" in output[1]["text"]
    assert type(output[1]["text"]) is str  # the bridge's HostCut marks it, never sent
    sent = sum(map(APPROX.count_message, responses.read_items(window.messages).messages))
    assert sent == window.record.tokens_after <= 600  # the image counted as it is sent


def test_pydantic_ai_cut_tool_return_keeps_its_image_before_the_text() -> None:
    image = BinaryContent(b"\x89PNG", media_type="image/png")
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("take a screenshot and read the log")]),
        ModelResponse(parts=[ToolCallPart("shot", {}, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart("shot", [image, LOG], tool_call_id="c1")]),
    ]
    window = pai.select(history, budget=600)
    content = window.messages[-1].parts[0].content
    assert isinstance(content, list) and content[0] is image
    assert "characters cut by ctxwindow from this tool result" in content[1]
    assert type(content[1]) is str  # the bridge's HostCut marks it, never sent
    assert window.record.tokens_after <= 600


def test_langchain_cut_tool_result_keeps_its_image() -> None:
    image = {"type": "image_url", "image_url": {"url": PNG_URL}}
    history: list[BaseMessage] = [
        HumanMessage("take a screenshot and read the log"),
        AIMessage("", tool_calls=[{"name": "shot", "args": {}, "id": "c1"}]),
        ToolMessage([image, {"type": "text", "text": LOG}], tool_call_id="c1"),
    ]
    window = lc.select(history, budget=600)
    content = window.messages[-1].content
    assert isinstance(content, list) and content[0] == image
    assert type(content[1]["text"]) is str  # the bridge's HostCut marks it, never sent
    assert window.record.tokens_after <= 600


def test_a_cleared_output_is_its_stub_alone() -> None:
    """A strategy's stand-in for a whole result (a cleared output) sends no image: the
    stub says the whole output went, and is counted alone."""
    output = [{"type": "input_image", "image_url": PNG_URL}, {"type": "input_text", "text": LOG}]
    items = [
        {"role": "user", "content": "read the log"},
        {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": output},
        {"role": "user", "content": "and now?"},
        {"type": "function_call", "call_id": "c2", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "ok"},
    ]
    window = responses.select(
        items, 10_000, "clear_tool_outputs", keep_recent=1, min_tokens=10, when="always"
    )
    assert isinstance(window.messages[2]["output"], str)
    assert "cleared" in window.messages[2]["output"]


# -- 3. a file the model made counts as a non-text part ---------------------------------
def test_pydantic_ai_file_part_counts_as_a_media_part() -> None:
    image = BinaryContent(data=os.urandom(200_000), media_type="image/png")
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("draw a cat")]),
        ModelResponse(parts=[FilePart(content=image), TextPart("here is your cat")]),
        ModelRequest(parts=[UserPromptPart("make it orange")]),
    ]
    response = pai.read_messages(history).messages[1]
    sent = pai.read_messages([ModelRequest(parts=[UserPromptPart(["x", image])])]).messages[0]
    assert APPROX.count_message(response) < 2 * APPROX.count_message(sent) < 400
    assert pai.select(history, budget=4000).messages == history


# -- 5, 6. what is edited in place among the newest is read again -----------------------
def lc_exchanges(count: int) -> list[BaseMessage]:
    history: list[BaseMessage] = [HumanMessage("task")]
    for number in range(count):
        call = {"name": "write_file", "args": {"body": {"text": "x"}}, "id": f"c{number}"}
        history += [AIMessage("", tool_calls=[call]), ToolMessage("ok", tool_call_id=f"c{number}")]
    history.append(HumanMessage("go on"))
    return history


def test_langchain_nested_args_edited_in_place_are_read_again(nothing_remembered: Any) -> None:
    history = lc_exchanges(20)
    lc.select(history, budget=1000)
    history[-3].tool_calls[0]["args"]["body"]["text"] = "word " * 1500  # type: ignore[attr-defined]
    warm = lc.select(history, budget=1000)
    cold = nothing_remembered(lc.select, history, budget=1000)
    assert warm.record.tokens_after == cold.record.tokens_after <= 1000
    assert len(warm.messages) == len(cold.messages)


def test_langchain_tool_call_id_edited_in_place_is_read_again(nothing_remembered: Any) -> None:
    history = lc_exchanges(20)
    lc.select(history, budget=3000)
    history[-2].tool_call_id = "other"  # type: ignore[attr-defined]
    with pytest.raises(OrphanToolResult):
        lc.select(history, budget=3000)  # as a first read does
    with pytest.raises(OrphanToolResult):
        nothing_remembered(lc.select, history, budget=3000)


def test_responses_call_id_edited_in_place_is_read_again() -> None:
    items: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    for number in range(20):
        items += [
            {"type": "function_call", "call_id": f"c{number}", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{number}", "output": "r"},
        ]
    items.append({"role": "user", "content": "go"})
    responses.select(items, budget=3000)
    items[-2]["call_id"] = "other"
    with pytest.raises(OrphanToolResult):
        responses.select(items, budget=3000)


# -- 7. a pydantic-ai summary passed back is rolled on, never nested --------------------
def run_agent_turns(turns: int) -> tuple[pai.HistoryProcessor, list[list[ModelMessage]]]:
    processor = pai.ctxwindow_processor(budget=500, strategy="summarize")
    sent: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(messages)
        return ModelResponse(parts=[TextPart(f"answer number {len(sent)} " + "blah " * 40)])

    agent = Agent(
        FunctionModel(model), system_prompt="Be brief.", capabilities=[processor.capability()]
    )
    history: list[ModelMessage] | None = None
    for turn in range(turns):
        prompt = f"question {turn} about topic{turn} " + "pad " * 30
        history = agent.run_sync(prompt, message_history=history).all_messages()
    return processor, sent


def summaries(messages: list[ModelMessage]) -> list[str]:
    return [
        part.content
        for message in messages
        for part in message.parts
        if isinstance(part, UserPromptPart)
        and isinstance(part.content, str)
        and part.content.startswith("Summary of")
    ]


def test_pydantic_ai_summary_passed_back_never_nests_and_covers_the_earlier_turns() -> None:
    processor, sent = run_agent_turns(12)
    seen = [summaries(messages) for messages in sent]
    assert any(seen), "the budget makes the strategy summarize"
    for texts in seen:
        assert len(texts) <= 1
        for text in texts:
            assert text.count("Summary of the earlier conversation") == 1
            assert "User: Summary" not in text and "system: Summary" not in text
    last = seen[-1][0]
    assert "topic1 " in last  # the earliest turn summarized is still in it
    record = processor.last.record if processor.last else None
    assert record is not None
    assert record.tokens_before > 1000  # the strategy saw every earlier turn, not its summary
    summarized = [d for d in record.decisions if d.action == "summarized"]
    assert len(summarized) >= 10  # the turns the summary stands for, each one


def test_a_summary_from_elsewhere_is_read_as_a_made_message() -> None:
    """A summary this process did not make (a history loaded from a store) is a made
    message, not the user's words: a system message marked synthetic (content)."""
    made = {"synthetic": True, "covers": ["#1"], "summarizer": "extractive", "made": "gone"}
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("task")]),
        ModelRequest(
            parts=[UserPromptPart("Summary of the earlier conversation: x")],
            metadata={"ctxwindow": made},
        ),
        ModelResponse(parts=[TextPart("ok")]),
        ModelRequest(parts=[UserPromptPart("next")]),
    ]
    read = pai.read_messages(history).messages[1]
    assert read.role == "system" and read.synthetic
    assert "made" not in read.metadata


# -- 8. an encrypted reasoning blob counts as the Responses adapter counts it -----------
def test_langchain_encrypted_reasoning_counts_as_the_responses_adapter() -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Plan the answer."}],
        "encrypted_content": "gAAAAABo" + "Q" * 12000,
    }
    history: list[BaseMessage] = [
        HumanMessage("q1"),
        AIMessage(content=[reasoning, {"type": "text", "text": "answer"}]),
        HumanMessage("q2"),
    ]
    items = [
        {"role": "user", "content": "q1"},
        reasoning,
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "answer"}],
        },
        {"role": "user", "content": "q2"},
    ]
    counted = lc.select(history, budget=10**6).record.tokens_after
    assert counted == responses.select(items, budget=10**6).record.tokens_after
    assert len(lc.select(history, budget=2000).messages) == 3


# -- 10. minor ----------------------------------------------------------------------------
def test_responses_call_without_call_id_is_named() -> None:
    items = [
        {"role": "user", "content": "a"},
        {"type": "function_call", "name": "f", "arguments": "{}"},
        {"role": "user", "content": "b"},
    ]
    with pytest.raises(InvalidMessage, match="call_id") as raised:
        responses.select(items, budget=1000)
    assert raised.value.index == 1


def test_truncation_keeps_the_parts_in_their_order() -> None:
    image = {"type": "input_image", "image_url": "data:,x"}
    window = responses.select(
        [{"role": "user", "content": [image, {"type": "input_text", "text": LONG}]}],
        budget=300,
        oversize="truncate",
    )
    assert [p["type"] for p in window.messages[0]["content"]] == ["input_image", "input_text"]

    image_url = {"type": "image_url", "image_url": {"url": "data:,x"}}
    given = [{"role": "user", "content": [image_url, {"type": "text", "text": LONG}], "id": "u1"}]
    window = chat.select(given, budget=300, oversize="truncate")
    assert [p["type"] for p in window.messages[0]["content"]] == ["image_url", "text"]
    assert window.messages[0]["content"][0] is image_url
    assert window.messages[0]["metadata"]["truncated"]

    history: list[BaseMessage] = [
        HumanMessage(content=[image_url, {"type": "text", "text": LONG}], id="u1")
    ]
    window = lc.select(history, budget=300, oversize="truncate")
    assert [p["type"] for p in window.messages[0].content] == ["image_url", "text"]  # type: ignore[index]

    requests: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart([ImageUrl("http://x/a.png"), LONG, CachePoint()])])
    ]
    window = pai.select(requests, budget=300, oversize="truncate")
    content = window.messages[0].parts[0].content
    assert isinstance(content[0], ImageUrl) and isinstance(content[1], str)
    assert isinstance(content[2], CachePoint)


def test_pydantic_ai_cache_point_counts_nothing() -> None:
    marked = ModelRequest(parts=[UserPromptPart(["hello there", CachePoint()])])
    plain = ModelRequest(parts=[UserPromptPart(["hello there"])])
    counts = [
        APPROX.count_message(pai.read_messages([request]).messages[0])
        for request in (marked, plain)
    ]
    assert counts[0] == counts[1]
