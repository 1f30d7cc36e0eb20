"""The openai summarizer's client, after the third review: a usage field it cannot read
does not cost a good summary, an API key in the endpoint's path is never shown, the
SDK is imported when the summarizer is made (not in its first, time-limited call), and
``prompt_overhead`` says what its instructions add to a request.

A local OpenAI-compatible server (:mod:`ctxwindow.testing.servers`) plays the endpoint: its
path's first segment picks the usage it reports."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import ctxwindow
from ctxwindow import LLMUsage, Message, SummaryRequest, get_counter
from ctxwindow.testing import assistant, user
from ctxwindow.testing.servers import Request, chat_completion, local_server
from ctxwindow_summarize import OpenAISummarizer, SummarizeWindow
from ctxwindow_summarize.llm import public_url

KEY = "sk-test-PATHKEY-1234567890abcdef"
KEY_ENV = "CTXWINDOW_REVIEW3_TEST_KEY"
#: The usage each mode of the server reports with its (good) summary.
USAGE: dict[str, Any] = {
    "ok": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    "badusage": {"prompt_tokens": -5, "completion_tokens": "lots", "total_tokens": None},
    "negusage": {"prompt_tokens": -5, "completion_tokens": -7},
    "oddusage": {"prompt_tokens": True, "completion_tokens": 12.0},
    "nousage": None,
}
APPROX = get_counter("approx")


def answer(request: Request) -> dict[str, Any]:
    """A summary for every chat completion; ``/<mode>/...`` picks its usage."""
    usage = USAGE.get(request.path.split("/")[1], USAGE["ok"])
    return chat_completion("Ann booked Lisbon, 14 May.", request.body["model"], usage)


#: Every request's JSON body, since the ``key`` fixture last emptied it.
BODIES: list[dict[str, Any]] = []


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    def recorded(request: Request) -> dict[str, Any]:
        BODIES.append(request.body)
        return answer(request)

    with local_server(recorded) as running:
        yield running.url


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    BODIES.clear()


def history(turns: int = 40) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You plan trips."}]
    for turn in range(turns):
        out.append(user(f"Turn {turn}: Ann asks about Lisbon on 14 May and INV-{turn:04d}."))
        out.append(assistant(f"Turn {turn}: noted, Ann; INV-{turn:04d} is on file."))
    return out


def strategy(url: str, **options: Any) -> SummarizeWindow:
    return SummarizeWindow(
        summarizer="openai",
        llm_model="fake",
        llm_base_url=url,
        llm_api_key_env=KEY_ENV,
        llm_retries=0,
        llm_timeout=10.0,
        **options,
    )


def summary_of(window: Any) -> dict[str, Any]:
    return next(m for m in window.messages if (m.get("metadata") or {}).get("synthetic"))


# -- 7. usage read defensively ---------------------------------------------------------
@pytest.mark.usefixtures("key")
@pytest.mark.parametrize("mode", ["badusage", "negusage", "oddusage", "nousage"])
def test_a_usage_field_it_cannot_read_keeps_the_summary_and_counts_the_call(
    server: str, mode: str
) -> None:
    """``completion_tokens: "lots"`` failed the summary (int() raised) and hid the paid
    call; negative counts went into the record as given. A count that is not a
    non-negative integer is unknown (0), one written as a float (12.0) is read; the
    summary is the LLM's, the call counted."""
    window = strategy(f"{server}/{mode}/v1").select(history(), 300)
    assert BODIES, "the LLM must have been called"
    assert summary_of(window)["metadata"]["summarizer"].startswith("openai:fake@")
    assert not window.record.notes
    usage = window.record.llm
    assert usage is not None and usage.calls == len(BODIES)
    assert usage.prompt_tokens == 0  # -5, True, or none reported
    assert usage.completion_tokens == (12 * usage.calls if mode == "oddusage" else 0)


def test_usage_counts_are_taken_when_they_are_counts() -> None:
    summarizer = OpenAISummarizer("fake", base_url="http://127.0.0.1:9/v1")

    def reply(prompt: object, completion: object) -> Any:
        message = SimpleNamespace(content="Ann booked Lisbon.")
        usage = SimpleNamespace(prompt_tokens=prompt, completion_tokens=completion)
        return SimpleNamespace(choices=[SimpleNamespace(message=message)], usage=usage)

    spent = summarizer._result(reply(100, 20.0)).usage
    assert spent == LLMUsage("openai-compatible", "fake", 1, 100, 20)
    for prompt, completion in [("100", None), (-1, float("nan")), (False, 1.5), ([], {})]:
        spent = summarizer._result(reply(prompt, completion)).usage
        assert spent == LLMUsage("openai-compatible", "fake", 1, 0, 0)
    odd = SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=["x"]))])
    with pytest.raises(ctxwindow.SummarizerFailed, match="no summary") as failed:
        summarizer._result(odd)  # content that is no text: no summary, the call counted
    assert failed.value.usage is not None and failed.value.usage.calls == 1


# -- 9. a key in the endpoint's path ----------------------------------------------------
@pytest.mark.usefixtures("key")
def test_a_key_in_the_urls_path_is_redacted_everywhere_it_is_reported(
    server: str, tmp_path: Path
) -> None:
    """Some gateways take the key in the path (``.../v1/<key>``): it was in the name,
    so in every summary's metadata, record reason and cache key."""
    url = f"{server}/ok/v1/{KEY}"
    cache = tmp_path / "summaries.sqlite3"
    window = strategy(url, cache=str(cache)).select(history(), 300)
    assert BODIES, "the LLM must have been called"
    name = summary_of(window)["metadata"]["summarizer"]
    assert name == f"openai:fake@{server}/ok/v1/[redacted]"
    shown = "\n".join(
        [
            json.dumps(window.messages),
            repr(window.record),
            json.dumps(window.record.to_dict(), default=repr),
            repr(window.record.decisions),
        ]
    )
    with sqlite3.connect(cache) as db:
        tables = [
            row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        stored = repr([list(db.execute(f"SELECT * FROM {table}")) for table in tables])
    assert "[redacted]" in stored, "the summary must have been cached under the name"
    summarizer = OpenAISummarizer("fake", base_url=url, api_key_env=KEY_ENV)
    for text in (shown, stored, repr(summarizer), summarizer.name):
        assert KEY not in text and "PATHKEY" not in text


@pytest.mark.parametrize(
    "path",
    [
        f"/v1/{KEY}",
        f"/v1/key={KEY}/chat",
        "/v1/" + KEY.replace("-", "%2D"),
        "/gw/sk-proj-Ab3dEf6hIj9kLm2nOp5q/openai",
        "/gw/0123456789abcdef0123456789abcdef/openai",
        "/gw/123e4567-e89b-12d3-a456-426614174000/openai",
    ],
)
def test_a_path_segment_that_looks_like_a_credential_is_masked(path: str) -> None:
    """Compared with the key when it is known; else masked by its look (a provider's key
    prefix, a long mix of letters and digits, a UUID), by a digest, so that gateways of
    two accounts keep two names. The same URL always gives the same name."""
    url = f"https://user:pw@gw.example.com{path}?api-key=x#frag"
    for known in (KEY, None):
        shown = public_url(url, known)
        assert "PATHKEY" not in shown and "user" not in shown and "?" not in shown
        assert "[redacted" in shown and shown == public_url(url, known)
        segments = [s for s in path.split("/") if s and not s.startswith(("v1", "gw"))]
        assert all(s not in shown for s in segments if s not in ("openai", "chat"))


def test_names_stay_apart_and_ordinary_paths_stay_as_they_are() -> None:
    first = public_url("https://gw.example.com/v1/0123456789abcdef0123456789abcdef/openai")
    second = public_url("https://gw.example.com/v1/fedcba9876543210fedcba9876543210/openai")
    assert first != second
    for url in [
        "https://api.openai.com/v1",
        "https://x.openai.azure.com/openai/deployments/gpt-4o-mini-2024-07-18",
        "http://localhost:11434/v1",
        "https://gw.example.com/api/v1/my-company-prod-east/anthropic.claude-3-5-sonnet",
    ]:
        assert public_url(url) == url
        assert public_url(url, KEY) == url


def test_the_name_stays_the_same_when_the_key_rotates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The name is part of every cache key: the key, redacted, does not change it."""
    monkeypatch.setenv(KEY_ENV, KEY)
    before = OpenAISummarizer("m", base_url=f"http://127.0.0.1:9/v1/{KEY}", api_key_env=KEY_ENV)
    rotated = "sk-test-ROTATEDKEY-0987654321fedcba"
    monkeypatch.setenv(KEY_ENV, rotated)
    after = OpenAISummarizer("m", base_url=f"http://127.0.0.1:9/v1/{rotated}", api_key_env=KEY_ENV)
    assert before.name == after.name == "openai:m@http://127.0.0.1:9/v1/[redacted]"


# -- 10. the SDK imported at configuration -----------------------------------------------
def test_the_sdk_is_imported_at_configuration_and_never_by_import_ctxwindow(server: str) -> None:
    """``import openai`` took 1.8 s inside the first call, which a short time_limit gave
    up on. Now the summarizer imports it, and builds its client, when it is made; the
    first call imports nothing of the SDK's. ``import ctxwindow`` and a strategy using
    no openai summarizer do not import it at all. In a fresh interpreter, as another
    test may have imported the SDK in this one."""
    script = textwrap.dedent(
        f"""
        import sys
        import ctxwindow
        history = [{{"role": "system", "content": "You plan trips."}}]
        for turn in range(40):
            history.append({{"role": "user", "content": f"Turn {{turn}}: Lisbon on 14 May."}})
            history.append({{"role": "assistant", "content": f"Turn {{turn}}: noted."}})
        extractive = ctxwindow.select(history, budget=300, strategy="summarize")
        assert "openai" not in sys.modules, "imported without an openai summarizer"
        windower = ctxwindow.from_config({{
            "strategy": "summarize", "budget": 300, "summarizer": "openai",
            "llm_model": "fake", "llm_base_url": "{server}/ok/v1", "llm_retries": 0,
        }})
        assert "openai" in sys.modules, "not imported at configuration"
        before = set(sys.modules)
        window = windower.select(history)
        assert window.record.llm is not None and window.record.llm.calls >= 1
        late = sorted(m for m in set(sys.modules) - before if m.startswith("openai"))
        assert not late, f"the first call imported {{late}}"
        print("ok")
        """
    )
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-unused"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_without_the_sdk_the_summarizer_is_refused_at_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai raises ImportError
    with pytest.raises(ctxwindow.LLMNotConfigured, match=r"pip install 'ctxwindow-summarize\["):
        SummarizeWindow(summarizer="openai:m", llm_base_url="http://127.0.0.1:9/v1")


@pytest.mark.usefixtures("key")
def test_the_async_client_is_made_at_its_first_use_and_works(server: str) -> None:
    summarizer = OpenAISummarizer("fake", base_url=f"{server}/ok/v1", api_key_env=KEY_ENV)
    request = SummaryRequest(None, ["user: Ann books Lisbon."], 50, APPROX)
    result = asyncio.run(summarizer.asummarize(request))
    assert result.text and result.usage is not None and result.usage.prompt_tokens == 100


# -- 6. prompt_overhead --------------------------------------------------------------------
@pytest.mark.parametrize("limit", [200, 250, 1000, 1100, 6000, 100_000])
def test_prompt_overhead_is_what_the_request_adds_to_its_texts(limit: int) -> None:
    """Counted as the strategy counts texts (the approx counter, a line break a text),
    the request never exceeds its texts, the previous summary and ``prompt_overhead``;
    under a small limit the short instructions are sent, so that room is left."""
    summarizer = OpenAISummarizer("m", base_url="http://127.0.0.1:9/v1", max_input_tokens=limit)
    overhead = summarizer.prompt_overhead
    assert isinstance(overhead, int) and 0 < overhead <= max(limit // 4, 90)
    for previous in (None, "", "Ann booked Lisbon."):
        for texts in ([], ["user: hi"], ["x" * 997] * 12):
            for target in (1, 50, limit // 3, limit):
                request = SummaryRequest(previous, texts, target, APPROX)
                sent = sum(
                    APPROX.count_message(Message("user", m["content"]))
                    for m in summarizer._messages(request)
                )
                texts_cost = sum(APPROX.count_text(t) + 1 for t in texts)
                assert sent <= APPROX.count_text(previous or "") + texts_cost + overhead


@pytest.mark.usefixtures("key")
@pytest.mark.parametrize("limit", [250, 1000])
def test_every_request_fits_llm_max_input(server: str, limit: int) -> None:
    """End to end (with the strategy reserving ``prompt_overhead``): every request the
    endpoint receives is within ``llm_max_input``, as the approx counter counts it."""
    strategy(f"{server}/ok/v1", llm_max_input=limit).select(history(150), 2000)
    assert BODIES
    for body in BODIES:
        sent = sum(APPROX.count_message(Message("user", m["content"])) for m in body["messages"])
        assert sent <= limit
