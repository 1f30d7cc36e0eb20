"""LoCoMo written out three ways (``--render``), and each conversation's own recall."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwindow.errors import ConfigError
from ctxwindow_eval import evaluate, load_locomo

SAMPLE = {
    "sample_id": "tiny",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat yesterday."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely!"},
        ],
        "session_2_date_time": "9:05 am on 20 June, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "How is the cat?"}],
    },
    "qa": [{"question": "When did Ann adopt a cat?", "evidence": ["D1:1"], "category": 2}],
}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    other = json.loads(json.dumps(SAMPLE).replace('"tiny"', '"other"'))
    path.write_text(json.dumps([SAMPLE, other]), encoding="utf-8")
    return path


def messages(data: Path, render: str) -> list[dict[str, Any]]:
    conversations, _ = load_locomo(data, render)
    return conversations[0].messages


def test_headers_is_the_default_and_dates_each_session_in_a_message(data: Path) -> None:
    default = messages(data, "headers")
    assert default == load_locomo(data)[0][0].messages
    assert [m["id"] for m in default] == ["S1", "D1:1", "D1:2", "S2", "D2:1"]
    assert default[0]["content"] == "[Session 1: 1:56 pm on 8 May, 2023]"
    assert default[1]["name"] == "Ann" and "metadata" not in default[1]


def test_timestamps_puts_the_session_date_on_each_turn_and_no_header(data: Path) -> None:
    stamped = messages(data, "timestamps")
    assert [m["id"] for m in stamped] == ["D1:1", "D1:2", "D2:1"]
    assert [m["metadata"]["timestamp"] for m in stamped] == [
        "2023-05-08T13:56:00",
        "2023-05-08T13:56:00",
        "2023-06-20T09:05:00",
    ]


def test_inline_writes_the_speaker_into_the_text(data: Path) -> None:
    inline = messages(data, "inline")
    assert inline[1] == {"role": "user", "content": "Ann: I adopted a cat yesterday.", "id": "D1:1"}
    assert inline[0]["id"] == "S1"


def test_an_unknown_rendering_is_a_config_error(data: Path) -> None:
    with pytest.raises(ConfigError, match="render"):
        load_locomo(data, "sideways")


def test_each_conversation_has_its_own_recall(data: Path) -> None:
    conversations, _ = load_locomo(data)
    result = evaluate(["fixed"], conversations, budgets=[30, 1000])
    small, large = result.rows
    assert set(large.by_conversation) == {"tiny", "other"}
    assert large.by_conversation["tiny"] == {
        "questions": 1,
        "recall": 1.0,
        "by_category": {"2": 1.0},
    }
    assert small.by_conversation["other"]["recall"] == small.recall
    assert result.to_dict()["rows"][0]["by_conversation"] == small.by_conversation
