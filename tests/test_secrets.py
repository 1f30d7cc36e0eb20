"""The summarizer's API key never leaves the environment variable it is read from.

A local OpenAI-compatible server (:mod:`ctxwindow.testing.servers`) plays every part: it
answers, it refuses with 401 and echoes the key back in its body (as real providers
echo part of it), it replies 200 with error text quoting the key, or it is not there
at all. Every server check first proves the key was sent, so that "not found anywhere"
cannot pass because the key was never used. Looked for: the window (its messages, the
summary's metadata), the record (repr, str, to_dict, decisions, notes), the errors
(message, repr, the whole cause and context chain, the formatted traceback), the repr
of the strategy and summarizer, every log record at DEBUG, and the output of
``ctxwindow plugins``, ``ctxwindow strategies`` and ``ctxwindow --debug select`` run
with the key in the environment and CTXWINDOW_DEBUG set.

Not covered, as not ours: httpcore logs a response's headers at DEBUG, so a server
that echoed the key in a response header would put it in that library's debug log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ctxwindow
from ctxwindow.testing import assistant, user
from ctxwindow.testing.servers import Reply, Request, chat_completion, local_server
from ctxwindow_summarize import OpenAISummarizer, SummarizerFailed, SummarizeWindow

SECRET = "sk-test-SECRET-123"
KEY_ENV = "CTXWINDOW_SECRETS_TEST_KEY"
BUDGET = 300


#: The Authorization headers received, since the ``key`` fixture last emptied it.
SEEN: list[str] = []


def answer(request: Request) -> Reply:
    """``/ok/v1``: a summary; ``/deny/v1``: 401 echoing the key; ``/echo/v1``: a 200
    reply whose text is an error quoting the key."""
    authorization = request.headers.get("authorization", "")
    SEEN.append(authorization)
    mode = request.path.split("/")[1]
    if mode == "deny":
        body = {
            "error": {
                "message": f"Incorrect API key provided: {authorization[7:]}",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        }
        return Reply(body, 401, {"WWW-Authenticate": "Bearer"})
    content = (
        f"Error: the key {authorization[7:]} is not allowed here."
        if mode == "echo"
        else "Ann booked Lisbon for 14 May; the refund for INV-2291 is pending."
    )
    usage = {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}
    return Reply(chat_completion(content, "fake", usage))


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with local_server(answer) as running:
        yield running.url


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The key in the environment; every logger captured at DEBUG."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    SEEN.clear()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def history(turns: int = 30) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You plan trips."}]
    for turn in range(turns):
        out.append(user(f"Turn {turn}: Ann asks about Lisbon on 14 May and INV-2291."))
        out.append(assistant(f"Turn {turn}: noted, Ann; Lisbon it is."))
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


def everything_about(window: ctxwindow.Window[Any]) -> str:
    record = window.record
    return "\n".join(
        [
            json.dumps(window.messages, default=repr),
            repr(window.messages),
            repr(record),
            str(record),
            json.dumps(record.to_dict(), default=repr),
            repr(record.decisions),
            repr(record.notes),
            repr(record.llm),
        ]
    )


def chain(error: BaseException) -> str:
    """The error and every cause and context behind it, as str and repr, and the
    traceback Python would print."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts += [str(current), repr(current), repr(vars(current))]
        current = current.__cause__ or current.__context__
    parts += traceback.format_exception(error)
    return "\n".join(parts)


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        assert SECRET not in text
        assert SECRET[3:] not in text  # nor most of it


def assert_sent() -> None:
    assert f"Bearer {SECRET}" in SEEN, "the key must have been sent"


# -- the server answers ---------------------------------------------------------------------
@pytest.mark.usefixtures("key")
def test_a_summary_from_the_server_carries_no_key(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    summarize = strategy(f"{server}/ok/v1")
    window = summarize.select(history(), BUDGET)
    awindow = asyncio.run(strategy(f"{server}/ok/v1").aselect(history(), BUDGET))
    assert_sent()
    assert window.record.llm is not None and window.record.llm.calls >= 1
    assert any("Lisbon for 14 May" in str(m["content"]) for m in window.messages)
    assert_no_secret(
        everything_about(window),
        everything_about(awindow),
        repr(summarize),
        repr(summarize._summarizers[0]),
        caplog.text,
        "\n".join(repr(vars(r)) for r in caplog.records),
    )


@pytest.mark.usefixtures("key")
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_401_that_echoes_the_key_is_reported_without_it(
    server: str, caplog: pytest.LogCaptureFixture, asynchronous: bool
) -> None:
    def run(**options: Any) -> ctxwindow.Window[Any]:
        chosen = strategy(f"{server}/deny/v1", **options)
        if asynchronous:
            return asyncio.run(chosen.aselect(history(), BUDGET))
        return chosen.select(history(), BUDGET)

    window = run()  # falls back to extractive, and says why
    assert_sent()
    notes = " ".join(window.record.notes)
    assert "AuthenticationError (HTTP 401)" in notes
    with pytest.raises(SummarizerFailed) as caught:
        run(on_error="raise")
    assert "AuthenticationError (HTTP 401)" in str(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None, "the SDK's error (and request) is not kept"
    assert_no_secret(everything_about(window), chain(caught.value), caplog.text)


@pytest.mark.usefixtures("key")
def test_error_text_that_quotes_the_key_is_shown_redacted(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    window = strategy(f"{server}/echo/v1").select(history(), BUDGET)
    assert_sent()
    notes = " ".join(window.record.notes)
    assert "returned no summary: 'Error: the key [redacted] is not allowed here.'" in notes
    assert_no_secret(everything_about(window), caplog.text)


@pytest.mark.usefixtures("key")
def test_an_unreachable_server_is_reported_without_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    window = strategy(url).select(history(), BUDGET)
    assert "APIConnectionError" in " ".join(window.record.notes)
    with pytest.raises(SummarizerFailed) as caught:
        strategy(url, on_error="raise").select(history(), BUDGET)
    assert_no_secret(everything_about(window), chain(caught.value), caplog.text)


@pytest.mark.usefixtures("key")
def test_credentials_in_the_url_are_not_shown(server: str) -> None:
    """A key put in the endpoint's URL (user info, or a query string) stays out of the
    summarizer's name, which records, notes and summaries carry."""
    port = server.rsplit(":", 1)[1]
    url = f"http://user:{SECRET}@127.0.0.1:{port}/ok/v1?api-key={SECRET}"
    summarizer = OpenAISummarizer("fake", base_url=url, api_key_env=KEY_ENV)
    assert summarizer.name == f"openai:fake@http://127.0.0.1:{port}/ok/v1"
    window = strategy(url).select(history(), BUDGET)
    assert_no_secret(everything_about(window), repr(summarizer), summarizer.name)


@pytest.mark.usefixtures("key")
def test_a_rotated_key_is_used_from_the_next_call(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is read at call time, as documented: no restart to rotate it."""
    summarizer = strategy(f"{server}/deny/v1", on_error="raise")
    with pytest.raises(SummarizerFailed):
        summarizer.select(history(), BUDGET)
    monkeypatch.setenv(KEY_ENV, "sk-test-ROTATED-456")
    with pytest.raises(SummarizerFailed):
        summarizer.select(history(32), BUDGET)
    assert SEEN[0] == f"Bearer {SECRET}"
    assert SEEN[-1] == "Bearer sk-test-ROTATED-456"


# -- the command line -------------------------------------------------------------------------
def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_API_KEY": SECRET, KEY_ENV: SECRET, "CTXWINDOW_DEBUG": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ctxwindow", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
        check=False,
    )


def test_cli_reports_and_debug_tracebacks_carry_no_key(server: str, tmp_path: Path) -> None:
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps(history()), encoding="utf-8")
    options = [
        "-o",
        "summarizer=openai",
        "-o",
        "llm_model=fake",
        "-o",
        f"llm_api_key_env={KEY_ENV}",
        "-o",
        "llm_retries=0",
    ]
    listing = [run_cli("plugins", cwd=tmp_path), run_cli("strategies", cwd=tmp_path)]
    for done in listing:
        assert done.returncode == 0, done.stderr
        assert "summarize" in done.stdout
    SEEN.clear()
    explained = run_cli(
        "select", str(chat), "-b", str(BUDGET), "-s", "summarize", "--explain",
        "-o", f"llm_base_url={server}/deny/v1", *options,
        cwd=tmp_path,
    )  # fmt: skip
    assert explained.returncode == 0, explained.stderr
    assert "AuthenticationError (HTTP 401)" in explained.stdout + explained.stderr
    failed = run_cli(
        "--debug", "select", str(chat), "-b", str(BUDGET), "-s", "summarize",
        "-o", f"llm_base_url={server}/deny/v1", "-o", "on_error=raise", *options,
        cwd=tmp_path,
    )  # fmt: skip
    assert failed.returncode != 0
    assert "Traceback" in failed.stderr
    assert "SummarizerFailed" in failed.stderr
    assert f"Bearer {SECRET}" in SEEN, "the CLI runs did send the key"
    for done in [*listing, explained, failed]:
        assert_no_secret(done.stdout, done.stderr)


@pytest.mark.parametrize(
    "url",
    [
        "redis://:s3cret-pw@127.0.0.1:1/0",
        "redis://user:s3cret-pw@[::1]:1/0",
        "redis://127.0.0.1:1/0?password=s3cret-pw",
        "unix:///tmp/ctxwindow-no-such.sock?db=0&password=s3cret-pw",
    ],
)
def test_a_cache_server_password_is_never_shown(url: str) -> None:
    """In the strategy's repr, the Windower's, the store's name and the outage warning."""
    import warnings

    from ctxwindow_stores import open_store
    from ctxwindow_summarize import SummarizeWindow

    strategy = SummarizeWindow(cache=url)
    shown = [repr(strategy), repr(ctxwindow.Windower(strategy, 500, "approx"))]
    store = open_store(url, memory_entries=10, memory_bytes=10**5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store.get_many(["k"])  # the server is not there: one warning
        store.put_many({"k": b"v"})
    shown += [str(w.message) for w in caught]
    assert caught, "no warning for a server that is not there"
    assert all("s3cret-pw" not in text for text in shown), shown
    assert any("***" in text for text in shown)
