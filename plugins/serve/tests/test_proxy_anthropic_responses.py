"""The real anthropic client and openai's Responses API through the proxy: bodies that
reach the upstream are valid for the SDKs' types, with tool exchanges kept whole."""

from __future__ import annotations

import anthropic
import openai
from anthropic.types import MessageParam
from openai.types.responses import ResponseInputParam
from pydantic import TypeAdapter

ANTHROPIC_MESSAGES = TypeAdapter(list[MessageParam])
RESPONSES_INPUT = TypeAdapter(ResponseInputParam)


def anthropic_history(turns: int) -> list[dict]:
    messages: list[dict] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn} " + "word " * 20})
        messages.append({"role": "assistant", "content": f"answer {turn} " + "word " * 20})
    messages += [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "checking"},
            {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "rain"},
            {"type": "text", "text": "so?"}]},
    ]  # fmt: skip
    return messages


def test_anthropic_messages_are_windowed_with_system_kept(validate, proxy, upstream):
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-x", max_retries=0)
    messages = anthropic_history(20)
    raw = client.messages.with_raw_response.create(
        model="claude-test", max_tokens=50, system="Be brief.", messages=messages
    )
    assert raw.parse().content[0].text == "Hello"
    sent = upstream.last.json()
    assert upstream.last.path == "/v1/messages"
    assert "sk-ant-x" in upstream.last.headers["authorization"]
    forwarded = validate(ANTHROPIC_MESSAGES, sent["messages"])
    assert sent["system"] == "Be brief."
    assert len(forwarded) < len(messages)
    assert forwarded[0]["role"] == "user"
    assert forwarded[-3:] == messages[-3:]  # the tool exchange and the current turn
    assert "strategy=fixed" in raw.headers["x-ctxwindow"]


def test_anthropic_streams_through(proxy, upstream):
    client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-x", max_retries=0)
    with client.messages.stream(
        model="claude-test", max_tokens=50, messages=anthropic_history(20)
    ) as stream:
        text = "".join(stream.text_stream)
    assert text == "Hello"
    assert upstream.last.json()["stream"] is True


def responses_input(turns: int) -> list[dict]:
    items: list[dict] = [{"role": "developer", "content": "Be brief."}]
    for turn in range(turns):
        items.append({"role": "user", "content": f"question {turn} " + "word " * 20})
        items.append({"type": "message", "role": "assistant", "id": f"msg_{turn}",
                      "status": "completed",
                      "content": [{"type": "output_text", "text": "answer " + "word " * 20,
                                   "annotations": []}]})  # fmt: skip
    items += [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "w",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"role": "user", "content": "thanks"},
    ]  # fmt: skip
    return items


def test_responses_input_is_windowed(validate, proxy, upstream):
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-x", max_retries=0)
    items = responses_input(20)
    raw = client.responses.with_raw_response.create(
        model="small", input=items, max_output_tokens=50, instructions="Answer in French."
    )
    assert raw.parse().output_text == "Hello"
    sent = upstream.last.json()
    forwarded = validate(RESPONSES_INPUT, sent["input"])
    assert len(forwarded) < len(items)
    assert forwarded[0] == items[0]
    assert forwarded[-4:] == items[-4:]  # reasoning, call and output stay together
    assert sent["instructions"] == "Answer in French."


def test_responses_with_server_state_go_untouched(proxy, upstream):
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-x", max_retries=0)
    items = responses_input(20)
    raw = client.responses.with_raw_response.create(
        model="small", input=items, previous_response_id="resp_0"
    )
    assert upstream.last.json()["input"] == items
    assert raw.headers["x-ctxwindow"] == "outcome=untouched"
