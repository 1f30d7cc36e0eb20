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
