"""``ctxwindow serve`` as a user runs it: a real process reading a real config."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ctxwindow(*args, cwd):
    return [sys.executable, "-m", "ctxwindow", *args]


def test_serve_reads_its_config_and_windows(tmp_path, upstream, make_history):
    (tmp_path / "ctxwindow.toml").write_text(
        f'strategy = "sliding"\n[serve]\nupstream = "{upstream.url}"\n'
        '[models."small"]\ncontext = 400\noutput = 50\nreserve = 0.0\n'
    )
    port = free_port()
    process = subprocess.Popen(
        ctxwindow("serve", "--port", str(port), "--log-level", "warning", cwd=tmp_path),
        cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/healthz")
                break
            except httpx.ConnectError:
                assert process.poll() is None, process.stderr.read()
                assert time.monotonic() < deadline
                time.sleep(0.1)
        body = {"model": "small", "messages": make_history(20), "max_tokens": 50}
        answer = httpx.post(f"{url}/v1/chat/completions", json=body)
        assert answer.status_code == 200
        assert answer.headers["x-ctxwindow"].startswith("strategy=sliding;")
    finally:
        process.terminate()
        process.wait(20)


def test_ctxwindow_select_reads_the_proxys_config_file(tmp_path, upstream, make_history):
    """The proxy's ctxwindow.toml is `ctxwindow select`'s too (docs/serve.md): its
    [serve] and [models] tables are the proxy's (register_config_tables), not unknown
    strategy keys. Found by a docs reader: select raised "unknown key(s) 'models'"."""
    import json

    (tmp_path / "ctxwindow.toml").write_text(
        f'strategy = "fixed"\nbudget = 300\n[serve]\nupstream = "{upstream.url}"\n'
        '[models."small"]\ncontext = 400\noutput = 50\n'
    )
    (tmp_path / "chat.json").write_text(json.dumps(make_history(20)))
    done = subprocess.run(
        ctxwindow("select", "chat.json", cwd=tmp_path),
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert 0 < len(json.loads(done.stdout)) < 20


def _started(args: list[str], cwd) -> tuple[subprocess.Popen, str]:
    """``ctxwindow serve ARGS`` running, its stdout and stderr captured, and its URL."""
    port = free_port()
    process = subprocess.Popen(
        ctxwindow("serve", "--port", str(port), *args, cwd=cwd),
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/healthz")
            return process, url
        except httpx.ConnectError:
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.1)


def _stopped(process: subprocess.Popen) -> str:
    """Everything the process wrote, once it has stopped."""
    process.terminate()
    out, err = process.communicate(timeout=20)
    return out + err


def test_the_proxys_own_log_lines_appear(tmp_path, upstream):
    (tmp_path / "ctxwindow.toml").write_text(f'[serve]\nupstream = "{upstream.url}"\n')
    process, url = _started(["--log-level", "info"], tmp_path)
    try:
        httpx.post(f"{url}/v1/chat/completions", json={"model": "nameless", "messages": []})
    finally:
        written = _stopped(process)
    assert "model 'nameless' has no [models] entry" in written


@pytest.mark.parametrize(
    ("level", "redacted"),
    [
        ("info", "GET /v1/models?... HTTP/1.1"),  # the access line is there, redacted
        ("trace", "'query_string': b'...'"),  # each request's scope too, at trace
    ],
)
def test_a_query_string_is_not_in_the_log(tmp_path, upstream, level, redacted):
    (tmp_path / "ctxwindow.toml").write_text(f'[serve]\nupstream = "{upstream.url}"\n')
    process, url = _started(["--log-level", level], tmp_path)
    try:
        httpx.get(f"{url}/v1/models?key=AIza-secret-in-query")
        assert upstream.last.target == "/v1/models?key=AIza-secret-in-query"  # forwarded
    finally:
        written = _stopped(process)
    assert redacted in written
    assert "AIza-secret-in-query" not in written


def test_an_unknown_log_level_is_a_usage_error(tmp_path):
    done = subprocess.run(
        ctxwindow("serve", "--log-level", "loud", cwd=tmp_path), cwd=tmp_path,
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "invalid choice: 'loud'" in done.stderr


def test_a_bad_config_is_one_line(tmp_path):
    (tmp_path / "ctxwindow.toml").write_text('[serve]\nupstrem = "http://x"\n')
    done = subprocess.run(
        ctxwindow("serve", cwd=tmp_path), cwd=tmp_path, capture_output=True, text=True, check=False,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith("ctxwindow: error: [serve]: unknown key(s) 'upstrem'")
    assert len(done.stderr.strip().splitlines()) == 1


def test_listening_beyond_loopback_without_a_key_warns(tmp_path, upstream):
    port = free_port()
    process = subprocess.Popen(
        ctxwindow("serve", "--upstream", upstream.url, "--host", "0.0.0.0", "--port",
                  str(port), cwd=tmp_path),
        cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = process.stderr.readline()
        assert "without --require-key" in line
    finally:
        process.terminate()
        process.wait(20)


def test_a_log_file_the_proxy_cannot_write_is_one_line(tmp_path):
    (tmp_path / "a-file").write_text("")
    (tmp_path / "ctxwindow.toml").write_text(
        '[serve]\nupstream = "http://127.0.0.1:9"\nlog = "a-file/visits.jsonl"\n'
    )
    done = subprocess.run(
        ctxwindow("serve", cwd=tmp_path), cwd=tmp_path, capture_output=True, text=True, check=False,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith(
        "ctxwindow: error: [serve] log: cannot write 'a-file/visits.jsonl'"
    )
    assert len(done.stderr.strip().splitlines()) == 1
