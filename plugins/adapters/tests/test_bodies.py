"""``ctxwindow select`` on a saved Anthropic Messages body, as a user runs it: the same
body comes back, its messages windowed, every other key kept, and the real anthropic
client sends it (a local server records what it sent)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic")

from anthropic_api import REPLY, check_messages  # noqa: E402

from ctxwindow_adapters.bodies import AnthropicBody  # noqa: E402

SYSTEM_BLOCKS = [
    {"type": "text", "text": "You are a careful agent.", "cache_control": {"type": "ephemeral"}}
]


def agent_history(turns: int = 8) -> list[dict[str, Any]]:
    """A question, a tool_use, its tool_result and an answer per turn, then a question."""
    out: list[dict[str, Any]] = []
    for t in range(turns):
        out += [
            {"role": "user", "content": f"question {t} " + "word " * 30},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": f"call{t}", "name": "lookup", "input": {"q": t}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"call{t}", "content": "r " * 40}
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "answer " * 20}]},
        ]
    out.append({"role": "user", "content": "and now?"})
    return out


def body_with(system: Any) -> dict[str, Any]:
    return {
        "model": "claude",
        "max_tokens": 512,
        "system": system,
        "messages": agent_history(),
        "metadata": {"user_id": "user-1"},
        "tools": [{"name": "lookup", "description": "d", "input_schema": {"type": "object"}}],
    }


def select(tmp_path: Path, body: dict[str, Any], *args: str) -> tuple[int, str, str]:
    source = tmp_path / "request.json"
    source.write_text(json.dumps(body), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "ctxwindow", "select", str(source), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("system", ["You are a careful agent.", SYSTEM_BLOCKS])
def test_select_windows_an_anthropic_body_and_gives_the_same_shape_back(
    tmp_path: Path, recording_server: Any, system: Any
) -> None:
    body = body_with(system)
    code, out, err = select(tmp_path, body, "-s", "fixed", "-b", "400")
    assert code == 0, err
    windowed = json.loads(out)
    assert list(windowed) == list(body)
    assert {k: v for k, v in windowed.items() if k != "messages"} == {
        k: v for k, v in body.items() if k != "messages"
    }
    kept = windowed["messages"]
    assert 0 < len(kept) < len(body["messages"])
    assert kept[-1] == body["messages"][-1]
    assert all(message in body["messages"] for message in kept)  # whole messages, not made
    check_messages(kept, user_first=True)
    base_url, sent = recording_server(lambda path: REPLY)
    client = anthropic.Anthropic(api_key="test", base_url=base_url, max_retries=0, timeout=10)
    reply = client.messages.create(**windowed)
    assert reply.content[0].text == "ok"
    assert sent[0][1]["messages"] == kept and sent[0][1]["system"] == system


def test_the_record_counts_the_system_parameter(tmp_path: Path) -> None:
    body = body_with("You are a careful agent.")
    record = tmp_path / "record.json"
    code, out, err = select(tmp_path, body, "-s", "fixed", "-b", "400", "--record", str(record))
    assert code == 0, err
    written = json.loads(record.read_text(encoding="utf-8"))
    assert written["messages_before"] == len(body["messages"])
    assert written["messages_after"] == len(json.loads(out)["messages"])
    assert written["decisions"][0]["positions"] == []  # the system parameter: no position
    assert written["decisions"][0]["action"] == "kept"
    assert written["tokens_after"] <= 400


def test_explain_shows_the_system_parameter_as_a_row_of_its_own(tmp_path: Path) -> None:
    """The system parameter's decision names no position in the list: --explain shows it
    as '-' (it raised IndexError)."""
    body = body_with("You are a careful agent.")
    code, _, err = select(tmp_path, body, "-s", "fixed", "-b", "400", "--explain")
    assert code == 0, err
    rows = [line.split() for line in err.splitlines()]
    assert any(row[:1] == ["-"] and "kept" in row for row in rows), err


def test_an_openai_body_is_not_taken_for_an_anthropic_one() -> None:
    anthropic_body = AnthropicBody()
    openai = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        ],
    }
    assert not anthropic_body.recognises(openai)
    tools_only = {"messages": agent_history(1)}  # no system, but tool_use blocks
    assert anthropic_body.recognises(tools_only)
    assert anthropic_body.recognises({"system": "s", "messages": []})
