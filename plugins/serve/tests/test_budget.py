"""The budget of a request's history, and the settings it comes from."""

from __future__ import annotations

import json

import pytest

import ctxwindow
from ctxwindow_serve.budget import PartCounts, request_budget
from ctxwindow_serve.settings import ModelEntry, load_settings
from ctxwindow_serve.shapes import ANTHROPIC, CHAT, RESPONSES

COUNTER = ctxwindow.get_counter("approx")
ENTRY = ModelEntry("m", context=10_000, output=1000, reserve=0.1)


def budget(body, shape=CHAT, entry=ENTRY):
    return request_budget(body, shape, entry, COUNTER, PartCounts())


@pytest.mark.parametrize(
    ("shape", "body", "output"),
    [
        (CHAT, {"max_completion_tokens": 300, "max_tokens": 200}, 300),
        (CHAT, {"max_tokens": 200}, 200),
        (CHAT, {}, 1000),
        (ANTHROPIC, {"max_tokens": 64}, 64),
        (RESPONSES, {"max_output_tokens": 128, "max_tokens": 5}, 128),
        (RESPONSES, {}, 1000),
    ],
)
def test_the_output_comes_from_the_request_else_the_entry(shape, body, output):
    found = budget(body, shape)
    assert found.output == output
    assert found.left == 10_000 - output - 1000


def test_tools_formats_and_instructions_take_their_tokens():
    tools = [{"type": "function", "function": {"name": "f", "description": "x " * 400}}]
    text = {"format": {"type": "json_schema", "schema": {"description": "y " * 200}}}
    with_parts = budget({"tools": tools, "instructions": "z " * 100, "text": text}, RESPONSES)
    compact = {"separators": (",", ":")}
    parts = (json.dumps(tools, **compact), "z " * 100, json.dumps(text["format"], **compact))
    assert with_parts.fixed == sum(COUNTER.count_text(part) for part in parts)
    chat = budget({"tools": tools, "response_format": text["format"]})
    assert chat.fixed > 0
    assert chat.left == 10_000 - 1000 - chat.fixed - 1000


def test_model_entries_match_exactly_then_by_the_longest_prefix():
    settings = load_settings(
        {"serve": {"upstream": "http://up"},
         "models": {"gpt-4o": {"context": 10_000}, "gpt-*": {"context": 20_000},
                    "gpt-4*": {"context": 30_000}}}
    )  # fmt: skip
    assert settings.model("gpt-4o").context == 10_000
    assert settings.model("gpt-4o-mini").context == 30_000
    assert settings.model("gpt-3.5").context == 20_000
    assert settings.model("claude") is None
    assert settings.model(None) is None


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"serve": {"upstream": "http://up", "uptream": 1}}, "unknown key"),
        ({"serve": {"upstream": "http://up"}, "models": {"m": {}}}, "needs context"),
        ({"serve": {"upstream": "http://up"}, "models": {"m": {"context": 0}}}, "positive"),
        ({"serve": {"upstream": "http://up"}, "models": {"m": {"context": 9, "reserve": 1}}},
         "reserve"),
        ({"serve": {"upstream": "http://up"}, "models": {"m": {"context": 100, "output": 200}}},
         r"leaves no room for a history: output \(200\)"),
        ({"serve": {"upstream": "http://up"}, "models": {"m": {"context": 4096}}},
         "lower output"),
        ({}, "no upstream"),
        ({"serve": {"upstream": "ftp://up"}}, "http"),
        ({"serve": {"upstream": "http://up", "histories": 0}}, "histories"),
    ],
)  # fmt: skip
def test_bad_settings_are_config_errors(config, message):
    with pytest.raises(ctxwindow.ConfigError, match=message):
        load_settings(config)


def test_the_proxy_remembers_a_thousand_conversations_unless_told():
    assert load_settings({"serve": {"upstream": "http://up"}}).histories == 1024
    assert load_settings({"serve": {"upstream": "http://up", "histories": 5}}).histories == 5


@pytest.mark.parametrize(
    ("serve", "message"),
    [
        ({"ui": "false"}, r"\[serve\] ui must be true or false"),
        ({"ui": 0}, r"\[serve\] ui must be true or false"),
        ({"require_key_env": 5}, r"\[serve\] require_key_env must be a non-empty string"),
        ({"log": True}, r"\[serve\] log must be a non-empty string"),
    ],
)
def test_a_serve_key_of_the_wrong_type_is_a_config_error(serve, message):
    """``ui = "false"`` is a string, which ``bool`` read as true: /ui, showing the
    conversations' text, was served."""
    with pytest.raises(ctxwindow.ConfigError, match=message):
        load_settings({"serve": {"upstream": "http://up", **serve}})


def test_a_model_key_of_the_wrong_type_is_a_config_error():
    table = {"context": 1000, "output": 10}
    with pytest.raises(ctxwindow.ConfigError, match="reserve must be a share"):
        load_settings(
            {"serve": {"upstream": "http://up"}, "models": {"m": {**table, "reserve": False}}}
        )
    with pytest.raises(ctxwindow.ConfigError, match="counter must be a non-empty string"):
        load_settings(
            {"serve": {"upstream": "http://up"}, "models": {"m": {**table, "counter": 1}}}
        )


def test_a_log_the_proxy_cannot_write_is_a_config_error(tmp_path):
    """Found at start as a config error, not as a traceback when the server starts."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(
        ctxwindow.ConfigError, match=r"\[serve\] log: cannot write .*a-file/visits.jsonl"
    ):
        load_settings({"serve": {"upstream": "http://up", "log": str(blocker / "visits.jsonl")}})
    made = tmp_path / "new" / "visits.jsonl"
    assert load_settings({"serve": {"upstream": "http://up", "log": str(made)}}).log == made
    assert made.exists()
