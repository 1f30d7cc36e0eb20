"""A bad counter in a ``[models."NAME"]`` entry is an error at start that names the
entry, from a config file as from settings built directly."""

from __future__ import annotations

import pytest

import ctxwindow
from ctxwindow_serve import ModelEntry, ServeSettings, build_app
from ctxwindow_serve.settings import load_settings


@pytest.mark.parametrize(
    ("counter", "says"),
    [
        ("bogus", "unknown token counter 'bogus'"),
        ("tiktoken:nope", "tiktoken knows no encoding or model 'nope'"),
        ("hf:/nope/tokenizer.json", "/nope/tokenizer.json"),
    ],
)
def test_a_bad_model_counter_names_its_entry(counter, says):
    models = (ModelEntry("ok", context=1000), ModelEntry("gpt-x*", context=1000, counter=counter))
    with pytest.raises(ctxwindow.ConfigError) as raised:
        build_app(ServeSettings(upstream="http://127.0.0.1:9", models=models))
    message = str(raised.value)
    assert message.startswith('[models."gpt-x*"] counter: ')
    assert says in message and "\n" not in message


def test_from_a_config_file_too():
    settings = load_settings(
        {
            "counter": "approx",
            "serve": {"upstream": "http://127.0.0.1:9"},
            "models": {"m": {"context": 10000, "counter": "tiktoken:nope"}},
        }
    )
    with pytest.raises(ctxwindow.ConfigError, match=r'^\[models\."m"\] counter: tiktoken knows'):
        build_app(settings)


def test_a_bad_top_level_counter_is_not_blamed_on_an_entry():
    settings = ServeSettings(
        upstream="http://127.0.0.1:9",
        strategy={"strategy": "fixed", "counter": "bogus"},
        models=(ModelEntry("m", context=1000),),
    )
    with pytest.raises(ctxwindow.CtxWindowError, match=r"^unknown token counter 'bogus'"):
        build_app(settings)
