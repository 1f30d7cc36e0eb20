"""``ctxwindow.read_request``: what ``ctxwindow select`` reads, for any tool to reuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ctxwindow
from ctxwindow import InvalidMessage, Windower
from ctxwindow.testing.strategies import Newest

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    *({"role": "user" if i % 2 else "assistant", "content": f"turn {i} " * 20} for i in range(9)),
]


def test_a_messages_file_comes_back_as_a_list(tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in MESSAGES), encoding="utf-8")
    request = ctxwindow.read_request(str(path))
    assert request.messages == MESSAGES and request.body is None
    result, window = request.select(Windower(Newest(), budget=120))
    assert result == window.messages and result[0] == MESSAGES[0] and result[-1] == MESSAGES[-1]
    assert len(result) < len(MESSAGES)


def test_a_request_body_comes_back_as_a_body_with_every_other_key(tmp_path: Path) -> None:
    body = {"model": "gpt-4o", "temperature": 0, "messages": MESSAGES}
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    request = ctxwindow.read_request(str(path))
    assert request.body == body and request.format is None and request.messages == MESSAGES
    result, window = request.select(Windower(Newest(), budget=120))
    assert {k: v for k, v in result.items() if k != "messages"} == {
        "model": "gpt-4o",
        "temperature": 0,
    }
    assert result["messages"] == window.messages
    assert window.record.messages_before == len(MESSAGES)


def test_a_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidMessage, match="does not exist"):
        ctxwindow.read_request(str(tmp_path / "missing.json"))


def test_a_request_body_sends_the_messages_the_window_made_with_the_apis_fields_only(
    tmp_path: Path,
) -> None:
    """Found by two users' reviews: the body ``ctxwindow select`` wrote held ctxwindow's
    ``metadata`` on the messages it made (a cut tool result here), which the API refuses;
    the caller's own messages go as they came, metadata and all."""
    pinned = {"role": "user", "content": "keep me", "metadata": {"pinned": True}}
    messages = [
        MESSAGES[0],
        pinned,
        {"role": "user", "content": "read the log"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "log", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "line\n" * 2_000},
    ]
    path = tmp_path / "body.json"
    path.write_text(json.dumps({"model": "gpt-4o", "messages": messages}), encoding="utf-8")
    result, window = ctxwindow.read_request(str(path)).select(Windower(Newest(), budget=300))
    assert window.messages[-1]["metadata"]["truncated"] is True  # the window marks its cut
    sent = result["messages"]
    assert sent[:-1] == messages[:-1] and sent[1]["metadata"] == {"pinned": True}
    assert set(sent[-1]) == {"role", "tool_call_id", "content"}
    assert sent[-1]["content"] == window.messages[-1]["content"]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('{"model": "m", "messages": "oops"}', "a str 'messages'"),
        ('{"model": "m"}', "no 'messages'"),
    ],
)
def test_a_json_object_neither_message_nor_body_says_so(
    tmp_path: Path, text: str, found: str
) -> None:
    """Found by a plugin author's review: such a file was read as one line of JSONL and
    the error was "message 0: unknown role None"."""
    path = tmp_path / "body.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidMessage) as caught:
        ctxwindow.read_request(str(path))
    assert f"no 'role' (not a message) and {found} (not a request body" in str(caught.value)
    assert str(path) in str(caught.value)
