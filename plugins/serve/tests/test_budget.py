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
