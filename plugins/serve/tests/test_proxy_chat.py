"""The real openai client, pointed at the proxy, against the recording upstream: what
reaches the upstream is a valid chat body, windowed as the strategy windows the history."""

from __future__ import annotations

import json

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

import ctxwindow
from ctxwindow.testing import check_window

MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])


def client(proxy, key="sk-x"):
    return openai.OpenAI(base_url=f"{proxy.url}/v1", api_key=key, max_retries=0)


def test_a_long_chat_is_windowed_to_the_models_context(validate, proxy, upstream, make_history):
    messages = make_history(20)
    raw = client(proxy).chat.completions.with_raw_response.create(
        model="small", messages=messages, max_tokens=50
    )
    assert raw.parse().choices[0].message.content == "Hello"
    sent = upstream.last.json()
    forwarded = validate(MESSAGES, sent["messages"])
    assert len(forwarded) < len(messages)
    # the strategy's own window at the request's budget: context 400 - output 50
    expected = check_window(ctxwindow.get_strategy("fixed"), messages, 350)
    assert expected is not None
    assert forwarded == expected.messages
    assert sent["max_tokens"] == 50
    header = raw.headers["x-ctxwindow"]
    assert header.startswith("strategy=fixed; tokens=")
    assert f"dropped={len(messages) - len(forwarded)}" in header
    assert "budget=350" in header


def test_a_history_that_fits_goes_as_the_same_bytes(proxy, upstream, make_history):
    body = json.dumps(
        {"model": "small", "messages": make_history(1), "temperature": 0.25}, indent=1
    ).encode()
    answer = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert answer.status_code == 200
    assert upstream.last.body == body
    assert "dropped=0" in answer.headers["x-ctxwindow"]


def test_every_other_key_of_the_body_is_kept(proxy, upstream, make_history):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    client(proxy).chat.completions.create(
        model="small",
        messages=make_history(20),
        max_completion_tokens=20,
        tools=tools,
        temperature=0.5,
        user="u1",
    )
    sent = upstream.last.json()
    assert sent["tools"] == tools
    assert (sent["temperature"], sent["user"], sent["max_completion_tokens"]) == (0.5, "u1", 20)


def test_tools_and_output_come_off_the_budget(proxy, make_history):
    tools = [{"type": "function", "function": {"name": "f", "description": "word " * 100}}]
    raw = client(proxy).chat.completions.with_raw_response.create(
        model="small", messages=make_history(20), max_tokens=100, tools=tools
    )
    budget = int(raw.headers["x-ctxwindow"].split("budget=")[1].split(";")[0])
    assert budget < 400 - 100 - 100


def test_a_tool_call_goes_with_its_results(validate, proxy, upstream, make_history):
    messages = make_history(10)
    messages[-1:] = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny " * 40},
        {"role": "user", "content": "thanks"},
    ]  # fmt: skip
    client(proxy).chat.completions.create(model="small", messages=messages, max_tokens=50)
    forwarded = validate(MESSAGES, upstream.last.json()["messages"])
    calls = [m for m in forwarded if m.get("tool_calls")]
    results = [m for m in forwarded if m["role"] == "tool"]
    assert len(calls) == len(results)


def test_a_model_without_an_entry_goes_untouched(proxy, upstream, make_history):
    messages = make_history(20)
    raw = client(proxy).chat.completions.with_raw_response.create(model="other", messages=messages)
    assert upstream.last.json()["messages"] == messages
    assert raw.headers["x-ctxwindow"] == "outcome=unknown_model"


def test_a_prefix_entry_matches_its_models(proxy, upstream, make_history):
    raw = client(proxy).chat.completions.with_raw_response.create(
        model="claude-x", messages=make_history(20), max_tokens=50
    )
    assert "budget=350" in raw.headers["x-ctxwindow"]


def test_no_room_for_history_is_a_400_naming_the_numbers(proxy, upstream, make_history):
    try:
        client(proxy).chat.completions.create(
            model="small", messages=make_history(2), max_tokens=1000
        )
    except openai.BadRequestError as error:
        assert "context 400 - output 1000" in str(error)
    else:
        raise AssertionError("expected a 400")
    assert upstream.seen == []


def test_other_requests_pass_through(proxy, upstream):
    models = client(proxy).models.list()
    assert [m.id for m in models.data] == ["m"]
    assert upstream.last.path == "/v1/models"


def test_a_growing_chat_is_windowed_each_turn(validate, proxy, upstream, make_history):
    messages = make_history(5)
    chat = client(proxy)
    for turn in range(30):
        answer = chat.chat.completions.create(model="small", messages=messages, max_tokens=50)
        messages.append({"role": "assistant", "content": answer.choices[0].message.content})
        messages.append({"role": "user", "content": f"turn {turn} " + "word " * 20})
        sent = validate(MESSAGES, upstream.last.json()["messages"])
        assert sent[0] == messages[0]  # the system prompt is kept
    assert len(sent) < len(messages)


def test_a_chat_read_in_part_is_windowed_as_if_read_whole(validate, proxy, upstream, make_history):
    """From the second request on, a conversation's body is parsed in part (the history
    it starts with is recognised by its bytes): the window is the strategy's own on the
    whole history each turn, an old message edited in place included."""
    messages = make_history(20)
    chat = client(proxy)
    strategy = ctxwindow.get_strategy("fixed")
    for turn in range(6):
        if turn == 4:  # an app edits a message the window keeps: parsed whole again
            messages[-3] = {**messages[-3], "content": "edited " + "word " * 20}
        chat.chat.completions.create(model="small", messages=messages, max_tokens=50)
        expected = check_window(strategy, messages, 350)
        assert expected is not None
        assert validate(MESSAGES, upstream.last.json()["messages"]) == expected.messages
        # each turn's body replaces the one it grew from; the edit starts a second one
        assert len(proxy.app.state.proxy.windowing.bodies) == (1 if turn < 4 else 2)
        messages.append({"role": "assistant", "content": f"answer {turn}"})
        messages.append({"role": "user", "content": f"turn {turn} " + "word " * 20})
    assert any(m["content"].startswith("edited") for m in upstream.last.json()["messages"])


def test_a_message_the_window_made_goes_with_the_apis_fields_only(
    validate, start_proxy, upstream, make_history
):
    """A summary is ctxwindow's message: its ``metadata`` (what it covers, that it is
    synthetic) is the record's, not the upstream's, which may refuse unknown fields.
    The client's own messages go as they came, extra keys and all."""
    proxy = start_proxy(strategy={"strategy": "summarize"})
    messages = make_history(20)
    messages[-1] = {**messages[-1], "name": "ada", "x-app-note": "the client's own key"}
    answer = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "small", "messages": messages, "max_tokens": 50},
        headers={"authorization": "Bearer sk-x"},
    )
    assert answer.status_code == 200
    assert "summarized=0" not in answer.headers["x-ctxwindow"]
    forwarded = upstream.last.json()["messages"]
    expected = check_window(ctxwindow.get_strategy("summarize"), messages, 350)
    assert expected is not None
    own = set(map(id, messages))
    made = [m for m in expected.messages if id(m) not in own]
    assert made and all(m["metadata"]["synthetic"] for m in made)  # a summary, say
    assert forwarded == [
        m if id(m) in own else {k: v for k, v in m.items() if k != "metadata"}
        for m in expected.messages
    ]
    assert forwarded[-1] == messages[-1]  # the client's extra key went as it came
    assert all("metadata" not in m for m in forwarded)
    validate(MESSAGES, forwarded[:-1])


def test_integers_past_64_bits_are_relayed_exactly_when_the_body_is_rebuilt(
    proxy, upstream, make_history
):
    """orjson reads an integer past 64 bits as a float: a rebuilt body must still carry
    every number as the client wrote it, in the other keys and in the messages kept."""
    seed = 123456789012345678901234
    messages = make_history(20)
    messages[-1] = {**messages[-1], "x-app-id": -9223372036854775809}
    body = json.dumps({"model": "small", "messages": messages, "max_tokens": 50, "seed": seed})
    answer = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        content=body.encode(),
        headers={"content-type": "application/json"},
    )
    assert answer.status_code == 200
    sent = upstream.last.json()
    assert len(sent["messages"]) < len(messages)  # rebuilt, not the bytes as they came
    assert sent["seed"] == seed and isinstance(sent["seed"], int)
    assert sent["messages"][-1]["x-app-id"] == -9223372036854775809
    assert b"123456789012345678901234" in upstream.last.body


def _tool_turns(turns: int) -> list[dict]:
    """A chat whose turns each hold a call with two results (one unit, three messages),
    and a last user message too long for any budget."""
    messages: list[dict] = [{"role": "system", "content": "You are terse."}]
    for turn in range(turns):
        calls = [
            {"id": f"c{turn}{n}", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            for n in range(2)
        ]
        messages += [
            {"role": "user", "content": f"question {turn} " + "word " * 10},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": f"c{turn}0", "content": "sunny " * 10},
            {"role": "tool", "tool_call_id": f"c{turn}1", "content": "windy " * 10},
        ]
    messages.append({"role": "user", "content": "and now? " + "word " * 2000})
    return messages


def test_dropped_counts_messages_whether_or_not_the_window_made_any(start_proxy, upstream):
    """``dropped=`` is the history's messages left out, on every path: a window of the
    client's own messages, and one holding a copy it made (a cut last message)."""
    proxy = start_proxy(strategy={"strategy": "fixed", "oversize": "truncate"})
    for messages in (_tool_turns(1), _tool_turns(6)):
        answer = httpx.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "small", "messages": messages, "max_tokens": 50},
        )
        forwarded = upstream.last.json()["messages"]
        assert forwarded[-1]["content"] != messages[-1]["content"]  # the window cut it
        assert f"dropped={len(messages) - len(forwarded)};" in answer.headers["x-ctxwindow"]
        assert "; cut=1;" in answer.headers["x-ctxwindow"]
    picked = [*_tool_turns(6)[:-1], {"role": "user", "content": "and now?"}]
    answer = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "small", "messages": picked, "max_tokens": 50},
    )
    sent = len(upstream.last.json()["messages"])
    assert sent < len(picked)
    assert f"dropped={len(picked) - sent};" in answer.headers["x-ctxwindow"]
    assert "; cut=0;" in answer.headers["x-ctxwindow"]


def test_cut_counts_the_messages_of_units_sent_shortened(start_proxy, upstream):
    """``cut=`` is the history's messages whose unit the window sends shortened (a
    tool result cleared to a stand-in, say), counted as ``dropped=`` counts: a call
    whose results were stood in for is the call and its results. The record's figure."""
    proxy = start_proxy(strategy={"strategy": "clear_tool_outputs", "keep_recent": 1})
    messages = [*_tool_turns(2)[:-1], {"role": "user", "content": "and now?"}]
    for message in messages:
        if message["role"] == "tool":
            message["content"] *= 12  # worth a stand-in: 120 words
    answer = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        json={"model": "small", "messages": messages, "max_tokens": 50},
    )
    assert answer.status_code == 200
    strategy = ctxwindow.get_strategy("clear_tool_outputs", keep_recent=1)
    window = check_window(strategy, messages, 350)
    assert window is not None
    cut = [r for r in window.record.decision_runs if r.action in ("truncated", "replaced")]
    expected = sum(len(run.positions) for run in cut)
    assert expected >= 3  # a call and its two results, stood in for, at least
    assert f"; cut={expected};" in answer.headers["x-ctxwindow"]
    forwarded = upstream.last.json()["messages"]
    assert sum(m != o for m, o in zip(forwarded, messages, strict=False)) > 0
