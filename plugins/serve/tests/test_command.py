"""``ctxwindow serve`` as a user runs it: a real process reading a real config."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx


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
